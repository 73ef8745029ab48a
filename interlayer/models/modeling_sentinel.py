"""Sentinel-gated GPT-2 (seed 001): a learnable gate per attention head, L1 pressure on the gates, structural head
pruning, and U-Net skips from the first half of the layers to the second.

Every stock weight keeps its stock name and layout (fused `c_attn`, `c_proj`), so a stock GPT-2 checkpoint loads
with nothing missing. The gate of head h scales that head's attention output before `c_proj`:
`c_proj(concat_h g_h * softmax(q_h k_h^T / sqrt(d)) v_h)` (seed section 2.1). With `identity_init=True` every gate
is exactly 1 at conversion and the model is stock GPT-2. The mechanism's own tensors are named `sentinel_*` (gates,
head mask) and `unet_*` (skip fusions).

Reading order: the gated attention, the block, the pre-trained base class, the base model, the LM head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast, ModelOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.gpt2.modeling_gpt2 import (
    GPT2Attention,
    GPT2Block,
    GPT2Model,
    GPT2PreTrainedModel,
    eager_attention_forward,
)
from transformers.pytorch_utils import Conv1D
from transformers.utils.generic import can_return_tuple

from .configuration_sentinel import GPT2SentinelConfig
from .zoo_common import ZooModelMixin


class GPT2SentinelAttention(GPT2Attention):
    """GPT-2 self-attention with one sentinel gate per head, and only the heads the config has not pruned.

    `sentinel_gate_logits` holds one logit per remaining head; `sentinel_head_mask` (0/1, saved with the model)
    switches heads off without removing them (the controller's "masked" state). `head_ids` are the original
    indices of the remaining heads.
    """

    def __init__(self, config, layer_idx):
        super().__init__(config, is_cross_attention=False, layer_idx=layer_idx)
        heads = config.heads_in_layer(layer_idx)
        self.num_heads = len(heads)
        self.split_size = self.num_heads * self.head_dim
        if self.num_heads != config.num_attention_heads:
            self.c_attn = Conv1D(3 * self.split_size, self.embed_dim)
            self.c_proj = Conv1D(self.embed_dim, self.split_size)
        self.register_buffer("head_ids", torch.tensor(heads, dtype=torch.long), persistent=False)
        self.sentinel_gate_logits = nn.Parameter(torch.empty(self.num_heads))
        self.register_buffer("sentinel_head_mask", torch.ones(self.num_heads))
        self.gate_scale = 1.0 / (1.0 + math.exp(-config.sentinel_gate_init)) if config.identity_init else 1.0
        self.measure_entropy = False
        self.last_entropy: torch.Tensor | None = None
        self.last_entropy_tokens: torch.Tensor | None = None

    def learned_gates(self) -> torch.Tensor:
        """sigmoid(logit_h) (divided by its initial value under identity_init): the gate without the head mask."""
        return torch.sigmoid(self.sentinel_gate_logits) / self.gate_scale

    def gates(self) -> torch.Tensor:
        """g_h = the learned gate times the head mask (0 for a masked head)."""
        return self.learned_gates() * self.sentinel_head_mask

    @torch.no_grad()
    def _entropy(self, query, key, attention_mask) -> torch.Tensor:
        """Mean attention entropy per head (nats) over the real query tokens, for the controller; computed only when
        asked for. Masked key positions get no probability; query positions that are padding are left out of the
        mean. A query is padding when the mask hides its own key position (causal attention always allows it for a
        real token), which holds for right and left padding and with a cache. The number of real queries is kept
        in `last_entropy_tokens` for averaging over batches."""
        scores = query @ key.transpose(-1, -2) * self.scaling
        q_len, k_len = scores.shape[-2:]
        if attention_mask is None:
            allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).tril(k_len - q_len)[None, None]
        elif attention_mask.dtype == torch.bool:
            allowed = attention_mask
        else:
            allowed = attention_mask == 0
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        probs = scores.softmax(-1)
        entropy = -(probs * probs.clamp(min=1e-12).log()).sum(-1)  # (batch, heads, queries)
        real = allowed.diagonal(k_len - q_len, dim1=-2, dim2=-1).to(entropy.dtype)  # (batch or 1, 1, queries)
        real = real.expand(entropy.shape[0], 1, q_len)
        tokens = real.sum()
        self.last_entropy_tokens = tokens
        return (entropy * real).sum(dim=(0, 2)) / tokens.clamp(min=1)

    def forward(self, hidden_states, past_key_values: Cache | None = None, attention_mask=None, **kwargs):
        batch, seq = hidden_states.shape[:2]
        if self.num_heads == 0:
            # every head pruned: the layer adds only c_proj's bias; the cache still advances (with no heads)
            if past_key_values is not None:
                empty = hidden_states.new_zeros(batch, 0, seq, self.head_dim)
                past_key_values.update(empty, empty, self.layer_idx)
            return self.resid_dropout(self.c_proj.bias.expand(batch, seq, -1)), None
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        shape = (batch, seq, self.num_heads, self.head_dim)
        query, key, value = (t.view(shape).transpose(1, 2) for t in (query, key, value))
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attn_dropout.p if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        if self.measure_entropy:
            self.last_entropy = self._entropy(query, key, attention_mask)
        # seed section 2.1: head h's output scaled by its gate before the output projection
        attn_output = attn_output * self.gates().view(1, 1, -1, 1).to(attn_output.dtype)
        attn_output = self.c_proj(attn_output.reshape(batch, seq, -1))
        return self.resid_dropout(attn_output), attn_weights

    @torch.no_grad()
    def prune(self, heads: list[int]) -> None:
        """Remove the given original head indices: their columns of `c_attn` (q, k and v) and rows of `c_proj`."""
        keep = [i for i, h in enumerate(self.head_ids.tolist()) if h not in set(heads)]
        index = torch.tensor(keep, dtype=torch.long, device=self.c_attn.weight.device)
        cols = (index[:, None] * self.head_dim + torch.arange(self.head_dim, device=index.device)).flatten()
        qkv_cols = torch.cat([cols + part * self.split_size for part in range(3)])
        new_split = len(keep) * self.head_dim
        c_attn = Conv1D(3 * new_split, self.embed_dim).to(self.c_attn.weight)
        c_attn.weight.copy_(self.c_attn.weight[:, qkv_cols])
        c_attn.bias.copy_(self.c_attn.bias[qkv_cols])
        c_proj = Conv1D(self.embed_dim, new_split).to(self.c_proj.weight)
        c_proj.weight.copy_(self.c_proj.weight[cols])
        c_proj.bias.copy_(self.c_proj.bias)
        self.c_attn, self.c_proj = c_attn, c_proj
        self.sentinel_gate_logits = nn.Parameter(self.sentinel_gate_logits[index].clone())
        self.sentinel_head_mask = self.sentinel_head_mask[index].clone()
        self.head_ids = self.head_ids[index].clone()
        self.num_heads, self.split_size = len(keep), new_split


class UNetSkipFusion(nn.Linear):
    """The U-Net skip fusion `Linear([h_dec; h_enc]) -> d` (seed section 2.2), zero at initialisation.

    Its own class, so that `_init_weights` finds it: transformers' init walks every module, but skips a module
    without parameters of its own (the block) in custom code, so an init written for the block never ran."""

    def __init__(self, hidden_size: int):
        super().__init__(2 * hidden_size, hidden_size)


def unet_skip_source(config, layer_idx: int) -> int | None:
    """The encoder layer whose output layer `layer_idx` fuses, or None (seed section 2.2).

    The seed pairs encoder layer j with decoder layer L-1-j (0-based; its "encoder layer i to decoder layer N-i+1")
    for the floor(L/2) outermost pairs: decoder layers i >= L - floor(L/2) take the output of layer L-1-i. With odd
    L the middle layer has no skip. The fusion acts on the decoder layer's output, so every pair joins two
    different states; with even L the first decoder layer L/2 joins its output with its input (a skip around one
    block), never a state with itself."""
    num_layers = config.num_hidden_layers
    if not config.unet_skips or layer_idx < num_layers - num_layers // 2:
        return None
    return num_layers - 1 - layer_idx


def unet_skip_scale(config, layer_idx: int) -> float:
    """Depth-scaled factor of a skip: `unet_skip_scale * (L - i) / floor(L/2)` for decoder layer i. The first
    decoder layer gets `unet_skip_scale`, each deeper one a step less, the last `unet_skip_scale / floor(L/2)`:
    the seed's "scaling factors that vary by layer depth ... later layers receive more conservative skip
    connection contributions" (its copies used 0.01 to 0.1; 0.1 on 12 layers gives 0.1 down to 0.017)."""
    num_layers = config.num_hidden_layers
    return float(config.unet_skip_scale) * (num_layers - layer_idx) / (num_layers // 2)


class GPT2SentinelBlock(GPT2Block):
    """A stock GPT-2 block whose attention is gated; decoder-half blocks own a U-Net skip fusion on their output."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx=layer_idx)
        self.attn = GPT2SentinelAttention(config, layer_idx)
        self.unet_source = unet_skip_source(config, layer_idx)
        self.unet_fuse = None
        if self.unet_source is not None:
            self.unet_fuse = UNetSkipFusion(config.hidden_size)
            self.unet_scale = unet_skip_scale(config, layer_idx)

    def forward(self, hidden_states, past_key_values=None, attention_mask=None, skip=None, **kwargs):
        hidden_states = super().forward(hidden_states, past_key_values, attention_mask, **kwargs)
        if self.unet_fuse is not None:
            # seed section 2.2: h'_dec = h_dec + s_i * Linear([h_dec; h_enc]); the fusion starts at zero
            hidden_states = hidden_states + self.unet_scale * self.unet_fuse(torch.cat([hidden_states, skip], dim=-1))
        return hidden_states


@dataclass
class SentinelCausalLMOutput(ModelOutput):
    """Causal-LM output; `loss` is `lm_loss + gate_l1_loss` when labels are given."""

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    past_key_values: Cache | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    lm_loss: torch.FloatTensor | None = None
    gate_l1_loss: torch.FloatTensor | None = None


class SentinelPreTrainedMixin(ZooModelMixin):
    """Init, statistics and pruning shared by the gated GPT-2 models (put before `GPT2PreTrainedModel`)."""

    config_class = GPT2SentinelConfig
    mechanism_name = "Sentinel gates"
    mechanism_param_markers = ("sentinel_", "unet_")
    _no_split_modules = ["GPT2SentinelBlock"]

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, GPT2SentinelAttention):
            init.constant_(module.sentinel_gate_logits, float(self.config.sentinel_gate_init))
            init.ones_(module.sentinel_head_mask)
            init.copy_(module.head_ids, torch.tensor(self.config.heads_in_layer(module.layer_idx)))
        elif isinstance(module, UNetSkipFusion):
            # after the generic nn.Linear init above: the fusion starts at zero, so skips leave stock GPT-2 unchanged
            init.zeros_(module.weight)
            init.zeros_(module.bias)

    @property
    def gated_attentions(self) -> list[GPT2SentinelAttention]:
        return [block.attn for block in self.base_model.h]

    def gate_values(self) -> list[torch.Tensor]:
        """Current gate of every remaining head, one tensor per layer (layers may have different head counts)."""
        return [attn.gates().detach() for attn in self.gated_attentions]

    def prune_heads(self, heads: dict[int, list[int]]) -> None:
        """Remove heads structurally (by original index per layer); recorded in `config.pruned_heads`, so a saved
        model reloads with the smaller shapes. A pruned head computes exactly what a gate of zero lets through."""
        attentions = self.gated_attentions
        heads = {int(layer): list(layer_heads) for layer, layer_heads in heads.items()}
        for layer, layer_heads in heads.items():  # everything checked before anything is pruned
            if not 0 <= layer < len(attentions):
                raise ValueError(f"prune_heads: layer {layer} does not exist; layers are 0..{len(attentions) - 1}.")
            unknown = set(layer_heads) - set(attentions[layer].head_ids.tolist())
            if unknown:
                raise ValueError(
                    f"prune_heads: layer {layer} has no heads {sorted(unknown)}; remaining heads are "
                    f"{attentions[layer].head_ids.tolist()}."
                )
        for layer, layer_heads in heads.items():
            attn = attentions[layer]
            attn.prune(layer_heads)
            self.config.pruned_heads[layer] = sorted(set(self.config.pruned_heads.get(layer, [])) | set(layer_heads))

    def prune_masked_heads(self) -> dict[int, list[int]]:
        """Structurally remove every head whose mask is 0 (switched off by the controller); returns them."""
        masked = {
            attn.layer_idx: [h for h, m in zip(attn.head_ids.tolist(), attn.sentinel_head_mask.tolist()) if m == 0]
            for attn in self.gated_attentions
        }
        masked = {layer: heads for layer, heads in masked.items() if heads}
        self.prune_heads(masked)
        return masked

    def mechanism_summary(self) -> str:
        c = self.config
        pruned = sum(len(v) for v in c.pruned_heads.values())
        total = c.num_hidden_layers * c.num_attention_heads
        skips = (
            " U-Net skips fuse the output of layer L-1-i into the output of each layer i >= L - floor(L/2), scaled "
            "by depth."
            if c.unet_skips
            else ""
        )
        return (
            "Sentinel-gated GPT-2 (interlayer, seed 001): a learnable gate per attention head scales that head's "
            f"output before `c_proj`; an L1 term (weight {c.gate_l1}) pushes gates down. {pruned} of {total} heads "
            f"are structurally pruned.{skips} Stock weight names; the mechanism's tensors are named `sentinel_*` and "
            "`unet_*`."
        )

    def mechanism_state(self) -> dict[str, float]:
        """Every gate by layer and original head (`sentinel/L3/gate_h5`), and head counts."""
        out = {}
        masked = 0
        for attn in self.gated_attentions:
            gates = attn.gates().detach().float().cpu().tolist()
            for head, value in zip(attn.head_ids.tolist(), gates):
                out[f"sentinel/L{attn.layer_idx}/gate_h{head}"] = value
            masked += int((attn.sentinel_head_mask == 0).sum())
        out["sentinel/heads_active"] = float(sum(a.num_heads for a in self.gated_attentions) - masked)
        out["sentinel/heads_masked"] = float(masked)
        out["sentinel/heads_pruned"] = float(sum(len(v) for v in self.config.pruned_heads.values()))
        return out


class GPT2SentinelModel(SentinelPreTrainedMixin, GPT2Model):
    """GPT-2 with sentinel-gated attention and optional U-Net skips. Stock embeddings, blocks, final norm."""

    def __init__(self, config: GPT2SentinelConfig):
        PreTrainedModel.__init__(self, config)
        self.embed_dim = config.hidden_size
        self.wte = nn.Embedding(config.vocab_size, self.embed_dim)
        self.wpe = nn.Embedding(config.max_position_embeddings, self.embed_dim)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPT2SentinelBlock(config, layer_idx=i) for i in range(config.num_hidden_layers)])
        self.ln_f = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_epsilon)
        self.gradient_checkpointing = False
        self.post_init()

    @can_return_tuple
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
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if kwargs.pop("output_attentions", None):
            raise ValueError("`output_attentions=True` is not supported; gate statistics come from mechanism_stats().")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if self.gradient_checkpointing and self.training:
            use_cache = False
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)
        if position_ids is None:
            past_seen = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = (torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen)[None]
        hidden_states = inputs_embeds + self.wpe(position_ids)
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            position_ids=position_ids,
        )
        if token_type_ids is not None:
            hidden_states = hidden_states + self.wte(token_type_ids)
        hidden_states = self.drop(hidden_states)

        outputs = []
        all_hidden = (hidden_states,) if output_hidden_states else None
        for block in self.h:
            skip = outputs[block.unet_source] if block.unet_source is not None else None
            hidden_states = block(
                hidden_states,
                past_key_values if use_cache else None,
                causal_mask,
                skip,
                position_ids=position_ids,
                **kwargs,
            )
            outputs.append(hidden_states)
            if output_hidden_states:
                all_hidden = all_hidden + (hidden_states,)
        hidden_states = self.ln_f(hidden_states)
        if output_hidden_states:
            all_hidden = all_hidden[:-1] + (hidden_states,)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            past_key_values=past_key_values if use_cache else None,
            hidden_states=all_hidden,
        )


class GPT2SentinelLMHeadModel(SentinelPreTrainedMixin, GPT2PreTrainedModel, GenerationMixin):
    """Causal LM on [`GPT2SentinelModel`], weights tied like stock GPT-2; the loss adds the gates' L1 pressure."""

    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}
    pipeline_tag = "text-generation"
    # the LM loss normalises by `num_items_in_batch` itself
    accepts_loss_kwargs = True

    def __init__(self, config: GPT2SentinelConfig):
        PreTrainedModel.__init__(self, config)
        self.loss_type = "ForCausalLM"
        self.transformer = GPT2SentinelModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def gate_l1(self) -> torch.Tensor:
        """The seed's L1 pressure: the sum of all gate values (section 4.1)."""
        return sum(attn.gates().sum() for attn in self.gated_attentions if attn.num_heads)

    @can_return_tuple
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
        loss_kwargs = {k: kwargs.pop(k) for k in ("num_items_in_batch", "ignore_index", "shift_labels") if k in kwargs}
        outputs = self.transformer(
            input_ids,
            past_key_values=past_key_values,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, keep, :])
        loss = lm_loss = l1 = None
        if labels is not None:
            lm_loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **loss_kwargs)
            l1 = self.config.gate_l1 * self.gate_l1()
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
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            lm_loss=lm_loss,
            gate_l1_loss=l1,
        )


GPT2SentinelConfig.register_for_auto_class()
GPT2SentinelModel.register_for_auto_class("AutoModel")
GPT2SentinelLMHeadModel.register_for_auto_class("AutoModelForCausalLM")

# the names the GPT-2 classes had before the rename, still documented and importable
GatedGPT2Model = GPT2SentinelModel
GatedGPT2LMHeadModel = GPT2SentinelLMHeadModel

__all__ = [
    "GPT2SentinelModel",
    "GPT2SentinelLMHeadModel",
    "GatedGPT2Model",
    "GatedGPT2LMHeadModel",
    "SentinelCausalLMOutput",
    "GPT2SentinelAttention",
]
