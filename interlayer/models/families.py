"""The zoo's families, each declared once by the roles its stock modules play, for every mechanism to read.

A decoder family (`DecoderFamily`) is declared by its stock classes and by the roles of its layer: the attention
branch `F_attn(x)` and the MLP branch `F_mlp(x)` of a residual block (the stock layer computes `h + F_attn(h)`, then
`h + F_mlp(h)`), with the family's norms and dropouts inside the branch; the embedding (scaled or not); the final norm;
the rotary position embeddings (shared, or one per layer type); the stock attribute names. The mechanisms' classes on
a family are `class` statements that `python -m interlayer.models.generate_classes --fix` writes from these
declarations into the configuration and modeling files, so a new decoder family is one declaration here (and a run of
the generator).

It sits beside the modeling files that import it, so `save_pretrained` ships it with the remote code.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
from collections.abc import Callable

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPast, BaseModelOutputWithPastAndCrossAttentions
from transformers.models.gemma2 import modeling_gemma2 as gemma2
from transformers.models.gemma3 import modeling_gemma3 as gemma3
from transformers.models.gpt2 import modeling_gpt2 as gpt2
from transformers.models.llama import modeling_llama as llama
from transformers.models.mistral import modeling_mistral as mistral
from transformers.models.olmo2 import modeling_olmo2 as olmo2
from transformers.models.phi3 import modeling_phi3 as phi3
from transformers.models.qwen2 import modeling_qwen2 as qwen2
from transformers.models.qwen3 import modeling_qwen3 as qwen3

from .zoo_common import stock_cache_kwargs


@dataclasses.dataclass(frozen=True)
class Branch:
    """One residual branch `F(x)` of a stock decoder layer, by the layer's attribute names:
    `F(x) = after[-1](... after[0](module(before[-1](... before[0](x)))))`. An attention module is called with
    `hidden_states=` and the layer's keywords (mask, cache, positions) and its first output kept (the second is the
    attention weights); an MLP, called with no keywords, with `x` alone."""

    module: str
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    def __call__(self, layer: nn.Module, x: torch.Tensor, **kwargs) -> torch.Tensor:
        kwargs = stock_cache_kwargs(kwargs)
        for name in self.before:
            x = getattr(layer, name)(x)
        x = getattr(layer, self.module)(hidden_states=x, **kwargs) if kwargs else getattr(layer, self.module)(x)
        if isinstance(x, tuple):
            x = x[0]
        for name in self.after:
            x = getattr(layer, name)(x)
        return x


@dataclasses.dataclass(frozen=True)
class StackNames:
    """The stock model's attribute names for the pieces of its stack (so stock weight names load unchanged):
    token embedding, layers, final norm, and (GPT-2) the absolute position embedding and the embedding dropout."""

    embed: str = "embed_tokens"
    layers: str = "layers"
    norm: str = "norm"
    positions: str | None = None
    dropout: str | None = None


def plain_embedding(config, padding_idx):
    return nn.Embedding(config.vocab_size, config.hidden_size, padding_idx)


def rms_norm(norm_class):
    """The final RMS norm of a family, as its stock model builds it."""

    def build(config):
        return norm_class(config.hidden_size, eps=config.rms_norm_eps)

    return build


def scaled_embedding(embedding_class):
    """The embedding of a family that multiplies it by sqrt(hidden_size) (Gemma), as its stock model builds it."""

    def build(config, padding_idx):
        return embedding_class(config.vocab_size, config.hidden_size, padding_idx, embed_scale=config.hidden_size**0.5)

    return build


@dataclasses.dataclass(frozen=True)
class DecoderFamily:
    """A stock decoder-only family, declared by the roles its pieces play.

    Attributes:
        model_type: the stock `model_type` (`"qwen2"`).
        name: the family's part of the zoo's class names (`"Qwen2"`: `Qwen2MHCModel`, `Qwen2MHCConfig`, ...).
        checkpoints: the checkpoints of that model type, as the configs' docstrings name them (`"Qwen2, Qwen2.5"`).
        layer, model, causal_lm: the stock decoder layer, base model and causal-LM classes (a zoo class subclasses
            them, so their weight names, init and generation code apply unchanged).
        attention: the stock attention module (recorded for `output_attentions`).
        final_norm: `final_norm(config)` builds the stock final norm.
        rotary: the stock rotary-embedding class; None for absolute positions (GPT-2).
        attention_branch, mlp_branch: `F_attn`, `F_mlp` of the stock layer, norms and dropouts included.
        embedding: `embedding(config, padding_idx)` builds the stock embedding (scaled for Gemma).
        names: the stock model's attribute names (`StackNames`); with `names.positions`, the absolute position
            embedding is added to the token embedding and `names.dropout` applied, as GPT-2 does.
        rotary_per_layer_type: the rotary embedding takes the layer type and differs per type (Gemma 3's local and
            global bases).
        refused: `{config field: why}`: settings of the family the zoo's stack does not reproduce; a config with
            one of them set (truthy) is refused with a ValueError naming the family.
        extra_inputs: keywords the stock base model takes that the zoo's stack does not (GPT-2's `token_type_ids`,
            cross-attention inputs): accepted as None, refused otherwise.
        output_class: the stock base model's output class (the stock head reads its fields).
    """

    model_type: str
    name: str
    layer: type
    model: type
    causal_lm: type
    attention: type
    final_norm: Callable
    rotary: type | None
    attention_branch: Branch
    mlp_branch: Branch
    embedding: Callable = plain_embedding
    names: StackNames = StackNames()
    rotary_per_layer_type: bool = False
    refused: dict = dataclasses.field(default_factory=dict)
    extra_inputs: tuple[str, ...] = ()
    output_class: type = BaseModelOutputWithPast
    checkpoints: str = ""

    def check(self, config) -> None:
        for name, why in self.refused.items():
            if getattr(config, name, None):
                raise ValueError(
                    f"The {self.model_type} family with `{name}={getattr(config, name)!r}` is not supported by the "
                    f"zoo's decoder stack: {why}. Use `{name}=False`."
                )

    def check_inputs(self, kwargs: dict) -> None:
        """Take the stock base model's `extra_inputs` out of a forward's keywords, refusing any that is set."""
        for name in self.extra_inputs:
            if kwargs.pop(name, None) is not None:
                raise ValueError(f"`{name}` is not supported by the zoo's {self.model_type} models; leave it None.")


# pre-norm blocks: F_attn(x) = attn(norm_1(x)), F_mlp(x) = mlp(norm_2(x))
PRE_NORM_ATTENTION = Branch("self_attn", before=("input_layernorm",))
PRE_NORM_MLP = Branch("mlp", before=("post_attention_layernorm",))


def _family(module, prefix: str, model_type: str, **roles) -> DecoderFamily:
    """A family whose stock classes follow transformers' naming (`{prefix}DecoderLayer`, ...), named `prefix` in the
    zoo's class names; pre-norm unless `roles` say otherwise."""
    names = {"layer": "DecoderLayer", "model": "Model", "causal_lm": "ForCausalLM", "attention": "Attention"}
    classes = {role: getattr(module, prefix + name) for role, name in names.items() if role not in roles}
    classes |= {"final_norm": rms_norm(getattr(module, prefix + "RMSNorm"))}
    classes |= {"rotary": getattr(module, prefix + "RotaryEmbedding")}
    branches = {"attention_branch": PRE_NORM_ATTENTION, "mlp_branch": PRE_NORM_MLP}
    return DecoderFamily(model_type=model_type, **{"name": prefix, **classes, **branches, **roles})


LLAMA = _family(llama, "Llama", "llama", checkpoints="SmolLM2, Llama 2/3, ...")
QWEN3 = _family(qwen3, "Qwen3", "qwen3")
QWEN2 = _family(qwen2, "Qwen2", "qwen2", checkpoints="Qwen2, Qwen2.5")
MISTRAL = _family(mistral, "Mistral", "mistral")
# Phi-3: fused qkv / gate_up projections (inside the stock modules) and a residual dropout after each branch
PHI3 = _family(
    phi3,
    "Phi3",
    "phi3",
    checkpoints="Phi-3, Phi-3.5, Phi-4 mini",
    attention_branch=Branch("self_attn", before=("input_layernorm",), after=("resid_attn_dropout",)),
    mlp_branch=Branch("mlp", before=("post_attention_layernorm",), after=("resid_mlp_dropout",)),
)
# OLMo 2: no input norms; each branch ends in its own norm
OLMO2 = _family(
    olmo2,
    "Olmo2",
    "olmo2",
    attention_branch=Branch("self_attn", after=("post_attention_layernorm",)),
    mlp_branch=Branch("mlp", after=("post_feedforward_layernorm",)),
)
# Gemma 2 / 3: a norm before and after each branch, the embedding scaled by sqrt(hidden_size)
GEMMA_ATTENTION = Branch("self_attn", before=("input_layernorm",), after=("post_attention_layernorm",))
GEMMA_MLP = Branch("mlp", before=("pre_feedforward_layernorm",), after=("post_feedforward_layernorm",))
BIDIRECTIONAL = "it builds causal masks only"
GEMMA2 = _family(
    gemma2,
    "Gemma2",
    "gemma2",
    attention_branch=GEMMA_ATTENTION,
    mlp_branch=GEMMA_MLP,
    embedding=scaled_embedding(gemma2.Gemma2TextScaledWordEmbedding),
    refused={"use_bidirectional_attention": BIDIRECTIONAL},
)
GEMMA3_TEXT = _family(
    gemma3,
    "Gemma3",
    "gemma3_text",
    name="Gemma3Text",
    checkpoints="text-only Gemma 3, such as gemma-3-1b",
    attention_branch=GEMMA_ATTENTION,
    mlp_branch=GEMMA_MLP,
    embedding=scaled_embedding(gemma3.Gemma3TextScaledWordEmbedding),
    model=gemma3.Gemma3TextModel,
    rotary_per_layer_type=True,
    refused={"use_bidirectional_attention": BIDIRECTIONAL},
)

# GPT-2: pre-norm LayerNorms (ln_1, ln_2), absolute position embeddings and an embedding dropout, `transformer.h`
GPT2 = DecoderFamily(
    model_type="gpt2",
    name="GPT2",
    checkpoints="GPT-2, DistilGPT-2",
    layer=gpt2.GPT2Block,
    model=gpt2.GPT2Model,
    causal_lm=gpt2.GPT2LMHeadModel,
    attention=gpt2.GPT2Attention,
    final_norm=lambda config: nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon),
    rotary=None,
    attention_branch=Branch("attn", before=("ln_1",)),
    mlp_branch=Branch("mlp", before=("ln_2",)),
    embedding=lambda config, padding_idx: nn.Embedding(config.vocab_size, config.hidden_size),
    names=StackNames(embed="wte", layers="h", norm="ln_f", positions="wpe", dropout="drop"),
    refused={"add_cross_attention": "it has no cross-attention"},
    extra_inputs=("token_type_ids", "encoder_hidden_states", "encoder_attention_mask"),
    output_class=BaseModelOutputWithPastAndCrossAttentions,
)
