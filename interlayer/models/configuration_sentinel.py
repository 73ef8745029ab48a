"""Configurations of the sentinel-gated models (seed 001)."""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
from typing import ClassVar

from transformers import GPT2Config

from .zoo_common import ConfigError, ZooConfigFields, ZooConfigMixin, check_range, zoo_config

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers import LlamaConfig, Qwen2Config, Qwen3Config

# --- end generated imports ---

# the largest gate logit the weights hold in every dtype (fp16's largest value); the gates are computed in log space,
# so every logit up to it gives finite gates, exactly 1 at conversion under identity_init
MAX_GATE_LOGIT = 65504.0


@dataclasses.dataclass(kw_only=True)
class SentinelFields(ZooConfigFields):
    r"""
    Sentinel-gate options (seed 001).

    Args:
        sentinel_gate_init (`float`, defaults to 3.0): initial gate logit of every head (the seed's controller),
            between -65504 and 65504 (the largest fp16 value: the logits are stored in the weights' dtype).
        gate_l1 (`float`, defaults to 1e-4): weight of the L1 pressure `sum(gates)` added to the loss when labels
            are given (reported separately as `gate_l1_loss`).
        pruned_heads (`dict[int, list[int]]`, *optional*): heads removed structurally per layer, by their
            original index (none when not given); written by `prune_heads` and rebuilt with the smaller shapes on
            load. Converting a stock checkpoint refuses it (its weights have every head): prune after converting.
        unet_skips (`bool`, defaults to `False`): U-Net skips (seed section 2.2): the output h of every decoder
            layer i >= L - floor(L/2) becomes `h + s_i * Linear([h; h_enc])`, h_enc the output of encoder layer
            L-1-i; the fusion starts at zero. With odd L the middle layer has no skip.
        unet_skip_scale (`float`, defaults to 0.1): the skip factor of the first decoder layer; deeper layers get
            less, `s_i = unet_skip_scale * (L - i) / floor(L/2)` (the seed's depth-scaled skips, 0.01 to 0.1).
        identity_init (`bool`, defaults to `True`): gates are `sigmoid(logit) / sigmoid(sentinel_gate_init)`, exactly
            1 at conversion, so the model computes the stock model; `False` uses the seed's raw `sigmoid(logit)`.
    """

    reload_options: ClassVar[frozenset[str]] = ZooConfigFields.reload_options | {"gate_l1"}
    init_options: ClassVar[frozenset[str]] = ZooConfigFields.init_options | {"sentinel_gate_init"}

    sentinel_gate_init: float | int = 3.0
    gate_l1: float | int = 1e-4
    pruned_heads: dict | None = None
    unet_skips: bool = False
    unet_skip_scale: float | int = 0.1

    def validate_sentinel(self):
        if getattr(self, "sentinel_is_encoder", False):
            if self.unet_skips:
                raise ValueError(
                    f"unet_skips=True does not apply to the {self.sentinel_family} family (an encoder): U-Net skips "
                    "join the first half of a decoder's layers to the second; set unet_skips=False."
                )
            if self.is_decoder or self.add_cross_attention:
                raise ValueError(
                    f"Sentinel gates on the {self.sentinel_family} family are encoder-only: `is_decoder` and "
                    f"`add_cross_attention` must be False, got is_decoder={self.is_decoder!r}, "
                    f"add_cross_attention={self.add_cross_attention!r}."
                )
        check_range("sentinel_gate_init", self.sentinel_gate_init, -MAX_GATE_LOGIT, MAX_GATE_LOGIT)
        check_range("gate_l1", self.gate_l1, 0)
        check_range("unet_skip_scale", self.unet_skip_scale, 0)
        for layer, heads in (self.pruned_heads or {}).items():
            check_range("pruned_heads layer", int(layer), 0, self.num_hidden_layers - 1)
            for head in heads:
                check_range(f"pruned_heads[{layer}] head", head, 0, self.num_attention_heads - 1)


def canonical_pruned_heads(value) -> dict[int, list[int]]:
    """`pruned_heads` as `{layer: sorted head indices}` (JSON turns the integer keys into strings), or a ValueError
    naming the field for anything that is not a mapping of layer indices to lists of head indices."""

    def index(x) -> int:
        if isinstance(x, bool) or not isinstance(x, (int, str)) or not str(x).lstrip("-").isdigit():
            raise ConfigError(
                "`pruned_heads` maps layer indices to lists of head indices, such as {0: [1, 3], 5: [0]}; got "
                f"{value!r}."
            )
        return int(x)

    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, (list, tuple)) for v in value.values()):
        index(None)
    return {index(k): sorted({index(h) for h in v}) for k, v in value.items() if v}


class SentinelConfigMixin:
    """Head bookkeeping shared by the sentinel configs (first among a config's bases): which query heads and which
    key/value heads each layer still has. A key/value head goes only when every query head of its group is pruned."""

    sentinel_family: ClassVar[str] = ""
    # an encoder family: no U-Net skips (they join a decoder's halves) and no decoder use
    sentinel_is_encoder: ClassVar[bool] = False

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        """A conversion (a stock checkpoint's config) refuses `pruned_heads`: the stock weights have every head."""
        if config_dict.get("model_type") in cls.stock_model_types and kwargs.get("pruned_heads"):
            raise ConfigError(
                f"`pruned_heads={kwargs['pruned_heads']!r}` cannot be given when converting a stock checkpoint: its "
                "weights have every head. Convert it, then remove heads with `model.prune_heads(...)` (or "
                "`interlayer prune`); `pruned_heads` is what a pruned model records for reloading."
            )
        return super().from_dict(config_dict, **kwargs)

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.pruned_heads = canonical_pruned_heads(self.pruned_heads)

    @property
    def no_attention_weights(self) -> str | None:
        """Why `output_attentions=True` is refused: the decoder stacks record no attention weights (the encoders
        return the stock ones)."""
        if self.sentinel_is_encoder:
            return None
        return "the gated decoder stack records no attention weights; read the gates with `model.mechanism_stats()`"

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads of an unpruned layer (the query heads for multi-head attention)."""
        return getattr(self, "num_key_value_heads", None) or self.num_attention_heads

    def heads_in_layer(self, layer: int) -> list[int]:
        """Original indices of the query heads layer `layer` still has."""
        removed = set(self.pruned_heads.get(layer, ()))
        return [h for h in range(self.num_attention_heads) if h not in removed]

    def kv_heads_in_layer(self, layer: int) -> list[int]:
        """Original indices of the key/value heads layer `layer` still has: those with a query head left."""
        group = self.num_attention_heads // self.num_kv_heads
        return sorted({h // group for h in self.heads_in_layer(layer)})


@zoo_config
class GPT2SentinelConfig(SentinelConfigMixin, ZooConfigMixin, GPT2Config, SentinelFields):
    r"""Configuration of [`GPT2SentinelModel`]: every [`GPT2Config`] field plus the sentinel options of
    [`SentinelFields`]. Converts checkpoints of model_type `gpt2`."""

    model_type = "gpt2_sentinel"
    stock_model_types = ("gpt2",)
    sentinel_family = "gpt2"
    # the model type this class had before the mechanism's files were named `sentinel`: a folder saved then loads
    legacy_model_types: ClassVar[tuple[str, ...]] = ("gated_gpt2",)

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        if config_dict.get("model_type") in cls.legacy_model_types:
            config_dict = {**config_dict, "model_type": cls.model_type}
        return super().from_dict(config_dict, **kwargs)


class LegacyGatedGPT2Config(GPT2SentinelConfig):
    """The model type `gated_gpt2` of models saved before the rename, for `AutoConfig` in-process: it reads such a
    config.json as a [`GPT2SentinelConfig`] (so the Auto model classes pick the current classes, and a save writes
    the current model type)."""

    model_type = "gated_gpt2"

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        return GPT2SentinelConfig.from_dict(config_dict, **kwargs)


# the names the GPT-2 classes had before the rename, still documented and importable
GatedGPT2Config = GPT2SentinelConfig

__all__ = [
    "GPT2SentinelConfig",
    "GatedGPT2Config",
    "LegacyGatedGPT2Config",
    "SentinelConfigMixin",
    "SentinelFields",
]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
@zoo_config
class LlamaSentinelConfig(SentinelConfigMixin, ZooConfigMixin, LlamaConfig, SentinelFields):
    r"""Configuration of [`LlamaSentinelModel`]: every [`LlamaConfig`] field plus the sentinel options of
    [`SentinelFields`]. Converts checkpoints of model_type `llama` (SmolLM2, Llama 2/3, ...). The gates are per query
    head (grouped-query attention included)."""

    model_type = "llama_sentinel"
    stock_model_types = ("llama",)
    sentinel_family = "llama"


@zoo_config
class Qwen2SentinelConfig(SentinelConfigMixin, ZooConfigMixin, Qwen2Config, SentinelFields):
    r"""Configuration of [`Qwen2SentinelModel`]: every [`Qwen2Config`] field plus the sentinel options of
    [`SentinelFields`]. Converts checkpoints of model_type `qwen2` (Qwen2, Qwen2.5). The gates are per query head
    (grouped-query attention included)."""

    model_type = "qwen2_sentinel"
    stock_model_types = ("qwen2",)
    sentinel_family = "qwen2"


@zoo_config
class Qwen3SentinelConfig(SentinelConfigMixin, ZooConfigMixin, Qwen3Config, SentinelFields):
    r"""Configuration of [`Qwen3SentinelModel`]: every [`Qwen3Config`] field plus the sentinel options of
    [`SentinelFields`]. Converts checkpoints of model_type `qwen3`. The gates are per query head (grouped-query
    attention included)."""

    model_type = "qwen3_sentinel"
    stock_model_types = ("qwen3",)
    sentinel_family = "qwen3"


__all__ += ["LlamaSentinelConfig", "Qwen2SentinelConfig", "Qwen3SentinelConfig"]
# --- end generated classes ---
