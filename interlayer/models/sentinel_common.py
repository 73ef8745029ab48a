"""Sentinel gates (seed 001), what every family shares: the weight surgery of structural head pruning, the gates
(`SentinelGates`: a learnable gate per attention head, which an attention forward calls where the stock one calls the
attention function), the U-Net skip fusions, and the pre-trained mixin (init, statistics, pruning, stock export). The
decoders' classes are in modeling_sentinel.py, the encoders' in modeling_sentinel_encoders.py, so that a saved
checkpoint's remote code imports the stock families of its own kind only.

The mechanism is written once against where a family's layer keeps its attention heads (`families.Heads`, declared
with the family: which module carries the gates, which projections hold the heads' weights and how).
"""

from __future__ import annotations

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import copy
import math
from typing import Any

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.pytorch_utils import Conv1D

from .families import Heads
from .zoo_common import (
    ZooModelMixin,
)


def _head_features(heads: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The feature indices of the given head positions in a projection grouped by head."""
    return (heads[:, None] * head_dim + torch.arange(head_dim, device=heads.device)).flatten()


def _scaled_head_features(weight: torch.Tensor, gates: torch.Tensor, head_dim: int, dim: int) -> torch.Tensor:
    """`weight` with each head's `head_dim` features along `dim` multiplied by that head's gate, computed in float32
    and stored in the weight's dtype."""
    shape = [1] * weight.dim()
    shape[dim] = -1
    scale = gates.repeat_interleave(head_dim).to(weight.device).view(shape)
    return (weight.float() * scale).to(weight.dtype)


def _feature_dims(module: nn.Module) -> tuple[int, int]:
    """(output-feature dim, input-feature dim) of a projection's weight: `nn.Linear` (out, in), `Conv1D` (in, out)."""
    if isinstance(module, Conv1D):
        return 1, 0
    if isinstance(module, nn.Linear):
        return 0, 1
    raise TypeError(f"sentinel pruning handles nn.Linear and Conv1D projections, got {type(module).__name__}")


@torch.no_grad()
def select_features(module: nn.Module, index: torch.Tensor, side: str) -> nn.Module:
    """A copy of a projection keeping only the output (`side="out"`) or input (`side="in"`) features `index`: the
    same class, dtype and device, the kept weights copied (the bias follows the output features)."""
    out_dim, in_dim = _feature_dims(module)
    dim = out_dim if side == "out" else in_dim
    new = copy.copy(module)
    new._parameters = dict(module._parameters)
    new.weight = nn.Parameter(module.weight.index_select(dim, index).clone(), module.weight.requires_grad)
    if side == "out" and module.bias is not None:
        new.bias = nn.Parameter(module.bias.index_select(0, index).clone(), module.bias.requires_grad)
    size = len(index)
    if isinstance(module, Conv1D):
        new.nf = size if side == "out" else module.nf
        new.nx = size if side == "in" else module.nx
    else:
        new.out_features = size if side == "out" else module.out_features
        new.in_features = size if side == "in" else module.in_features
    return new


def _replace(root: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, name, module)


def log_sigmoid(x: float) -> float:
    """log(sigmoid(x)) without overflow or underflow for any finite x."""
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


class SentinelGates:
    """The gates of one attention module (mixed into a family's attention class, before the stock class).

    `sentinel_gate_logits` holds one logit per remaining query head; `sentinel_head_mask` (0/1, saved with the
    model) switches heads off without removing them (the controller's "masked" state). `head_ids` are the original
    indices of the remaining query heads, `kv_head_ids` those of the remaining key/value heads. While every
    remaining group of query heads has the same size the stock grouped attention runs; once pruning leaves groups of
    different sizes, each query head gets its own copy of its group's key and value (`kv_for_head`), after the
    cache, so the cache keeps only the remaining key/value heads.
    """

    def setup_sentinel(self, config, layer_idx: int) -> None:
        heads, kv_heads = config.heads_in_layer(layer_idx), config.kv_heads_in_layer(layer_idx)
        self.sentinel_group = config.num_attention_heads // config.num_kv_heads
        self.register_buffer("head_ids", torch.tensor(heads, dtype=torch.long), persistent=False)
        self.register_buffer("kv_head_ids", torch.tensor(kv_heads, dtype=torch.long), persistent=False)
        # the buffers are derived from the config at construction, so that a model built without weight initialisation
        # (`no_init_weights`, as `from_pretrained` builds one under DeepSpeed ZeRO-3) has them right; `_init_weights`
        # fills them again for a model built on the meta device
        self.register_buffer("kv_for_head", self.kv_positions(), persistent=False)
        self.sentinel_gate_logits = nn.Parameter(torch.empty(len(heads)))
        self.register_buffer("sentinel_head_mask", torch.ones(len(heads)))
        # log sigmoid(sentinel_gate_init), which identity_init divides out; kept in log space, where it is finite for
        # every init (sigmoid(-104) is 0 in float32, and a gate of 0/0 is NaN)
        self.gate_log_scale = log_sigmoid(float(config.sentinel_gate_init)) if config.identity_init else 0.0
        self.measure_entropy = False
        # the gates this module applied in its last forward, for the loss's L1 term (`_forward_gate_l1`)
        self.forward_gates: torch.Tensor | None = None
        self.last_entropy: torch.Tensor | None = None
        self.last_entropy_tokens: torch.Tensor | None = None
        self._set_head_counts(heads, kv_heads)

    def _set_head_counts(self, heads: list[int], kv_heads: list[int]) -> None:
        """Head counts and the grouping after construction or pruning (`kv_for_head` is set beside them)."""
        self.num_heads, self.num_kv_heads = len(heads), len(kv_heads)
        sizes = [sum(h // self.sentinel_group == kv for h in heads) for kv in kv_heads]
        self.uniform_groups = len(set(sizes)) <= 1
        self.num_key_value_groups = sizes[0] if self.uniform_groups and sizes else 1

    def kv_positions(self) -> torch.Tensor:
        """For each remaining query head, the position of its key/value head among the remaining ones."""
        return torch.searchsorted(self.kv_head_ids, self.head_ids // self.sentinel_group)

    def learned_gates(self) -> torch.Tensor:
        """sigmoid(logit_h) (divided by its initial value under identity_init): the gate without the head mask.
        Computed as exp(log sigmoid(logit_h) - log sigmoid(init)) in float32, so that a gate at its initial logit is
        1 for any init and in any dtype of the weights (in fp16, sigmoid(-20) is already 0)."""
        logits = self.sentinel_gate_logits
        return torch.exp(nn.functional.logsigmoid(logits.float()) - self.gate_log_scale).to(logits.dtype)

    def gates(self) -> torch.Tensor:
        """g_h = the learned gate times the head mask (0 for a masked head)."""
        return self.learned_gates() * self.sentinel_head_mask

    def no_heads(self, out_projection: nn.Module, hidden_states: torch.Tensor, past_key_values) -> torch.Tensor:
        """The attention output of a layer whose every head is pruned: the output projection of nothing, its bias
        (or zeros), as a tensor of its own (not a view of the bias: under no_grad such a view would be a leaf that
        requires grad without a grad function, and in-place updates downstream would write into the bias); the
        cache still advances, with no heads."""
        batch, seq = hidden_states.shape[:2]
        if past_key_values is not None:
            empty = hidden_states.new_zeros(batch, 0, seq, self.head_dim)
            past_key_values.update(empty, empty, self.layer_idx)
        if out_projection.bias is None:
            return torch.zeros_like(hidden_states)
        return torch.zeros_like(hidden_states) + out_projection.bias

    def attend(self, query, key, value, attention_mask, eager_fallback, **kwargs):
        """The stock attention function on (batch, heads, seq, head_dim) states, then the gates: returns the heads'
        outputs `(batch, seq, heads, head_dim)` scaled by their gates, and the attention weights."""
        if not self.uniform_groups:
            key, value = key.index_select(1, self.kv_for_head), value.index_select(1, self.kv_for_head)
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_fallback)
        attn_output, attn_weights = attention_interface(self, query, key, value, attention_mask, **kwargs)
        # a serving engine's attention function returns (tokens, heads * head_dim): the gates need the heads apart
        attn_output = attn_output.reshape(query.shape[0], query.shape[2], query.shape[1], -1)
        if self.measure_entropy:
            self.last_entropy = self._entropy(query, key, attention_mask, kwargs.get("scaling", self.scaling))
        # seed section 2.1: head h's output scaled by its gate before the output projection
        self.forward_gates = gates = self.gates()
        return attn_output * gates.view(1, 1, -1, 1).to(attn_output.dtype), attn_weights

    @torch.no_grad()
    def _entropy(self, query, key, attention_mask, scaling) -> torch.Tensor:
        """Mean attention entropy per query head (nats) over the real query tokens, for the controller; computed
        only when asked for. Masked key positions get no probability; query positions that are padding are left out
        of the mean. A query is padding when the mask hides its own key position (causal attention always allows it
        for a real token), which holds for right and left padding and with a cache. The number of real queries is
        kept in `last_entropy_tokens` for averaging over batches."""
        key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        scores = query @ key.transpose(-1, -2) * scaling
        q_len, k_len = scores.shape[-2:]
        if attention_mask is None:
            allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device)[None, None]
            allowed = allowed.tril(k_len - q_len) if self.is_causal else allowed
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

    @torch.no_grad()
    def resize_heads(self, keep: torch.Tensor, kv_heads: list[int]) -> None:
        """Keep the query heads at positions `keep` and the key/value heads `kv_heads` (original indices): the
        gates, masks and bookkeeping (the projections are cut by the model's `prune_heads`)."""
        self.sentinel_gate_logits = nn.Parameter(self.sentinel_gate_logits[keep].clone())
        self.sentinel_head_mask = self.sentinel_head_mask[keep].clone()
        self.head_ids = self.head_ids[keep].clone()
        self.kv_head_ids = torch.tensor(kv_heads, dtype=torch.long, device=self.head_ids.device)
        self.kv_for_head = self.kv_positions()
        self._set_head_counts(self.head_ids.tolist(), kv_heads)


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


class UNetSkipMixin:
    """A layer that may own a U-Net skip fusion on its output (seed section 2.2), for the model's loop to feed."""

    def setup_unet(self, config, layer_idx: int) -> None:
        self.unet_source = unet_skip_source(config, layer_idx)
        self.sentinel_unet_fuse = None
        if self.unet_source is not None:
            self.sentinel_unet_fuse = UNetSkipFusion(config.hidden_size)
            self.unet_scale = unet_skip_scale(config, layer_idx)

    def apply_unet(self, hidden_states: torch.Tensor, skip: torch.Tensor | None) -> torch.Tensor:
        if self.sentinel_unet_fuse is None:
            return hidden_states
        # seed section 2.2: h'_dec = h_dec + s_i * Linear([h_dec; h_enc]); the fusion starts at zero
        return hidden_states + self.unet_scale * self.sentinel_unet_fuse(torch.cat([hidden_states, skip], dim=-1))


class SentinelPreTrainedMixin(ZooModelMixin):
    """Init, statistics and pruning shared by every sentinel model (put before the stock pre-trained class). A class
    declares its `family` (`families.py`), which says where the base model keeps its layers and where a layer keeps
    its attention heads."""

    mechanism_name = "Sentinel gates"
    mechanism_param_prefix = "sentinel_"  # the gates and the mask (`sentinel_gate_logits`), the U-Net skip fusions
    renamed_parameters = {"unet_fuse": "sentinel_unet_fuse"}  # the fusions' name until 2026-11-24
    family: Any  # the family's declaration (`decoder_families.py`, `encoder_families.py`)
    # why the family's stock attention cannot take fewer heads of the same size from its config (empty: it can, with
    # the config's `head_dim`)
    stock_head_count_limit: str = ""

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, SentinelGates):
            heads = self.config.heads_in_layer(module.layer_idx)
            kv_heads = self.config.kv_heads_in_layer(module.layer_idx)
            init.constant_(module.sentinel_gate_logits, float(self.config.sentinel_gate_init))
            init.ones_(module.sentinel_head_mask)
            init.copy_(module.head_ids, torch.tensor(heads))
            init.copy_(module.kv_head_ids, torch.tensor(kv_heads))
            init.copy_(module.kv_for_head, module.kv_positions())
        elif isinstance(module, UNetSkipFusion):
            # after the generic nn.Linear init above: the fusion starts at zero, so skips leave the stock model as is
            init.zeros_(module.weight)
            init.zeros_(module.bias)

    @property
    def sentinel_roles(self) -> Heads:
        """Where a layer keeps the gated attention, the projections of its heads and its output projection."""
        return self.family.heads

    @property
    def sentinel_layers(self) -> list[nn.Module]:
        return list(self.base_model.get_submodule(self.family.layer_path))

    @property
    def gated_attentions(self) -> list[SentinelGates]:
        return [layer.get_submodule(self.sentinel_roles.attention) for layer in self.sentinel_layers]

    def gate_values(self) -> list[torch.Tensor]:
        """Current gate of every remaining head, one tensor per layer (layers may have different head counts)."""
        return [attn.gates().detach() for attn in self.gated_attentions]

    def gate_l1(self) -> torch.Tensor:
        """The seed's L1 pressure: the sum of all gate values (section 4.1)."""
        return sum(attn.gates().sum() for attn in self.gated_attentions if attn.num_heads)

    def _forward_gate_l1(self) -> torch.Tensor:
        """`gate_l1()` of the gates the attentions applied in the forward that just ran (the loss's term), taken (and
        cleared) from what each attention recorded in its forward: the loss then reads no parameter outside its
        layer's forward, where FSDP2 (`fully_shard`) and DeepSpeed ZeRO-3 hold it sharded. A record without the
        gradient the gates need (reentrant activation checkpointing runs the forward without gradients and again in
        the backward) is replaced by the gates computed here."""
        total = 0
        for attn in self.gated_attentions:
            gates, attn.forward_gates = attn.forward_gates, None
            if not attn.num_heads:
                continue
            needs_grad = torch.is_grad_enabled() and attn.sentinel_gate_logits.requires_grad
            if gates is None or (needs_grad and not gates.requires_grad):
                gates = attn.gates()
            total = total + gates.sum()
        return total

    @torch.no_grad()
    def head_weight_norms(self) -> list[torch.Tensor]:
        """Norm of each remaining query head's own weights, one tensor per layer: its query rows, the key and value
        rows of its key/value head (shared within a group) and its input columns of the output projection."""
        roles, out = self.sentinel_roles, []
        for layer in self.sentinel_layers:
            attn = layer.get_submodule(roles.attention)
            d, nq, nkv = attn.head_dim, attn.num_heads, attn.num_kv_heads
            weights = []
            for path in roles.qkv:
                module = layer.get_submodule(path)
                out_dim, _ = _feature_dims(module)
                weights.append(module.weight.movedim(out_dim, 0).float())
            rows = torch.cat(weights).pow(2).sum(1)  # per output feature, [q | k | v]
            q = rows[: nq * d].view(nq, d).sum(1)
            k = rows[nq * d : (nq + nkv) * d].view(nkv, d).sum(1)
            v = rows[(nq + nkv) * d :].view(nkv, d).sum(1)
            o_module = layer.get_submodule(roles.out)
            _, in_dim = _feature_dims(o_module)
            o = o_module.weight.movedim(in_dim, 0).float().pow(2).sum(1).view(nq, d).sum(1)
            kv = attn.kv_positions()
            out.append((q + k[kv] + v[kv] + o).sqrt().cpu())
        return out

    def prune_heads(self, heads: dict[int, list[int]]) -> None:
        """Remove query heads structurally (by original index per layer): their rows of the query projection and
        columns of the output projection; a key/value head goes (its rows of the key and value projections) only
        once every query head of its group is pruned. Recorded in `config.pruned_heads`, so a saved model reloads
        with the smaller shapes. A pruned head computes exactly what a gate of zero lets through."""
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
        roles, layers = self.sentinel_roles, self.sentinel_layers
        for layer, layer_heads in heads.items():
            self.config.pruned_heads[layer] = sorted(set(self.config.pruned_heads.get(layer, [])) | set(layer_heads))
            attn, block = attentions[layer], layers[layer]
            device = attn.head_ids.device
            keep = torch.tensor(
                [i for i, h in enumerate(attn.head_ids.tolist()) if h not in set(layer_heads)], dtype=torch.long
            ).to(device)
            kv_heads = self.config.kv_heads_in_layer(layer)
            keep_kv = torch.tensor([attn.kv_head_ids.tolist().index(h) for h in kv_heads], dtype=torch.long)
            q_rows = _head_features(keep, attn.head_dim)
            kv_rows = _head_features(keep_kv.to(device), attn.head_dim)
            if len(roles.qkv) == 1:  # fused [q | k | v]
                q_size, kv_size = attn.num_heads * attn.head_dim, attn.num_kv_heads * attn.head_dim
                rows = torch.cat([q_rows, kv_rows + q_size, kv_rows + q_size + kv_size])
                _replace(block, roles.qkv[0], select_features(block.get_submodule(roles.qkv[0]), rows, "out"))
            else:
                for path, rows in zip(roles.qkv, (q_rows, kv_rows, kv_rows)):
                    _replace(block, path, select_features(block.get_submodule(path), rows, "out"))
            _replace(block, roles.out, select_features(block.get_submodule(roles.out), q_rows, "in"))
            attn.resize_heads(keep, kv_heads)

    def prune_masked_heads(self) -> dict[int, list[int]]:
        """Structurally remove every head whose mask is 0 (switched off by the controller); returns them."""
        masked = {
            attn.layer_idx: [h for h, m in zip(attn.head_ids.tolist(), attn.sentinel_head_mask.tolist()) if m == 0]
            for attn in self.gated_attentions
        }
        masked = {layer: heads for layer, heads in masked.items() if heads}
        self.prune_heads(masked)
        return masked

    @torch.no_grad()
    def stock_export(self) -> tuple[dict, dict[str, torch.Tensor]]:
        """The stock checkpoint that computes what this model computes (see `ZooModelMixin.stock_export`): each
        remaining head's gate folded into its input columns of the output projection, and, after pruning, either
        the head counts in the config (a family whose stock attention takes fewer heads at the same head size) or,
        for one that cannot (`stock_head_count_limit`: GPT-2, BERT, RoBERTa), every pruned head put back as a zero
        head (`restore_pruned_heads`): the stock config's head count, the pruned function, the unpruned cost.
        Refused, saying why, when layers keep different numbers of heads or groups of different sizes (prune with
        `uniform=True`) in a family of the first kind, or when U-Net skips have left zero (no stock class has
        them)."""
        c, name = self.config, type(self).__name__
        family = f"stock {c.sentinel_family}"
        fusions = [getattr(layer, "sentinel_unet_fuse", None) for layer in self.sentinel_layers]
        fusions = [f for f in fusions if f is not None]
        if any(bool(f.weight.any() or f.bias.any()) for f in fusions):
            raise ValueError(
                f"{name} cannot be exported as a {family} checkpoint: its U-Net skips (unet_skips=True) have been "
                "trained away from zero, and no stock class joins one layer's output into another's."
            )
        attns = self.gated_attentions
        if self.stock_head_count_limit and any(a.num_heads != c.num_attention_heads for a in attns):
            return {}, self.restore_pruned_heads()
        counts = [(a.num_heads, a.num_kv_heads) for a in attns]
        if len(set(counts)) > 1:
            raise ValueError(
                f"{name} cannot be exported as a {family} checkpoint: its layers keep different numbers of "
                f"(query, key/value) heads {counts}, and a stock config has one head count for every layer. Prune "
                "with `uniform=True` (`interlayer prune --uniform`)."
            )
        heads, kv_heads = counts[0]
        if heads == 0:
            raise ValueError(f"{name} cannot be exported as a {family} checkpoint: every attention head is pruned.")
        for attn in attns:
            grouped = torch.arange(heads, device=attn.kv_for_head.device) // (heads // kv_heads)
            if heads % kv_heads or not torch.equal(attn.kv_for_head, grouped):
                raise ValueError(
                    f"{name} cannot be exported as a {family} checkpoint: layer {attn.layer_idx} keeps query heads "
                    f"{attn.head_ids.tolist()} of key/value heads {attn.kv_head_ids.tolist()}, groups of different "
                    "sizes that stock grouped-query attention cannot express. Prune whole groups (`uniform=True`)."
                )
        state = self.state_dict()
        names = {module: path for path, module in self.named_modules()}
        for layer, attn in zip(self.sentinel_layers, attns):
            gates = attn.gates().float()
            if bool((gates == 1).all()):
                continue  # the identity: the stock weights as they are, bit for bit
            out = layer.get_submodule(self.sentinel_roles.out)
            _, in_dim = _feature_dims(out)
            state[f"{names[out]}.weight"] = _scaled_head_features(out.weight, gates, attn.head_dim, in_dim)
        changes = {}
        if heads != c.num_attention_heads:
            changes = {"num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": attns[0].head_dim}
        return changes, state

    @torch.no_grad()
    def restore_pruned_heads(self) -> dict[str, torch.Tensor]:
        """The state dict at the unpruned shapes: each remaining head's rows of the query, key and value projections
        and its gate-scaled input columns of the output projection back at its original position, every pruned head
        zero there (its output projection columns zero, so it adds exactly nothing). Families without grouped
        key/value heads only (each query head has its own key and value head)."""
        c, roles = self.config, self.sentinel_roles
        state = self.state_dict()
        names = {module: path for path, module in self.named_modules()}
        for layer, attn in zip(self.sentinel_layers, self.gated_attentions):
            if not torch.equal(attn.kv_head_ids, attn.head_ids):
                raise ValueError(
                    f"restore_pruned_heads: layer {attn.layer_idx} shares key/value heads between query heads "
                    f"({attn.kv_head_ids.tolist()} for {attn.head_ids.tolist()}); only families with one key/value "
                    "head per query head put pruned heads back"
                )
            full, d = c.num_attention_heads, attn.head_dim
            rows = _head_features(attn.head_ids, d)
            qkv = [layer.get_submodule(path) for path in roles.qkv]
            blocks = 3 if len(qkv) == 1 else 1  # one fused [q | k | v] projection, or one module each
            for module in qkv:
                out_dim, _ = _feature_dims(module)
                index = torch.cat([rows + b * full * d for b in range(blocks)])
                for key, dim in (("weight", out_dim), ("bias", 0)):
                    kept = getattr(module, key)
                    if kept is None:
                        continue
                    shape = list(kept.shape)
                    shape[dim] = blocks * full * d
                    state[f"{names[module]}.{key}"] = kept.new_zeros(shape).index_copy(dim, index, kept)
            out = layer.get_submodule(roles.out)
            _, in_dim = _feature_dims(out)
            kept = _scaled_head_features(out.weight, attn.gates().float(), d, in_dim)
            shape = list(kept.shape)
            shape[in_dim] = full * d
            state[f"{names[out]}.weight"] = kept.new_zeros(shape).index_copy(in_dim, rows, kept)
        return state

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
            f"Sentinel-gated {c.sentinel_family} (interlayer, seed 001): a learnable gate per attention head scales "
            f"that head's output before `{self.sentinel_roles.out.rpartition('.')[2]}`; an L1 term (weight "
            f"{c.gate_l1}) pushes gates down. {pruned} of {total} heads are structurally pruned.{skips} Stock weight "
            "names; the mechanism's tensors (gates, head mask, skip fusions) are named `sentinel_*`."
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


__all__ = ["SentinelGates", "SentinelPreTrainedMixin", "UNetSkipFusion", "UNetSkipMixin"]
