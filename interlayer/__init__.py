"""interlayer: cross-layer and residual-stream mechanisms for Hugging Face transformers.

Importing the package registers every config and model of the zoo (`interlayer.zoo.ZOO`) with the Auto classes, so
`AutoConfig` and `AutoModel...` resolve them in-process without `trust_remote_code`, and exports every zoo class by
its name (`from interlayer import Qwen3MHCForCausalLM`), and under the older names kept for it. The classes of the
decoder mechanisms on each family are imported in the generated block (`python -m interlayer.generate_classes`).
"""

from transformers import AutoConfig

from . import card, saving  # noqa: F401  (the model card, the conversion report and staged saves: not shipped)
from .models.configuration_attention_bridge import OLD_MODEL_TYPE_CONFIGS as OLD_ATTENTION_BRIDGE_CONFIGS
from .models.configuration_attention_bridge import (
    BartAttentionBridgeConfig,
    BartBridgeConfig,
    M2M100AttentionBridgeConfig,
    MarianAttentionBridgeConfig,
    MarianBridgeConfig,
    MBartAttentionBridgeConfig,
    T5AttentionBridgeConfig,
)
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
from .models.configuration_sentinel import GatedGPT2Config, GPT2SentinelConfig, LegacyGatedGPT2Config
from .models.configuration_sentinel_encoders import BertSentinelConfig, RobertaSentinelConfig
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
from .models.modeling_sentinel import GatedGPT2LMHeadModel, GatedGPT2Model, GPT2SentinelLMHeadModel, GPT2SentinelModel
from .models.modeling_sentinel_encoders import (
    BertSentinelForSequenceClassification,
    BertSentinelModel,
    RobertaSentinelForSequenceClassification,
    RobertaSentinelModel,
)
from .zoo import ZOO, convert

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
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
from .models.configuration_sentinel import LlamaSentinelConfig, Qwen2SentinelConfig, Qwen3SentinelConfig
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
from .models.modeling_sentinel import (
    LlamaSentinelForCausalLM,
    LlamaSentinelModel,
    Qwen2SentinelForCausalLM,
    Qwen2SentinelModel,
    Qwen3SentinelForCausalLM,
    Qwen3SentinelModel,
)

# --- end generated imports ---

__version__ = "0.1.0"

for _entry in ZOO:
    AutoConfig.register(_entry.config_class.model_type, _entry.config_class, exist_ok=True)
    _entry.auto_class.register(_entry.config_class, _entry.model_class, exist_ok=True)
# model types saved before a mechanism's rename (sentinel GPT-2's `gated_gpt2`, the attention bridges'
# `marian_bridge` and `bart_bridge`) still resolve, to the renamed classes
for _old in (LegacyGatedGPT2Config, *OLD_ATTENTION_BRIDGE_CONFIGS):
    AutoConfig.register(_old.model_type, _old, exist_ok=True)

__all__ = [
    "BRIDGE_PRESETS",
    "ZOO",
    "BartAttentionBridgeConfig",
    "BartAttentionBridgeForConditionalGeneration",
    "BartAttentionBridgeModel",
    "BartBridgeConfig",
    "BartBridgeForConditionalGeneration",
    "BartBridgeModel",
    "BertBridgeConfig",
    "BertBridgeForSequenceClassification",
    "BertBridgeForTokenClassification",
    "BertBridgeModel",
    "BertSentinelConfig",
    "BertSentinelForSequenceClassification",
    "BertSentinelModel",
    "DebertaV2BridgeConfig",
    "DebertaV2BridgeForSequenceClassification",
    "DebertaV2BridgeForTokenClassification",
    "DebertaV2BridgeModel",
    "ElectraBridgeConfig",
    "ElectraBridgeForSequenceClassification",
    "ElectraBridgeForTokenClassification",
    "ElectraBridgeModel",
    "GPT2SentinelConfig",
    "GPT2SentinelLMHeadModel",
    "GPT2SentinelModel",
    "GatedGPT2Config",
    "GatedGPT2LMHeadModel",
    "GatedGPT2Model",
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
    "ModernBertBridgeConfig",
    "ModernBertBridgeForSequenceClassification",
    "ModernBertBridgeForTokenClassification",
    "ModernBertBridgeModel",
    "RobertaBridgeConfig",
    "RobertaBridgeForSequenceClassification",
    "RobertaBridgeForTokenClassification",
    "RobertaBridgeModel",
    "RobertaSentinelConfig",
    "RobertaSentinelForSequenceClassification",
    "RobertaSentinelModel",
    "T5AttentionBridgeConfig",
    "T5AttentionBridgeForConditionalGeneration",
    "T5AttentionBridgeModel",
    "XLMRobertaBridgeConfig",
    "XLMRobertaBridgeForSequenceClassification",
    "XLMRobertaBridgeForTokenClassification",
    "XLMRobertaBridgeModel",
    "bridge_preset",
    "convert",
]

# --- begin generated exports (python -m interlayer.generate_classes --fix): do not edit ---
__all__ += [
    "GPT2LatentConfig",
    "GPT2LatentForCausalLM",
    "GPT2LatentModel",
    "GPT2MHCConfig",
    "GPT2MHCForCausalLM",
    "GPT2MHCModel",
    "Gemma2LatentConfig",
    "Gemma2LatentForCausalLM",
    "Gemma2LatentModel",
    "Gemma2MHCConfig",
    "Gemma2MHCForCausalLM",
    "Gemma2MHCModel",
    "Gemma3TextLatentConfig",
    "Gemma3TextLatentForCausalLM",
    "Gemma3TextLatentModel",
    "Gemma3TextMHCConfig",
    "Gemma3TextMHCForCausalLM",
    "Gemma3TextMHCModel",
    "LlamaLatentConfig",
    "LlamaLatentForCausalLM",
    "LlamaLatentModel",
    "LlamaMHCConfig",
    "LlamaMHCForCausalLM",
    "LlamaMHCModel",
    "LlamaSentinelConfig",
    "LlamaSentinelForCausalLM",
    "LlamaSentinelModel",
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
    "Qwen2SentinelConfig",
    "Qwen2SentinelForCausalLM",
    "Qwen2SentinelModel",
    "Qwen3LatentConfig",
    "Qwen3LatentForCausalLM",
    "Qwen3LatentModel",
    "Qwen3MHCConfig",
    "Qwen3MHCForCausalLM",
    "Qwen3MHCModel",
    "Qwen3SentinelConfig",
    "Qwen3SentinelForCausalLM",
    "Qwen3SentinelModel",
]
# --- end generated exports ---
