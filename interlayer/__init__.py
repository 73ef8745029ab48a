"""interlayer: cross-layer and residual-stream mechanisms for Hugging Face transformers.

Importing the package registers every config and model with the Auto classes, so `AutoConfig` and
`AutoModel...` resolve them in-process without `trust_remote_code`.
"""

from transformers import AutoConfig

from .models.configuration_attention_bridge import BartBridgeConfig, MarianBridgeConfig
from .models.configuration_bridge import BRIDGE_PRESETS, BertBridgeConfig, RobertaBridgeConfig, bridge_preset
from .models.configuration_gated_gpt2 import GatedGPT2Config
from .models.configuration_hyper_connections import (
    Gemma2MHCConfig,
    Gemma3TextMHCConfig,
    GPT2MHCConfig,
    LlamaMHCConfig,
    MistralMHCConfig,
    Olmo2MHCConfig,
    Phi3MHCConfig,
    Qwen2MHCConfig,
    Qwen3MHCConfig,
)
from .models.configuration_latent import (
    Gemma2LatentConfig,
    Gemma3TextLatentConfig,
    GPT2LatentConfig,
    LlamaLatentConfig,
    MistralLatentConfig,
    Olmo2LatentConfig,
    Phi3LatentConfig,
    Qwen2LatentConfig,
    Qwen3LatentConfig,
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
from .models.modeling_gated_gpt2 import GatedGPT2LMHeadModel, GatedGPT2Model
from .models.modeling_hyper_connections import (
    Gemma2MHCForCausalLM,
    Gemma2MHCModel,
    Gemma3TextMHCForCausalLM,
    Gemma3TextMHCModel,
    GPT2MHCForCausalLM,
    GPT2MHCModel,
    LlamaMHCForCausalLM,
    LlamaMHCModel,
    MistralMHCForCausalLM,
    MistralMHCModel,
    Olmo2MHCForCausalLM,
    Olmo2MHCModel,
    Phi3MHCForCausalLM,
    Phi3MHCModel,
    Qwen2MHCForCausalLM,
    Qwen2MHCModel,
    Qwen3MHCForCausalLM,
    Qwen3MHCModel,
)
from .models.modeling_latent import (
    Gemma2LatentForCausalLM,
    Gemma2LatentModel,
    Gemma3TextLatentForCausalLM,
    Gemma3TextLatentModel,
    GPT2LatentForCausalLM,
    GPT2LatentModel,
    LlamaLatentForCausalLM,
    LlamaLatentModel,
    MistralLatentForCausalLM,
    MistralLatentModel,
    Olmo2LatentForCausalLM,
    Olmo2LatentModel,
    Phi3LatentForCausalLM,
    Phi3LatentModel,
    Qwen2LatentForCausalLM,
    Qwen2LatentModel,
    Qwen3LatentForCausalLM,
    Qwen3LatentModel,
)
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
    "BertBridgeModel",
    "GatedGPT2Config",
    "GatedGPT2LMHeadModel",
    "GatedGPT2Model",
    "Gemma2LatentConfig",
    "Gemma2LatentForCausalLM",
    "Gemma2LatentModel",
    "Gemma2MHCConfig",
    "Gemma2MHCForCausalLM",
    "Gemma2MHCModel",
    "Gemma3TextLatentConfig",
    "Gemma3TextLatentForCausalLM",
    "Gemma3TextLatentModel",
    "GPT2LatentConfig",
    "GPT2LatentForCausalLM",
    "GPT2LatentModel",
    "Gemma3TextMHCConfig",
    "Gemma3TextMHCForCausalLM",
    "Gemma3TextMHCModel",
    "GPT2MHCConfig",
    "GPT2MHCForCausalLM",
    "GPT2MHCModel",
    "LlamaLatentConfig",
    "LlamaLatentForCausalLM",
    "LlamaLatentModel",
    "LlamaMHCConfig",
    "LlamaMHCForCausalLM",
    "LlamaMHCModel",
    "MarianBridgeConfig",
    "MarianBridgeForConditionalGeneration",
    "MarianBridgeModel",
    "MistralLatentConfig",
    "MistralLatentForCausalLM",
    "MistralLatentModel",
    "MistralMHCConfig",
    "MistralMHCForCausalLM",
    "MistralMHCModel",
    "Olmo2LatentConfig",
    "Olmo2LatentForCausalLM",
    "Olmo2LatentModel",
    "Olmo2MHCConfig",
    "Olmo2MHCForCausalLM",
    "Olmo2MHCModel",
    "Phi3LatentConfig",
    "Phi3LatentForCausalLM",
    "Phi3LatentModel",
    "Phi3MHCConfig",
    "Phi3MHCForCausalLM",
    "Phi3MHCModel",
    "Qwen2LatentConfig",
    "Qwen2LatentForCausalLM",
    "Qwen2LatentModel",
    "Qwen2MHCConfig",
    "Qwen2MHCForCausalLM",
    "Qwen2MHCModel",
    "Qwen3LatentConfig",
    "Qwen3LatentForCausalLM",
    "Qwen3LatentModel",
    "Qwen3MHCConfig",
    "Qwen3MHCForCausalLM",
    "Qwen3MHCModel",
    "RobertaBridgeConfig",
    "RobertaBridgeForSequenceClassification",
    "RobertaBridgeModel",
    "ZOO",
    "bridge_preset",
    "convert",
]
