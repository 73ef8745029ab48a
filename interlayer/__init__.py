"""interlayer: cross-layer and residual-stream mechanisms for Hugging Face transformers.

Importing the package registers every config and model with the Auto classes, so `AutoConfig` and
`AutoModel...` resolve them in-process without `trust_remote_code`.
"""

from transformers import AutoConfig

from .models.configuration_attention_bridge import BartBridgeConfig, MarianBridgeConfig
from .models.configuration_bridge import BRIDGE_PRESETS, BertBridgeConfig, RobertaBridgeConfig, bridge_preset
from .models.configuration_hyper_connections import LlamaMHCConfig, Qwen3MHCConfig
from .models.configuration_latent import LlamaLatentConfig, Qwen3LatentConfig
from .models.configuration_sentinel import (
    BertSentinelConfig,
    GatedGPT2Config,
    GPT2SentinelConfig,
    LegacyGatedGPT2Config,
    LlamaSentinelConfig,
    Qwen2SentinelConfig,
    Qwen3SentinelConfig,
    RobertaSentinelConfig,
)
from .models.modeling_attention_bridge import (
    BartBridgeForConditionalGeneration,
    BartBridgeModel,
    MarianBridgeForConditionalGeneration,
    MarianBridgeModel,
)
from .models.modeling_bridge import (
    BertBridgeForSequenceClassification,
    BertBridgeModel,
    RobertaBridgeForSequenceClassification,
    RobertaBridgeModel,
)
from .models.modeling_hyper_connections import LlamaMHCForCausalLM, LlamaMHCModel, Qwen3MHCForCausalLM, Qwen3MHCModel
from .models.modeling_latent import LlamaLatentForCausalLM, LlamaLatentModel, Qwen3LatentForCausalLM, Qwen3LatentModel
from .models.modeling_sentinel import (
    BertSentinelForSequenceClassification,
    BertSentinelModel,
    GatedGPT2LMHeadModel,
    GatedGPT2Model,
    GPT2SentinelLMHeadModel,
    GPT2SentinelModel,
    LlamaSentinelForCausalLM,
    LlamaSentinelModel,
    Qwen2SentinelForCausalLM,
    Qwen2SentinelModel,
    Qwen3SentinelForCausalLM,
    Qwen3SentinelModel,
    RobertaSentinelForSequenceClassification,
    RobertaSentinelModel,
)
from .zoo import ZOO, convert

__version__ = "0.1.0"

for _entry in ZOO:
    AutoConfig.register(_entry.config_class.model_type, _entry.config_class, exist_ok=True)
    _entry.auto_class.register(_entry.config_class, _entry.model_class, exist_ok=True)
AutoConfig.register(LegacyGatedGPT2Config.model_type, LegacyGatedGPT2Config, exist_ok=True)  # saved before the rename

__all__ = [
    "BRIDGE_PRESETS",
    "BartBridgeConfig",
    "BartBridgeForConditionalGeneration",
    "BartBridgeModel",
    "BertBridgeConfig",
    "BertBridgeForSequenceClassification",
    "BertBridgeModel",
    "BertSentinelConfig",
    "BertSentinelForSequenceClassification",
    "BertSentinelModel",
    "GPT2SentinelConfig",
    "GPT2SentinelLMHeadModel",
    "GPT2SentinelModel",
    "GatedGPT2Config",
    "GatedGPT2LMHeadModel",
    "GatedGPT2Model",
    "LlamaLatentConfig",
    "LlamaLatentForCausalLM",
    "LlamaLatentModel",
    "LlamaMHCConfig",
    "LlamaMHCForCausalLM",
    "LlamaMHCModel",
    "LlamaSentinelConfig",
    "LlamaSentinelForCausalLM",
    "LlamaSentinelModel",
    "MarianBridgeConfig",
    "MarianBridgeForConditionalGeneration",
    "MarianBridgeModel",
    "Qwen3LatentConfig",
    "Qwen3LatentForCausalLM",
    "Qwen2SentinelConfig",
    "Qwen2SentinelForCausalLM",
    "Qwen2SentinelModel",
    "Qwen3LatentModel",
    "Qwen3MHCConfig",
    "Qwen3MHCForCausalLM",
    "Qwen3MHCModel",
    "Qwen3SentinelConfig",
    "Qwen3SentinelForCausalLM",
    "Qwen3SentinelModel",
    "RobertaBridgeConfig",
    "RobertaBridgeForSequenceClassification",
    "RobertaBridgeModel",
    "RobertaSentinelConfig",
    "RobertaSentinelForSequenceClassification",
    "RobertaSentinelModel",
    "ZOO",
    "bridge_preset",
    "convert",
]
