"""The encoder families (`families.EncoderFamily`): BERT, RoBERTa, XLM-RoBERTa, ELECTRA, DeBERTa-v2, ModernBERT, each
declared once by the roles its stock modules play: its layer cut where the attention sublayer ends (`Sublayers`), its
stock task heads (`TaskHead`), where it keeps its attention heads. `ENCODER_FAMILIES` lists them in order.

It imports the encoder families' stock modules only, and sits beside the modeling files that import it, so that
`save_pretrained` ships it with the remote code of an encoder checkpoint.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
from collections.abc import Callable

import torch
from torch import nn
from transformers.models.bert import modeling_bert as bert
from transformers.models.deberta_v2 import modeling_deberta_v2 as deberta_v2
from transformers.models.electra import modeling_electra as electra
from transformers.models.modernbert import modeling_modernbert as modernbert
from transformers.models.roberta import modeling_roberta as roberta
from transformers.models.xlm_roberta import modeling_xlm_roberta as xlm_roberta
from transformers.pytorch_utils import apply_chunking_to_forward

from .families import Heads, attention_heads


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

ENCODER_FAMILIES = tuple(value for value in tuple(globals().values()) if isinstance(value, EncoderFamily))
