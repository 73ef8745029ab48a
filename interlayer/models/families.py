"""The roles a stock family's pieces play, for every mechanism to read: the vocabulary the families are declared in.

A decoder family (`DecoderFamily`) is declared by its stock classes and by the roles of its layer: the attention
branch `F_attn(x)` and the MLP branch `F_mlp(x)` of a residual block (the stock layer computes `h + F_attn(h)`, then
`h + F_mlp(h)`), with the family's norms and dropouts inside the branch; the embedding (scaled or not); the final norm;
the rotary position embeddings (shared, or one per layer type); the stock attribute names. Where a family's layer keeps
its attention heads (`Heads`: the attention module, its query/key/value projections and its output projection) is
declared once per family, decoder or encoder: the sentinel gates and prunes the heads there, the bridges'
cross-attention projects with those projections.

An encoder family (`encoder_families.EncoderFamily`) is declared by its stock layer, embeddings, encoder and pooler,
where its layer's attention sublayer ends, its stock task heads and the steps where its stock base model runs its
stack differently from BERT's; an encoder-decoder family
(`seq2seq_families.Seq2SeqFamily`) by its stock encoder, decoder, base model and LM.

The families themselves are declared by kind, each module importing only its own stock families, so that a saved
checkpoint's remote code imports the families of its kind alone: `decoder_families.py`, `encoder_families.py`,
`seq2seq_families.py`. The mechanisms' classes on a family are `class` statements that the class generator
(`python -m interlayer.generate_classes --fix`) writes from these declarations.

It sits beside the modeling files that import it, so `save_pretrained` ships it with the remote code.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
import operator
from collections.abc import Callable

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPast

from .zoo_common import stock_cache_kwargs


@dataclasses.dataclass(frozen=True)
class Branch:
    """One residual branch `F(x)` of a stock decoder layer, by the layer's attribute names:
    `F(x) = after[-1](... after[0](module(before[-1](... before[0](x)))))`. An attention module is called with
    `hidden_states=` and the layer's keywords (mask, cache, positions) and its first output kept (the second is the
    attention weights); an MLP, called with no keywords, with `x` alone.

    A branch whose `before` is one norm has an input norm (`input_norm`): a mechanism that normalises its input itself,
    in that norm's place (the gated residual of hyper-connections applies it to each of its streams), calls the branch
    with `input_norm=False`, which runs everything but it. OLMo 2's branches have none (their norms come after)."""

    module: str
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    def normed(self, layer: nn.Module, x: torch.Tensor, input_norm: bool = True) -> torch.Tensor:
        """What the branch's module reads of `x`: `x` through the norms before it (none with `input_norm=False`)."""
        if not input_norm and self.input_norm(layer) is None:
            raise ValueError(f"the `{self.module}` branch of {type(layer).__name__} has no input norm to leave out")
        for name in self.before if input_norm else ():
            x = getattr(layer, name)(x)
        return x

    def __call__(self, layer: nn.Module, x: torch.Tensor, input_norm: bool = True, **kwargs) -> torch.Tensor:
        kwargs = stock_cache_kwargs(kwargs)
        x = self.normed(layer, x, input_norm)
        x = getattr(layer, self.module)(hidden_states=x, **kwargs) if kwargs else getattr(layer, self.module)(x)
        if isinstance(x, tuple):
            x = x[0]
        for name in self.after:
            x = getattr(layer, name)(x)
        return x

    def input_norm(self, layer: nn.Module) -> nn.Module | None:
        """The norm the branch starts with (`before` when it is one module), None where it starts with none."""
        return getattr(layer, self.before[0]) if len(self.before) == 1 else None


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
class Heads:
    """Where a family's layer keeps its attention heads, as module paths inside one layer (block).

    Attributes:
        attention: the self-attention module that computes the heads' outputs (the sentinel gates it).
        qkv: the projections whose output features are grouped by head: one fused module whose outputs are
            `[query heads | key heads | value heads]` (GPT-2's `c_attn`), or the query, key and value modules.
        out: the output projection, whose input features are grouped by query head.
        count, size: the attributes of the attention module (dotted paths) holding its number of query heads and
            the size of a head, as the stock module sets them.
    """

    attention: str
    qkv: tuple[str, ...]
    out: str
    count: str
    size: str

    def count_of(self, attention: nn.Module) -> int:
        return operator.attrgetter(self.count)(attention)

    def size_of(self, attention: nn.Module) -> int:
        return operator.attrgetter(self.size)(attention)

    def widths_of(self, attention: nn.Module) -> tuple[int, int, int]:
        """The query, key and value widths of the projections (`count * size` for the queries; grouped-query
        attention's fewer key/value heads for the keys and values)."""
        count, size = self.count_of(attention), self.size_of(attention)
        kv = count // getattr(attention, "num_key_value_groups", 1)
        return count * size, kv * size, kv * size


def attention_heads(attention: str, q: str, k: str, v: str, out: str, count: str, size: str) -> Heads:
    """`Heads` of an attention module `attention` with separate query, key and value projections (names inside it)."""
    return Heads(attention, tuple(f"{attention}.{name}" for name in (q, k, v)), out, count, size)


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
        heads: where a layer keeps its attention heads (`Heads`).
        attention_branch, mlp_branch: `F_attn`, `F_mlp` of the stock layer, norms and dropouts included.
        embedding: `embedding(config, padding_idx)` builds the stock embedding (scaled for Gemma).
        names: the stock model's attribute names (`StackNames`); with `names.positions`, the absolute position
            embedding is added to the token embedding and `names.dropout` applied, as GPT-2 does.
        rotary_per_layer_type: the rotary embedding takes the layer type and differs per type (Gemma 3's local and
            global bases).
        refused: `{config field: why}`: settings of the family the zoo's stack does not reproduce; a config with
            one of them set (truthy) is refused with a ValueError naming the family.
        embeds_token_types: the stock model adds the token embedding of `token_type_ids` to its input embeddings
            (GPT-2), before the embedding dropout.
        extra_inputs: keywords the stock base model takes that the zoo's stack does not (GPT-2's cross-attention
            inputs): accepted as None, refused otherwise.
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
    heads: Heads
    attention_branch: Branch
    mlp_branch: Branch
    embedding: Callable = plain_embedding
    names: StackNames = StackNames()
    rotary_per_layer_type: bool = False
    refused: dict = dataclasses.field(default_factory=dict)
    embeds_token_types: bool = False
    extra_inputs: tuple[str, ...] = ()
    output_class: type = BaseModelOutputWithPast
    checkpoints: str = ""

    @property
    def input_norms(self) -> bool:
        """Whether both residual branches start with an input norm (`Branch.input_norm`); the config classes of the
        family record it (`branch_input_norms`), so that a form needing them is refused at config creation."""
        return all(len(branch.before) == 1 for branch in (self.attention_branch, self.mlp_branch))

    @property
    def layer_path(self) -> str:
        """Where the base model keeps its layers (`layers`, GPT-2's `h`)."""
        return self.names.layers

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
