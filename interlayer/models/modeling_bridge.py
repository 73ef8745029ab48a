"""Cross-layer bridges (seed 000) on stock encoders: BERT, RoBERTa, XLM-R, ELECTRA, DeBERTa-v2 and ModernBERT.

Late target layers j (the last `route_last_n`) receive messages from earlier layers i < j chosen by a router:
a QKV cross-attention message (target queries, source keys/values) and an HDIM pairwise-MLP message. Per-layer
gates blend them; a LayerNorm, a projection and dropout follow, and the result is added where the attention sublayer
ends, to the input of the FFN sublayer (seed section 4). Every stock weight keeps its stock name
(`encoder.layer.N.attention...`, `layers.N.attn...`); the mechanism's own parameters all contain `bridge` in their
names (`encoder.bridge_router.*`, `encoder.layer.N.bridge.*`).

The mechanism is written once, against the roles a family's encoder layer plays (`BridgeLayerMixin`: where the
attention sublayer ends, the FFN sublayer, the query/key/value projections, how the bridge reads a hidden state)
and the routing over its layer stack (`BridgeModelMixin`). A family's roles, stock modules (heads, sublayers,
embeddings, encoder, pooler, task heads) and the few steps where its stock base model differs from BERT's are its
declaration in `encoder_families.py` (`EncoderFamily`, which the sentinel reads too); the `*Bridge*` classes at the end
of this file, written by `python -m interlayer.generate_classes --fix` from the mechanism's record (its
`EncoderClasses`), put the mixins before each family's stock classes.

Reading order: helpers, router, HDIM message, the per-target bridge block, the layer mixin, the pre-trained base
class, the base model (with the routing over the stack) and task heads shared by every family, then the families'
generated classes.
"""

from __future__ import annotations

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.loss.loss_utils import ForSequenceClassificationLoss
from transformers.modeling_outputs import ModelOutput
from transformers.utils.generic import can_return_tuple

from .encoder_families import EncoderFamily, TaskHead
from .zoo_common import (
    Fused,
    StatsAccumulator,
    ZooModelMixin,
    dot_product_attention,
    refuse_output_attentions,
    register_for_auto_classes,
    register_scalar_parameters,
    select_hidden_states,
)

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers.models.bert.modeling_bert import BertLayer, BertModel, BertPreTrainedModel
from transformers.models.deberta_v2.modeling_deberta_v2 import DebertaV2Layer, DebertaV2Model, DebertaV2PreTrainedModel
from transformers.models.electra.modeling_electra import ElectraLayer, ElectraModel, ElectraPreTrainedModel
from transformers.models.modernbert.modeling_modernbert import (
    ModernBertEncoderLayer,
    ModernBertModel,
    ModernBertPreTrainedModel,
)
from transformers.models.roberta.modeling_roberta import RobertaLayer, RobertaModel, RobertaPreTrainedModel
from transformers.models.xlm_roberta.modeling_xlm_roberta import (
    XLMRobertaLayer,
    XLMRobertaModel,
    XLMRobertaPreTrainedModel,
)

from .configuration_bridge import (
    BertBridgeConfig,
    DebertaV2BridgeConfig,
    ElectraBridgeConfig,
    ModernBertBridgeConfig,
    RobertaBridgeConfig,
    XLMRobertaBridgeConfig,
)
from .encoder_families import BERT, DEBERTA_V2, ELECTRA, MODERNBERT, ROBERTA, XLM_ROBERTA

# --- end generated imports ---


def pool_tokens(hidden: torch.Tensor, token_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Seed section 1: first-token (`cls`) or masked-mean (`mean`) summary, (B, S, H) -> (B, H)."""
    if mode == "cls":
        return hidden[:, 0]
    weights = token_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def per_source(x: torch.Tensor, k: int) -> torch.Tensor:
    """Repeat each example's tensor once per routed source (B, ...) -> (B * k, ...); no copy at top-1."""
    return x if k == 1 else x.repeat_interleave(k, dim=0)


def inverse_softplus(value: float) -> float:
    return value + math.log(-math.expm1(-value))


@dataclass
class BridgeModelOutput(ModelOutput):
    """Output of the bridged base models: the stock fields plus the bridge's auxiliary loss (the alignment
    entropy regulariser, zero when `hdim_entropy_reg=0`)."""

    last_hidden_state: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    bridge_aux_loss: torch.FloatTensor | None = None


@dataclass
class BridgeSequenceClassifierOutput(ModelOutput):
    """Sequence classification output; `loss` is `task_loss + bridge_aux_loss`."""

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    task_loss: torch.FloatTensor | None = None
    bridge_aux_loss: torch.FloatTensor | None = None


@dataclass
class BridgeTokenClassifierOutput(BridgeSequenceClassifierOutput):
    """Token classification output (`logits` per token); `loss` is `task_loss + bridge_aux_loss`."""


class BridgeRouter(nn.Module):
    """One router shared by all targets (seed section 1): logits <W_q pool(H_j), W_k pool(H_i)> / tau over the
    earlier layers i < j, top-k, softmax over the kept logits.

    At top-1 that softmax is the constant 1, so the seed's router gets no gradient. With
    `route_estimator="straight_through"` each kept weight is multiplied by p_i / sg(p_i), where p is the softmax
    over ALL earlier layers and sg stops the gradient: the factor is exactly 1 in the forward pass (computed as
    exp(log p_i - sg(log p_i)), which stays 1 even where p_i underflows), and its gradient g * (1[m = i] - p_m)
    reaches every logit m, kept or not, with g the gradient of the loss with respect to the kept source's weight.
    A source whose message helps gains logit mass against all others; one whose message hurts loses it until
    another source wins the top-k. The weight must scale something the normalisation after it cannot divide out
    (`route_placement="post_norm"`, see `BridgeBlock`), otherwise g is zero.
    """

    def __init__(self, config):
        super().__init__()
        self.route_q = nn.Linear(config.hidden_size, config.route_dim)
        self.route_k = nn.Linear(config.hidden_size, config.route_dim)
        self.temperature = float(config.route_temp)
        self.topk = config.route_topk
        self.straight_through = config.route_estimator == "straight_through"

    def forward(self, target_summary: torch.Tensor, source_summaries: torch.Tensor):
        """(B, H), (B, j, H) -> kept source indices (B, k) and their weights (B, k)."""
        query = self.route_q(target_summary)
        keys = self.route_k(source_summaries)
        logits = torch.einsum("bd,bjd->bj", query, keys) / self.temperature
        top_logits, index = logits.topk(min(self.topk, logits.shape[-1]), dim=-1)
        weight = top_logits.softmax(dim=-1)
        if self.straight_through:
            log_probs = logits.log_softmax(dim=-1).gather(-1, index)
            weight = weight * torch.exp(log_probs - log_probs.detach())
        return index, weight


def hdim_pair_logits(
    z_tgt: torch.Tensor,
    z_src: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    last_weight: torch.Tensor,
    last_bias: torch.Tensor,
) -> torch.Tensor:
    """The 4-term scorer `Linear(4D, hidden) -> ReLU -> Linear(hidden, 1)` on phi_st = [z_s, z_t, z_s * z_t,
    |z_s - z_t|] for every pair: (N, S, D) targets, (N, T, D) sources -> (N, S, T) logits.

    phi_st is never concatenated in full: the first layer's weight is split into its per-token parts (applied once
    per token, broadcast over the pairs) and its pairwise part (applied to [z_s * z_t, |z_s - z_t|]); the last layer
    is a matrix-vector product. This eager function is the specification of `fused_hdim_pair_logits`."""
    dim = z_tgt.shape[-1]
    w_tgt, w_src, w_pair = weight.split([dim, dim, 2 * dim], dim=1)
    per_tgt = F.linear(z_tgt, w_tgt, bias)
    per_src = F.linear(z_src, w_src)
    pair = torch.cat([z_tgt.unsqueeze(2) * z_src.unsqueeze(1), (z_tgt.unsqueeze(2) - z_src.unsqueeze(1)).abs()], dim=-1)
    # in place: the pairwise activations are the largest tensors of the bridge (N x S x T x hidden)
    hidden = F.linear(pair, w_pair)
    hidden += per_tgt.unsqueeze(2)
    hidden += per_src.unsqueeze(1)
    return hidden.relu_() @ last_weight[0] + last_bias


# compiled (inductor): the pair features, the broadcast per-token terms, ReLU and the last layer become a few fused
# loops around the first layer's matrix products, forward and backward (`hdim_fused`)
fused_hdim_pair_logits = Fused(hdim_pair_logits, dynamic_dims={"z_tgt": (0, 1), "z_src": (0, 1)})


class HDIMMessage(nn.Module):
    """HDIM message (seed section 3) for one target layer, vectorised over examples and routed sources.

    Pair features phi_st = [z_s, z_t, z_s * z_t, |z_s - z_t|] are never concatenated in full: the first linear
    layer of the 4-term scorer is split into its per-token part (computed once per token) and its pairwise part
    (`hdim_pair_logits`, compiled with `hdim_fused`). Target tokens are scored `hdim_chunk_size` at a time and, with
    `hdim_recompute`, recomputed in backward, so only the B x S x T logits are kept; peak memory is bounded by the
    chunk and results equal the plain computation.
    """

    def __init__(self, config):
        super().__init__()
        hidden, dim = config.hidden_size, config.hdim_dim
        self.proj_tgt = nn.Linear(hidden, dim, bias=False)
        self.proj_src = None if config.hdim_share_proj else nn.Linear(hidden, dim, bias=False)
        self.proj_norm = nn.LayerNorm(dim, eps=config.bridge_norm_eps) if config.hdim_proj_norm else None
        self.scorer_kind = config.hdim_scorer
        if self.scorer_kind == "4term":
            self.scorer = nn.Sequential(
                nn.Linear(4 * dim, config.hdim_scorer_hidden), nn.ReLU(), nn.Linear(config.hdim_scorer_hidden, 1)
            )
        elif self.scorer_kind == "bilinear":
            self.scorer = nn.Linear(dim, dim, bias=False)
        self.token_temp = nn.Parameter(torch.empty(1)) if config.hdim_token_temp is not None else None
        self.fusion = config.hdim_value_fusion
        width = {"concat_only": 2, "concat_hadam": 3, "concat_diff_hadam": 4}[self.fusion]
        value_hidden = config.hdim_value_hidden or 2 * max(128, hidden // 2)
        self.value_mlp = nn.Sequential(
            nn.Linear(width * hidden, value_hidden),
            nn.GELU() if config.hdim_value_act == "gelu" else nn.ReLU(),
            nn.Linear(value_hidden, hidden),
        )
        self.value_residual = float(config.hdim_value_residual)
        self.chunk_size = config.hdim_chunk_size
        self.recompute = config.hdim_recompute
        self.fused = config.hdim_fused

    def project(self, hidden: torch.Tensor, source: bool) -> torch.Tensor:
        proj = self.proj_src if (source and self.proj_src is not None) else self.proj_tgt
        z = proj(hidden)
        return self.proj_norm(z) if self.proj_norm is not None else z

    def _score_4term(self, z_tgt: torch.Tensor, z_src: torch.Tensor) -> torch.Tensor:
        first, _, last = self.scorer
        if type(first) is not nn.Linear or type(last) is not nn.Linear:
            # a wrapped layer (a PEFT adapter, a quantised linear) is called on the full pair features, so whatever
            # it adds applies; splitting the first layer's weight is only valid for the plain affine maps
            pair = torch.cat(
                [
                    z_tgt.unsqueeze(2).expand(-1, -1, z_src.shape[1], -1),
                    z_src.unsqueeze(1).expand(-1, z_tgt.shape[1], -1, -1),
                    z_tgt.unsqueeze(2) * z_src.unsqueeze(1),
                    (z_tgt.unsqueeze(2) - z_src.unsqueeze(1)).abs(),
                ],
                dim=-1,
            )
            return self.scorer(pair).squeeze(-1)
        score = fused_hdim_pair_logits if self.fused else hdim_pair_logits
        return score(z_tgt, z_src, first.weight, first.bias, last.weight, last.bias)

    def alignment_logits(self, z_tgt: torch.Tensor, z_src: torch.Tensor) -> torch.Tensor:
        """(N, S, D), (N, T, D) -> (N, S, T) logits a_st."""
        if self.scorer_kind == "bilinear":
            logits = z_tgt @ self.scorer(z_src).transpose(1, 2)  # z_s^T W z_t, through the module
        elif self.scorer_kind == "cosine":
            logits = 10.0 * F.normalize(z_tgt, dim=-1) @ F.normalize(z_src, dim=-1).transpose(1, 2)
        else:
            recompute = self.recompute and torch.is_grad_enabled()
            # an exported graph (torch.export, torch.onnx.export) cannot hold a number of chunks that depends on the
            # sequence length: it scores every target token at once (the same logits, the memory of one chunk of S)
            parts = (z_tgt,) if torch.compiler.is_exporting() else z_tgt.split(self.chunk_size, dim=1)
            chunks = [
                checkpoint(self._score_4term, part, z_src, use_reentrant=False)
                if recompute
                else self._score_4term(part, z_src)
                for part in parts
            ]
            logits = chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=1)
        if self.token_temp is not None:
            logits = logits / F.softplus(self.token_temp)
        return logits

    def forward(self, z_tgt, h_tgt, h_src, allowed):
        """z_tgt (N, S, D), h_tgt (N, S, H), h_src (N, T, H), allowed (N, S, T) bool
        -> message (N, S, H) and the mean alignment entropy per example (N,)."""
        logits = self.alignment_logits(z_tgt, self.project(h_src, source=True))
        logits = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
        has_source = allowed.any(-1, keepdim=True)
        alpha = logits.softmax(dim=-1) * has_source
        # 0 log 0 = 0 in every dtype (a clamp at 1e-12 underflows to 0 in fp16 and gives NaN), with a zero gradient
        entropy = -(alpha * torch.log(torch.where(alpha > 0, alpha, torch.ones_like(alpha)))).sum(-1)
        rows = has_source.squeeze(-1).to(entropy.dtype)
        entropy = (entropy * rows).sum(-1) / rows.sum(-1).clamp(min=1.0)
        ctx = alpha @ h_src
        parts = [ctx, h_tgt]
        if self.fusion == "concat_diff_hadam":
            parts.append(ctx - h_tgt)
        if self.fusion != "concat_only":
            parts.append(ctx * h_tgt)
        message = self.value_mlp(torch.cat(parts, dim=-1))
        if self.value_residual:
            message = message + self.value_residual * (ctx - h_tgt)
        return message, entropy


class BridgeBlock(nn.Module):
    """Everything a target layer j adds (seed sections 2-4): the QKV and HDIM messages from its routed sources,
    weighted by the router, blended by the gates, normalised, projected and dropped out.

    Gate placement: in the seed (`gate_placement="pre_norm"`) the gates scale the messages before one LayerNorm,
    so the LayerNorm divides out their common scale and only the ratio alpha_attn / alpha_hdim matters (in a
    single-path mode the gate has no effect at all). `"post_norm"` normalises each message first, so each gate
    sets its message's magnitude. Either way the gates are applied once (the original applied the HDIM gate twice).

    Route-weight placement: the seed (`route_placement="pre_norm"`) mixes the routed sources' messages with the
    route weights before the normalisation, which at top-1 divides the single weight out, so the router's gradient
    is rounding noise. `"post_norm"` (default) blends and normalises each routed source's messages on their own and
    mixes the normalised blends with the route weights just before the projection, where nothing cancels them. At
    top-1 both compute the same forward value; at top-k > 1 they differ (a mix of normalised blends against the
    normalisation of a mix).
    """

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.use_qkv = config.bridge_mode in ("hybrid", "qkv")
        self.use_hdim = config.bridge_mode in ("hybrid", "hdim")
        head_dim = config.hidden_size // config.num_attention_heads
        self.value_proj = nn.Linear(head_dim, head_dim) if (self.use_qkv and config.qkv_value_proj) else None
        self.hdim = HDIMMessage(config) if self.use_hdim else None
        # gates and temperatures are (1,), not 0-d: FSDP2 shards no 0-d parameter (see register_scalar_parameters)
        self.alpha_attn = nn.Parameter(torch.empty(1)) if self.use_qkv else None
        self.alpha_hdim = nn.Parameter(torch.empty(1)) if self.use_hdim else None
        self.softplus_gates = config.gate_activation == "softplus"
        self.post_norm = config.gate_placement == "post_norm"
        self.route_pre_norm = config.route_placement == "pre_norm"
        if self.post_norm:
            self.norm_attn = nn.LayerNorm(config.hidden_size, eps=config.bridge_norm_eps) if self.use_qkv else None
            self.norm_hdim = nn.LayerNorm(config.hidden_size, eps=config.bridge_norm_eps) if self.use_hdim else None
        else:
            self.norm = nn.LayerNorm(config.hidden_size, eps=config.bridge_norm_eps)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.bridge_dropout)
        self.attn_dropout = config.bridge_attention_dropout
        self.config = config  # the QKV message attends as the model's `attn_implementation` says
        self.entropy_reg = float(config.hdim_entropy_reg)
        self.stats = StatsAccumulator()

    def init_mechanism(self, config) -> None:
        """Seed section 4 inits; with `identity_init` the projection is zero, so nothing is injected."""
        raw = inverse_softplus if self.softplus_gates else float
        if self.alpha_attn is not None:
            init.constant_(self.alpha_attn, raw(config.gate_init_attn))
        if self.alpha_hdim is not None:
            init.constant_(self.alpha_hdim, raw(config.gate_init_hdim))
        if self.hdim is not None and self.hdim.token_temp is not None:
            init.constant_(self.hdim.token_temp, inverse_softplus(config.hdim_token_temp))
        if config.identity_init:
            init.zeros_(self.proj.weight)
        else:
            init.normal_(self.proj.weight, std=1e-3)
        init.zeros_(self.proj.bias)

    def gate(self, raw: torch.Tensor) -> torch.Tensor:
        raw = raw.reshape(())  # the (1,) parameter as the scalar it is
        return F.softplus(raw) if self.softplus_gates else raw

    def _qkv_message(self, projections, hidden, sources, source_kv, key_mask):
        """Seed section 2: target queries (this layer's query projection) attend to source keys/values, no output
        projection. `source_kv` holds the routed sources' keys and values made by each source layer's own
        projections; without it this layer's key/value projections project the sources."""
        n, seq, width = sources.shape
        batch = hidden.shape[0]
        heads, head_dim = projections.heads, projections.head_dim
        query = projections.query(hidden).view(batch, seq, heads, head_dim).transpose(1, 2)
        query = per_source(query, n // batch)
        key, value = (projections.key(sources), projections.value(sources)) if source_kv is None else source_kv
        key = key.view(n, seq, heads, head_dim).transpose(1, 2)
        value = value.view(n, seq, heads, head_dim).transpose(1, 2)
        if self.value_proj is not None:
            value = self.value_proj(value)
        dropout = self.attn_dropout if self.training else 0.0
        ctx = dot_product_attention(
            query, key, value, key_mask[:, None, None, :], dropout, self.config._attn_implementation
        )
        return ctx.transpose(1, 2).reshape(n, seq, width)

    def forward(self, projections, hidden, sources, route_weight, route_index, source_kv, token_mask, allowed_pairs):
        """projections: the target layer's `BridgeProjections`; hidden (B, S, H): the target layer's input H_j as the
        bridge reads it; sources (B, k, S, H): the routed layer outputs H_i as the bridge reads them;
        route_weight / route_index (B, k). Returns the injection (B, S, H) and the auxiliary loss (0-d)."""
        batch, k = route_weight.shape
        flat_sources = sources.flatten(0, 1)
        key_mask = per_source(token_mask, k)
        weight = route_weight.reshape(batch, k, 1, 1).to(hidden.dtype)

        def mix(per_source: torch.Tensor) -> torch.Tensor:
            return (per_source.view(batch, k, *per_source.shape[1:]) * weight).sum(1)

        # route_placement="pre_norm" (the seed) mixes the routed messages before the normalisation, which divides out
        # the route weight at top-1; "post_norm" normalises each routed source's blend and mixes after, so the route
        # weight scales what is injected and the router's gradient survives
        mix_first = self.route_pre_norm
        contributions = []
        aux = hidden.new_zeros(())
        if self.use_qkv:
            ctx_qkv = self._qkv_message(projections, hidden, flat_sources, source_kv, key_mask)
            if mix_first:
                ctx_qkv = mix(ctx_qkv)
            if self.post_norm:
                ctx_qkv = self.norm_attn(ctx_qkv)
            contributions.append(("qkv", self.gate(self.alpha_attn), ctx_qkv))
        if self.use_hdim:
            z_tgt = per_source(self.hdim.project(hidden, source=False), k)
            h_tgt = per_source(hidden, k)
            allowed = per_source(allowed_pairs, k)
            msg_hdim, entropy = self.hdim(z_tgt, h_tgt, flat_sources, allowed)
            if mix_first:
                msg_hdim = mix(msg_hdim)
            if self.post_norm:
                msg_hdim = self.norm_hdim(msg_hdim)
            contributions.append(("hdim", self.gate(self.alpha_hdim), msg_hdim))
            entropy = mix(entropy.view(-1, 1, 1)).mean()
            if self.entropy_reg:
                aux = aux + self.entropy_reg * entropy
        blended = sum(gate * message for _, gate, message in contributions)
        if not self.post_norm:
            blended = self.norm(blended)
        if not mix_first:
            blended = mix(blended)
        injection = self.dropout(self.proj(blended))
        self._record(
            contributions, mix, injection, token_mask, route_index, route_weight, entropy if self.use_hdim else None
        )
        return injection, aux

    @torch.no_grad()
    def _record(self, contributions, mix, injection, token_mask, route_index, route_weight, entropy):
        """Usage statistics of the seed's instrumented runs: gates, contribution norms (of the route-weighted mix of
        each gated message), chosen sources."""
        prefix = f"bridge/L{self.layer_idx}"
        valid = token_mask.to(injection.dtype)

        def token_norm(x):
            return (x.norm(dim=-1) * valid).sum() / valid.sum().clamp(min=1.0)

        for name, gate, message in contributions:
            self.stats.add(f"{prefix}/alpha_{'attn' if name == 'qkv' else 'hdim'}", gate)
            mixed = message if message.shape[0] == injection.shape[0] else mix(message)
            self.stats.add(f"{prefix}/{name}_norm", token_norm(gate * mixed))
        self.stats.add(f"{prefix}/inject_norm", token_norm(injection))
        if entropy is not None:
            self.stats.add(f"{prefix}/hdim_entropy", entropy)
        hist = F.one_hot(route_index, self.layer_idx).to(injection.dtype).sum(1).mean(0)
        self.stats.add(f"{prefix}/source", hist)
        self.stats.add(f"{prefix}/route_weight_max", route_weight.max(-1).values.mean())


class BridgeProjections(NamedTuple):
    """A layer's attention projections as the QKV bridge calls them: modules or callables (..., H) -> (..., heads *
    head_dim). Calling them (never reading their weights) lets adapters and other wrappers act on the bridge."""

    query: Callable
    key: Callable
    value: Callable
    heads: int
    head_dim: int


NO_BRIDGE = (None,) * 7  # the bridge arguments of a layer that is not a target


class BridgeLayerMixin:
    """A stock encoder layer (same modules, same weight names) that, when it is a target, adds the bridge's injection
    where its attention sublayer ends, to the input of its FFN sublayer (seed section 4).

    The mechanism is written once against the roles a family's layer plays, all declared by its `family`
    (`families.EncoderFamily`): where the layer keeps its attention heads, which give `bridge_projections()` (the
    query, key and value projections, `BridgeProjections`); the norm its attention reads through, which gives
    `bridge_read` (the states the bridge reads from a hidden state entering this layer, the way this layer's attention
    reads it: the hidden state itself in a post-norm layer, its attention norm in a pre-norm one); and the layer cut
    where its attention sublayer ends (`families.Sublayers`): `attention_sublayer(hidden_states, *layer_inputs)`
    returns what enters the FFN sublayer (post-norm: LN(H + Attn(H)); pre-norm: the residual stream H + Attn(norm(H))),
    `ffn_sublayer(attention_output)` the rest of the stock layer. `layer_inputs` are the per-layer tensors the
    family's encoder passes (attention mask, relative positions, rotary tables).
    """

    family: EncoderFamily

    def __init__(self, config, layer_idx=None):
        if self.family.layer_takes_index:
            super().__init__(config, layer_idx=layer_idx)
        else:
            super().__init__(config)
        self.bridge = BridgeBlock(config, layer_idx) if layer_idx in config.bridge_target_layers else None

    def attention_sublayer(self, hidden_states, *layer_inputs):
        """The stock computation up to where the attention sublayer ends: what enters the FFN sublayer."""
        return self.family.sublayers.attention(self, hidden_states, *layer_inputs)

    def ffn_sublayer(self, attention_output):
        """The rest of the stock layer, up to its output."""
        return self.family.sublayers.ffn(self, attention_output)

    @property
    def bridge_reads_output(self) -> bool:
        """`bridge_read` is the identity (a post-norm layer)."""
        return self.family.attention_norm is None

    def bridge_read(self, hidden_states):
        if self.family.attention_norm is None:
            return hidden_states
        return self.get_submodule(self.family.attention_norm)(hidden_states)

    def bridge_projections(self) -> BridgeProjections:
        heads = self.family.heads
        attention = self.get_submodule(heads.attention)
        count, size = heads.count_of(attention), heads.size_of(attention)
        projections = [self.get_submodule(path) for path in heads.qkv]
        if len(projections) == 1:  # one fused projection, whose output is [query | key | value]
            fused, width = projections[0], count * size
            projections = [lambda x, i=i: fused(x)[..., i * width : (i + 1) * width] for i in range(3)]
        return BridgeProjections(*projections, count, size)

    def forward(
        self,
        hidden_states,
        sources=None,
        route_weight=None,
        route_index=None,
        source_keys=None,
        source_values=None,
        token_mask=None,
        allowed_pairs=None,
        *layer_inputs,
        part="layer",
    ):
        """The layer (`part="layer"`), or one of the two things the stack needs of it between layers, computed in a
        call of the layer so that they run inside its forward, where FSDP2 (`fully_shard`) and DeepSpeed ZeRO-3 gather
        its parameters: `part="read"` is `bridge_read(hidden_states)` (a pre-norm layer's attention norm of its
        input), `part="source_kv"` this layer's keys and values of `hidden_states` (`qkv_kv_weights="source"`)."""
        # every tensor comes as its own positional argument: reentrant checkpointing passes gradients only to those
        if part == "read":
            return self.bridge_read(hidden_states)
        if part == "source_kv":
            projections = self.bridge_projections()
            return projections.key(hidden_states), projections.value(hidden_states)
        attention_output = self.attention_sublayer(hidden_states, *layer_inputs)
        if sources is None:
            return self.ffn_sublayer(attention_output)
        injection, aux = self.bridge(
            self.bridge_projections(),
            self.bridge_read(hidden_states),
            sources,
            route_weight,
            route_index,
            None if source_keys is None else (source_keys, source_values),
            token_mask,
            allowed_pairs,
        )
        return self.ffn_sublayer(attention_output + injection), aux


class SeedClassificationHead(nn.Module):
    """The seed's head on the first token: LayerNorm -> Linear -> ReLU -> Dropout -> Linear. Its weights are named
    `fc1`/`fc2` so that a stock head (`dense`/`out_proj`) is never loaded into it by name."""

    def __init__(self, config):
        super().__init__()
        dropout = getattr(config, "classifier_dropout", None)
        dropout = dropout if dropout is not None else config.hidden_dropout_prob
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.bridge_norm_eps)
        self.fc1 = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, sequence_output):
        x = self.fc1(self.norm(sequence_output[:, 0])).relu()
        return self.fc2(self.dropout(x))


class BridgePreTrainedMixin(ZooModelMixin):
    """Init and conventions shared by every bridged model (put before the family's PreTrainedModel)."""

    mechanism_name = "Cross-layer bridges"
    mechanism_param_prefix = "bridge"  # the bridge of a target layer (`bridge`) and the router (`bridge_router`)

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, BridgeBlock):
            module.init_mechanism(self.config)

    def mechanism_summary(self) -> str:
        c = self.config
        targets = ", ".join(str(j) for j in c.bridge_target_layers)
        messages = {
            "hybrid": "QKV cross-attention and HDIM pairwise-MLP messages, blended by per-layer gates",
            "qkv": "QKV cross-attention messages, scaled by a per-layer gate",
            "hdim": "HDIM pairwise-MLP messages, scaled by a per-layer gate",
        }[c.bridge_mode]
        return (
            "Cross-layer bridges (interlayer, seed 000): for each of the target layers "
            f"{targets}, a router picks {c.route_topk} earlier source layer(s) per example; the sources send "
            f"{messages}, which are normalised, projected and added where the attention sublayer ends, before "
            "the FFN sublayer. "
            "Every stock weight keeps its stock name; the bridge's own parameters contain `bridge`."
        )


class BridgeModelMixin(BridgePreTrainedMixin):
    """The bridged base model: the family's stock modules under their stock names (`EncoderFamily.build_stack`:
    embeddings, the encoder or the layers, the family's other modules, its pooler if any) with its layers bridged
    (`layer_class`), and the routing over the layer stack, written once: one router shared by all targets
    (`bridge_router`, on the module holding the layers) picks each target's sources, and their states (and, with
    `qkv_kv_weights="source"`, their keys and values) are gathered vectorised over the batch. The stack runs as the
    family's stock base model runs it (its `embed`, `layer_inputs`, `after_layer`, `final_norm`)."""

    family: EncoderFamily
    layer_class: type[nn.Module]

    def __init__(self, config, add_pooling_layer: bool = True):
        PreTrainedModel.__init__(self, config)
        self.config = config
        self.gradient_checkpointing = False
        layers = nn.ModuleList([self.layer_class(config, layer_idx=i) for i in range(config.num_hidden_layers)])
        self.family.build_stack(self, config, layers, add_pooling_layer)
        self.get_submodule(self.family.stack_path).bridge_router = BridgeRouter(config)
        self.post_init()

    @property
    def bridge_source_kv(self) -> bool:
        """A source's keys and values come from its own layer's projections (`qkv_kv_weights="source"`)."""
        return self.config.bridge_mode != "hdim" and self.config.qkv_kv_weights == "source"

    @staticmethod
    def _gather(per_layer: list[torch.Tensor], route_index: torch.Tensor) -> torch.Tensor:
        """Each example's routed entries of a per-layer list of (B, S, H) tensors -> (B * k, S, H).
        index_select keeps only indices for backward (an index_add), not a copy of every earlier layer. The batch size
        is read as `shape[0]`, not `len()` (a Python int), so that an exported graph keeps it dynamic."""
        count = len(per_layer)
        flat_index = route_index + count * torch.arange(route_index.shape[0], device=route_index.device)[:, None]
        return torch.stack(per_layer, dim=1).flatten(0, 1).index_select(0, flat_index.flatten())

    def bridged_forward(self, hidden_states, layer_inputs, token_mask, allowed_pairs, output_hidden_states=False):
        """Run the layers; `layer_inputs[idx]` is the tuple of per-layer tensors layer idx takes (the family's
        `layer_inputs`), and what passes on from a layer the family's `after_layer` (DeBERTa's convolution after the
        first). Returns the last hidden state, the hidden states (or None) and the auxiliary loss.

        The bridge reads layer i's output H_i as layer i + 1 reads it (`layers[i + 1].bridge_read`); that is also the
        target j's input as it reads it, so the target's routing summary is the last source's."""
        layers = self.get_submodule(self.family.layer_path)
        router = self.get_submodule(self.family.stack_path).bridge_router
        pool_mode, source_kv = self.config.route_pool, self.bridge_source_kv
        states, summaries, keys, values = [], [], [], []
        all_hidden = (hidden_states,) if output_hidden_states else None
        aux_loss = hidden_states.new_zeros(())
        last = len(layers) - 1
        for idx, layer in enumerate(layers):
            if layer.bridge is None:
                output = layer(hidden_states, *NO_BRIDGE, *layer_inputs[idx])
            else:
                route_index, route_weight = router(summaries[-1], torch.stack(summaries, dim=1))
                sources = self._gather(states, route_index).view(*route_index.shape, *hidden_states.shape[1:])
                output, aux = layer(
                    hidden_states,
                    sources,
                    route_weight,
                    route_index,
                    self._gather(keys, route_index) if source_kv else None,
                    self._gather(values, route_index) if source_kv else None,
                    token_mask,
                    allowed_pairs,
                    *layer_inputs[idx],
                )
                aux_loss = aux_loss + aux
            hidden_states = self.family.after_layer(self, idx, hidden_states, output, token_mask)
            if idx < last:
                following = layers[idx + 1]
                # the reads and the keys/values are calls of the layer whose modules make them (`part`), never of
                # its modules from here: FSDP2 and ZeRO-3 hold a layer's parameters only around its own calls
                read = hidden_states if following.bridge_reads_output else following(hidden_states, part="read")
                states.append(read)
                summaries.append(pool_tokens(read, token_mask, pool_mode))
                if source_kv:
                    # seed section 2: a source's keys/values are its own layer's projections of its output. Calling
                    # the modules (once per layer, shared by all targets) lets adapters and other wrappers act; reading
                    # their weights would bypass them. Costs two projections per layer, whichever sources are picked.
                    key, value = layer(read, part="source_kv")
                    keys.append(key)
                    values.append(value)
            if output_hidden_states:
                all_hidden = all_hidden + (hidden_states,)
        return hidden_states, all_hidden, aux_loss

    def encode(self, embedding_output, attention_mask, position_ids, token_mask, allowed_pairs, output_hidden_states):
        """The layer stack; returns the last hidden state (after the family's `final_norm`), the hidden states (or
        None) and the auxiliary loss."""
        family = self.family
        inputs = family.layer_inputs(self, embedding_output, attention_mask, token_mask, position_ids)
        hidden, all_hidden, aux_loss = self.bridged_forward(
            embedding_output, inputs, token_mask, allowed_pairs, output_hidden_states
        )
        if family.final_norm is not None:
            hidden = self.get_submodule(family.final_norm)(hidden)
            if all_hidden is not None:  # the stock model's last hidden state is the normed one
                all_hidden = (*all_hidden[:-1], hidden)
        return hidden, all_hidden, aux_loss

    def _segments(self, input_ids, token_type_ids):
        """Segment id per token for cross-segment pair masks: token types, or the separator count before it."""
        mode = self.config.hdim_segments
        if mode == "auto":
            use_types = token_type_ids is not None and bool(token_type_ids.any())
            mode = "token_type_ids" if use_types else "separator"
        if mode == "token_type_ids":
            if token_type_ids is None:
                raise ValueError("`hdim_segments='token_type_ids'` needs `token_type_ids` in the inputs.")
            return token_type_ids
        if input_ids is None:
            raise ValueError("Separator segments (`hdim_segments='separator'`) need `input_ids`, not `inputs_embeds`.")
        is_sep = (input_ids == self.config.sep_token_id).long()
        return ((is_sep.cumsum(-1) - is_sep) > 0).long()

    def _allowed_pairs(self, input_ids, token_type_ids, token_mask):
        """(B, S, S) bool: which (target token, source token) pairs HDIM may align. Padding is neither a source nor
        a target: a padded target row has no source, so it adds nothing to the alignment entropy's mean."""
        allowed = token_mask[:, None, :] & token_mask[:, :, None]
        if self.config.hdim_pair_mask == "cross_segment":
            segments = self._segments(input_ids, token_type_ids)
            allowed = allowed & (segments[:, :, None] != segments[:, None, :])
        if self.config.hdim_mask_special_tokens:
            if input_ids is None:
                raise ValueError("`hdim_mask_special_tokens=True` needs `input_ids`, not `inputs_embeds`.")
            special = (input_ids == self.config.sep_token_id) | (input_ids == self.config.cls_token_id)
            allowed = allowed & ~special[:, None, :]
        return allowed

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BridgeModelOutput:
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        refuse_output_attentions(self, kwargs)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        embedding_output = self.family.embed(
            self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds
        )
        if attention_mask is None:
            token_mask = torch.ones(embedding_output.shape[:2], dtype=torch.bool, device=embedding_output.device)
        else:
            token_mask = attention_mask.bool()
        allowed_pairs = (
            self._allowed_pairs(input_ids, token_type_ids, token_mask) if self.config.bridge_mode != "qkv" else None
        )
        sequence_output, all_hidden, aux_loss = self.encode(
            embedding_output, attention_mask, position_ids, token_mask, allowed_pairs, output_hidden_states
        )
        pooler = getattr(self, "pooler", None)
        return BridgeModelOutput(
            last_hidden_state=sequence_output,
            pooler_output=pooler(sequence_output) if pooler is not None else None,
            hidden_states=select_hidden_states(all_hidden, output_hidden_states),
            bridge_aux_loss=aux_loss,
        )


def classification_loss(labels, logits, config, label_smoothing: float = 0.0):
    """The stock sequence-classification loss, with label smoothing for single-label problems."""
    if label_smoothing and config.num_labels > 1 and labels.dtype in (torch.long, torch.int):
        config.problem_type = config.problem_type or "single_label_classification"
        if config.problem_type == "single_label_classification":
            return F.cross_entropy(logits.view(-1, config.num_labels), labels.view(-1), label_smoothing=label_smoothing)
    return ForSequenceClassificationLoss(labels, logits, config)


class BridgeTaskMixin(BridgePreTrainedMixin):
    """A task head on a bridged base model; `loss` is the task loss plus the bridge's auxiliary loss.

    `label_smoothing` is an attribute (default 0.0) rather than the Trainer's `label_smoothing_factor`, because the
    Trainer's smoother recomputes the loss from the logits and would drop the bridge's auxiliary loss. A family's
    task class declares its `family` and `base_class`; the stock head is the one its family declares for the task
    (`stock_head`).
    """

    # the loss is a batch mean that ignores `num_items_in_batch`, so the Trainer must divide it by the number of
    # gradient-accumulation steps itself (it would not for a model that takes **kwargs without this flag)
    accepts_loss_kwargs = False
    family: EncoderFamily
    base_class: type[nn.Module]
    output_class: type[ModelOutput]
    head_role: str  # the `families.EncoderFamily` field of the task's stock head

    def __init__(self, config):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.config = config
        self.label_smoothing = 0.0
        setattr(self, self.base_model_prefix, self.base_class(config, add_pooling_layer=self.uses_pooler(config)))
        self.build_head(config)
        self.post_init()

    @property
    def stock_head(self) -> TaskHead:
        """The family's stock head for this task (`families.TaskHead`): its `head_role`."""
        return getattr(self.family, self.head_role)

    def uses_pooler(self, config) -> bool:
        return self.stock_head.uses_pooler

    def build_head(self, config):
        self.stock_head.build(self, config)

    def task_logits(self, outputs, attention_mask):
        return self.stock_head.logits(self, outputs, attention_mask)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ):
        outputs = getattr(self, self.base_model_prefix)(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )
        logits = self.task_logits(outputs, attention_mask)
        loss = task_loss = None
        if labels is not None:
            task_loss = self.task_loss(labels, logits)
            loss = task_loss + outputs.bridge_aux_loss
        return self.output_class(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            task_loss=task_loss,
            bridge_aux_loss=outputs.bridge_aux_loss,
        )


class BridgeForSequenceClassificationMixin(BridgeTaskMixin):
    """Sequence classification with the family's stock head (`sequence_head`), or the seed's head
    (`classifier_head="seed"`)."""

    pipeline_tag = "text-classification"
    output_class = BridgeSequenceClassifierOutput
    head_role = "sequence_head"

    def uses_pooler(self, config) -> bool:
        return super().uses_pooler(config) and config.classifier_head == "stock"

    def build_head(self, config):
        if config.classifier_head == "seed":
            self.classifier = SeedClassificationHead(config)
        else:
            super().build_head(config)

    def task_logits(self, outputs, attention_mask):
        if self.config.classifier_head == "seed":
            return self.classifier(outputs.last_hidden_state)
        return super().task_logits(outputs, attention_mask)

    def task_loss(self, labels, logits):
        """The family's own loss (`TaskHead.own_loss`: DeBERTa-v2's) while `problem_type` is unset and there are
        several labels; else the shared loss."""
        own_loss = self.family.sequence_head.own_loss
        if own_loss is not None and self.config.problem_type is None and self.num_labels > 1:
            return own_loss(labels, logits, self.num_labels, self.label_smoothing)
        return classification_loss(labels, logits, self.config, self.label_smoothing)


class BridgeForTokenClassificationMixin(BridgeTaskMixin):
    """Token classification with the family's stock head (`token_head`). The seed's head classifies the first token
    only, so `classifier_head="seed"` is refused."""

    pipeline_tag = "token-classification"
    output_class = BridgeTokenClassifierOutput
    head_role = "token_head"

    def build_head(self, config):
        if config.classifier_head != "stock":
            raise ValueError(
                f"`classifier_head={config.classifier_head!r}` is a sequence-classification head (it reads the first "
                f"token); {type(self).__name__} takes only `classifier_head='stock'`."
            )
        super().build_head(config)

    def task_loss(self, labels, logits):
        """The stock token-classification loss (cross-entropy over tokens, labels -100 ignored)."""
        return F.cross_entropy(
            logits.view(-1, self.num_labels), labels.view(-1).to(logits.device), label_smoothing=self.label_smoothing
        )


# checkpoints saved with 0-d gates exist only for the families of that time
register_scalar_parameters(
    [RobertaBridgeConfig.model_type, BertBridgeConfig.model_type], ["alpha_attn", "alpha_hdim", "token_temp"]
)

__all__ = ["BridgeModelOutput", "BridgeSequenceClassifierOutput", "BridgeTokenClassifierOutput"]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
# each class has an `__init__` of its own, so that DeepSpeed's zero.Init partitions the mixin's parameters too
class BertBridgeLayer(BridgeLayerMixin, BertLayer):
    family = BERT

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)


class BertBridgeModel(BridgeModelMixin, BertModel):
    config_class = BertBridgeConfig
    family = BERT
    layer_class = BertBridgeLayer
    _no_split_modules = ["BertEmbeddings", "BertBridgeLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config, add_pooling_layer)


class BertBridgeForSequenceClassification(BridgeForSequenceClassificationMixin, BertPreTrainedModel):
    config_class = BertBridgeConfig
    family = BERT
    base_class = BertBridgeModel
    _no_split_modules = ["BertEmbeddings", "BertBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


class BertBridgeForTokenClassification(BridgeForTokenClassificationMixin, BertPreTrainedModel):
    config_class = BertBridgeConfig
    family = BERT
    base_class = BertBridgeModel
    _no_split_modules = ["BertEmbeddings", "BertBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    BertBridgeConfig,
    AutoModel=BertBridgeModel,
    AutoModelForSequenceClassification=BertBridgeForSequenceClassification,
    AutoModelForTokenClassification=BertBridgeForTokenClassification,
)


class RobertaBridgeLayer(BridgeLayerMixin, RobertaLayer):
    family = ROBERTA

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)


class RobertaBridgeModel(BridgeModelMixin, RobertaModel):
    config_class = RobertaBridgeConfig
    family = ROBERTA
    layer_class = RobertaBridgeLayer
    _no_split_modules = ["RobertaEmbeddings", "RobertaBridgeLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config, add_pooling_layer)


class RobertaBridgeForSequenceClassification(BridgeForSequenceClassificationMixin, RobertaPreTrainedModel):
    config_class = RobertaBridgeConfig
    family = ROBERTA
    base_class = RobertaBridgeModel
    _no_split_modules = ["RobertaEmbeddings", "RobertaBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


class RobertaBridgeForTokenClassification(BridgeForTokenClassificationMixin, RobertaPreTrainedModel):
    config_class = RobertaBridgeConfig
    family = ROBERTA
    base_class = RobertaBridgeModel
    _no_split_modules = ["RobertaEmbeddings", "RobertaBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    RobertaBridgeConfig,
    AutoModel=RobertaBridgeModel,
    AutoModelForSequenceClassification=RobertaBridgeForSequenceClassification,
    AutoModelForTokenClassification=RobertaBridgeForTokenClassification,
)


class XLMRobertaBridgeLayer(BridgeLayerMixin, XLMRobertaLayer):
    family = XLM_ROBERTA

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)


class XLMRobertaBridgeModel(BridgeModelMixin, XLMRobertaModel):
    config_class = XLMRobertaBridgeConfig
    family = XLM_ROBERTA
    layer_class = XLMRobertaBridgeLayer
    _no_split_modules = ["XLMRobertaEmbeddings", "XLMRobertaBridgeLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config, add_pooling_layer)


class XLMRobertaBridgeForSequenceClassification(BridgeForSequenceClassificationMixin, XLMRobertaPreTrainedModel):
    config_class = XLMRobertaBridgeConfig
    family = XLM_ROBERTA
    base_class = XLMRobertaBridgeModel
    _no_split_modules = ["XLMRobertaEmbeddings", "XLMRobertaBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


class XLMRobertaBridgeForTokenClassification(BridgeForTokenClassificationMixin, XLMRobertaPreTrainedModel):
    config_class = XLMRobertaBridgeConfig
    family = XLM_ROBERTA
    base_class = XLMRobertaBridgeModel
    _no_split_modules = ["XLMRobertaEmbeddings", "XLMRobertaBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    XLMRobertaBridgeConfig,
    AutoModel=XLMRobertaBridgeModel,
    AutoModelForSequenceClassification=XLMRobertaBridgeForSequenceClassification,
    AutoModelForTokenClassification=XLMRobertaBridgeForTokenClassification,
)


class ElectraBridgeLayer(BridgeLayerMixin, ElectraLayer):
    family = ELECTRA

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)


class ElectraBridgeModel(BridgeModelMixin, ElectraModel):
    config_class = ElectraBridgeConfig
    family = ELECTRA
    layer_class = ElectraBridgeLayer
    _no_split_modules = ["ElectraEmbeddings", "ElectraBridgeLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config, add_pooling_layer)


class ElectraBridgeForSequenceClassification(BridgeForSequenceClassificationMixin, ElectraPreTrainedModel):
    config_class = ElectraBridgeConfig
    family = ELECTRA
    base_class = ElectraBridgeModel
    _no_split_modules = ["ElectraEmbeddings", "ElectraBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


class ElectraBridgeForTokenClassification(BridgeForTokenClassificationMixin, ElectraPreTrainedModel):
    config_class = ElectraBridgeConfig
    family = ELECTRA
    base_class = ElectraBridgeModel
    _no_split_modules = ["ElectraEmbeddings", "ElectraBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    ElectraBridgeConfig,
    AutoModel=ElectraBridgeModel,
    AutoModelForSequenceClassification=ElectraBridgeForSequenceClassification,
    AutoModelForTokenClassification=ElectraBridgeForTokenClassification,
)


class DebertaV2BridgeLayer(BridgeLayerMixin, DebertaV2Layer):
    family = DEBERTA_V2

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)


class DebertaV2BridgeModel(BridgeModelMixin, DebertaV2Model):
    config_class = DebertaV2BridgeConfig
    family = DEBERTA_V2
    layer_class = DebertaV2BridgeLayer
    _no_split_modules = ["DebertaV2Embeddings", "DebertaV2BridgeLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config, add_pooling_layer)


class DebertaV2BridgeForSequenceClassification(BridgeForSequenceClassificationMixin, DebertaV2PreTrainedModel):
    config_class = DebertaV2BridgeConfig
    family = DEBERTA_V2
    base_class = DebertaV2BridgeModel
    _no_split_modules = ["DebertaV2Embeddings", "DebertaV2BridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


class DebertaV2BridgeForTokenClassification(BridgeForTokenClassificationMixin, DebertaV2PreTrainedModel):
    config_class = DebertaV2BridgeConfig
    family = DEBERTA_V2
    base_class = DebertaV2BridgeModel
    _no_split_modules = ["DebertaV2Embeddings", "DebertaV2BridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    DebertaV2BridgeConfig,
    AutoModel=DebertaV2BridgeModel,
    AutoModelForSequenceClassification=DebertaV2BridgeForSequenceClassification,
    AutoModelForTokenClassification=DebertaV2BridgeForTokenClassification,
)


class ModernBertBridgeLayer(BridgeLayerMixin, ModernBertEncoderLayer):
    family = MODERNBERT

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)


class ModernBertBridgeModel(BridgeModelMixin, ModernBertModel):
    config_class = ModernBertBridgeConfig
    family = MODERNBERT
    layer_class = ModernBertBridgeLayer
    _no_split_modules = ["ModernBertEmbeddings", "ModernBertBridgeLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config, add_pooling_layer)


class ModernBertBridgeForSequenceClassification(BridgeForSequenceClassificationMixin, ModernBertPreTrainedModel):
    config_class = ModernBertBridgeConfig
    family = MODERNBERT
    base_class = ModernBertBridgeModel
    _no_split_modules = ["ModernBertEmbeddings", "ModernBertBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


class ModernBertBridgeForTokenClassification(BridgeForTokenClassificationMixin, ModernBertPreTrainedModel):
    config_class = ModernBertBridgeConfig
    family = MODERNBERT
    base_class = ModernBertBridgeModel
    _no_split_modules = ["ModernBertEmbeddings", "ModernBertBridgeLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    ModernBertBridgeConfig,
    AutoModel=ModernBertBridgeModel,
    AutoModelForSequenceClassification=ModernBertBridgeForSequenceClassification,
    AutoModelForTokenClassification=ModernBertBridgeForTokenClassification,
)


# stock model_type -> (config, base model, SequenceClassification class, TokenClassification class)
FAMILIES = {
    "bert": (BertBridgeConfig, BertBridgeModel, BertBridgeForSequenceClassification, BertBridgeForTokenClassification),
    "roberta": (
        RobertaBridgeConfig,
        RobertaBridgeModel,
        RobertaBridgeForSequenceClassification,
        RobertaBridgeForTokenClassification,
    ),
    "xlm-roberta": (
        XLMRobertaBridgeConfig,
        XLMRobertaBridgeModel,
        XLMRobertaBridgeForSequenceClassification,
        XLMRobertaBridgeForTokenClassification,
    ),
    "electra": (
        ElectraBridgeConfig,
        ElectraBridgeModel,
        ElectraBridgeForSequenceClassification,
        ElectraBridgeForTokenClassification,
    ),
    "deberta-v2": (
        DebertaV2BridgeConfig,
        DebertaV2BridgeModel,
        DebertaV2BridgeForSequenceClassification,
        DebertaV2BridgeForTokenClassification,
    ),
    "modernbert": (
        ModernBertBridgeConfig,
        ModernBertBridgeModel,
        ModernBertBridgeForSequenceClassification,
        ModernBertBridgeForTokenClassification,
    ),
}

__all__ += [
    "FAMILIES",
    "BertBridgeForSequenceClassification",
    "BertBridgeForTokenClassification",
    "BertBridgeModel",
    "DebertaV2BridgeForSequenceClassification",
    "DebertaV2BridgeForTokenClassification",
    "DebertaV2BridgeModel",
    "ElectraBridgeForSequenceClassification",
    "ElectraBridgeForTokenClassification",
    "ElectraBridgeModel",
    "ModernBertBridgeForSequenceClassification",
    "ModernBertBridgeForTokenClassification",
    "ModernBertBridgeModel",
    "RobertaBridgeForSequenceClassification",
    "RobertaBridgeForTokenClassification",
    "RobertaBridgeModel",
    "XLMRobertaBridgeForSequenceClassification",
    "XLMRobertaBridgeForTokenClassification",
    "XLMRobertaBridgeModel",
]
# --- end generated classes ---
