"""The encoder families (`families.EncoderFamily`): BERT, RoBERTa, XLM-RoBERTa, ELECTRA, DeBERTa-v2, ModernBERT, each
declared once by the roles its stock modules play: its stock classes, its layer cut where the attention sublayer ends
(`Sublayers`), its stock task heads (`TaskHead`), where it keeps its attention heads, and how its stock base model
builds its stack and runs it (`EncoderFamily.build_stack`, `embed`, `layer_inputs`, `after_layer`, `final_norm`): the
few places where a family's base model differs from BERT's, which every mechanism's generic mixins call. A new encoder
family is one declaration here (and a run of `python -m interlayer.generate_classes --fix`); `ENCODER_FAMILIES` lists
them in order.

It imports the encoder families' stock modules only, and sits beside the modeling files that import it, so that
`save_pretrained` ships it with the remote code of an encoder checkpoint.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask
from transformers.models.bert import modeling_bert as bert
from transformers.models.deberta_v2 import modeling_deberta_v2 as deberta_v2
from transformers.models.electra import modeling_electra as electra
from transformers.models.modernbert import modeling_modernbert as modernbert
from transformers.models.roberta import modeling_roberta as roberta
from transformers.models.xlm_roberta import modeling_xlm_roberta as xlm_roberta
from transformers.pytorch_utils import apply_chunking_to_forward

from .families import Heads, attention_heads
from .zoo_common import CACHE_KWARG


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
    logits from the base model's output; `uses_pooler`: the head reads the base model's `pooler_output`;
    `own_loss(labels, logits, num_labels, label_smoothing)`: the stock model's own loss for the head while the
    config's `problem_type` is unset and there are several labels (DeBERTa-v2's), None where it uses transformers'
    shared loss."""

    build: Callable
    logits: Callable
    uses_pooler: bool = False
    own_loss: Callable | None = None


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


def _deberta_v2_loss(labels, logits, num_labels: int, label_smoothing: float) -> torch.Tensor:
    """DeBERTa-v2's own sequence loss: examples with a negative label are left out of the cross-entropy (a batch
    without a labelled one gives 0) and soft labels (one column per class) take the soft-target cross-entropy."""
    if labels.dim() == 1 or labels.size(-1) == 1:
        labels = labels.view(-1).long()
        labelled = labels >= 0
        losses = F.cross_entropy(
            logits.view(-1, num_labels).float(), labels.clamp(min=0), reduction="none", label_smoothing=label_smoothing
        )
        return (losses * labelled).sum() / labelled.sum().clamp(min=1)
    return -(F.log_softmax(logits, -1) * labels).sum(-1).mean()


CONTEXT_POOLER_HEAD = TaskHead(
    _context_pooler_head,
    lambda model, outputs, mask: model.classifier(model.dropout(model.pooler(outputs.last_hidden_state))),
    own_loss=_deberta_v2_loss,
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


# ---- how a stock base model runs its stack: the hooks of `EncoderFamily` ---------------------------------------------
# Each takes the base model being built or run (`model`: the stock modules under their stock names); `token_mask` is
# the (B, S) bool mask of the real tokens (all True without an attention mask).


def stock_embed(model, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds) -> torch.Tensor:
    """BERT's embedding step: the embeddings of the ids (or `inputs_embeds`), positions and token types."""
    return model.embeddings(
        input_ids=input_ids, position_ids=position_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds
    )


def _projected_embed(model, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds) -> torch.Tensor:
    """ELECTRA's: BERT's, then `embeddings_project` where the model has it (`embedding_size != hidden_size`)."""
    embedded = stock_embed(model, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
    project = getattr(model, "embeddings_project", None)
    return project(embedded) if project is not None else embedded


def _masked_embed(model, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds) -> torch.Tensor:
    """DeBERTa-v2's: the embeddings zero the padded positions (an all-ones mask where none is given)."""
    if attention_mask is None:
        reference = input_ids if input_ids is not None else inputs_embeds[..., 0]
        attention_mask = torch.ones(reference.shape, device=reference.device)
    return model.embeddings(
        input_ids=input_ids,
        token_type_ids=token_type_ids,
        position_ids=position_ids,
        mask=attention_mask,
        inputs_embeds=inputs_embeds,
    )


def _token_embed(model, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds) -> torch.Tensor:
    """ModernBERT's: token embeddings alone (its positions are rotary, inside the attention)."""
    return model.embeddings(input_ids=input_ids, inputs_embeds=inputs_embeds)


def extended_mask_inputs(model, embedding_output, attention_mask, token_mask, position_ids) -> list[tuple]:
    """BERT's layer inputs: the extended attention mask the stock base model builds, the same for every layer."""
    extended_mask, _ = model._create_attention_masks(
        attention_mask=attention_mask,
        encoder_attention_mask=None,
        embedding_output=embedding_output,
        encoder_hidden_states=None,
        **{CACHE_KWARG: None},
    )
    return [(extended_mask,)] * model.config.num_hidden_layers


def _relative_inputs(model, embedding_output, attention_mask, token_mask, position_ids) -> list[tuple]:
    """DeBERTa-v2's: the (B, 1, S, S) mask, the relative positions and the relative embeddings its encoder makes."""
    encoder = model.encoder
    inputs = (
        encoder.get_attention_mask(token_mask.long()),
        encoder.get_rel_pos(embedding_output),
        encoder.get_rel_embedding(),
    )
    return [inputs] * model.config.num_hidden_layers


def _rotary_inputs(model, embedding_output, attention_mask, token_mask, position_ids) -> list[tuple]:
    """ModernBERT's: each layer's attention type's mask (bidirectional, or bidirectional within the sliding window)
    and rotary tables."""
    if position_ids is None:
        position_ids = torch.arange(embedding_output.shape[1], device=embedding_output.device).unsqueeze(0)
    mask_kwargs = {"config": model.config, "inputs_embeds": embedding_output, "attention_mask": attention_mask}
    masks = {
        "full_attention": create_bidirectional_mask(**mask_kwargs),
        "sliding_attention": create_bidirectional_sliding_window_mask(**mask_kwargs),
    }
    types = model.config.layer_types
    rotary = {kind: model.rotary_emb(embedding_output, position_ids, kind) for kind in set(types)}
    return [(masks[kind], *rotary[kind]) for kind in types]


def layer_output(model, idx: int, layer_input, output, token_mask):
    """What a stock encoder passes on from layer `idx`: its output (BERT's)."""
    return output


def _convolved_output(model, idx: int, layer_input, output, token_mask):
    """DeBERTa-v2's: its optional convolution (`encoder.conv`) after the first layer."""
    conv = model.encoder.conv
    return conv(layer_input, output, token_mask.long()) if idx == 0 and conv is not None else output


def _embeddings_projection(config) -> nn.Module | None:
    """ELECTRA's `embeddings_project`: smaller embeddings mapped to `hidden_size` (none where the sizes agree)."""
    if config.embedding_size == config.hidden_size:
        return None
    return nn.Linear(config.embedding_size, config.hidden_size)


def _final_layer_norm(config) -> nn.Module:
    return nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)


@dataclasses.dataclass(frozen=True)
class EncoderFamily:
    """A stock encoder family, declared by the roles its pieces play.

    Attributes:
        model_type: the stock `model_type` (`"bert"`).
        name: the family's part of the zoo's class names (`"Bert"`: `BertBridgeModel`, `BertSentinelModel`, ...).
        model, pretrained: the stock base model and pre-trained classes (a zoo class subclasses them, so their weight
            names, init and conventions apply unchanged).
        checkpoints: the checkpoints of that model type, as the configs' docstrings name them (`"the discriminator"`).
        layer: the stock encoder layer class; `layer_takes_index` whether it takes `layer_idx` (DeBERTa's does not).
        attention: the stock self-attention class, of the module `heads.attention` names (where a mechanism that
            replaces it puts its own).
        heads: where a layer keeps its attention heads (`Heads`).
        sublayers: the layer cut where its attention sublayer ends (`Sublayers`).
        embeddings: the stock embeddings class (`embeddings`).
        sequence_head, token_head: the stock sequence- and token-classification heads (`TaskHead`).
        encoder: the stock encoder class holding the layers (`encoder`), None when the base model holds them.
        pooler: the stock pooler class (`pooler`), None when the stock base model has none.
        layer_path: where the base model keeps its layers (`encoder.layer`; ModernBERT's `layers`).
        attention_norm: in a pre-norm layer, the norm its attention reads its input through (ModernBERT's
            `attn_norm`); None in a post-norm layer (BERT's), whose attention reads the layer's input itself.
        sep_token_id, cls_token_id: its tokenizer's separator and first-token ids (the defaults of a config without).
        norm_eps_field, attention_dropout_field: its config's fields for the LayerNorm epsilon and attention dropout.

    How its stock base model builds and runs its stack (`build_stack`), where it differs from BERT's:
        extra_modules: `(name, build(config))` of the stock modules the base model holds besides its embeddings,
            layers and pooler (ELECTRA's `embeddings_project`; ModernBERT's final norm and rotary embedding); a
            `build` that returns None builds nothing (ELECTRA's projection when the sizes agree).
        embed: `embed(model, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)`, the stock
            embedding step (DeBERTa-v2's zeroes padding; ELECTRA's projects; ModernBERT's embeds tokens alone).
        layer_inputs: `layer_inputs(model, embedding_output, attention_mask, token_mask, position_ids)`, the tuple of
            tensors each layer takes after the hidden states (the `Sublayers`' `layer_inputs`), one per layer.
        after_layer: `after_layer(model, idx, layer_input, output, token_mask)`, what the stock encoder passes on
            from layer `idx` (DeBERTa-v2's convolution after the first).
        final_norm: the base model's attribute of the norm after the last layer (ModernBERT's), None without one.
    """

    model_type: str
    name: str
    model: type
    pretrained: type
    layer: type
    heads: Heads
    embeddings: type
    sequence_head: TaskHead
    sep_token_id: int
    cls_token_id: int
    attention: type | None = None
    token_head: TaskHead = TOKEN_HEAD
    sublayers: Sublayers = POST_NORM
    encoder: type | None = None
    pooler: type | None = None
    layer_path: str = "encoder.layer"
    attention_norm: str | None = None
    layer_takes_index: bool = True
    checkpoints: str = ""
    norm_eps_field: str = "layer_norm_eps"
    attention_dropout_field: str = "attention_probs_dropout_prob"
    extra_modules: tuple[tuple[str, Callable], ...] = ()
    embed: Callable = stock_embed
    layer_inputs: Callable = extended_mask_inputs
    after_layer: Callable = layer_output
    final_norm: str | None = None

    @property
    def stack_path(self) -> str:
        """Where the module holding the layers sits in the base model (`encoder`; `""`: the base model itself)."""
        return self.layer_path.rpartition(".")[0]

    def build_stack(self, model: nn.Module, config, layers: nn.ModuleList, add_pooling_layer: bool) -> None:
        """Give the base model `model` its stock modules under their stock names, with `layers` as its layers: the
        embeddings, the stock encoder holding `layers` (or `layers` on the model), the `extra_modules`, the pooler
        (where the family has one: None without `add_pooling_layer`)."""
        model.embeddings = self.embeddings(config)
        if self.stack_path:
            setattr(model, self.stack_path, self.encoder(config))
        setattr(model.get_submodule(self.stack_path), self.layer_path.rpartition(".")[2], layers)
        for name, build in self.extra_modules:
            module = build(config)
            if module is not None:
                setattr(model, name, module)
        if self.pooler is not None:
            model.pooler = self.pooler(config) if add_pooling_layer else None


# BERT and its descendants: post-norm layers `attention -> intermediate -> output`, the projections
# `attention.self.query/key/value` and `attention.output.dense`
BERT_HEADS = attention_heads(
    "attention.self", "query", "key", "value", "attention.output.dense", "num_attention_heads", "attention_head_size"
)
BERT = EncoderFamily(
    "bert",
    "Bert",
    bert.BertModel,
    bert.BertPreTrainedModel,
    bert.BertLayer,
    BERT_HEADS,
    bert.BertEmbeddings,
    POOLER_HEAD,
    sep_token_id=102,  # [SEP] in the uncased WordPiece vocabulary
    cls_token_id=101,  # [CLS]
    attention=bert.BertSelfAttention,
    encoder=bert.BertEncoder,
    pooler=bert.BertPooler,
)
ROBERTA = EncoderFamily(
    "roberta",
    "Roberta",
    roberta.RobertaModel,
    roberta.RobertaPreTrainedModel,
    roberta.RobertaLayer,
    BERT_HEADS,
    roberta.RobertaEmbeddings,
    head_module(roberta.RobertaClassificationHead),
    sep_token_id=2,  # </s>
    cls_token_id=0,  # <s>
    attention=roberta.RobertaSelfAttention,
    encoder=roberta.RobertaEncoder,
    pooler=roberta.RobertaPooler,
)
XLM_ROBERTA = EncoderFamily(
    "xlm-roberta",
    "XLMRoberta",
    xlm_roberta.XLMRobertaModel,
    xlm_roberta.XLMRobertaPreTrainedModel,
    xlm_roberta.XLMRobertaLayer,
    BERT_HEADS,
    xlm_roberta.XLMRobertaEmbeddings,
    head_module(xlm_roberta.XLMRobertaClassificationHead),
    sep_token_id=2,  # </s>
    cls_token_id=0,  # <s>
    attention=xlm_roberta.XLMRobertaSelfAttention,
    encoder=xlm_roberta.XLMRobertaEncoder,
    pooler=xlm_roberta.XLMRobertaPooler,
)
# ELECTRA: no pooler; smaller embeddings are projected to the hidden size (`embeddings_project`)
ELECTRA = EncoderFamily(
    "electra",
    "Electra",
    electra.ElectraModel,
    electra.ElectraPreTrainedModel,
    electra.ElectraLayer,
    BERT_HEADS,
    electra.ElectraEmbeddings,
    head_module(electra.ElectraClassificationHead),
    sep_token_id=102,  # [SEP] in the uncased WordPiece vocabulary
    cls_token_id=101,  # [CLS]
    attention=electra.ElectraSelfAttention,
    encoder=electra.ElectraEncoder,
    checkpoints="the discriminator",
    extra_modules=(("embeddings_project", _embeddings_projection),),
    embed=_projected_embed,
)
# DeBERTa-v2/v3: the same layout with disentangled attention's `query_proj/key_proj/value_proj`; no pooler (the
# sequence head has its own `ContextPooler`); the embeddings zero padded positions, the encoder makes the relative
# positions and embeddings every layer takes and convolves the first layer's output (optionally)
DEBERTA_V2 = EncoderFamily(
    "deberta-v2",
    "DebertaV2",
    deberta_v2.DebertaV2Model,
    deberta_v2.DebertaV2PreTrainedModel,
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
    sep_token_id=2,  # [SEP] in the DeBERTa-v3 SentencePiece vocabulary
    cls_token_id=1,  # [CLS]
    attention=deberta_v2.DisentangledSelfAttention,
    sublayers=DISENTANGLED,
    encoder=deberta_v2.DebertaV2Encoder,
    layer_takes_index=False,
    checkpoints="DeBERTa-v2 and v3",
    embed=_masked_embed,
    layer_inputs=_relative_inputs,
    after_layer=_convolved_output,
)
# ModernBERT: pre-norm layers `attn_norm -> attn`, `mlp_norm -> mlp` (no encoder module: `layers.N`), one fused `Wqkv`;
# alternating full and sliding-window attention with rotary positions, a final norm; no pooler; its heads put a
# prediction head (dense, activation, norm) before the classifier
MODERNBERT = EncoderFamily(
    "modernbert",
    "ModernBert",
    modernbert.ModernBertModel,
    modernbert.ModernBertPreTrainedModel,
    modernbert.ModernBertEncoderLayer,
    Heads("attn", ("attn.Wqkv",), "attn.Wo", "config.num_attention_heads", "head_dim"),
    modernbert.ModernBertEmbeddings,
    PREDICTION_HEAD,
    sep_token_id=50282,  # [SEP]
    cls_token_id=50281,  # [CLS]
    attention=modernbert.ModernBertAttention,
    token_head=TOKEN_PREDICTION_HEAD,
    sublayers=PRE_NORM,
    layer_path="layers",
    attention_norm="attn_norm",
    norm_eps_field="norm_eps",
    attention_dropout_field="attention_dropout",
    extra_modules=(("final_norm", _final_layer_norm), ("rotary_emb", modernbert.ModernBertRotaryEmbedding)),
    embed=_token_embed,
    layer_inputs=_rotary_inputs,
    final_norm="final_norm",
)

ENCODER_FAMILIES = tuple(value for value in tuple(globals().values()) if isinstance(value, EncoderFamily))
