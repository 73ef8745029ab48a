"""Sentinel gates (seed 001) on the encoder families BERT and RoBERTa: a learnable gate per attention head of the
stock self-attention, L1 pressure on the gates and structural head pruning (sentinel_common.py); a sequence
classifier whose loss adds the gates' L1 term. Every stock weight keeps its stock name and layout; with
`identity_init=True` every gate is exactly 1 at conversion and the model is the stock model.
"""

from __future__ import annotations

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.loss.loss_utils import ForSequenceClassificationLoss
from transformers.modeling_outputs import ModelOutput
from transformers.models.bert.modeling_bert import eager_attention_forward as bert_eager_attention_forward
from transformers.utils.generic import can_return_tuple

from .encoder_families import EncoderFamily
from .sentinel_common import SentinelGates, SentinelPreTrainedMixin
from .zoo_common import register_for_auto_classes, take_cache

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers.models.bert.modeling_bert import BertLayer, BertModel, BertPreTrainedModel, BertSelfAttention
from transformers.models.roberta.modeling_roberta import (
    RobertaLayer,
    RobertaModel,
    RobertaPreTrainedModel,
    RobertaSelfAttention,
)

from .configuration_sentinel_encoders import BertSentinelConfig, RobertaSentinelConfig
from .encoder_families import BERT, ROBERTA

# --- end generated imports ---


class EncoderSentinelSelfAttention(SentinelGates):
    """The BERT family's self-attention (BERT, RoBERTa) with one sentinel gate per head: the stock forward, with
    `attend` in place of the attention function. Its output projection is the sibling `attention.output.dense`. The
    classes on each family, at the end of this file, are written by `python -m interlayer.generate_classes --fix`
    from the mechanism's record (its `EncoderClasses`)."""

    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__(config, is_causal=is_causal, layer_idx=layer_idx)
        self.head_dim = self.attention_head_size
        self.setup_sentinel(config, layer_idx)
        if self.num_heads != config.num_attention_heads:
            self.query, self.key, self.value = (
                nn.Linear(config.hidden_size, self.num_heads * self.head_dim) for _ in range(3)
            )

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, **kwargs):
        take_cache(past_key_values, kwargs)  # an encoder keeps no cache; not passed on to the attention function
        input_shape = hidden_states.shape[:-1]
        if self.num_heads == 0:  # the output projection (with no inputs) then adds only its bias
            return hidden_states.new_zeros(*input_shape, 0), None
        hidden_shape = (*input_shape, -1, self.head_dim)
        query, key, value = (
            m(hidden_states).view(hidden_shape).transpose(1, 2) for m in (self.query, self.key, self.value)
        )
        attn_output, attn_weights = self.attend(
            query,
            key,
            value,
            attention_mask,
            bert_eager_attention_forward,
            dropout=0.0 if not self.training else self.dropout.p,
            scaling=self.scaling,
            **kwargs,
        )
        return attn_output.reshape(*input_shape, -1).contiguous(), attn_weights


class EncoderSentinelLayerMixin:
    """A stock BERT-family layer whose self-attention is gated (and, once pruned, its output projection smaller)."""

    attention_class: type

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx=layer_idx)
        self.attention.self = self.attention_class(config, is_causal=False, layer_idx=layer_idx)
        heads = self.attention.self.num_heads
        if heads != config.num_attention_heads:
            self.attention.output.dense = nn.Linear(heads * self.attention.self.head_dim, config.hidden_size)


@dataclass
class SentinelSequenceClassifierOutput(ModelOutput):
    """Sequence-classification output; `loss` is `task_loss + gate_l1_loss` when labels are given."""

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    task_loss: torch.FloatTensor | None = None
    gate_l1_loss: torch.FloatTensor | None = None


class EncoderSentinelPreTrainedMixin(SentinelPreTrainedMixin):
    stock_head_count_limit = "the stock self-attention derives its head size as hidden_size / num_attention_heads"


class EncoderSentinelModelMixin(EncoderSentinelPreTrainedMixin):
    """A BERT-family encoder with sentinel-gated self-attention: the family's stock embeddings, encoder (its layers
    gated) and pooler, and the stock forward."""

    family: EncoderFamily
    layer_class: type

    def __init__(self, config, add_pooling_layer: bool = True):
        PreTrainedModel.__init__(self, config)
        self.config = config
        self.gradient_checkpointing = False
        layers = nn.ModuleList([self.layer_class(config, layer_idx=i) for i in range(config.num_hidden_layers)])
        self.family.build_stack(self, config, layers, add_pooling_layer)
        self.post_init()


class EncoderSentinelForSequenceClassificationMixin(EncoderSentinelPreTrainedMixin):
    """Sequence classification on a sentinel encoder with the family's stock head (`family.sequence_head`); the loss
    adds the gates' L1 pressure."""

    pipeline_tag = "text-classification"
    # the loss is a batch mean that ignores `num_items_in_batch`: the Trainer divides it for gradient accumulation
    accepts_loss_kwargs = False
    family: EncoderFamily
    base_class: type

    def __init__(self, config):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.config = config
        head = self.family.sequence_head
        setattr(self, self.base_model_prefix, self.base_class(config, add_pooling_layer=head.uses_pooler))
        head.build(self, config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> SentinelSequenceClassifierOutput:
        outputs = self.base_model(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.family.sequence_head.logits(self, outputs, attention_mask)
        loss = task_loss = l1 = None
        if labels is not None:
            task_loss = ForSequenceClassificationLoss(labels, logits, self.config)
            l1 = self.config.gate_l1 * self._forward_gate_l1()
            loss = task_loss + l1
        return SentinelSequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            task_loss=task_loss,
            gate_l1_loss=l1,
        )


__all__ = ["SentinelSequenceClassifierOutput"]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
# each class has an `__init__` of its own, so that DeepSpeed's zero.Init partitions the mixin's parameters too
class BertSentinelSelfAttention(EncoderSentinelSelfAttention, BertSelfAttention):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)


class BertSentinelLayer(EncoderSentinelLayerMixin, BertLayer):
    family = BERT
    attention_class = BertSentinelSelfAttention

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)


class BertSentinelModel(EncoderSentinelModelMixin, BertModel):
    config_class = BertSentinelConfig
    family = BERT
    layer_class = BertSentinelLayer
    _no_split_modules = ["BertEmbeddings", "BertSentinelLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config, add_pooling_layer)


class BertSentinelForSequenceClassification(EncoderSentinelForSequenceClassificationMixin, BertPreTrainedModel):
    config_class = BertSentinelConfig
    family = BERT
    base_class = BertSentinelModel
    _no_split_modules = ["BertEmbeddings", "BertSentinelLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    BertSentinelConfig,
    AutoModel=BertSentinelModel,
    AutoModelForSequenceClassification=BertSentinelForSequenceClassification,
)


class RobertaSentinelSelfAttention(EncoderSentinelSelfAttention, RobertaSelfAttention):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)


class RobertaSentinelLayer(EncoderSentinelLayerMixin, RobertaLayer):
    family = ROBERTA
    attention_class = RobertaSentinelSelfAttention

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)


class RobertaSentinelModel(EncoderSentinelModelMixin, RobertaModel):
    config_class = RobertaSentinelConfig
    family = ROBERTA
    layer_class = RobertaSentinelLayer
    _no_split_modules = ["RobertaEmbeddings", "RobertaSentinelLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config, add_pooling_layer)


class RobertaSentinelForSequenceClassification(EncoderSentinelForSequenceClassificationMixin, RobertaPreTrainedModel):
    config_class = RobertaSentinelConfig
    family = ROBERTA
    base_class = RobertaSentinelModel
    _no_split_modules = ["RobertaEmbeddings", "RobertaSentinelLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    RobertaSentinelConfig,
    AutoModel=RobertaSentinelModel,
    AutoModelForSequenceClassification=RobertaSentinelForSequenceClassification,
)


# stock model_type -> (config, base model, SequenceClassification class)
FAMILIES = {
    "bert": (BertSentinelConfig, BertSentinelModel, BertSentinelForSequenceClassification),
    "roberta": (RobertaSentinelConfig, RobertaSentinelModel, RobertaSentinelForSequenceClassification),
}

__all__ += [
    "FAMILIES",
    "BertSentinelForSequenceClassification",
    "BertSentinelModel",
    "RobertaSentinelForSequenceClassification",
    "RobertaSentinelModel",
]
# --- end generated classes ---
