"""Configuration of attention bridges between an encoder and language-specific decoders (seed 004) on Marian, BART,
mBART, M2M100 (NLLB's architecture) and T5."""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
from typing import ClassVar, Literal

from torch import nn
from transformers import BartConfig, M2M100Config, MarianConfig, MBartConfig, T5Config

from .zoo_common import ZooConfigFields, ZooConfigMixin, check_choice, check_range, zoo_config

BRIDGE_LAYER_TYPES = ("lin", "perceiver", "simple", "transformer", "feedforward")
FIXED_LENGTH_TYPES = ("lin", "perceiver", "simple")
BRIDGE_NORMS = ("layernorm", "rmsnorm", "none")


@dataclasses.dataclass(kw_only=True)
class AttentionBridgeFields(ZooConfigFields):
    r"""
    Attention-bridge options (seed 004): a shared stack of bridge layers between the encoder and the decoders'
    cross-attention, and optionally one decoder per target language.

    Args:
        bridge_layers (`list[str]`, defaults to `["lin"]`): the bridge layers, applied in order to the encoder output:
            `"lin"` (Lin et al. 2017 structured self-attention: `bridge_fixed_length` attention heads over the source,
            `softmax_len(W2 relu(W1 H))^T H`), `"simple"` (learned queries attending over the source), `"perceiver"`
            (a learned latent array cross-attending to the encoder output, then a self-attention block; later
            perceiver layers refine the previous output and still attend to the encoder output), `"transformer"` (a
            pre-norm transformer encoder layer, variable length) and `"feedforward"` (Linear, ReLU, Linear, norm; no
            residual). An empty list is no bridge. `lin`, `simple` and `perceiver` give the decoder a fixed-length
            memory of `bridge_fixed_length` slots.
        bridge_fixed_length (`int`, defaults to 50): slots of a fixed-length bridge (the toolkit's `ab_fixed_length`).
        bridge_hidden_size (`int`, defaults to 2048): inner width of the lin scorer, the simple bridge's queries and
            keys, and the feed-forward blocks (the toolkit's `hidden_ab_size`).
        bridge_heads (`int`, defaults to 8): attention heads of the perceiver and transformer layers (must divide
            `d_model`).
        bridge_norm (`str`, defaults to `"layernorm"`): `"layernorm"`, `"rmsnorm"` or `"none"`, eps `bridge_norm_eps`.
        bridge_norm_eps (`float`, defaults to 1e-6): epsilon of the bridge's norms.
        decoder_languages (`list[str]`, *optional*): one decoder per target language, sharing the encoder, the bridge,
            the embeddings and the output layer. The first language's decoder is the stock `model.decoder`; the others
            (`model.attention_bridge_decoders.<lang>`) start as copies of the stock decoder when converting a stock
            checkpoint. The language is chosen per batch: `forward(..., tgt_lang="de")`, `generate(..., tgt_lang="de")`.
            A name is a module name: no `.`, and none of the others may be an attribute of `nn.ModuleDict` (`"to"`).
        identity_init (`bool`, defaults to `False`): start the bridge as the identity, so the converted model computes
            the stock function. Only a bridge made of `"transformer"` layers can (their residual branches start at
            zero); any other layer type raises.
    """

    reload_options: ClassVar[frozenset[str]] = ZooConfigFields.reload_options | {"bridge_norm_eps"}

    bridge_layers: list[str] = dataclasses.field(default_factory=lambda: ["lin"])
    bridge_fixed_length: int = 50
    bridge_hidden_size: int = 2048
    bridge_heads: int = 8
    bridge_norm: Literal["layernorm", "rmsnorm", "none"] = "layernorm"
    bridge_norm_eps: float = 1e-6
    decoder_languages: list[str] | None = None
    identity_init: bool = False

    def validate_attention_bridge(self):
        for i, layer in enumerate(self.bridge_layers):
            check_choice(f"bridge_layers[{i}]", layer, BRIDGE_LAYER_TYPES)
        check_range("bridge_fixed_length", self.bridge_fixed_length, 1)
        check_range("bridge_hidden_size", self.bridge_hidden_size, 1)
        check_range("bridge_heads", self.bridge_heads, 1)
        check_choice("bridge_norm", self.bridge_norm, BRIDGE_NORMS)
        check_range("bridge_norm_eps", self.bridge_norm_eps, 0, low_open=True)
        uses_heads = {"perceiver", "transformer"} & set(self.bridge_layers)
        if uses_heads and self.d_model % self.bridge_heads:
            raise ValueError(
                f"`bridge_heads` must divide d_model={self.d_model} for {sorted(uses_heads)} bridge layers, got "
                f"{self.bridge_heads}."
            )
        if self.decoder_languages is not None:
            languages = self.decoder_languages
            if not languages or any(not isinstance(x, str) or not x for x in languages):
                raise ValueError(f"`decoder_languages` must be a non-empty list of language names, got {languages!r}.")
            if len(set(languages)) != len(languages):
                raise ValueError(f"`decoder_languages` must not repeat a language, got {languages!r}.")
            dotted = [x for x in languages if "." in x]
            if dotted:
                raise ValueError(
                    f"`decoder_languages` names become module names, which cannot contain '.': got {dotted[0]!r} "
                    f"(use {dotted[0].replace('.', '_')!r})."
                )
            # the further languages' decoders are `attention_bridge_decoders.<lang>` (the saved weights' names); torch
            # cannot register a module under a name its `nn.ModuleDict` already has as an attribute
            taken = [x for x in languages[1:] if hasattr(nn.ModuleDict(), x)]
            if taken:
                raise ValueError(
                    f"`decoder_languages`: {taken[0]!r} cannot name a further decoder "
                    f"(`attention_bridge_decoders.{taken[0]}`): it is an attribute of torch's nn.ModuleDict. Name that "
                    f"language otherwise (such as {taken[0] + '_'!r}), or make it the first language, whose decoder "
                    f"is the stock `decoder`; got {languages!r}."
                )
        if self.identity_init:
            other = [t for t in self.bridge_layers if t != "transformer"]
            if other:
                raise ValueError(
                    f"`identity_init=True` needs a bridge of 'transformer' layers only (their residual branches can "
                    f"start at zero); a {other[0]!r} bridge layer cannot start as the identity"
                    + (" (it gives the decoder a fixed-length memory)" if other[0] in FIXED_LENGTH_TYPES else "")
                    + ". Use identity_init=False."
                )

    @property
    def bridge_is_fixed_length(self) -> bool:
        """Whether the decoder's memory is `bridge_fixed_length` slots (then no source padding mask applies)."""
        return any(t in FIXED_LENGTH_TYPES for t in self.bridge_layers)


class AttentionBridgeConfigMixin(ZooConfigMixin):
    """What every attention-bridge config adds to the zoo's conversion rules: a config saved under the model type the
    family had before the attention bridges were renamed (`old_model_type`, e.g. `marian_bridge`) is read as this
    class (so `from_pretrained` on such a folder works and a re-save writes the new type); and the standard deviation
    of the bridge's initialisation (`bridge_init_std`), the family's own `init_std` unless the family declares
    otherwise."""

    old_model_type: ClassVar[str | None] = None

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        if cls.old_model_type is not None and config_dict.get("model_type") == cls.old_model_type:
            config_dict = {**config_dict, "model_type": cls.model_type}
        return super().from_dict(config_dict, **kwargs)

    @property
    def bridge_init_std(self) -> float:
        return self.init_std


@zoo_config
class MarianAttentionBridgeConfig(AttentionBridgeConfigMixin, MarianConfig, AttentionBridgeFields):
    r"""Configuration of [`MarianAttentionBridgeForConditionalGeneration`]: every [`MarianConfig`] field plus the
    options of [`AttentionBridgeFields`]. Converts checkpoints of model_type `marian` (Helsinki-NLP opus-mt models)."""

    model_type = "marian_attention_bridge"
    old_model_type = "marian_bridge"
    stock_model_types = ("marian",)


@zoo_config
class BartAttentionBridgeConfig(AttentionBridgeConfigMixin, BartConfig, AttentionBridgeFields):
    r"""Configuration of [`BartAttentionBridgeForConditionalGeneration`]: every [`BartConfig`] field plus the options
    of [`AttentionBridgeFields`]. Converts checkpoints of model_type `bart`."""

    model_type = "bart_attention_bridge"
    old_model_type = "bart_bridge"
    stock_model_types = ("bart",)


@zoo_config
class MBartAttentionBridgeConfig(AttentionBridgeConfigMixin, MBartConfig, AttentionBridgeFields):
    r"""Configuration of [`MBartAttentionBridgeForConditionalGeneration`]: every [`MBartConfig`] field plus the
    options of [`AttentionBridgeFields`]. Converts checkpoints of model_type `mbart` (mBART-25/50)."""

    model_type = "mbart_attention_bridge"
    stock_model_types = ("mbart",)


@zoo_config
class M2M100AttentionBridgeConfig(AttentionBridgeConfigMixin, M2M100Config, AttentionBridgeFields):
    r"""Configuration of [`M2M100AttentionBridgeForConditionalGeneration`]: every [`M2M100Config`] field plus the
    options of [`AttentionBridgeFields`]. Converts checkpoints of model_type `m2m_100` (M2M100 and NLLB-200)."""

    model_type = "m2m_100_attention_bridge"
    stock_model_types = ("m2m_100",)


@zoo_config
class T5AttentionBridgeConfig(AttentionBridgeConfigMixin, T5Config, AttentionBridgeFields):
    r"""Configuration of [`T5AttentionBridgeForConditionalGeneration`]: every [`T5Config`] field plus the options of
    [`AttentionBridgeFields`]. Converts checkpoints of model_type `t5` (T5, T5 v1.1, mT5-style configs saved as `t5`).
    T5 has no `init_std`: the bridge initialises with `initializer_factor * d_model ** -0.5`, the std T5 gives its
    own projections from `d_model`."""

    model_type = "t5_attention_bridge"
    stock_model_types = ("t5",)

    @property
    def bridge_init_std(self) -> float:
        return self.initializer_factor * self.d_model**-0.5


class OldModelTypeConfig:
    """A config class registered with `AutoConfig` under a model type saved before the attention bridges were renamed
    (`marian_bridge`, `bart_bridge`): reading a config returns the renamed class (`renamed`), so the Auto model classes
    build the renamed models in-process. A saved folder also ships its own code for `trust_remote_code`."""

    renamed: ClassVar[type]

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        return cls.renamed.from_dict(config_dict, **kwargs)


class MarianBridgeOldTypeConfig(OldModelTypeConfig, MarianAttentionBridgeConfig):
    model_type = "marian_bridge"
    renamed = MarianAttentionBridgeConfig


class BartBridgeOldTypeConfig(OldModelTypeConfig, BartAttentionBridgeConfig):
    model_type = "bart_bridge"
    renamed = BartAttentionBridgeConfig


OLD_MODEL_TYPE_CONFIGS = (MarianBridgeOldTypeConfig, BartBridgeOldTypeConfig)

# The names before the attention bridges were renamed (they named two mechanisms "bridge"): the same classes.
MarianBridgeConfig = MarianAttentionBridgeConfig
BartBridgeConfig = BartAttentionBridgeConfig

__all__ = [
    "BRIDGE_LAYER_TYPES",
    "OLD_MODEL_TYPE_CONFIGS",
    "AttentionBridgeFields",
    "BartAttentionBridgeConfig",
    "BartBridgeConfig",
    "M2M100AttentionBridgeConfig",
    "MBartAttentionBridgeConfig",
    "MarianAttentionBridgeConfig",
    "MarianBridgeConfig",
    "T5AttentionBridgeConfig",
]
