"""interlayer: cross-layer and residual-stream mechanisms for Hugging Face transformers.

Importing the package registers every config and model with the Auto classes, so `AutoConfig` and
`AutoModel...` resolve them in-process without `trust_remote_code`.
"""

from transformers import AutoConfig

from .models.configuration_attention_bridge import (
    OLD_MODEL_TYPE_CONFIGS,
    BartAttentionBridgeConfig,
    BartBridgeConfig,
    M2M100AttentionBridgeConfig,
    MarianAttentionBridgeConfig,
    MarianBridgeConfig,
    MBartAttentionBridgeConfig,
    T5AttentionBridgeConfig,
)
from .models.configuration_bridge import BRIDGE_PRESETS, BertBridgeConfig, RobertaBridgeConfig, bridge_preset
from .models.configuration_gated_gpt2 import GatedGPT2Config
from .models.configuration_hyper_connections import LlamaMHCConfig, Qwen3MHCConfig
from .models.configuration_latent import LlamaLatentConfig, Qwen3LatentConfig
from .models.modeling_attention_bridge import (
    BartAttentionBridgeForConditionalGeneration,
    BartAttentionBridgeModel,
    BartBridgeForConditionalGeneration,
    BartBridgeModel,
    M2M100AttentionBridgeForConditionalGeneration,
    M2M100AttentionBridgeModel,
    MarianAttentionBridgeForConditionalGeneration,
    MarianAttentionBridgeModel,
    MarianBridgeForConditionalGeneration,
    MarianBridgeModel,
    MBartAttentionBridgeForConditionalGeneration,
    MBartAttentionBridgeModel,
    T5AttentionBridgeForConditionalGeneration,
    T5AttentionBridgeModel,
)
from .models.modeling_bridge import (
    BertBridgeForSequenceClassification,
    BertBridgeModel,
    RobertaBridgeForSequenceClassification,
    RobertaBridgeModel,
)
from .models.modeling_gated_gpt2 import GatedGPT2LMHeadModel, GatedGPT2Model
from .models.modeling_hyper_connections import LlamaMHCForCausalLM, LlamaMHCModel, Qwen3MHCForCausalLM, Qwen3MHCModel
from .models.modeling_latent import LlamaLatentForCausalLM, LlamaLatentModel, Qwen3LatentForCausalLM, Qwen3LatentModel
from .zoo import ZOO, convert

__version__ = "0.1.0"

for _entry in ZOO:
    AutoConfig.register(_entry.config_class.model_type, _entry.config_class, exist_ok=True)
    _entry.auto_class.register(_entry.config_class, _entry.model_class, exist_ok=True)
for _old in OLD_MODEL_TYPE_CONFIGS:  # model types saved before a rename still resolve, to the renamed classes
    AutoConfig.register(_old.model_type, _old, exist_ok=True)

__all__ = [
    "BRIDGE_PRESETS",
    "BartAttentionBridgeConfig",
    "BartAttentionBridgeForConditionalGeneration",
    "BartAttentionBridgeModel",
    "BartBridgeConfig",
    "BartBridgeForConditionalGeneration",
    "BartBridgeModel",
    "BertBridgeConfig",
    "BertBridgeForSequenceClassification",
    "BertBridgeModel",
    "GatedGPT2Config",
    "GatedGPT2LMHeadModel",
    "GatedGPT2Model",
    "LlamaLatentConfig",
    "LlamaLatentForCausalLM",
    "LlamaLatentModel",
    "LlamaMHCConfig",
    "LlamaMHCForCausalLM",
    "LlamaMHCModel",
    "M2M100AttentionBridgeConfig",
    "M2M100AttentionBridgeForConditionalGeneration",
    "M2M100AttentionBridgeModel",
    "MBartAttentionBridgeConfig",
    "MBartAttentionBridgeForConditionalGeneration",
    "MBartAttentionBridgeModel",
    "MarianAttentionBridgeConfig",
    "MarianAttentionBridgeForConditionalGeneration",
    "MarianAttentionBridgeModel",
    "MarianBridgeConfig",
    "MarianBridgeForConditionalGeneration",
    "MarianBridgeModel",
    "Qwen3LatentConfig",
    "Qwen3LatentForCausalLM",
    "Qwen3LatentModel",
    "Qwen3MHCConfig",
    "Qwen3MHCForCausalLM",
    "Qwen3MHCModel",
    "RobertaBridgeConfig",
    "RobertaBridgeForSequenceClassification",
    "RobertaBridgeModel",
    "T5AttentionBridgeConfig",
    "T5AttentionBridgeForConditionalGeneration",
    "T5AttentionBridgeModel",
    "ZOO",
    "bridge_preset",
    "convert",
]
