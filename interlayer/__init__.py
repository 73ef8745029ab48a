"""interlayer: cross-layer and residual-stream mechanisms for Hugging Face transformers.

Importing the package registers every config and model with the Auto classes, so `AutoConfig` and
`AutoModel...` resolve them in-process without `trust_remote_code`.
"""

from transformers import AutoConfig

from .models.configuration_attention_bridge import BartBridgeConfig, MarianBridgeConfig
from .models.configuration_bridge import (
    BRIDGE_PRESETS,
    BertBridgeConfig,
    DebertaV2BridgeConfig,
    ElectraBridgeConfig,
    ModernBertBridgeConfig,
    RobertaBridgeConfig,
    XLMRobertaBridgeConfig,
    bridge_preset,
)
from .models.configuration_gated_gpt2 import GatedGPT2Config
from .models.configuration_hyper_connections import LlamaMHCConfig, Qwen3MHCConfig
from .models.configuration_latent import LlamaLatentConfig, Qwen3LatentConfig
from .models.modeling_attention_bridge import (
    BartBridgeForConditionalGeneration,
    BartBridgeModel,
    MarianBridgeForConditionalGeneration,
    MarianBridgeModel,
)
from .models.modeling_bridge import (
    BertBridgeForSequenceClassification,
    BertBridgeForTokenClassification,
    BertBridgeModel,
    DebertaV2BridgeForSequenceClassification,
    DebertaV2BridgeForTokenClassification,
    DebertaV2BridgeModel,
    ElectraBridgeForSequenceClassification,
    ElectraBridgeForTokenClassification,
    ElectraBridgeModel,
    ModernBertBridgeForSequenceClassification,
    ModernBertBridgeForTokenClassification,
    ModernBertBridgeModel,
    RobertaBridgeForSequenceClassification,
    RobertaBridgeForTokenClassification,
    RobertaBridgeModel,
    XLMRobertaBridgeForSequenceClassification,
    XLMRobertaBridgeForTokenClassification,
    XLMRobertaBridgeModel,
)
from .models.modeling_gated_gpt2 import GatedGPT2LMHeadModel, GatedGPT2Model
from .models.modeling_hyper_connections import LlamaMHCForCausalLM, LlamaMHCModel, Qwen3MHCForCausalLM, Qwen3MHCModel
from .models.modeling_latent import LlamaLatentForCausalLM, LlamaLatentModel, Qwen3LatentForCausalLM, Qwen3LatentModel
from .zoo import ZOO, convert

__version__ = "0.1.0"

for _entry in ZOO:
    AutoConfig.register(_entry.config_class.model_type, _entry.config_class, exist_ok=True)
    _entry.auto_class.register(_entry.config_class, _entry.model_class, exist_ok=True)

__all__ = [
    "BRIDGE_PRESETS",
    "BartBridgeConfig",
    "BartBridgeForConditionalGeneration",
    "BartBridgeModel",
    "BertBridgeConfig",
    "BertBridgeForSequenceClassification",
    "BertBridgeForTokenClassification",
    "BertBridgeModel",
    "DebertaV2BridgeConfig",
    "DebertaV2BridgeForSequenceClassification",
    "DebertaV2BridgeForTokenClassification",
    "DebertaV2BridgeModel",
    "ElectraBridgeConfig",
    "ElectraBridgeForSequenceClassification",
    "ElectraBridgeForTokenClassification",
    "ElectraBridgeModel",
    "GatedGPT2Config",
    "GatedGPT2LMHeadModel",
    "GatedGPT2Model",
    "LlamaLatentConfig",
    "LlamaLatentForCausalLM",
    "LlamaLatentModel",
    "LlamaMHCConfig",
    "LlamaMHCForCausalLM",
    "LlamaMHCModel",
    "MarianBridgeConfig",
    "MarianBridgeForConditionalGeneration",
    "MarianBridgeModel",
    "ModernBertBridgeConfig",
    "ModernBertBridgeForSequenceClassification",
    "ModernBertBridgeForTokenClassification",
    "ModernBertBridgeModel",
    "Qwen3LatentConfig",
    "Qwen3LatentForCausalLM",
    "Qwen3LatentModel",
    "Qwen3MHCConfig",
    "Qwen3MHCForCausalLM",
    "Qwen3MHCModel",
    "RobertaBridgeConfig",
    "RobertaBridgeForSequenceClassification",
    "RobertaBridgeForTokenClassification",
    "RobertaBridgeModel",
    "XLMRobertaBridgeConfig",
    "XLMRobertaBridgeForSequenceClassification",
    "XLMRobertaBridgeForTokenClassification",
    "XLMRobertaBridgeModel",
    "ZOO",
    "bridge_preset",
    "convert",
]
