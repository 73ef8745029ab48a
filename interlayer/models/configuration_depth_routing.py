"""Configuration of depth routing on the decoder families of decoder_families.py (Llama, Qwen3, Qwen2, Mistral, Phi-3,
OLMo 2, Gemma 2, Gemma 3 text, GPT-2): a block reads a learned combination of earlier layers' outputs or values, or a
learned augmentation of its residual, instead of only the running residual stream."""

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

DEPTH_FORMS = ("dwa", "mudd", "attention_residual", "value_residual", "laurel")
ATTENTION_RESIDUAL_VARIANTS = ("delta", "full")
VALUE_RESIDUAL_MIXES = ("learned", "half")
LAUREL_FORMS = ("rw", "lr", "pa")
MUDD_WAYS = ("q", "k", "v", "r")


@dataclasses.dataclass(kw_only=True)
class DepthRoutingFields(ZooConfigFields):
    r"""
    Depth-routing options: the form (`depth_form`) and its knobs. Layer `i` (0-based) of `L` computes `x_{i+1} =
    B_i(y_i)` from what it reads, `y_i`; `x_0` is the embedding output. Every form starts, with `identity_init=True`,
    as the stock model, exactly (see docs/depth_routing.md for each form's equations).

    Args:
        depth_form (`str`, defaults to `"dwa"`): `"dwa"` (DenseFormer's depth-weighted average: `y_{i+1} = sum_j
            alpha_ij x_j` over the embedding and every earlier block's output), `"mudd"` (MUDDFormer's multiway
            dynamic dense connections: per token, weights over every earlier output generated from the current hidden
            state, separately for the next block's query, key, value and residual inputs), `"attention_residual"`
            (softmax attention over earlier sublayers' outputs with a learned query per sublayer, added, gated, to
            each sublayer's input), `"value_residual"` (ResFormer: each layer's attention values mixed with the first
            layer's, `v_n' = l1 v_n + l2 v_1`) or `"laurel"` (LAuReL's learned augmented residual). Chosen when the
            model is built.
        dwa_dilation (`int`, defaults to 1): DenseFormer's k: a depth-weighted average reads every k-th output
            counted back from the current one.
        dwa_period (`int`, defaults to 1): DenseFormer's p: a depth-weighted average follows every p-th block; the
            other blocks pass their output on as the stock stack does (and every block's output is a source).
        mudd_ways (`list[str]`, defaults to `["q", "k", "v", "r"]`): which inputs of the next block get their own
            dynamic dense connection (query, key, value, residual); the others read the residual way's, or, without
            it, the block's output as the stock stack does.
        mudd_hidden_expand (`int`, defaults to 1): the weight generator after block i has `mudd_hidden_expand *
            ways * (i + 2)` hidden units (the reference's `dynamic_dense_hidden_expand`).
        mudd_expand_last (`bool`, defaults to `True`): four times as many after the last block, whose generator
            makes the residual way alone (the reference's `expand_last`, on in its released models).
        attention_residual_variant (`str`, defaults to `"delta"`): `"delta"` (delta attention residuals) feeds each
            sublayer its residual input plus the gated attention over the sources (gate 0 at conversion), the
            residual stream unchanged; `"full"` (Kimi's attention residuals) feeds it the attention over the sources
            alone, and the final norm too, which cannot start as the stock model (refused with
            `identity_init=True`).
        attention_residual_block_size (`int`, defaults to 0): 0, the sources are the embedding and every earlier
            sublayer's output; n >= 1 (delta only), the embedding and the deltas of the completed blocks of n layers
            (the reference's `delta_block`, with the blocks' true deltas).
        attention_residual_gate_init (`float`, defaults to 0.0): the delta form's gates at conversion with
            `identity_init=False`.
        value_residual_mix (`str`, defaults to `"learned"`): `"learned"`, per layer `(l1, l2)` starting at (1, 0) (the
            stock values); `"half"`, the paper's fixed (0.5, 0.5), which cannot start as the stock model (refused with
            `identity_init=True`).
        laurel_form (`str`, defaults to `"lr"`): LAuReL's form around each sublayer `f` with residual input `h`:
            `"rw"` (residual weights: `alpha f(h) + beta h`, starting at 1 and 1), `"lr"` (low rank: `f(h) + h + B A
            h`, `B` starting at 0, `A` column-orthogonal) or `"pa"` (previous activations: `f(h_s) + h_s + B A
            sum_j gamma_j h_{s-j}` over the last `laurel_previous` residual inputs, `B` starting at 0 and `gamma` at
            (1, 0, ...)).
        laurel_previous (`int`, defaults to 3): how many residual inputs the previous-activations form weighs (the
            sublayer's own and those of the sublayers before it; the paper's k).
        laurel_rank (`int`, defaults to 16): the rank of `A` (`hidden -> rank`) and `B` (`rank -> hidden`).
        laurel_norm (`bool`, defaults to `False`): RMS-normalise `B A x` as Gemma 3n's LAuReL block does (its
            `post_laurel_norm`).
        depth_init_std (`float`, defaults to 0.02): standard deviation of the noise added to every depth-routing
            parameter that starts at its identity value, with `identity_init=False`.
        freeze_base (`bool`, defaults to `True`): train only the depth-routing parameters.
    """

    reload_options: ClassVar[frozenset[str]] = ZooConfigFields.reload_options | {"freeze_base"}
    init_options: ClassVar[frozenset[str]] = ZooConfigFields.init_options | {
        "attention_residual_gate_init",
        "depth_init_std",
    }

    depth_form: Literal["dwa", "mudd", "attention_residual", "value_residual", "laurel"] = "dwa"
    dwa_dilation: int = 1
    dwa_period: int = 1
    mudd_ways: list[str] = dataclasses.field(default_factory=lambda: list(MUDD_WAYS))
    mudd_hidden_expand: int = 1
    mudd_expand_last: bool = True
    attention_residual_variant: Literal["delta", "full"] = "delta"
    attention_residual_block_size: int = 0
    attention_residual_gate_init: float | int = 0.0
    value_residual_mix: Literal["learned", "half"] = "learned"
    laurel_form: Literal["rw", "lr", "pa"] = "lr"
    laurel_rank: int = 16
    laurel_norm: bool = False
    laurel_previous: int = 3
    depth_init_std: float | int = 0.02
    freeze_base: bool = True

    def validate_depth_routing(self):
        check_choice("depth_form", self.depth_form, DEPTH_FORMS)
        check_range("dwa_dilation", self.dwa_dilation, 1)
        check_range("dwa_period", self.dwa_period, 1)
        if not isinstance(self.mudd_ways, (list, tuple)) or not self.mudd_ways:
            raise ValueError(f"`mudd_ways` must be a non-empty list of {list(MUDD_WAYS)}, got {self.mudd_ways!r}.")
        for i, way in enumerate(self.mudd_ways):
            check_choice(f"mudd_ways[{i}]", way, MUDD_WAYS)
        if len(set(self.mudd_ways)) != len(self.mudd_ways):
            raise ValueError(f"`mudd_ways` must not repeat a way, got {self.mudd_ways!r}.")
        check_range("mudd_hidden_expand", self.mudd_hidden_expand, 1)
        check_choice("attention_residual_variant", self.attention_residual_variant, ATTENTION_RESIDUAL_VARIANTS)
        check_range("attention_residual_block_size", self.attention_residual_block_size, 0)
        if self.attention_residual_variant == "full" and self.attention_residual_block_size:
            raise ValueError(
                "`attention_residual_block_size` applies to the delta variant: the full variant's sources are every "
                f"sublayer's output; got attention_residual_block_size={self.attention_residual_block_size!r} with "
                "attention_residual_variant='full'. Leave it 0, or use attention_residual_variant='delta'."
            )
        check_choice("value_residual_mix", self.value_residual_mix, VALUE_RESIDUAL_MIXES)
        check_choice("laurel_form", self.laurel_form, LAUREL_FORMS)
        check_range("laurel_rank", self.laurel_rank, 1)
        check_range("laurel_previous", self.laurel_previous, 1)
        check_range("depth_init_std", self.depth_init_std, 0)
        check_range("num_hidden_layers", self.num_hidden_layers, 1)
        refused = {
            "attention_residual": ("attention_residual_variant", "full", "it replaces the residual stream"),
            "value_residual": ("value_residual_mix", "half", "it halves every layer's values"),
        }.get(self.depth_form)
        if refused and self.identity_init and getattr(self, refused[0]) == refused[1]:
            field, value, why = refused
            raise ValueError(
                f"`identity_init=True` cannot hold with `depth_form={self.depth_form!r}` and `{field}={value!r}`: "
                f"{why}, so the converted model cannot start as the stock model. Use identity_init=False, or the "
                f"form's identity variant."
            )


__all__ = [
    "ATTENTION_RESIDUAL_VARIANTS",
    "DEPTH_FORMS",
    "LAUREL_FORMS",
    "MUDD_WAYS",
    "VALUE_RESIDUAL_MIXES",
    "DepthRoutingFields",
]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
@zoo_config
class LlamaDepthRoutingConfig(ZooConfigMixin, LlamaConfig, DepthRoutingFields):
    r"""Configuration of [`LlamaDepthRoutingModel`]: every [`LlamaConfig`] field plus the options of
    [`DepthRoutingFields`]. Converts checkpoints of model_type `llama` (SmolLM2, Llama 2/3, ...)."""

    model_type = "llama_depth_routing"
    stock_model_types = ("llama",)


@zoo_config
class Qwen3DepthRoutingConfig(ZooConfigMixin, Qwen3Config, DepthRoutingFields):
    r"""Configuration of [`Qwen3DepthRoutingModel`]: every [`Qwen3Config`] field plus the options of
    [`DepthRoutingFields`]. Converts checkpoints of model_type `qwen3`."""

    model_type = "qwen3_depth_routing"
    stock_model_types = ("qwen3",)


@zoo_config
class Qwen2DepthRoutingConfig(ZooConfigMixin, Qwen2Config, DepthRoutingFields):
    r"""Configuration of [`Qwen2DepthRoutingModel`]: every [`Qwen2Config`] field plus the options of
    [`DepthRoutingFields`]. Converts checkpoints of model_type `qwen2` (Qwen2, Qwen2.5)."""

    model_type = "qwen2_depth_routing"
    stock_model_types = ("qwen2",)


@zoo_config
class MistralDepthRoutingConfig(ZooConfigMixin, MistralConfig, DepthRoutingFields):
    r"""Configuration of [`MistralDepthRoutingModel`]: every [`MistralConfig`] field plus the options of
    [`DepthRoutingFields`]. Converts checkpoints of model_type `mistral`."""

    model_type = "mistral_depth_routing"
    stock_model_types = ("mistral",)


@zoo_config
class Phi3DepthRoutingConfig(ZooConfigMixin, Phi3Config, DepthRoutingFields):
    r"""Configuration of [`Phi3DepthRoutingModel`]: every [`Phi3Config`] field plus the options of
    [`DepthRoutingFields`]. Converts checkpoints of model_type `phi3` (Phi-3, Phi-3.5, Phi-4 mini)."""

    model_type = "phi3_depth_routing"
    stock_model_types = ("phi3",)


@zoo_config
class Olmo2DepthRoutingConfig(ZooConfigMixin, Olmo2Config, DepthRoutingFields):
    r"""Configuration of [`Olmo2DepthRoutingModel`]: every [`Olmo2Config`] field plus the options of
    [`DepthRoutingFields`]. Converts checkpoints of model_type `olmo2`."""

    model_type = "olmo2_depth_routing"
    stock_model_types = ("olmo2",)


@zoo_config
class Gemma2DepthRoutingConfig(ZooConfigMixin, Gemma2Config, DepthRoutingFields):
    r"""Configuration of [`Gemma2DepthRoutingModel`]: every [`Gemma2Config`] field plus the options of
    [`DepthRoutingFields`]. Converts checkpoints of model_type `gemma2`."""

    model_type = "gemma2_depth_routing"
    stock_model_types = ("gemma2",)


@zoo_config
class Gemma3TextDepthRoutingConfig(ZooConfigMixin, Gemma3TextConfig, DepthRoutingFields):
    r"""Configuration of [`Gemma3TextDepthRoutingModel`]: every [`Gemma3TextConfig`] field plus the options of
    [`DepthRoutingFields`]. Converts checkpoints of model_type `gemma3_text` (text-only Gemma 3, such as gemma-3-1b)."""

    model_type = "gemma3_text_depth_routing"
    stock_model_types = ("gemma3_text",)


@zoo_config
class GPT2DepthRoutingConfig(ZooConfigMixin, GPT2Config, DepthRoutingFields):
    r"""Configuration of [`GPT2DepthRoutingModel`]: every [`GPT2Config`] field plus the options of
    [`DepthRoutingFields`]. Converts checkpoints of model_type `gpt2` (GPT-2, DistilGPT-2)."""

    model_type = "gpt2_depth_routing"
    stock_model_types = ("gpt2",)


__all__ += [
    "LlamaDepthRoutingConfig",
    "Qwen3DepthRoutingConfig",
    "Qwen2DepthRoutingConfig",
    "MistralDepthRoutingConfig",
    "Phi3DepthRoutingConfig",
    "Olmo2DepthRoutingConfig",
    "Gemma2DepthRoutingConfig",
    "Gemma3TextDepthRoutingConfig",
    "GPT2DepthRoutingConfig",
]
# --- end generated classes ---
