"""Cross-layer bridges (seed 000) on stock RoBERTa and BERT encoders.

Late target layers j (the last `route_last_n`) receive messages from earlier layers i < j chosen by a router:
a QKV cross-attention message (target queries, source keys/values) and an HDIM pairwise-MLP message. Per-layer
gates blend them; a LayerNorm, a projection and dropout follow, and the result is added to the attention output
before the FFN (seed section 4). Every stock weight keeps its stock name (`encoder.layer.N.attention...`); the
mechanism's own parameters all contain `bridge` in their names (`encoder.bridge_router.*`,
`encoder.layer.N.bridge.*`).

Reading order: helpers, router, HDIM message, the per-target bridge block, the bridged layer and encoder,
the pre-trained base class, then the base models and the sequence-classification heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.loss.loss_utils import ForSequenceClassificationLoss
from transformers.modeling_outputs import ModelOutput
from transformers.models.bert.modeling_bert import (
    BertEmbeddings,
    BertLayer,
    BertModel,
    BertPooler,
    BertPreTrainedModel,
)
from transformers.models.roberta.modeling_roberta import (
    RobertaClassificationHead,
    RobertaEmbeddings,
    RobertaLayer,
    RobertaModel,
    RobertaPooler,
    RobertaPreTrainedModel,
)
from transformers.pytorch_utils import apply_chunking_to_forward
from transformers.utils.generic import can_return_tuple

from .configuration_bridge import BertBridgeConfig, RobertaBridgeConfig
from .zoo_common import StatsAccumulator, ZooModelMixin, register_scalar_parameters


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


class HDIMMessage(nn.Module):
    """HDIM message (seed section 3) for one target layer, vectorised over examples and routed sources.

    Pair features phi_st = [z_s, z_t, z_s * z_t, |z_s - z_t|] are never concatenated in full: the first linear
    layer of the 4-term scorer is split into its per-token part (computed once per token) and its pairwise part.
    Target tokens are scored `hdim_chunk_size` at a time and, with `hdim_recompute`, recomputed in backward, so
    only the B x S x T logits are kept; peak memory is bounded by the chunk and results equal the plain computation.
    """

    def __init__(self, config):
        super().__init__()
        hidden, dim = config.hidden_size, config.hdim_dim
        self.proj_tgt = nn.Linear(hidden, dim, bias=False)
        self.proj_src = None if config.hdim_share_proj else nn.Linear(hidden, dim, bias=False)
        self.proj_norm = nn.LayerNorm(dim, eps=config.layer_norm_eps) if config.hdim_proj_norm else None
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

    def project(self, hidden: torch.Tensor, source: bool) -> torch.Tensor:
        proj = self.proj_src if (source and self.proj_src is not None) else self.proj_tgt
        z = proj(hidden)
        return self.proj_norm(z) if self.proj_norm is not None else z

    def _score_4term(self, z_tgt: torch.Tensor, z_src: torch.Tensor) -> torch.Tensor:
        first, _, last = self.scorer
        if type(first) is not nn.Linear:
            # a wrapped first layer (a PEFT adapter, a quantised linear) is called on the full pair features, so
            # whatever it adds applies; the split below is only valid for the plain affine map
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
        w_tgt, w_src, w_prod, w_diff = first.weight.split(z_tgt.shape[-1], dim=1)
        per_tgt = F.linear(z_tgt, w_tgt, first.bias)
        per_src = F.linear(z_src, w_src)
        pair = torch.cat(
            [z_tgt.unsqueeze(2) * z_src.unsqueeze(1), (z_tgt.unsqueeze(2) - z_src.unsqueeze(1)).abs()], dim=-1
        )
        # in place: the pairwise activations are the largest tensors of the bridge (B x S x T x hidden)
        hidden = F.linear(pair, torch.cat([w_prod, w_diff], dim=1))
        hidden += per_tgt.unsqueeze(2)
        hidden += per_src.unsqueeze(1)
        return last(hidden.relu_()).squeeze(-1)

    def alignment_logits(self, z_tgt: torch.Tensor, z_src: torch.Tensor) -> torch.Tensor:
        """(N, S, D), (N, T, D) -> (N, S, T) logits a_st."""
        if self.scorer_kind == "bilinear":
            logits = z_tgt @ self.scorer(z_src).transpose(1, 2)  # z_s^T W z_t, through the module
        elif self.scorer_kind == "cosine":
            logits = 10.0 * F.normalize(z_tgt, dim=-1) @ F.normalize(z_src, dim=-1).transpose(1, 2)
        else:
            recompute = self.recompute and torch.is_grad_enabled()
            chunks = [
                checkpoint(self._score_4term, part, z_src, use_reentrant=False)
                if recompute
                else self._score_4term(part, z_src)
                for part in z_tgt.split(self.chunk_size, dim=1)
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
            self.norm_attn = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if self.use_qkv else None
            self.norm_hdim = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if self.use_hdim else None
        else:
            self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.bridge_dropout)
        self.attn_dropout = config.attention_probs_dropout_prob
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

    def _qkv_message(self, attention, hidden, sources, source_kv, key_mask):
        """Seed section 2: target queries (this layer's `query`) attend to source keys/values, no output proj.
        `source_kv` holds the routed sources' keys and values made by each source layer's own modules; without
        it this layer's `key`/`value` modules project the sources."""
        n, seq, width = sources.shape
        batch = hidden.shape[0]
        heads, head_dim = attention.num_attention_heads, attention.attention_head_size
        query = attention.query(hidden).view(batch, seq, heads, head_dim).transpose(1, 2)
        query = per_source(query, n // batch)
        key, value = (attention.key(sources), attention.value(sources)) if source_kv is None else source_kv
        key = key.view(n, seq, heads, head_dim).transpose(1, 2)
        value = value.view(n, seq, heads, head_dim).transpose(1, 2)
        if self.value_proj is not None:
            value = self.value_proj(value)
        ctx = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=key_mask[:, None, None, :],
            dropout_p=self.attn_dropout if self.training else 0.0,
        )
        return ctx.transpose(1, 2).reshape(n, seq, width)

    def forward(self, attention, hidden, sources, route_weight, route_index, source_kv, token_mask, allowed_pairs):
        """hidden (B, S, H): the target layer's input H_j; sources (B, k, S, H): the routed layer outputs H_i;
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
            ctx_qkv = self._qkv_message(attention, hidden, flat_sources, source_kv, key_mask)
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


class BridgeLayerMixin:
    """A stock encoder layer (same modules, same weight names) that, when it is a target, adds the bridge's
    injection to its attention output before the FFN (seed section 4)."""

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx=layer_idx)
        self.bridge = BridgeBlock(config, layer_idx) if layer_idx in config.bridge_target_layers else None

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        sources=None,
        route_weight=None,
        route_index=None,
        source_keys=None,
        source_values=None,
        token_mask=None,
        allowed_pairs=None,
    ):
        # every tensor comes as its own positional argument: reentrant checkpointing passes gradients only to those
        source_kv = None if source_keys is None else (source_keys, source_values)
        attention_output, _ = self.attention(hidden_states, attention_mask)
        aux = None
        if sources is not None:
            injection, aux = self.bridge(
                self.attention.self,
                hidden_states,
                sources,
                route_weight,
                route_index,
                source_kv,
                token_mask,
                allowed_pairs,
            )
            attention_output = attention_output + injection
        layer_output = apply_chunking_to_forward(
            self.feed_forward_chunk, self.chunk_size_feed_forward, self.seq_len_dim, attention_output
        )
        return layer_output if aux is None else (layer_output, aux)


class RobertaBridgeLayer(BridgeLayerMixin, RobertaLayer):
    pass


class BertBridgeLayer(BridgeLayerMixin, BertLayer):
    pass


class BridgeEncoder(nn.Module):
    """The stock layer stack (`layer.N`) plus the shared router; runs the routing and gathers each target's
    sources (and, with `qkv_kv_weights="source"`, their keys and values) vectorised over the batch."""

    def __init__(self, config, layer_class):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([layer_class(config, layer_idx=i) for i in range(config.num_hidden_layers)])
        self.bridge_router = BridgeRouter(config)
        self.pool_mode = config.route_pool
        self.source_kv = config.bridge_mode != "hdim" and config.qkv_kv_weights == "source"
        self.gradient_checkpointing = False

    @staticmethod
    def _gather(per_layer: list[torch.Tensor], route_index: torch.Tensor) -> torch.Tensor:
        """Each example's routed entries of a per-layer list of (B, S, H) tensors -> (B * k, S, H).
        index_select keeps only indices for backward (an index_add), not a copy of every earlier layer."""
        count = len(per_layer)
        flat_index = route_index + count * torch.arange(len(route_index), device=route_index.device)[:, None]
        return torch.stack(per_layer, dim=1).flatten(0, 1).index_select(0, flat_index.flatten())

    def forward(self, hidden_states, attention_mask, token_mask, allowed_pairs, output_hidden_states=False):
        outputs, summaries, keys, values = [], [], [], []
        all_hidden = (hidden_states,) if output_hidden_states else None
        aux_loss = hidden_states.new_zeros(())
        last = len(self.layer) - 1
        for idx, layer in enumerate(self.layer):
            if layer.bridge is None:
                hidden_states = layer(hidden_states, attention_mask)
            else:
                target = pool_tokens(hidden_states, token_mask, self.pool_mode)
                route_index, route_weight = self.bridge_router(target, torch.stack(summaries, dim=1))
                sources = self._gather(outputs, route_index).view(*route_index.shape, *hidden_states.shape[1:])
                source_keys = self._gather(keys, route_index) if self.source_kv else None
                source_values = self._gather(values, route_index) if self.source_kv else None
                hidden_states, aux = layer(
                    hidden_states,
                    attention_mask,
                    sources,
                    route_weight,
                    route_index,
                    source_keys,
                    source_values,
                    token_mask,
                    allowed_pairs,
                )
                aux_loss = aux_loss + aux
            outputs.append(hidden_states)
            if self.source_kv and idx < last:
                # seed section 2: a source's keys/values are its own layer's projections of its output. Calling the
                # modules (once per layer, shared by all targets) lets adapters and other wrappers act; reading their
                # weights would bypass them. Costs two projections per layer, whichever sources the router picks.
                attention = layer.attention.self
                keys.append(attention.key(hidden_states))
                values.append(attention.value(hidden_states))
            summaries.append(pool_tokens(hidden_states, token_mask, self.pool_mode))
            if output_hidden_states:
                all_hidden = all_hidden + (hidden_states,)
        return hidden_states, all_hidden, aux_loss


class SeedClassificationHead(nn.Module):
    """The seed's head on the first token: LayerNorm -> Linear -> ReLU -> Dropout -> Linear. Its weights are named
    `fc1`/`fc2` so that a stock head (`dense`/`out_proj`) is never loaded into it by name."""

    def __init__(self, config):
        super().__init__()
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, sequence_output):
        x = self.fc1(self.norm(sequence_output[:, 0])).relu()
        return self.fc2(self.dropout(x))


class BridgePreTrainedMixin(ZooModelMixin):
    """Init and conventions shared by every bridged model (put before the family's PreTrainedModel)."""

    mechanism_name = "Cross-layer bridges"
    mechanism_param_markers = ("bridge",)

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
            f"{messages}, which are normalised, projected and added to the attention output before the FFN. "
            "Every stock weight keeps its stock name; the bridge's own parameters contain `bridge`."
        )


class BridgeModelMixin(BridgePreTrainedMixin):
    """The bridged base model: stock embeddings, bridged encoder, stock pooler. Families set the three classes."""

    embeddings_class: type[nn.Module]
    layer_class: type[nn.Module]
    pooler_class: type[nn.Module]

    def __init__(self, config, add_pooling_layer: bool = True):
        PreTrainedModel.__init__(self, config)
        self.config = config
        self.gradient_checkpointing = False
        self.embeddings = self.embeddings_class(config)
        self.encoder = BridgeEncoder(config, self.layer_class)
        self.pooler = self.pooler_class(config) if add_pooling_layer else None
        self.post_init()

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

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BridgeModelOutput:
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if kwargs.get("output_attentions") or self.config.output_attentions:
            raise ValueError(
                "`output_attentions=True` is not supported by bridged models; read the bridge's usage with "
                "`model.mechanism_stats()` instead."
            )
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        embedding_output = self.embeddings(
            input_ids=input_ids, position_ids=position_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds
        )
        if attention_mask is None:
            token_mask = torch.ones(embedding_output.shape[:2], dtype=torch.bool, device=embedding_output.device)
        else:
            token_mask = attention_mask.bool()
        extended_mask, _ = self._create_attention_masks(
            attention_mask=attention_mask,
            encoder_attention_mask=None,
            embedding_output=embedding_output,
            encoder_hidden_states=None,
            past_key_values=None,
        )
        allowed_pairs = (
            self._allowed_pairs(input_ids, token_type_ids, token_mask) if self.config.bridge_mode != "qkv" else None
        )
        sequence_output, all_hidden, aux_loss = self.encoder(
            embedding_output, extended_mask, token_mask, allowed_pairs, output_hidden_states=output_hidden_states
        )
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        output = BridgeModelOutput(
            last_hidden_state=sequence_output,
            pooler_output=pooled_output,
            hidden_states=all_hidden,
            bridge_aux_loss=aux_loss,
        )
        return output if return_dict is not False else output.to_tuple()


def classification_loss(labels, logits, config, label_smoothing: float = 0.0):
    """The stock sequence-classification loss, with label smoothing for single-label problems."""
    if label_smoothing and config.num_labels > 1 and labels.dtype in (torch.long, torch.int):
        config.problem_type = config.problem_type or "single_label_classification"
        if config.problem_type == "single_label_classification":
            return F.cross_entropy(logits.view(-1, config.num_labels), labels.view(-1), label_smoothing=label_smoothing)
    return ForSequenceClassificationLoss(labels, logits, config)


class BridgeForSequenceClassificationMixin(BridgePreTrainedMixin):
    """Sequence classification on a bridged encoder, with the family's stock head or the seed's head.

    `label_smoothing` is an attribute (default 0.0) rather than the Trainer's `label_smoothing_factor`, because the
    Trainer's smoother recomputes the loss from the logits and would drop the bridge's auxiliary loss.
    """

    pipeline_tag = "text-classification"
    # the loss is a batch mean that ignores `num_items_in_batch`, so the Trainer must divide it by the number of
    # gradient-accumulation steps itself (it would not for a model that takes **kwargs without this flag)
    accepts_loss_kwargs = False
    base_class: type[nn.Module]
    stock_uses_pooler: bool

    def __init__(self, config):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.config = config
        self.label_smoothing = 0.0
        add_pooler = self.stock_uses_pooler and config.classifier_head == "stock"
        setattr(self, self.base_model_prefix, self.base_class(config, add_pooling_layer=add_pooler))
        if config.classifier_head == "seed":
            self.classifier = SeedClassificationHead(config)
        else:
            self.build_stock_head(config)
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
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BridgeSequenceClassifierOutput:
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
        if self.config.classifier_head == "seed":
            logits = self.classifier(outputs.last_hidden_state)
        else:
            logits = self.stock_logits(outputs)
        loss = task_loss = None
        if labels is not None:
            task_loss = classification_loss(labels, logits, self.config, self.label_smoothing)
            loss = task_loss + outputs.bridge_aux_loss
        return BridgeSequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            task_loss=task_loss,
            bridge_aux_loss=outputs.bridge_aux_loss,
        )


class RobertaBridgeModel(BridgeModelMixin, RobertaModel):
    config_class = RobertaBridgeConfig
    embeddings_class = RobertaEmbeddings
    layer_class = RobertaBridgeLayer
    pooler_class = RobertaPooler
    _no_split_modules = ["RobertaEmbeddings", "RobertaBridgeLayer"]


class BertBridgeModel(BridgeModelMixin, BertModel):
    config_class = BertBridgeConfig
    embeddings_class = BertEmbeddings
    layer_class = BertBridgeLayer
    pooler_class = BertPooler
    _no_split_modules = ["BertEmbeddings", "BertBridgeLayer"]


class RobertaBridgeForSequenceClassification(BridgeForSequenceClassificationMixin, RobertaPreTrainedModel):
    config_class = RobertaBridgeConfig
    base_class = RobertaBridgeModel
    stock_uses_pooler = False

    def build_stock_head(self, config):
        self.classifier = RobertaClassificationHead(config)

    def stock_logits(self, outputs):
        return self.classifier(outputs.last_hidden_state)


class BertBridgeForSequenceClassification(BridgeForSequenceClassificationMixin, BertPreTrainedModel):
    config_class = BertBridgeConfig
    base_class = BertBridgeModel
    stock_uses_pooler = True

    def build_stock_head(self, config):
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def stock_logits(self, outputs):
        return self.classifier(self.dropout(outputs.pooler_output))


RobertaBridgeConfig.register_for_auto_class()
BertBridgeConfig.register_for_auto_class()
RobertaBridgeModel.register_for_auto_class("AutoModel")
BertBridgeModel.register_for_auto_class("AutoModel")
RobertaBridgeForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
BertBridgeForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
register_scalar_parameters(
    [RobertaBridgeConfig.model_type, BertBridgeConfig.model_type], ["alpha_attn", "alpha_hdim", "token_temp"]
)

__all__ = [
    "RobertaBridgeModel",
    "RobertaBridgeForSequenceClassification",
    "BertBridgeModel",
    "BertBridgeForSequenceClassification",
    "BridgeModelOutput",
    "BridgeSequenceClassifierOutput",
]
