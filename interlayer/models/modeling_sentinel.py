"""Sentinel gates (seed 001): a learnable gate per attention head, L1 pressure on the gates, structural head
pruning, and U-Net skips from the first half of a decoder's layers to the second; on GPT-2 and on the Llama family
(Llama, Qwen2, Qwen3: grouped-query attention).

Every stock weight keeps its stock name and layout, so a stock checkpoint loads with nothing missing. The gate of
query head h scales that head's attention output before the output projection:
`o_proj(concat_h g_h * softmax(q_h k_{kv(h)}^T / sqrt(d)) v_{kv(h)})` (seed section 2.1). With `identity_init=True`
every gate is exactly 1 at conversion and the model is the stock model. The mechanism's own tensors are named
`sentinel_*` (gates, head mask, and the U-Net skip fusions `sentinel_unet_fuse`).

The mechanism is written once against where a family's layer keeps its attention heads (`families.Heads`), in
sentinel_common.py; a family is that declaration plus its attention forward, which calls `SentinelGates.attend` where
the stock forward calls the attention function. This file holds the decoders (BERT and RoBERTa are in
modeling_sentinel_encoders.py).

Reading order: each family's attention and layer, the LM head, the models; at the end, the classes of the Llama-family
decoders, which `python -m interlayer.generate_classes --fix` writes from their family declarations.
"""

from __future__ import annotations

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.models.gpt2.modeling_gpt2 import (
    GPT2Attention,
    GPT2Block,
    GPT2Model,
    GPT2PreTrainedModel,
)
from transformers.models.gpt2.modeling_gpt2 import eager_attention_forward as gpt2_eager_attention_forward
from transformers.models.llama.modeling_llama import (
    apply_rotary_pos_emb,
)
from transformers.models.llama.modeling_llama import eager_attention_forward as llama_eager_attention_forward
from transformers.pytorch_utils import Conv1D
from transformers.utils.generic import can_return_tuple

from .configuration_sentinel import GatedGPT2Config, GPT2SentinelConfig
from .decoder_common import CausalLMMixin, DecoderLayerRolesMixin, DecoderStackMixin, StackRun
from .decoder_families import GPT2
from .sentinel_common import SentinelGates, SentinelPreTrainedMixin, UNetSkipMixin
from .zoo_common import (
    CACHE_KWARG,
    refuse_output_attentions,
    register_for_auto_classes,
    take_cache,
)

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaModel
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2DecoderLayer, Qwen2ForCausalLM, Qwen2Model
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3DecoderLayer, Qwen3ForCausalLM, Qwen3Model

from .configuration_sentinel import LlamaSentinelConfig, Qwen2SentinelConfig, Qwen3SentinelConfig
from .decoder_families import LLAMA, QWEN2, QWEN3

# --- end generated imports ---


class GPT2SentinelAttention(SentinelGates, GPT2Attention):
    """GPT-2 self-attention with one sentinel gate per head, and only the heads the config has not pruned."""

    def __init__(self, config, layer_idx):
        super().__init__(config, is_cross_attention=False, layer_idx=layer_idx)
        self.setup_sentinel(config, layer_idx)
        if self.num_heads != config.num_attention_heads:
            self.split_size = self.num_heads * self.head_dim
            self.c_attn = Conv1D(3 * self.split_size, self.embed_dim)
            self.c_proj = Conv1D(self.embed_dim, self.split_size)

    def resize_heads(self, keep, kv_heads) -> None:
        super().resize_heads(keep, kv_heads)
        self.split_size = self.num_heads * self.head_dim

    def forward(self, hidden_states, past_key_values: Cache | None = None, attention_mask=None, **kwargs):
        past_key_values = take_cache(past_key_values, kwargs)
        batch, seq = hidden_states.shape[:2]
        if self.num_heads == 0:
            return self.resid_dropout(self.no_heads(self.c_proj, hidden_states, past_key_values)), None
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        shape = (batch, seq, self.num_heads, self.head_dim)
        query, key, value = (t.view(shape).transpose(1, 2) for t in (query, key, value))
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        attn_output, attn_weights = self.attend(
            query,
            key,
            value,
            attention_mask,
            gpt2_eager_attention_forward,
            dropout=self.attn_dropout.p if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = self.c_proj(attn_output.reshape(batch, seq, -1))
        return self.resid_dropout(attn_output), attn_weights


class DecoderSentinelAttention(SentinelGates):
    """The Llama family's attention (Llama, Qwen2, Qwen3) with one sentinel gate per query head: the stock forward, with
    `attend` in place of the attention function. Qwen3's per-head query/key norms and sliding windows are used when
    the stock class has them."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.setup_sentinel(config, layer_idx)
        if self.num_heads != config.num_attention_heads:  # the stock layout's biases, at the pruned sizes
            q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
            self.q_proj = nn.Linear(config.hidden_size, q, bias=self.q_proj.bias is not None)
            self.k_proj = nn.Linear(config.hidden_size, kv, bias=self.k_proj.bias is not None)
            self.v_proj = nn.Linear(config.hidden_size, kv, bias=self.v_proj.bias is not None)
            self.o_proj = nn.Linear(q, config.hidden_size, bias=self.o_proj.bias is not None)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
        past_key_values = take_cache(past_key_values, kwargs)
        if self.num_heads == 0:
            return self.no_heads(self.o_proj, hidden_states, past_key_values), None
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape)
        key_states = self.k_proj(hidden_states).view(hidden_shape)
        if hasattr(self, "q_norm"):
            query_states, key_states = self.q_norm(query_states), self.k_norm(key_states)
        query_states, key_states = query_states.transpose(1, 2), key_states.transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if past_key_values is not None:
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)
        if getattr(self, "sliding_window", None) is not None:
            kwargs["sliding_window"] = self.sliding_window
        attn_output, attn_weights = self.attend(
            query_states,
            key_states,
            value_states,
            attention_mask,
            llama_eager_attention_forward,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class DecoderSentinelLayerMixin(UNetSkipMixin, DecoderLayerRolesMixin):
    """A stock decoder layer (GPT-2's block, a Llama-family layer) with gated attention (`attention_class`, under the
    family's attention name) and, in the decoder half, a U-Net skip fusion on its output."""

    attention_class: type

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        setattr(self, self.family.heads.attention, self.attention_class(config, layer_idx))
        self.setup_unet(config, layer_idx)

    def residual_block(self, h: torch.Tensor, attention, skip: torch.Tensor | None = None) -> torch.Tensor:
        return self.apply_unet(super().residual_block(h, attention), skip)


class GPT2SentinelBlock(DecoderSentinelLayerMixin, GPT2Block):
    """A stock GPT-2 block whose attention is gated; decoder-half blocks own a U-Net skip fusion on their output."""

    family = GPT2
    attention_class = GPT2SentinelAttention

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


@dataclass
class SentinelCausalLMOutput(CausalLMOutputWithPast):
    """The stock causal-LM output (its cache field, `cache` or, before transformers 5.24, `past_key_values`, is what
    `generate()` reads); `loss` is `lm_loss + gate_l1_loss` when labels are given."""

    lm_loss: torch.FloatTensor | None = None
    gate_l1_loss: torch.FloatTensor | None = None


class SentinelLMHeadMixin:
    """The causal-LM forward of every sentinel LM: the base model, the LM head, the loss plus the gates' L1 pressure."""

    pipeline_tag = "text-generation"
    # the LM loss normalises by `num_items_in_batch` itself
    accepts_loss_kwargs = True

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> SentinelCausalLMOutput:
        loss_kwargs = {k: kwargs.pop(k) for k in ("num_items_in_batch", "ignore_index", "shift_labels") if k in kwargs}
        outputs = self.base_model(
            input_ids=input_ids,
            past_key_values=take_cache(past_key_values, kwargs),
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, keep, :])
        loss = lm_loss = l1 = None
        if labels is not None:
            lm_loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **loss_kwargs)
            l1 = self.config.gate_l1 * self._forward_gate_l1()
            num_items = loss_kwargs.get("num_items_in_batch")
            if num_items is not None:  # this batch's share of the L1 term, so that the shares over the devices and
                # the accumulated micro-batches of one optimiser step add up to the term once
                targets = loss_kwargs.get("shift_labels")
                targets = labels[..., 1:] if targets is None else targets
                l1 = l1 * (targets != -100).sum() / num_items
            loss = lm_loss + l1
        return SentinelCausalLMOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            lm_loss=lm_loss,
            gate_l1_loss=l1,
            **{CACHE_KWARG: getattr(outputs, CACHE_KWARG)},
        )


class DecoderSentinelPreTrainedMixin(SentinelPreTrainedMixin):
    def apply_freeze_base(self) -> None:
        """The sentinel mechanism has no `freeze_base`: the gates train with the model."""


class DecoderSentinelModelMixin(DecoderSentinelPreTrainedMixin, DecoderStackMixin):
    """A decoder with sentinel-gated attention and optional U-Net skips: the family's stock embeddings, layers, norm
    and rotary embedding, in the decoder stack's forward; a decoder-half layer fuses the output of its encoder-half
    layer (`unet_source`)."""

    def check_forward(self, kwargs: dict) -> None:
        refuse_output_attentions(self, kwargs)

    def layer_inputs(self, i: int, run: StackRun) -> tuple:
        source = self.stack_layers[i].unet_source
        return (run.saved["outputs"][source] if source is not None else None,)

    def after_layer(self, i: int, output: torch.Tensor, run: StackRun) -> torch.Tensor:
        if self.config.unet_skips:  # the outputs the decoder half's skips read
            run.saved.setdefault("outputs", []).append(output)
        return output


class DecoderSentinelLMMixin(SentinelLMHeadMixin, DecoderSentinelPreTrainedMixin, CausalLMMixin):
    """The stock causal-LM head (and tying) on a sentinel decoder; the loss adds the gates' L1 pressure."""


class GPT2SentinelPreTrainedMixin(SentinelPreTrainedMixin):
    config_class = GPT2SentinelConfig
    family = GPT2
    stock_head_count_limit = "the stock GPT2Attention derives its head size as n_embd / n_head"
    _no_split_modules = ["GPT2SentinelBlock"]


class GPT2SentinelModel(DecoderSentinelModelMixin, GPT2SentinelPreTrainedMixin, GPT2Model):
    """GPT-2 with sentinel-gated attention and optional U-Net skips: the stock stack of the `GPT2` family (embeddings,
    blocks, final norm) and its forward, which takes `token_type_ids` as stock GPT-2 does."""

    decoder_layer_class = GPT2SentinelBlock

    def __init__(self, config: GPT2SentinelConfig):
        super().__init__(config)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """The decoder stack's forward with stock GPT-2's inputs in stock GPT-2's order."""
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            token_type_ids=token_type_ids,
            **kwargs,
        )


class GPT2SentinelLMHeadModel(SentinelLMHeadMixin, GPT2SentinelPreTrainedMixin, GPT2PreTrainedModel, GenerationMixin):
    """Causal LM on [`GPT2SentinelModel`], weights tied like stock GPT-2; the loss adds the gates' L1 pressure."""

    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: GPT2SentinelConfig):
        PreTrainedModel.__init__(self, config)
        self.loss_type = "ForCausalLM"
        self.transformer = GPT2SentinelModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> SentinelCausalLMOutput:
        """The sentinel LM forward with stock GPT-2's inputs in stock GPT-2's order: `token_type_ids` are embedded by
        `wte` and added to the input, as in stock GPT-2. `generate()` accepts (and prepares: position ids from the
        attention mask, logits of the last position only) what this signature names."""
        return super().forward(
            input_ids=input_ids,
            past_key_values=past_key_values,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )


register_for_auto_classes(GPT2SentinelConfig, AutoModel=GPT2SentinelModel, AutoModelForCausalLM=GPT2SentinelLMHeadModel)

# the names the GPT-2 classes had before the rename, still documented and importable
GatedGPT2Model = GPT2SentinelModel
GatedGPT2LMHeadModel = GPT2SentinelLMHeadModel

__all__ = [
    "GPT2SentinelAttention",
    "GPT2SentinelLMHeadModel",
    "GPT2SentinelModel",
    "GatedGPT2Config",
    "GatedGPT2LMHeadModel",
    "GatedGPT2Model",
    "SentinelCausalLMOutput",
    "SentinelGates",
]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
# each class has an `__init__` of its own, so that DeepSpeed's zero.Init partitions the mixin's parameters too
class LlamaSentinelAttention(DecoderSentinelAttention, LlamaAttention):
    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class LlamaSentinelDecoderLayer(DecoderSentinelLayerMixin, LlamaDecoderLayer):
    family = LLAMA
    attention_class = LlamaSentinelAttention

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class LlamaSentinelModel(DecoderSentinelModelMixin, LlamaModel):
    config_class = LlamaSentinelConfig
    family = LLAMA
    decoder_layer_class = LlamaSentinelDecoderLayer
    _no_split_modules = ["LlamaSentinelDecoderLayer"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class LlamaSentinelForCausalLM(DecoderSentinelLMMixin, LlamaForCausalLM, GenerationMixin):
    config_class = LlamaSentinelConfig
    family = LLAMA
    base_class = LlamaSentinelModel
    _no_split_modules = ["LlamaSentinelDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    LlamaSentinelConfig, AutoModel=LlamaSentinelModel, AutoModelForCausalLM=LlamaSentinelForCausalLM
)


class Qwen2SentinelAttention(DecoderSentinelAttention, Qwen2Attention):
    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen2SentinelDecoderLayer(DecoderSentinelLayerMixin, Qwen2DecoderLayer):
    family = QWEN2
    attention_class = Qwen2SentinelAttention

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen2SentinelModel(DecoderSentinelModelMixin, Qwen2Model):
    config_class = Qwen2SentinelConfig
    family = QWEN2
    decoder_layer_class = Qwen2SentinelDecoderLayer
    _no_split_modules = ["Qwen2SentinelDecoderLayer"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class Qwen2SentinelForCausalLM(DecoderSentinelLMMixin, Qwen2ForCausalLM, GenerationMixin):
    config_class = Qwen2SentinelConfig
    family = QWEN2
    base_class = Qwen2SentinelModel
    _no_split_modules = ["Qwen2SentinelDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Qwen2SentinelConfig, AutoModel=Qwen2SentinelModel, AutoModelForCausalLM=Qwen2SentinelForCausalLM
)


class Qwen3SentinelAttention(DecoderSentinelAttention, Qwen3Attention):
    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen3SentinelDecoderLayer(DecoderSentinelLayerMixin, Qwen3DecoderLayer):
    family = QWEN3
    attention_class = Qwen3SentinelAttention

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen3SentinelModel(DecoderSentinelModelMixin, Qwen3Model):
    config_class = Qwen3SentinelConfig
    family = QWEN3
    decoder_layer_class = Qwen3SentinelDecoderLayer
    _no_split_modules = ["Qwen3SentinelDecoderLayer"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class Qwen3SentinelForCausalLM(DecoderSentinelLMMixin, Qwen3ForCausalLM, GenerationMixin):
    config_class = Qwen3SentinelConfig
    family = QWEN3
    base_class = Qwen3SentinelModel
    _no_split_modules = ["Qwen3SentinelDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Qwen3SentinelConfig, AutoModel=Qwen3SentinelModel, AutoModelForCausalLM=Qwen3SentinelForCausalLM
)


__all__ += [
    "LlamaSentinelForCausalLM",
    "LlamaSentinelModel",
    "Qwen2SentinelForCausalLM",
    "Qwen2SentinelModel",
    "Qwen3SentinelForCausalLM",
    "Qwen3SentinelModel",
]
# --- end generated classes ---
