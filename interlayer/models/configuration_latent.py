"""Configuration of latent back-projection (seed 003) on the decoder families of families.py (Llama, Qwen3,
Qwen2, Mistral, Phi-3, OLMo 2, Gemma 2, Gemma 3 text, GPT-2)."""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
from typing import ClassVar, Literal

from .zoo_common import ZooConfigFields, ZooConfigMixin, check_choice, check_range, zoo_config

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers import (
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Olmo2Config,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

# --- end generated imports ---

LATENT_SOURCES = ("previous_position", "same_position", "recurrent")
SEED_DEPTH = 28  # Qwen3-0.6B: sources L5..L25, targets L0..L20, offset 5


def default_latent_offset(num_layers: int) -> int:
    """The seed's offset (5 of 28 layers) scaled to `num_layers`: round(5/28 of the depth), at least 1."""
    return max(1, round(num_layers * 5 / SEED_DEPTH))


def default_last_source(num_layers: int) -> int:
    """The seed's deepest source (L25 of 28: the top two layers are left out) scaled: round(2/28 of the depth) left
    out, at least 1."""
    return num_layers - 1 - max(1, round(num_layers * 2 / SEED_DEPTH))


@dataclasses.dataclass(kw_only=True)
class LatentFields(ZooConfigFields):
    r"""
    Latent back-projection options (seed 003). Source layer `s` compresses its output to `latent_dim` numbers
    (`down_s`); target layer `t` projects them back up and adds them, gated, to its MLP output:
    `mlp_t(x) + sigmoid(g_t) * up_t(down_s(h_s))`, with the latents taken from a first, stock pass.

    Args:
        latent_dim (`int`, defaults to 128): width of the latents.
        latent_offset (`int`, *optional*): target = source - offset. Defaults to round(5/28 of the depth) (5 on the
            seed's 28-layer Qwen3-0.6B, 5 on 30-layer SmolLM2-135M, 1 on a 4-layer model).
        latent_source_layers (`list[int]`, *optional*): the source layers, in the order of `latent_target_layers`.
            Defaults to layers `offset` .. `L - 1 - round(2/28 of L)` (L5..L25 on 28 layers: the seed leaves the top
            two layers out), at least one layer.
        latent_target_layers (`list[int]`, *optional*): the target layers, one per source. Defaults to each source
            minus `latent_offset`. Give both lists to choose any pairing (each layer at most once in each list).
        latent_source (`str`, defaults to `"previous_position"`): where token t's latents come from.
            `"previous_position"`: the stock pass at token t-1, so generation runs the stock and the latent pass of
            a new token side by side in one batched forward and agrees exactly with training (the default, because
            it is the only mode that is both exact and near single-pass at generation).
            `"same_position"`: the stock pass at token t itself (the seed's training); exact generation then runs
            the two passes one after the other for every new token.
            `"recurrent"`: the seed's inference taken literally: at generation one pass per token, with the latents
            of the previous token's own latent-applied pass. Training cannot unroll that; it trains as
            `"previous_position"`, so generation differs from training (measured in docs/latent.md).
        latent_gate_init (`float`, defaults to 0.0): initial gate logit (sigmoid 0.5, as the seed).
        latent_down_init_gain (`float`, defaults to 0.1): Xavier gain of the down projections (the seed's).
        latent_up_init_gain (`float`, defaults to 0.05): Xavier gain of the up projections (the seed's). With
            `identity_init=True` the up projections start at zero instead, so the converted model computes the stock
            function.
        freeze_base (`bool`, defaults to `True`): train only the latent projections and gates (the seed's setting).
    """

    reload_options: ClassVar[frozenset[str]] = ZooConfigFields.reload_options | {"freeze_base", "latent_source"}
    init_options: ClassVar[frozenset[str]] = ZooConfigFields.init_options | {
        "latent_gate_init",
        "latent_down_init_gain",
        "latent_up_init_gain",
    }

    latent_dim: int = 128
    latent_offset: int | None = None
    latent_source_layers: list[int] | None = None
    latent_target_layers: list[int] | None = None
    latent_source: Literal["previous_position", "same_position", "recurrent"] = "previous_position"
    latent_gate_init: float | int = 0.0
    latent_down_init_gain: float | int = 0.1
    latent_up_init_gain: float | int = 0.05
    freeze_base: bool = True

    no_attention_weights: ClassVar[str] = (
        "every token runs through the layers twice (the stock pass, then the latent-applied pass), so there is no "
        "single set of attention weights to return; read the gates and adjustment ratios with "
        "`model.mechanism_stats()`"
    )

    def validate_latent(self):
        check_range("latent_dim", self.latent_dim, 1)
        check_choice("latent_source", self.latent_source, LATENT_SOURCES)
        check_range("latent_down_init_gain", self.latent_down_init_gain, 0)
        check_range("latent_up_init_gain", self.latent_up_init_gain, 0)
        layers = self.num_hidden_layers
        check_range("latent_offset", self.latent_offset, 1 - layers, layers - 1, allow_none=True)
        pairs = self.latent_pairs
        if not pairs:
            raise ValueError(
                f"latent back-projection needs at least one (source, target) pair; with num_hidden_layers={layers}, "
                f"latent_offset={self.latent_offset!r}, latent_source_layers={self.latent_source_layers!r} and "
                f"latent_target_layers={self.latent_target_layers!r} there is none."
            )
        for field in ("latent_source_layers", "latent_target_layers"):
            value = getattr(self, field)
            if value is None:
                continue
            bad = [i for i in value if not 0 <= i < layers]
            if bad:
                raise ValueError(f"`{field}` must hold layer indices in [0, {layers - 1}], got {value!r}.")
            if len(set(value)) != len(value):
                raise ValueError(f"`{field}` must not repeat a layer, got {value!r}.")
        if self.latent_source_layers is not None and self.latent_target_layers is not None:
            if len(self.latent_source_layers) != len(self.latent_target_layers):
                raise ValueError(
                    "`latent_source_layers` and `latent_target_layers` must have the same length (one target per "
                    f"source), got {self.latent_source_layers!r} and {self.latent_target_layers!r}."
                )
            if self.latent_offset is not None:
                off = [(s, t) for s, t in pairs if s - t != self.latent_offset]
                if off:
                    raise ValueError(
                        f"`latent_offset`={self.latent_offset!r} contradicts the pairs given by `latent_source_layers` "
                        f"and `latent_target_layers` (source - target differs for {off}); leave `latent_offset` unset "
                        "when giving both lists."
                    )
        bad = [(s, t) for s, t in pairs if not (0 <= s < layers and 0 <= t < layers)]
        if bad:
            raise ValueError(
                f"`latent_offset`={self.latent_offset!r} gives (source, target) pairs outside [0, {layers - 1}]: {bad}."
            )

    @property
    def latent_pairs(self) -> list[tuple[int, int]]:
        """`(source, target)` layer pairs with the defaults resolved."""
        layers = self.num_hidden_layers
        offset = self.latent_offset if self.latent_offset is not None else default_latent_offset(layers)
        sources, targets = self.latent_source_layers, self.latent_target_layers
        if sources is None and targets is None:
            sources = list(range(max(offset, 0), max(offset, default_last_source(layers)) + 1))
        if sources is None:
            sources = [t + offset for t in targets]
        if targets is None:
            targets = [s - offset for s in sources]
        return list(zip(sources, targets))


__all__ = ["LATENT_SOURCES", "LatentFields"]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
@zoo_config
class LlamaLatentConfig(ZooConfigMixin, LlamaConfig, LatentFields):
    r"""Configuration of [`LlamaLatentModel`]: every [`LlamaConfig`] field plus the options of [`LatentFields`].
    Converts checkpoints of model_type `llama` (SmolLM2, Llama 2/3, ...)."""

    model_type = "llama_latent"
    stock_model_types = ("llama",)


@zoo_config
class Qwen3LatentConfig(ZooConfigMixin, Qwen3Config, LatentFields):
    r"""Configuration of [`Qwen3LatentModel`]: every [`Qwen3Config`] field plus the options of [`LatentFields`].
    Converts checkpoints of model_type `qwen3`."""

    model_type = "qwen3_latent"
    stock_model_types = ("qwen3",)


@zoo_config
class Qwen2LatentConfig(ZooConfigMixin, Qwen2Config, LatentFields):
    r"""Configuration of [`Qwen2LatentModel`]: every [`Qwen2Config`] field plus the options of [`LatentFields`].
    Converts checkpoints of model_type `qwen2` (Qwen2, Qwen2.5)."""

    model_type = "qwen2_latent"
    stock_model_types = ("qwen2",)


@zoo_config
class MistralLatentConfig(ZooConfigMixin, MistralConfig, LatentFields):
    r"""Configuration of [`MistralLatentModel`]: every [`MistralConfig`] field plus the options of [`LatentFields`].
    Converts checkpoints of model_type `mistral`."""

    model_type = "mistral_latent"
    stock_model_types = ("mistral",)


@zoo_config
class Phi3LatentConfig(ZooConfigMixin, Phi3Config, LatentFields):
    r"""Configuration of [`Phi3LatentModel`]: every [`Phi3Config`] field plus the options of [`LatentFields`]. Converts
    checkpoints of model_type `phi3` (Phi-3, Phi-3.5, Phi-4 mini)."""

    model_type = "phi3_latent"
    stock_model_types = ("phi3",)


@zoo_config
class Olmo2LatentConfig(ZooConfigMixin, Olmo2Config, LatentFields):
    r"""Configuration of [`Olmo2LatentModel`]: every [`Olmo2Config`] field plus the options of [`LatentFields`].
    Converts checkpoints of model_type `olmo2`."""

    model_type = "olmo2_latent"
    stock_model_types = ("olmo2",)


@zoo_config
class Gemma2LatentConfig(ZooConfigMixin, Gemma2Config, LatentFields):
    r"""Configuration of [`Gemma2LatentModel`]: every [`Gemma2Config`] field plus the options of [`LatentFields`].
    Converts checkpoints of model_type `gemma2`."""

    model_type = "gemma2_latent"
    stock_model_types = ("gemma2",)


@zoo_config
class Gemma3TextLatentConfig(ZooConfigMixin, Gemma3TextConfig, LatentFields):
    r"""Configuration of [`Gemma3TextLatentModel`]: every [`Gemma3TextConfig`] field plus the options of
    [`LatentFields`]. Converts checkpoints of model_type `gemma3_text` (text-only Gemma 3, such as gemma-3-1b)."""

    model_type = "gemma3_text_latent"
    stock_model_types = ("gemma3_text",)


@zoo_config
class GPT2LatentConfig(ZooConfigMixin, GPT2Config, LatentFields):
    r"""Configuration of [`GPT2LatentModel`]: every [`GPT2Config`] field plus the options of [`LatentFields`]. Converts
    checkpoints of model_type `gpt2` (GPT-2, DistilGPT-2)."""

    model_type = "gpt2_latent"
    stock_model_types = ("gpt2",)


__all__ += [
    "LlamaLatentConfig",
    "Qwen3LatentConfig",
    "Qwen2LatentConfig",
    "MistralLatentConfig",
    "Phi3LatentConfig",
    "Olmo2LatentConfig",
    "Gemma2LatentConfig",
    "Gemma3TextLatentConfig",
    "GPT2LatentConfig",
]
# --- end generated classes ---
