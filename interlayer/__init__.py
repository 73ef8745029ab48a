"""interlayer: cross-layer and residual-stream mechanisms for Hugging Face transformers.

Importing the package registers every config and model of the zoo (`interlayer.zoo.ZOO`) with the Auto classes, so
`AutoConfig` and `AutoModel...` resolve them in-process without `trust_remote_code`, and exports every zoo class by
its name (`from interlayer import Qwen3MHCForCausalLM`), and under the older names kept for it.
"""

from transformers import AutoConfig

from . import card  # noqa: F401  (the model card and the conversion report, which saved models do not ship)
from .models.configuration_attention_bridge import OLD_MODEL_TYPE_CONFIGS as OLD_ATTENTION_BRIDGE_CONFIGS
from .models.configuration_bridge import BRIDGE_PRESETS, bridge_preset
from .models.configuration_sentinel import LegacyGatedGPT2Config
from .zoo import ZOO, convert, exported_names

__version__ = "0.1.0"

for _entry in ZOO:
    AutoConfig.register(_entry.config_class.model_type, _entry.config_class, exist_ok=True)
    _entry.auto_class.register(_entry.config_class, _entry.model_class, exist_ok=True)
# model types saved before a mechanism's rename (sentinel GPT-2's `gated_gpt2`, the attention bridges'
# `marian_bridge` and `bart_bridge`) still resolve, to the renamed classes
for _old in (LegacyGatedGPT2Config, *OLD_ATTENTION_BRIDGE_CONFIGS):
    AutoConfig.register(_old.model_type, _old, exist_ok=True)

_exports = exported_names()
globals().update(_exports)
__all__ = ["BRIDGE_PRESETS", "ZOO", "bridge_preset", "convert", *_exports]
