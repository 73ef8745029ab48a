"""The zoo's families, each declared once by the roles its stock modules play, for every mechanism to read.

Where a family's layer keeps its attention heads (`Heads`: the attention module, its query/key/value projections and
its output projection) is declared once per family, decoder or encoder: the sentinel gates and prunes the heads there,
the bridges' cross-attention projects with those projections.

A decoder family (`DecoderFamily`) is declared by its stock classes and by the roles of its layer: the attention
branch `F_attn(x)` and the MLP branch `F_mlp(x)` of a residual block (the stock layer computes `h + F_attn(h)`, then
`h + F_mlp(h)`), with the family's norms and dropouts inside the branch; the embedding (scaled or not); the final norm;
the rotary position embeddings (shared, or one per layer type); the stock attribute names. The mechanisms' classes on
a family are `class` statements that `python -m interlayer.generate_classes --fix` writes from these
declarations into the configuration and modeling files, so a new decoder family is one declaration here (and a run of
the generator).

An encoder family (`EncoderFamily`) is declared by its stock layer, embeddings, encoder and pooler, where its layer's
attention sublayer ends (`Sublayers`: what enters the FFN sublayer, and the rest; the bridges inject there) and its
stock sequence- and token-classification heads (`TaskHead`), which the bridges and the sentinel both build.

An encoder-decoder family (`Seq2SeqFamily`) is declared by its stock encoder (whose output is the memory), decoder
(whose cross-attention reads it), base model and LM; the attention bridge's classes on it are generated the same way.

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
from transformers.modeling_outputs import BaseModelOutputWithPast, BaseModelOutputWithPastAndCrossAttentions
from transformers.models.bart import modeling_bart as bart
from transformers.models.bert import modeling_bert as bert
from transformers.models.deberta_v2 import modeling_deberta_v2 as deberta_v2
from transformers.models.electra import modeling_electra as electra
from transformers.models.gemma2 import modeling_gemma2 as gemma2
from transformers.models.gemma3 import modeling_gemma3 as gemma3
from transformers.models.gpt2 import modeling_gpt2 as gpt2
from transformers.models.llama import modeling_llama as llama
from transformers.models.m2m_100 import modeling_m2m_100 as m2m_100
from transformers.models.marian import modeling_marian as marian
from transformers.models.mbart import modeling_mbart as mbart
from transformers.models.mistral import modeling_mistral as mistral
from transformers.models.modernbert import modeling_modernbert as modernbert
from transformers.models.olmo2 import modeling_olmo2 as olmo2
from transformers.models.phi3 import modeling_phi3 as phi3
from transformers.models.qwen2 import modeling_qwen2 as qwen2
from transformers.models.qwen3 import modeling_qwen3 as qwen3
from transformers.models.roberta import modeling_roberta as roberta
from transformers.models.t5 import modeling_t5 as t5
from transformers.models.xlm_roberta import modeling_xlm_roberta as xlm_roberta
from transformers.pytorch_utils import apply_chunking_to_forward

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


# pre-norm blocks: F_attn(x) = attn(norm_1(x)), F_mlp(x) = mlp(norm_2(x))
PRE_NORM_ATTENTION = Branch("self_attn", before=("input_layernorm",))
PRE_NORM_MLP = Branch("mlp", before=("post_attention_layernorm",))
# the Llama family's attention: `self_attn.q_proj/k_proj/v_proj` (grouped-query: fewer key/value heads) and `o_proj`
LLAMA_HEADS = attention_heads(
    "self_attn", "q_proj", "k_proj", "v_proj", "self_attn.o_proj", "config.num_attention_heads", "head_dim"
)


def _family(module, prefix: str, model_type: str, **roles) -> DecoderFamily:
    """A family whose stock classes follow transformers' naming (`{prefix}DecoderLayer`, ...), named `prefix` in the
    zoo's class names; pre-norm unless `roles` say otherwise."""
    names = {"layer": "DecoderLayer", "model": "Model", "causal_lm": "ForCausalLM", "attention": "Attention"}
    classes = {role: getattr(module, prefix + name) for role, name in names.items() if role not in roles}
    classes |= {"final_norm": rms_norm(getattr(module, prefix + "RMSNorm"))}
    classes |= {"rotary": getattr(module, prefix + "RotaryEmbedding")}
    branches = {"attention_branch": PRE_NORM_ATTENTION, "mlp_branch": PRE_NORM_MLP, "heads": LLAMA_HEADS}
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
    heads=Heads("self_attn", ("self_attn.qkv_proj",), "self_attn.o_proj", "config.num_attention_heads", "head_dim"),
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
    heads=Heads("attn", ("attn.c_attn",), "attn.c_proj", "num_heads", "head_dim"),
    attention_branch=Branch("attn", before=("ln_1",)),
    mlp_branch=Branch("mlp", before=("ln_2",)),
    embedding=lambda config, padding_idx: nn.Embedding(config.vocab_size, config.hidden_size),
    names=StackNames(embed="wte", layers="h", norm="ln_f", positions="wpe", dropout="drop"),
    refused={"add_cross_attention": "it has no cross-attention"},
    embeds_token_types=True,
    extra_inputs=("encoder_hidden_states", "encoder_attention_mask"),
    output_class=BaseModelOutputWithPastAndCrossAttentions,
)


# ---- encoder families ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sublayers:
    """A stock encoder layer cut where its attention sublayer ends, so a mechanism can act between its two sublayers:
    `attention(layer, hidden_states, *layer_inputs)` is the stock computation up to what enters the FFN sublayer
    (post-norm: LN(H + Attn(H)); pre-norm: the residual stream H + Attn(norm(H))), `layer_inputs` the per-layer
    tensors the family's encoder passes (mask; relative positions; rotary tables); `ffn(layer, x)` the rest of the
    stock layer, up to its output."""

    attention: Callable
    ffn: Callable


def post_norm_attention(layer: nn.Module, hidden_states: torch.Tensor, attention_mask) -> torch.Tensor:
    """BERT's attention sublayer `LN(H + Attn(H))` (the stock `attention` module ends in its residual and norm)."""
    return layer.attention(hidden_states, attention_mask)[0]


def post_norm_ffn(layer: nn.Module, attention_output: torch.Tensor) -> torch.Tensor:
    """BERT's FFN sublayer `LN(x + W_2 act(W_1 x))` (`intermediate`, `output`), chunked as the stock layer chunks it."""
    return apply_chunking_to_forward(
        layer.feed_forward_chunk, layer.chunk_size_feed_forward, layer.seq_len_dim, attention_output
    )


def disentangled_attention(layer, hidden_states, attention_mask, relative_pos, rel_embeddings) -> torch.Tensor:
    """DeBERTa-v2's attention sublayer: BERT's, with the relative positions and embeddings."""
    return layer.attention(hidden_states, attention_mask, relative_pos=relative_pos, rel_embeddings=rel_embeddings)[0]


def disentangled_ffn(layer: nn.Module, attention_output: torch.Tensor) -> torch.Tensor:
    """DeBERTa-v2's FFN sublayer (unchunked)."""
    return layer.output(layer.intermediate(attention_output), attention_output)


def pre_norm_attention(layer: nn.Module, hidden_states: torch.Tensor, attention_mask, cos, sin) -> torch.Tensor:
    """ModernBERT's attention sublayer, on the residual stream: `H + Attn(attn_norm(H))` with rotary positions."""
    normed = layer.attn_norm(hidden_states)
    return hidden_states + layer.attn(normed, position_embeddings=(cos, sin), attention_mask=attention_mask)[0]


def pre_norm_ffn(layer: nn.Module, attention_output: torch.Tensor) -> torch.Tensor:
    """ModernBERT's FFN sublayer, `x + MLP(mlp_norm(x))`."""
    return attention_output + layer.mlp(layer.mlp_norm(attention_output))


# BERT, RoBERTa, XLM-R, ELECTRA: post-norm `attention -> intermediate -> output`; the layer input is the extended mask
POST_NORM = Sublayers(post_norm_attention, post_norm_ffn)
# DeBERTa-v2/v3: the same layout with disentangled relative attention; the layer inputs are the (B, 1, S, S) mask, the
# relative positions and the relative embeddings
DISENTANGLED = Sublayers(disentangled_attention, disentangled_ffn)
# ModernBERT: pre-norm `attn_norm -> attn` and `mlp_norm -> mlp`, each added to the residual stream; the layer inputs
# are its attention type's mask and rotary tables
PRE_NORM = Sublayers(pre_norm_attention, pre_norm_ffn)


@dataclasses.dataclass(frozen=True)
class TaskHead:
    """A family's stock task head: `build(model, config)` gives `model` the stock head's modules under their stock
    names (so a stock checkpoint's head loads into them), `logits(model, outputs, attention_mask)` computes the stock
    logits from the base model's output; `uses_pooler`: the head reads the base model's `pooler_output`."""

    build: Callable
    logits: Callable
    uses_pooler: bool = False


def _dropout_and_linear(model: nn.Module, config) -> None:
    """BERT's task heads: `dropout` (`classifier_dropout`, else `hidden_dropout_prob`) and a linear `classifier`."""
    dropout = getattr(config, "classifier_dropout", None)
    model.dropout = nn.Dropout(dropout if dropout is not None else config.hidden_dropout_prob)
    model.classifier = nn.Linear(config.hidden_size, config.num_labels)


def head_module(head_class: type) -> TaskHead:
    """A stock head that is one module `classifier` on the last hidden state (RoBERTa's `RobertaClassificationHead`)."""

    def build(model, config):
        model.classifier = head_class(config)

    return TaskHead(build, lambda model, outputs, attention_mask: model.classifier(outputs.last_hidden_state))


# BERT's: dropout and a linear classifier, on the pooler output for a sequence, on every token for tokens
POOLER_HEAD = TaskHead(
    _dropout_and_linear, lambda model, outputs, mask: model.classifier(model.dropout(outputs.pooler_output)), True
)
TOKEN_HEAD = TaskHead(
    _dropout_and_linear, lambda model, outputs, mask: model.classifier(model.dropout(outputs.last_hidden_state))
)


def _context_pooler_head(model: nn.Module, config) -> None:
    """DeBERTa-v2's sequence head: its `ContextPooler` (`pooler`), `classifier`, `dropout` (`cls_dropout`)."""
    model.pooler = deberta_v2.ContextPooler(config)
    model.classifier = nn.Linear(model.pooler.output_dim, config.num_labels)
    dropout = getattr(config, "cls_dropout", None)
    model.dropout = nn.Dropout(config.hidden_dropout_prob if dropout is None else dropout)


CONTEXT_POOLER_HEAD = TaskHead(
    _context_pooler_head,
    lambda model, outputs, mask: model.classifier(model.dropout(model.pooler(outputs.last_hidden_state))),
)


def _prediction_head(model: nn.Module, config) -> None:
    """ModernBERT's task heads: `head` (dense, activation, norm), dropout `drop`, then `classifier`."""
    model.head = modernbert.ModernBertPredictionHead(config)
    model.drop = nn.Dropout(config.classifier_dropout)
    model.classifier = nn.Linear(config.hidden_size, config.num_labels)


def _classify(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    return model.classifier(model.drop(model.head(hidden)))


def _pooled_prediction(model: nn.Module, outputs, attention_mask) -> torch.Tensor:
    """ModernBERT's sequence logits: the first token (`classifier_pooling="cls"`) or the masked mean of the tokens."""
    hidden = outputs.last_hidden_state
    if model.config.classifier_pooling == "cls":
        return _classify(model, hidden[:, 0])
    weights = (torch.ones_like(hidden[..., 0]) if attention_mask is None else attention_mask).to(hidden.dtype)
    weights = weights.unsqueeze(-1)
    return _classify(model, (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0))


PREDICTION_HEAD = TaskHead(_prediction_head, _pooled_prediction)
TOKEN_PREDICTION_HEAD = TaskHead(
    _prediction_head, lambda model, outputs, mask: _classify(model, outputs.last_hidden_state)
)


@dataclasses.dataclass(frozen=True)
class EncoderFamily:
    """A stock encoder family, declared by the roles its pieces play.

    Attributes:
        model_type: the stock `model_type` (`"bert"`).
        name: the family's part of the zoo's class names (`"Bert"`: `BertBridgeModel`, `BertSentinelModel`, ...).
        layer: the stock encoder layer class; `layer_takes_index` whether it takes `layer_idx` (DeBERTa's does not).
        heads: where a layer keeps its attention heads (`Heads`).
        sublayers: the layer cut where its attention sublayer ends (`Sublayers`).
        embeddings: the stock embeddings class (`embeddings`).
        sequence_head, token_head: the stock sequence- and token-classification heads (`TaskHead`).
        encoder: the stock encoder class holding the layers (`encoder`), None when the base model holds them.
        pooler: the stock pooler class (`pooler`), None when the stock base model has none.
        layer_path: where the base model keeps its layers (`encoder.layer`; ModernBERT's `layers`).
        attention_norm: in a pre-norm layer, the norm its attention reads its input through (ModernBERT's
            `attn_norm`); None in a post-norm layer (BERT's), whose attention reads the layer's input itself.
    """

    model_type: str
    name: str
    layer: type
    heads: Heads
    embeddings: type
    sequence_head: TaskHead
    token_head: TaskHead = TOKEN_HEAD
    sublayers: Sublayers = POST_NORM
    encoder: type | None = None
    pooler: type | None = None
    layer_path: str = "encoder.layer"
    attention_norm: str | None = None
    layer_takes_index: bool = True


# BERT and its descendants: post-norm layers `attention -> intermediate -> output`, the projections
# `attention.self.query/key/value` and `attention.output.dense`
BERT_HEADS = attention_heads(
    "attention.self", "query", "key", "value", "attention.output.dense", "num_attention_heads", "attention_head_size"
)
BERT = EncoderFamily(
    "bert",
    "Bert",
    bert.BertLayer,
    BERT_HEADS,
    bert.BertEmbeddings,
    POOLER_HEAD,
    encoder=bert.BertEncoder,
    pooler=bert.BertPooler,
)
ROBERTA = EncoderFamily(
    "roberta",
    "Roberta",
    roberta.RobertaLayer,
    BERT_HEADS,
    roberta.RobertaEmbeddings,
    head_module(roberta.RobertaClassificationHead),
    encoder=roberta.RobertaEncoder,
    pooler=roberta.RobertaPooler,
)
XLM_ROBERTA = EncoderFamily(
    "xlm-roberta",
    "XLMRoberta",
    xlm_roberta.XLMRobertaLayer,
    BERT_HEADS,
    xlm_roberta.XLMRobertaEmbeddings,
    head_module(xlm_roberta.XLMRobertaClassificationHead),
    encoder=xlm_roberta.XLMRobertaEncoder,
    pooler=xlm_roberta.XLMRobertaPooler,
)
# ELECTRA: no pooler (and a projection of smaller embeddings, which the base model adds)
ELECTRA = EncoderFamily(
    "electra",
    "Electra",
    electra.ElectraLayer,
    BERT_HEADS,
    electra.ElectraEmbeddings,
    head_module(electra.ElectraClassificationHead),
    encoder=electra.ElectraEncoder,
)
# DeBERTa-v2/v3: the same layout with disentangled attention's `query_proj/key_proj/value_proj`; no pooler (the
# sequence head has its own `ContextPooler`)
DEBERTA_V2 = EncoderFamily(
    "deberta-v2",
    "DebertaV2",
    deberta_v2.DebertaV2Layer,
    attention_heads(
        "attention.self",
        "query_proj",
        "key_proj",
        "value_proj",
        "attention.output.dense",
        "num_attention_heads",
        "attention_head_size",
    ),
    deberta_v2.DebertaV2Embeddings,
    CONTEXT_POOLER_HEAD,
    sublayers=DISENTANGLED,
    encoder=deberta_v2.DebertaV2Encoder,
    layer_takes_index=False,
)
# ModernBERT: pre-norm layers `attn_norm -> attn`, `mlp_norm -> mlp` (no encoder module: `layers.N`), one fused `Wqkv`;
# no pooler; its heads put a prediction head (dense, activation, norm) before the classifier
MODERNBERT = EncoderFamily(
    "modernbert",
    "ModernBert",
    modernbert.ModernBertEncoderLayer,
    Heads("attn", ("attn.Wqkv",), "attn.Wo", "config.num_attention_heads", "head_dim"),
    modernbert.ModernBertEmbeddings,
    PREDICTION_HEAD,
    token_head=TOKEN_PREDICTION_HEAD,
    sublayers=PRE_NORM,
    layer_path="layers",
    attention_norm="attn_norm",
)


@dataclasses.dataclass(frozen=True)
class Seq2SeqFamily:
    """A stock encoder-decoder family, declared by the roles its pieces play: the encoder, whose output
    (`last_hidden_state`) is the memory; the decoder, whose cross-attention reads the memory (`encoder_hidden_states`,
    masked by `encoder_attention_mask`); the class that owns the two (the base model, or an LM that has none); the LM.

    Attributes:
        model_type: the stock `model_type` (`"marian"`).
        name: the family's part of the zoo's class names (`"Marian"`: `MarianAttentionBridgeModel`, ...).
        title: how a docstring names the family's LM (`"Marian translation model"`); `note` a sentence after it.
        encoder, decoder: the stock encoder and decoder classes (T5's `T5Stack` is both).
        model: the stock base model (it owns the shared embedding, the encoder and the decoder).
        lm: the stock seq2seq LM class.
        lm_owns_stack: the stock LM builds the encoder and the decoder itself instead of wrapping `model` (T5).
        no_split_modules: the FSDP units, where the stock classes name none (Marian's layers).
    """

    model_type: str
    name: str
    title: str
    encoder: type
    decoder: type
    model: type
    lm: type
    lm_owns_stack: bool = False
    no_split_modules: tuple[str, ...] = ()
    note: str = ""


MARIAN = Seq2SeqFamily(
    "marian",
    "Marian",
    "Marian translation model",
    marian.MarianEncoder,
    marian.MarianDecoder,
    marian.MarianModel,
    marian.MarianMTModel,
    no_split_modules=("MarianEncoderLayer", "MarianDecoderLayer"),  # stock Marian names none: FSDP wraps these
)
BART = Seq2SeqFamily(
    "bart", "Bart", "BART", bart.BartEncoder, bart.BartDecoder, bart.BartModel, bart.BartForConditionalGeneration
)
MBART = Seq2SeqFamily(
    "mbart",
    "MBart",
    "mBART",
    mbart.MBartEncoder,
    mbart.MBartDecoder,
    mbart.MBartModel,
    mbart.MBartForConditionalGeneration,
)
M2M100 = Seq2SeqFamily(
    "m2m_100",
    "M2M100",
    "M2M100 / NLLB",
    m2m_100.M2M100Encoder,
    m2m_100.M2M100Decoder,
    m2m_100.M2M100Model,
    m2m_100.M2M100ForConditionalGeneration,
    note="NLLB's own target language token, `forced_bos_token_id`, still works as in the stock model.",
)
# T5: one stack class for the encoder and the decoder; the LM owns them (no base model inside)
T5 = Seq2SeqFamily(
    "t5", "T5", "T5", t5.T5Stack, t5.T5Stack, t5.T5Model, t5.T5ForConditionalGeneration, lm_owns_stack=True
)
