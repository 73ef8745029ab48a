"""interlayer: cross-layer and residual-stream mechanisms for Hugging Face transformers.

Importing the package registers every config and model of the zoo (`interlayer.zoo.ZOO`) with the Auto classes, so
`AutoConfig` and `AutoModel...` resolve them in-process without `trust_remote_code`, and exports every zoo class by
its name (`from interlayer import Qwen3MHCForCausalLM`), and under the older names kept for it.
"""

from transformers import AutoConfig

from .models.configuration_bridge import BRIDGE_PRESETS, bridge_preset
from .models.configuration_sentinel import LegacyGatedGPT2Config
from .zoo import ZOO, convert, exported_names

__version__ = "0.1.0"

for _entry in ZOO:
    AutoConfig.register(_entry.config_class.model_type, _entry.config_class, exist_ok=True)
    _entry.auto_class.register(_entry.config_class, _entry.model_class, exist_ok=True)
# the model type sentinel GPT-2 had before the mechanism's files were named `sentinel` (folders saved then)
AutoConfig.register(LegacyGatedGPT2Config.model_type, LegacyGatedGPT2Config, exist_ok=True)

__all__ = ["BRIDGE_PRESETS", "ZOO", "bridge_preset", "convert"]
globals().update(exported_names())
__all__ += list(exported_names())
