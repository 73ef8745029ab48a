"""Hyper-connections (HC) and manifold-constrained hyper-connections (mHC) for the decoder families of families.py
(seed 002): Llama, Qwen3, Qwen2, Mistral, Phi-3, OLMo 2, Gemma 2, Gemma 3 text, GPT-2.

The residual stream of a stock decoder becomes K full-width streams `h` of shape `[batch, seq, K, hidden]`. Around
every attention and MLP branch `F` (as the family declares it: its norms and dropout included):

    x  = sum_k H_pre[k] h_k                          read-in
    h' = H_res h + H_post^T F(x)                     h'_i = sum_j H_res[i, j] h_j + H_post[i] F(x)

with static coefficients (`hc_mode="static"`), coefficients plus an input-dependent part
`s * tanh(Linear(RMSNorm(h_k)))` computed per stream (`"dynamic"`, HC paper), or the manifold-constrained form
`H_pre = sigmoid(.)`, `H_post = 2 sigmoid(.)`, `H_res = Sinkhorn-Knopp(exp(.))`, whose input-dependent part is a
linear map of the RMS-normalised flattened streams (`"mhc"`, mHC paper); `mhc_variant="deepseek_v4"` computes
DeepSeek-V4's formula instead (`H_pre = sigmoid + eps`, `H_post = 2 sigmoid`, `H_res = comb^T` with `comb` a row
softmax followed by alternating eps-guarded column and row normalisations). Coefficients and the Sinkhorn projection
are computed in fp32, also under bf16 autocast and with bf16 or fp16 weights. The embedding output is copied into
every stream, and a learned read-out `sum_k r_k h_k` (starting at the mean) feeds the stock final norm.

With `identity_init=True` the streams stay equal until trained (read-in sums to 1, every stream receives `F(x)`, the
rows of `H_res` sum to 1), so the converted model computes the stock function in every mode (DeepSeek-V4's variant
to about 1e-6 per sublayer: its normalisations divide by the sum plus eps).
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import contextlib
import math

import torch
from torch import nn
from torch.utils._python_dispatch import is_in_torch_dispatch_mode
from torch.utils.checkpoint import checkpoint
from transformers import initialization as init
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .decoder_common import CausalLMMixin, DecoderLayerRolesMixin, DecoderStackMixin, FreezeBaseMixin
from .zoo_common import CACHE_KWARG, StatsAccumulator, register_for_auto_classes, select_hidden_states, take_cache

# isort: split
# --- begin generated imports (python -m interlayer.models.generate_classes --fix): do not edit ---
from transformers.models.gemma2.modeling_gemma2 import (
    Gemma2Attention,
    Gemma2DecoderLayer,
    Gemma2ForCausalLM,
    Gemma2Model,
)
from transformers.models.gemma3.modeling_gemma3 import (
    Gemma3Attention,
    Gemma3DecoderLayer,
    Gemma3ForCausalLM,
    Gemma3TextModel,
)
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, GPT2Block, GPT2LMHeadModel, GPT2Model
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaModel
from transformers.models.mistral.modeling_mistral import (
    MistralAttention,
    MistralDecoderLayer,
    MistralForCausalLM,
    MistralModel,
)
from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention, Olmo2DecoderLayer, Olmo2ForCausalLM, Olmo2Model
from transformers.models.phi3.modeling_phi3 import Phi3Attention, Phi3DecoderLayer, Phi3ForCausalLM, Phi3Model
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2DecoderLayer, Qwen2ForCausalLM, Qwen2Model
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3DecoderLayer, Qwen3ForCausalLM, Qwen3Model

from .configuration_hyper_connections import (
    Gemma2MHCConfig,
    Gemma3TextMHCConfig,
    GPT2MHCConfig,
    LlamaMHCConfig,
    MistralMHCConfig,
    Olmo2MHCConfig,
    Phi3MHCConfig,
    Qwen2MHCConfig,
    Qwen3MHCConfig,
)
from .families import GEMMA2, GEMMA3_TEXT, GPT2, LLAMA, MISTRAL, OLMO2, PHI3, QWEN2, QWEN3

# --- end generated imports ---

COEFFICIENT_EPS = 1e-6
MHC_EPS = 1e-6  # DeepSeek-V4's hc_eps: added to its read-in and softmax, and to every normalisation's denominator
MHC_RES_DIAGONAL = 4.0  # raw diagonal of H_res at identity_init in mHC mode (about 0.95 on the diagonal at K=4)
SUBLAYERS = ("attn", "mlp")


def sinkhorn_knopp(logits: torch.Tensor, iters: int) -> torch.Tensor:
    """Project `exp(logits)` (`[..., K, K]`) towards the doubly-stochastic matrices: `iters` rounds of column then
    row normalisation, so rows sum to 1 to rounding (the columns only approximately, see docs/hyper_connections.md).

    Finite for any finite logits (of magnitude below 1e38): the first round runs in the log domain, each column and
    then each row shifted by its own log-sum-exp, so no column or row underflows to zeros as a whole (one shift by the
    matrix's maximum let a column 100 below it become 0/0). After it the rows sum to 1 and every column holds an entry
    of at least 1/K^2, and each later round keeps that (a column or row sum is at least 1/K^2), so the other rounds
    run in the exp domain, at half the log domain's cost or less. The iterations run with the two K axes first (5x
    faster on CPU than reducing over the last axes)."""
    m = logits.movedim((-2, -1), (0, 1)).contiguous()
    m = m - torch.logsumexp(m, dim=0, keepdim=True)
    m = torch.exp(m - torch.logsumexp(m, dim=1, keepdim=True))
    for _ in range(iters - 1):
        m = m / m.sum(dim=0, keepdim=True)
        m = m / m.sum(dim=1, keepdim=True)
    return m.movedim((0, 1), (-2, -1))


def deepseek_comb(logits: torch.Tensor, iters: int, eps: float = MHC_EPS) -> torch.Tensor:
    """DeepSeek-V4's mixing matrix `comb` (`[..., K, K]`, indexed [input stream, output stream]) from its logits, as
    its published code computes it (TileKernels `sinkhorn_normalize_ref`, transformers' `DeepseekV4HyperConnection`):
    a softmax over each row plus `eps`, each column divided by its sum plus `eps`, then `iters - 1` rounds of rows
    then columns, each divided by its sum plus `eps`. Columns are normalised last, so each output stream's weights
    sum to about `1 - eps`; the streams are mixed by `comb` transposed. Finite for any finite logits (the softmax is
    shifted by its row's maximum, and every entry stays above 0 through the added `eps`). Runs with the K axes first,
    as `sinkhorn_knopp`."""
    m = torch.softmax(logits.movedim((-2, -1), (0, 1)), dim=1) + eps
    m = m / (m.sum(dim=0, keepdim=True) + eps)
    for _ in range(iters - 1):
        m = m / (m.sum(dim=1, keepdim=True) + eps)
        m = m / (m.sum(dim=0, keepdim=True) + eps)
    return m.movedim((0, 1), (-2, -1))


def _deepseek_res(logits: torch.Tensor, iters: int) -> torch.Tensor:
    """`H_res = comb^T` ([output, input], what multiplies the streams) from DeepSeek-V4's comb logits."""
    return deepseek_comb(logits, iters).mT


def _mhc_maps(pre, post, res, iters: int, variant: str, recompute_sinkhorn: bool = False):
    """`(H_pre, H_post, H_res)` of mHC from the fp32 logits (static, or static plus input-dependent): the seed's
    `sigmoid`, `2 sigmoid`, `Sinkhorn-Knopp(exp(res))`, or DeepSeek-V4's `sigmoid + eps`, `2 sigmoid`,
    `deepseek_comb(res)^T` (with `recompute_sinkhorn`, the normalisation rounds are recomputed in backward and only
    the logits saved)."""
    if variant == "deepseek_v4":
        pre, project = torch.sigmoid(pre) + MHC_EPS, _deepseek_res
    else:
        pre, project = torch.sigmoid(pre), sinkhorn_knopp
    post = 2.0 * torch.sigmoid(post)
    if recompute_sinkhorn:
        return pre, post, checkpoint(project, res, iters, use_reentrant=False)
    return pre, post, project(res, iters)


def _rms_scale(x: torch.Tensor) -> torch.Tensor:
    """`1 / RMS(x)` over the last axis (no squared copy of `x` is kept for backward)."""
    rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) * x.shape[-1] ** -0.5
    return torch.rsqrt(rms.square() + COEFFICIENT_EPS)


def _product(maps: torch.Tensor, streams: torch.Tensor) -> torch.Tensor:
    """`[H_pre; H_res] @ h` as one broadcast `matmul` (1.8-2.9x faster than `einsum` on CPU with torch 2.13, from one
    token to 4 x 256, see docs/hyper_connections.md): maps `[M, K]` (static) or `[..., M, K]` (per token), streams
    `[..., K, D]`. The first layer's streams are K views of the embeddings (stride 0), where the product is each
    row's sum times the embedding (batched products over stride-0 operands run 15x slower on CPU)."""
    single = _single_stream(streams)
    if single is not None:
        return maps.sum(-1, keepdim=True) * single
    return torch.matmul(maps, streams)


def _single_stream(streams: torch.Tensor) -> torch.Tensor | None:
    """`[..., 1, D]` when the K streams are views of one tensor (the expanded embeddings), else None."""
    return streams[..., :1, :] if streams.shape[-2] > 1 and streams.stride(-2) == 0 else None


def _read_mix(maps: torch.Tensor, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(H_pre h, H_res h)`: rows 0 and 1.. of `_product` (views of it)."""
    product = _product(maps, streams)
    return product[..., 0, :], product[..., 1:, :]


def _write(mixed: torch.Tensor, post: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`H_res h + H_post^T F(x)` from the mixed streams `H_res h` and the sublayer output."""
    return torch.addcmul(mixed, post.unsqueeze(-1), out.unsqueeze(-2))


def _token_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`sum over tokens and hidden units of a[..., i, d] b[..., j, d]` (`[I, J]`, the gradient of a map shared by every
    token): each token's small product, then one sum over tokens (5x faster on CPU than `einsum`, which copies both
    operands into transposed layouts first)."""
    return torch.bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]).mT).sum(0)


def _map_grad(grad: torch.Tensor, streams: torch.Tensor, shared: bool) -> torch.Tensor:
    """The gradient of maps `[..., I, K]` applied as `maps @ streams` from the product's gradient `[..., I, D]`:
    summed over tokens for a map `shared` by every token, per token otherwise."""
    single = _single_stream(streams)
    if single is not None:  # every column gets the same gradient
        column = _map_grad(grad, single, shared)
        return column.expand(*column.shape[:-1], streams.shape[-2])
    return _token_sum(grad, streams) if shared else torch.matmul(grad, streams.mT)


class _ReadMix(torch.autograd.Function):
    """`(H_pre h, H_res h)` from the maps `[H_pre; H_res]` in one product: the sublayer input `[..., D]` (a copy, so
    that what the sublayer keeps for backward does not hold the product) and the mixed streams `[..., K, D]` (a view).
    Backward writes each gradient once: autograd's product and slices would build the product's gradient from zeros
    and copies, and a shared map's gradient through `einsum`'s transposed copies. Only the inputs are kept."""

    @staticmethod
    def forward(ctx, maps, streams):
        ctx.save_for_backward(maps, streams)
        # detached: matmul folds differently when an input requires grad, and the stream recomputation (no grad)
        # must rebuild the same bits
        x, mixed = _read_mix(maps.detach(), streams.detach())
        return x.clone(), mixed

    @staticmethod
    def backward(ctx, grad_x, grad_mixed):
        maps, streams = ctx.saved_tensors  # under autocast the product (and so the gradients) may be in bf16
        dtype = grad_mixed.dtype
        grad_x = grad_x.to(dtype)
        maps_, streams_ = maps.to(dtype), streams.to(dtype)
        grad_maps = grad_streams = None
        if ctx.needs_input_grad[0]:
            shared = maps.dim() == 2
            grad_pre = _map_grad(grad_x.unsqueeze(-2), streams_, shared)
            grad_maps = torch.cat([grad_pre, _map_grad(grad_mixed, streams_, shared)], dim=-2).to(maps.dtype)
        if ctx.needs_input_grad[1]:
            grad_streams = torch.matmul(maps_[..., 1:, :].mT, grad_mixed)
            grad_streams = grad_streams.addcmul_(maps_[..., 0, :].unsqueeze(-1), grad_x.unsqueeze(-2))
            grad_streams = grad_streams.to(streams.dtype)
        return grad_maps, grad_streams


class _Write(torch.autograd.Function):
    """`_write` with a backward that passes the streams' gradient through as it is (no copy) and computes
    `H_post`'s and the sublayer output's gradients as products instead of element-wise products and sums over
    K-wide temporaries."""

    @staticmethod
    def forward(ctx, mixed, post, out):
        ctx.save_for_backward(post, out)
        return _write(mixed, post, out)

    @staticmethod
    def backward(ctx, grad):
        post, out = ctx.saved_tensors
        grad_post = grad_out = None
        if ctx.needs_input_grad[1]:
            out_ = out.to(grad.dtype).unsqueeze(-2)
            if post.dim() == 1:
                grad_post = _token_sum(grad, out_).squeeze(-1)
            else:
                grad_post = torch.matmul(grad, out_.mT).squeeze(-1)
            grad_post = grad_post.to(post.dtype)
        if ctx.needs_input_grad[2]:
            grad_out = torch.matmul(post.to(grad.dtype).unsqueeze(-2), grad).squeeze(-2).to(out.dtype)
        return grad, grad_post, grad_out


class StreamRecomputation:
    """Keeps the K-wide streams for backward only at every `every`-th sublayer and recomputes the others from there.

    Each sublayer's input streams are needed in backward (for the gradients of its coefficients). Instead of letting
    autograd keep them, a `saved_tensors_hooks` pair replaces them by a handle; backward asks for them in reverse
    order, and the streams of a block of `every` sublayers are recomputed once from the block's first streams with the
    same operations as the forward pass (so bit for bit), from what backward keeps anyway: the coefficients and each
    sublayer's output. Memory: about `L / every + every` K-wide tensors instead of `L` for `L` sublayers.
    """

    def __init__(self, every: int):
        self.every = every
        self.kept: dict[int, torch.Tensor] = {}
        self.steps: list[tuple] = []
        self.current: tuple[int, int] | None = None  # (sublayer, storage pointer) of the streams being read
        self.cache: dict[int, torch.Tensor] = {}
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self.autocast: dict | None = None  # the forward's autocast state, under which backward recomputes

    def __enter__(self):
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.current = None
        hooks, self.hooks = self.hooks, None  # no reference cycle: freed with the graph, without waiting for gc
        return hooks.__exit__(*exc)

    def reading(self, streams: torch.Tensor) -> None:
        """The next sublayer starts reading `streams` (its coefficients and product will save them)."""
        index = len(self.steps)
        if self.autocast is None:
            device = streams.device.type
            self.autocast = {
                "device_type": device,
                "dtype": torch.get_autocast_dtype(device),
                "enabled": torch.is_autocast_enabled(device),
            }
        owns_storage = streams.untyped_storage().nbytes() == streams.numel() * streams.element_size()
        if index % self.every == 0 or not owns_storage:  # the first streams are a view of the embeddings
            self.kept[index] = streams
            self.current = None
        else:
            self.current = (index, streams.untyped_storage().data_ptr())

    def read(self, maps: torch.Tensor, post: torch.Tensor) -> None:
        """The sublayer has taken what it saves of its input streams; record what rebuilds its output."""
        self.current = None
        self.steps.append((maps.detach(), post.detach()))

    def wrote(self, out: torch.Tensor) -> None:
        maps, post = self.steps[-1]
        self.steps[-1] = (maps, post, out.detach())

    def _pack(self, tensor):
        if self.current is not None and tensor.untyped_storage().data_ptr() == self.current[1]:
            return (self.current[0], tensor.shape, tensor.stride(), tensor.storage_offset())
        return tensor

    def _unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        index, shape, stride, offset = packed
        if index not in self.cache:
            start = max(i for i in self.kept if i < index)
            self.cache = {start: self.kept[start]}
            with torch.no_grad(), torch.autocast(**self.autocast):
                streams = self.kept[start]
                for i in range(start, index):
                    maps, post, out = self.steps[i]
                    streams = _write(_read_mix(maps, streams)[1], post, out)
                    self.cache[i + 1] = streams
        return self.cache[index].as_strided(shape, stride, offset)


class CompositeGain:
    """The composite residual map `H_res^(n) ... H_res^(1)` of every token through the sublayers of one forward pass,
    and its worst gain: the largest absolute row and column sums over every prefix of depth, per token; also the
    coefficient statistics of every sublayer (their mean over tokens).

    A sublayer only hands its coefficients over (`record`, no tensor operation); `close` computes everything at once,
    in fp32 and without grad: the prefix products by a parallel scan (`ceil(log2 n)` batched products for `n`
    sublayers, not one product per sublayer and token) and each statistic as one stacked mean, so that the cost per
    forward no longer grows by about ten small operations per sublayer (a third of static HC's decoding overhead).
    """

    def __init__(self):
        self.records: list[tuple] = []  # (hyper-connection, pre, post, res) per sublayer, in order
        self.closed = False

    def record(self, hc: "HyperConnection", pre: torch.Tensor, post: torch.Tensor, res: torch.Tensor) -> None:
        self.records.append((hc, pre.detach(), post.detach(), res.detach()))

    @staticmethod
    def prefix_products(res: torch.Tensor) -> torch.Tensor:
        """`P[i] = res[i] @ ... @ res[0]` for `res` `[n, ..., K, K]` (Hillis-Steele scan: the later block times the
        earlier prefix)."""
        shift = 1
        while shift < res.shape[0]:
            res = torch.cat([res[:shift], torch.matmul(res[shift:], res[:-shift])])
            shift *= 2
        return res

    @torch.no_grad()
    def close(self, attention_mask) -> torch.Tensor | None:
        """Records each sublayer's mean coefficients in its statistics and returns the worst `(row, column)` gain
        over depth and over the tokens that `attention_mask` (2-d, when given) keeps. Closed, it is not updated again
        (gradient checkpointing runs the layers again in backward)."""
        self.closed = True
        records, self.records = self.records, []
        if not records:
            return None
        hcs = [r[0] for r in records]
        pre, post, res = (torch.stack([r[i].float() for r in records]) for i in (1, 2, 3))
        magnitude = self.prefix_products(res).abs()
        worst = torch.stack([magnitude.sum(-1).amax(-1), magnitude.sum(-2).amax(-1)], dim=-1).amax(0)
        if pre.dim() > 2:  # per-token coefficients: their mean over tokens
            pre, post, res = pre.flatten(1, -2).mean(1), post.flatten(1, -2).mean(1), res.flatten(1, -3).mean(1)
        for hc, p, q, r in zip(hcs, pre.unbind(0), post.unbind(0), res.unbind(0)):
            name = f"hc/L{hc.layer_idx}/{hc.sublayer}"
            hc.stats.add(f"{name}/pre", p)
            hc.stats.add(f"{name}/post", q)
            hc.stats.add(f"{name}/res", r)
        if worst.dim() == 1:
            return worst
        if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2:
            keep = attention_mask[:, -worst.shape[-2] :].bool().unsqueeze(-1)
            worst = worst.masked_fill(~keep, 0.0)  # gains are >= 0: padding never wins, with no host sync
        return worst.flatten(0, -2).amax(0)


class DeferredStatsAccumulator(StatsAccumulator):
    """A `StatsAccumulator` that keeps what is added in a list and sums it when read (or every 256 values): one
    stacked sum instead of an addition per forward pass (the hyper-connections' coefficients, 3 per sublayer)."""

    FOLD_EVERY = 256

    def __init__(self):
        super().__init__()
        self._pending: dict[str, list[torch.Tensor]] = {}

    def _record(self, name: str, value: torch.Tensor) -> None:
        pending = self._pending.setdefault(name, [])
        pending.append(value)
        if len(pending) >= self.FOLD_EVERY:
            self._fold(name)

    @torch.no_grad()
    def _fold(self, name: str) -> None:
        values = self._pending.pop(name)
        total = torch.stack(values).float().sum(0)
        if name in self._sums:
            self._sums[name] = self._sums[name] + total
            self._counts[name] += len(values)
        else:
            self._sums[name], self._counts[name] = total, len(values)

    def read(self, reset: bool = True, split: str | None = None) -> dict[str, float]:
        for name in list(self._pending):
            self._fold(name)
        return super().read(reset=reset, split=split)


class RunningMaxAccumulator(StatsAccumulator):
    """A `StatsAccumulator` that keeps the largest value since the last read instead of the mean (for worst cases)."""

    def _record(self, name: str, value: torch.Tensor) -> None:
        value = value.float()
        self._sums[name] = torch.maximum(self._sums[name], value) if name in self._sums else value.clone()
        self._counts[name] = 1


def _compiled(fn):
    """`fn` compiled once per process with `torch.compile(fullgraph=True)` (shapes specialised; a handful of shapes
    in a generation: the prompt's and one token's)."""
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn, fullgraph=True)
    return _COMPILED[fn]


_COMPILED: dict = {}


def _mhc_coefficients(
    flat, weight, pre, post, res, scale, k: int, iters: int, recompute_sinkhorn: bool = False, variant: str = "seed"
):
    """Input-dependent mHC coefficients from the flattened fp32 streams `[..., K*D]` and the fp32 parameters:
    `z = Linear(RMSNorm(flat))` split into the three parts, each added to its static logits with its learned scale,
    then the constraints of `variant` (`_mhc_maps`)."""
    z = nn.functional.linear(flat, weight) * _rms_scale(flat)
    pre = pre + scale[0] * z[..., :k]
    post = post + scale[1] * z[..., k : 2 * k]
    res = res + scale[2] * z[..., 2 * k :].unflatten(-1, (k, k))
    return _mhc_maps(pre, post, res, iters, variant, recompute_sinkhorn)


class HyperConnection(nn.Module):
    """Read-in, write and mixing coefficients around one sublayer (attention or MLP) of one decoder layer."""

    def __init__(self, config, layer_idx: int, sublayer: str):
        super().__init__()
        k = config.hc_streams
        self.layer_idx, self.sublayer = layer_idx, sublayer
        self.mode = config.hc_mode
        self.streams = k
        self.sinkhorn_iters = config.sinkhorn_iters
        self.variant = config.mhc_variant if self.mode == "mhc" else None
        self.pre = nn.Parameter(torch.empty(k))
        self.post = nn.Parameter(torch.empty(k))
        self.res = nn.Parameter(torch.empty(k, k))
        self.dynamic = self.mode == "dynamic" or (self.mode == "mhc" and config.mhc_dynamic)
        self.dynamic_tanh = self.mode == "dynamic" and config.hc_dynamic_tanh
        # compiled where it wins: input-dependent mHC (Sinkhorn's rounds); dynamic HC's few operations cost less
        # eagerly than a compiled call
        self.fused = config.hc_fused and self.mode == "mhc" and self.dynamic
        if self.dynamic:
            if self.mode == "dynamic":  # per stream: RMSNorm(h_k) -> (pre_k, post_k, res[:, k])
                self.dynamic_proj = nn.Linear(config.hidden_size, k + 2, bias=False)
            else:  # all streams at once: RMSNorm(flatten(h)) -> (pre, post, res)
                self.dynamic_proj = nn.Linear(k * config.hidden_size, k * (k + 2), bias=False)
            self.dynamic_scale = nn.Parameter(torch.empty(3))  # s_pre, s_post, s_res
        self.stats = DeferredStatsAccumulator()
        self._frozen = None  # without grad: (key, value) of what depends on the parameters only

    @torch.no_grad()
    def reset_parameters(self, config) -> None:
        """Raw coefficients per `config` (see `HyperConnectionFields.identity_init`), through
        `transformers.initialization` so that loaded values are kept."""
        k = self.streams
        if config.identity_init:
            focus = config.read_in_focus
            pre = torch.full((k,), (1.0 - focus) / k)
            pre[self.layer_idx % k] += focus
            post, res = torch.ones(k), torch.eye(k)
            if self.mode == "mhc":
                # DeepSeek's read-in adds MHC_EPS after the sigmoid; the raw mixing is symmetric, so comb^T = comb
                target = pre.double() - (MHC_EPS if self.variant == "deepseek_v4" else 0.0)
                pre, post, res = torch.logit(target).float(), torch.zeros(k), MHC_RES_DIAGONAL * torch.eye(k)
        elif self.variant == "deepseek_v4":  # DeepSeek-V4's init of its biases
            pre, post, res = torch.zeros(k), torch.zeros(k), torch.zeros(k, k)
        else:
            pre, post, res = torch.full((k,), 1.0 / k), torch.ones(k), torch.eye(k)
        if config.hc_init_noise > 0:
            pre, post, res = (t + config.hc_init_noise * torch.randn_like(t) for t in (pre, post, res))
        init.copy_(self.pre, pre)
        init.copy_(self.post, post)
        init.copy_(self.res, res)
        if self.dynamic:
            init.zeros_(self.dynamic_proj.weight)
            init.constant_(self.dynamic_scale, float(config.hc_dynamic_scale_init))

    def _reused(self, make, dtype):
        """`make()` (a function of the parameters only), reused without grad until a parameter changes (the key
        reads storage pointers and version counters, which tracing has not) or the dtype does."""
        if torch.is_grad_enabled() or torch.compiler.is_compiling():
            return make()
        key = (dtype, *((p.data_ptr(), p._version) for p in self.parameters()))
        if self._frozen is None or self._frozen[0] != key:
            self._frozen = (key, make())
        return self._frozen[1]

    def _dynamic_parts(self, streams: torch.Tensor):
        """HC's per-stream input-dependent parts from fp32 streams: `Linear(RMSNorm(h_k))` (`[..., K, K + 2]`),
        optionally squashed by tanh, split into pre, post and the columns of res."""
        # RMSNorm(h_k) @ W^T == (h_k @ W^T) * rsqrt(mean(h_k^2)): no normalised copy of the streams is kept
        z = nn.functional.linear(streams, self.dynamic_proj.weight.float()) * _rms_scale(streams)
        if self.dynamic_tanh:
            z = torch.tanh(z)
        return z[..., 0], z[..., 1], z[..., 2:].transpose(-1, -2)

    def coefficients(self, streams: torch.Tensor):
        """`(H_pre [..., K], H_post [..., K], H_res [..., K, K])`: shapes `[K]` when static, `[batch, seq, K]`
        when input-dependent. Computed in fp32 (whatever the dtype of the streams and the parameters) and returned in
        the streams' dtype. Without grad, static coefficients are computed once and reused until a parameter
        changes."""
        if not self.dynamic:
            return self._reused(lambda: self._coefficients(streams), streams.dtype)
        return self._coefficients(streams)

    def _coefficients(self, streams: torch.Tensor):
        with torch.autocast(device_type=streams.device.type, enabled=False):
            pre, post, res = self.pre.float(), self.post.float(), self.res.float()
            if self.mode == "dynamic":
                d_pre, d_post, d_res = self._dynamic_parts(streams.float())
                scale = self.dynamic_scale.float()
                pre, post, res = pre + scale[0] * d_pre, post + scale[1] * d_post, res + scale[2] * d_res
            elif self.dynamic:  # fused: one compiled graph (Sinkhorn's backward in it too, so nothing to recompute)
                # eager inside a compiled model (traced as a whole) and under a dispatch mode such as torch's
                # FlopCounterMode, which torch.compile refuses to run under
                fused = self.fused and not torch.compiler.is_compiling() and not is_in_torch_dispatch_mode()
                fn = _compiled(_mhc_coefficients) if fused else _mhc_coefficients
                weight, scale = self.dynamic_proj.weight.float(), self.dynamic_scale.float()
                recompute = torch.is_grad_enabled() and not fused
                flat = streams.float().flatten(-2)
                pre, post, res = fn(
                    flat, weight, pre, post, res, scale, self.streams, self.sinkhorn_iters, recompute, self.variant
                )
            elif self.mode == "mhc":
                pre, post, res = _mhc_maps(pre, post, res, self.sinkhorn_iters, self.variant)
        dtype = streams.dtype
        return pre.to(dtype), post.to(dtype), res.to(dtype)

    def _maps(self, streams: torch.Tensor):
        """`(H_pre, H_post, H_res, [H_pre; H_res])`, the last the maps of the read-in and mixing product."""
        pre, post, res = self._coefficients(streams)
        return pre, post, res, torch.cat([pre.unsqueeze(-2), res], dim=-2)

    def forward(
        self,
        streams: torch.Tensor,
        sublayer,
        recompute: "StreamRecomputation | None" = None,
        gain: "CompositeGain | None" = None,
    ) -> torch.Tensor:
        """`h' = H_res h + H_post^T sublayer(H_pre h)` for streams `[batch, seq, K, hidden]`. `recompute` and `gain`
        are the forward pass's stream recomputation and composite-gain tracker, when it uses them; statistics are
        recorded with the tracker (eager forwards), once per forward (not again when checkpointing reruns a layer)."""
        if recompute is not None:
            recompute.reading(streams)
        if self.dynamic:
            pre, post, res, maps = self._maps(streams)
        else:
            pre, post, res, maps = self._reused(lambda: self._maps(streams), streams.dtype)
        if gain is not None and not gain.closed:
            gain.record(self, pre, post, res)
        # read-in and mixing in one product: row 0 of [H_pre; H_res] @ h is the sublayer input, rows 1.. the mixed
        # streams
        grad = torch.is_grad_enabled()
        x, mixed = _ReadMix.apply(maps, streams) if grad else _read_mix(maps, streams)
        if recompute is not None:
            recompute.read(maps, post)
        out = sublayer(x)
        if recompute is not None:
            recompute.wrote(out)
        return _Write.apply(mixed, post, out) if grad else _write(mixed, post, out)


class HCDecoderLayerMixin(DecoderLayerRolesMixin):
    """A stock decoder layer whose two residual connections are hyper-connections around its family's branches
    `F_attn` and `F_mlp` (put before the stock class)."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.hc_attn = HyperConnection(config, layer_idx, "attn")
        self.hc_mlp = HyperConnection(config, layer_idx, "mlp")

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = False,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        hc_recompute: StreamRecomputation | None = None,
        hc_gain: CompositeGain | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """As the stock layer on streams `[batch, seq, K, hidden]`; `hc_recompute` and `hc_gain` are the model
        forward's stream recomputation and composite-gain tracker (`None` when not used)."""
        past_key_values = take_cache(past_key_values, kwargs)

        def attention(x):
            return self.attention_branch(
                x,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past_key_values,
                use_cache=use_cache,
                position_embeddings=position_embeddings,
                **kwargs,
            )

        streams = self.hc_attn(hidden_states, attention, hc_recompute, hc_gain)
        return self.hc_mlp(streams, self.mlp_branch, hc_recompute, hc_gain)


class HCPreTrainedMixin(FreezeBaseMixin):
    """Init, freezing, statistics and card text shared by every hyper-connection model (put before the stock class)."""

    mechanism_name = "Hyper-connections"
    mechanism_param_prefix = "hc_"
    # the identity init holds to float rounding only: the coefficients (read-in weights summing to 1, Sinkhorn rows) are
    # computed, not stored, and the streams are mixed in another order than the stock residual sums (docs/matrix.md)
    stock_function_tolerance = 1e-4

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, HyperConnection):
            module.reset_parameters(self.config)
        elif isinstance(module, HCModelMixin):
            init.constant_(module.hc_read_out, 1.0 / self.config.hc_streams)

    @property
    def hyper_connections(self) -> list[HyperConnection]:
        return [m for m in self.modules() if isinstance(m, HyperConnection)]

    def mechanism_summary(self) -> str:
        c = self.config
        mode = {
            "static": "static hyper-connections (HC paper)",
            "dynamic": "dynamic hyper-connections (HC paper" + (", tanh" if c.hc_dynamic_tanh else ", no tanh") + ")",
            "mhc": "manifold-constrained hyper-connections (mHC: sigmoid read-in, 2*sigmoid write, "
            f"Sinkhorn-Knopp mixing with {c.sinkhorn_iters} iterations"
            + (", DeepSeek-V4's formula" if c.mhc_variant == "deepseek_v4" else "")
            + (", input-dependent" if c.mhc_dynamic else ", static")
            + ")",
        }[c.hc_mode]
        frozen = "Only the hyper-connection parameters train (`freeze_base`). " if c.freeze_base else ""
        return (
            f"{c.hc_streams} residual streams of full width with {mode} around every attention and MLP sublayer "
            "(interlayer, seed 002): `h' = H_res h + H_post^T F(H_pre h)`. Stock weight names; the mechanism's tensors "
            f"are named `hc_*`. {frozen}Log `mechanism_stats()` (or use `interlayer.callbacks.MechanismStatsCallback`) "
            "to watch the coefficients and the composite residual gain across depth."
        )

    def mechanism_stats(self, reset: bool = True, split: str | None = None) -> dict[str, float]:
        """Per layer and sublayer the mean `pre_k`, `post_k` and `res_i_j` since the last read, the largest absolute
        row and column sums of `H_res`, and the composite residual gain across depth: the largest absolute row and
        column sums of `H_res^(L) ... H_res^(1)` built from those means (`hc/amax_gain_row`, `hc/amax_gain_col`),
        and the worst case (`hc/amax_gain_row_worst`, `hc/amax_gain_col_worst`): the same sums of every token's own
        composite, at every depth (after each sublayer), maximised over depth, over the tokens the attention mask
        keeps and over the forwards since the last read. Forwards under torch.compile / torch.export record none."""
        out = super().mechanism_stats(reset=reset, split=split)
        k = self.config.hc_streams
        for prefix in ("", "eval/") if split is None else ("",):
            composite = torch.eye(k, dtype=torch.float64)
            for hc in self.hyper_connections:
                name = f"{prefix}hc/L{hc.layer_idx}/{hc.sublayer}/res"
                if f"{name}_0_0" not in out:
                    break
                res = torch.tensor([[out[f"{name}_{i}_{j}"] for j in range(k)] for i in range(k)], dtype=torch.float64)
                out[f"{name}_row_sum_max"] = res.abs().sum(1).max().item()
                out[f"{name}_col_sum_max"] = res.abs().sum(0).max().item()
                composite = res @ composite
            else:
                out[f"{prefix}hc/amax_gain_row"] = composite.abs().sum(1).max().item()
                out[f"{prefix}hc/amax_gain_col"] = composite.abs().sum(0).max().item()
        return out


class HCModelMixin(HCPreTrainedMixin, DecoderStackMixin):
    """The decoder stack with K residual streams: stock embeddings, layers, rotary embedding and final norm."""

    def build_mechanism(self, config) -> None:
        self.hc_read_out = nn.Parameter(torch.empty(config.hc_streams))
        self.hc_gain_stats = RunningMaxAccumulator()

    def read_out(self, streams: torch.Tensor) -> torch.Tensor:
        return (streams * self.hc_read_out.to(streams.dtype).unsqueeze(-1)).sum(dim=-2)

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """As the stock model; `hidden_states` (when asked for) are the read-outs of the streams after each layer."""
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        inputs_embeds, past_key_values, position_ids, masks, position_embeddings = self.prepare_inputs(
            input_ids, inputs_embeds, attention_mask, position_ids, past_key_values, use_cache, kwargs
        )
        layer_types = self.layer_types
        streams = inputs_embeds.unsqueeze(-2).expand(*inputs_embeds.shape[:-1], self.config.hc_streams, -1)
        all_hidden = [inputs_embeds] if output_hidden_states else None
        # statistics and the stream recomputation keep Python-side state (running sums, saved-tensor hooks keyed on
        # storage pointers), which torch.compile and torch.export cannot trace: compiled and exported forwards run
        # without them (same result; the streams are kept for backward, and no statistics are recorded)
        eager = not torch.compiler.is_compiling()
        recompute = None
        if eager and self.config.hc_recompute_streams and torch.is_grad_enabled() and not self.gradient_checkpointing:
            recompute = StreamRecomputation(every=math.ceil(math.sqrt(2 * self.config.num_hidden_layers)))
        gain = CompositeGain() if eager else None
        with recompute if recompute is not None else contextlib.nullcontext():
            streams = self._run_layers(
                streams,
                masks,
                layer_types,
                position_embeddings,
                position_ids,
                past_key_values,
                use_cache,
                all_hidden,
                kwargs,
                recompute,
                gain,
            )
        if gain is not None:
            worst = gain.close(attention_mask)
            if worst is not None:
                self.hc_gain_stats.add("hc/amax_gain_row_worst", worst[0])
                self.hc_gain_stats.add("hc/amax_gain_col_worst", worst[1])
        hidden_states = self.final_norm(self.read_out(streams))
        if all_hidden is not None:
            all_hidden[-1] = hidden_states
        return self.family.output_class(
            last_hidden_state=hidden_states,
            hidden_states=select_hidden_states(all_hidden, output_hidden_states),
            **{CACHE_KWARG: past_key_values},
        )

    def _run_layers(
        self,
        streams,
        masks,
        layer_types,
        position_embeddings,
        position_ids,
        past_key_values,
        use_cache,
        all_hidden,
        kwargs,
        recompute=None,
        gain=None,
    ):
        for i, decoder_layer in enumerate(self.stack_layers[: self.config.num_hidden_layers]):
            streams = decoder_layer(
                streams,
                attention_mask=masks[layer_types[i]],
                position_embeddings=position_embeddings[layer_types[i]],
                position_ids=position_ids,
                use_cache=use_cache,
                hc_recompute=recompute,
                hc_gain=gain,
                **{CACHE_KWARG: past_key_values},  # the name the stock layer's checkpointing clears
                **kwargs,
            )
            if all_hidden is not None:
                all_hidden.append(self.read_out(streams))
        return streams


class HCForCausalLMMixin(HCPreTrainedMixin, CausalLMMixin):
    """The stock causal-LM head on top of the hyper-connection decoder; stock forward and `generate()`."""


__all__ = ["HyperConnection", "deepseek_comb", "sinkhorn_knopp"]


# --- begin generated classes (python -m interlayer.models.generate_classes --fix): do not edit ---
# each class has an `__init__` of its own: generate_classes.py says why
class LlamaMHCDecoderLayer(HCDecoderLayerMixin, LlamaDecoderLayer):
    family = LLAMA

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class LlamaMHCModel(HCModelMixin, LlamaModel):
    config_class = LlamaMHCConfig
    family = LLAMA
    decoder_layer_class = LlamaMHCDecoderLayer
    _no_split_modules = ["LlamaMHCDecoderLayer"]
    _can_record_outputs = {"attentions": LlamaAttention}

    def __init__(self, config):
        super().__init__(config)


class LlamaMHCForCausalLM(HCForCausalLMMixin, LlamaForCausalLM, GenerationMixin):
    config_class = LlamaMHCConfig
    family = LLAMA
    base_class = LlamaMHCModel
    _no_split_modules = ["LlamaMHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(LlamaMHCConfig, AutoModel=LlamaMHCModel, AutoModelForCausalLM=LlamaMHCForCausalLM)


class Qwen3MHCDecoderLayer(HCDecoderLayerMixin, Qwen3DecoderLayer):
    family = QWEN3

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen3MHCModel(HCModelMixin, Qwen3Model):
    config_class = Qwen3MHCConfig
    family = QWEN3
    decoder_layer_class = Qwen3MHCDecoderLayer
    _no_split_modules = ["Qwen3MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Qwen3Attention}

    def __init__(self, config):
        super().__init__(config)


class Qwen3MHCForCausalLM(HCForCausalLMMixin, Qwen3ForCausalLM, GenerationMixin):
    config_class = Qwen3MHCConfig
    family = QWEN3
    base_class = Qwen3MHCModel
    _no_split_modules = ["Qwen3MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Qwen3MHCConfig, AutoModel=Qwen3MHCModel, AutoModelForCausalLM=Qwen3MHCForCausalLM)


class Qwen2MHCDecoderLayer(HCDecoderLayerMixin, Qwen2DecoderLayer):
    family = QWEN2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen2MHCModel(HCModelMixin, Qwen2Model):
    config_class = Qwen2MHCConfig
    family = QWEN2
    decoder_layer_class = Qwen2MHCDecoderLayer
    _no_split_modules = ["Qwen2MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Qwen2Attention}

    def __init__(self, config):
        super().__init__(config)


class Qwen2MHCForCausalLM(HCForCausalLMMixin, Qwen2ForCausalLM, GenerationMixin):
    config_class = Qwen2MHCConfig
    family = QWEN2
    base_class = Qwen2MHCModel
    _no_split_modules = ["Qwen2MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Qwen2MHCConfig, AutoModel=Qwen2MHCModel, AutoModelForCausalLM=Qwen2MHCForCausalLM)


class MistralMHCDecoderLayer(HCDecoderLayerMixin, MistralDecoderLayer):
    family = MISTRAL

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class MistralMHCModel(HCModelMixin, MistralModel):
    config_class = MistralMHCConfig
    family = MISTRAL
    decoder_layer_class = MistralMHCDecoderLayer
    _no_split_modules = ["MistralMHCDecoderLayer"]
    _can_record_outputs = {"attentions": MistralAttention}

    def __init__(self, config):
        super().__init__(config)


class MistralMHCForCausalLM(HCForCausalLMMixin, MistralForCausalLM, GenerationMixin):
    config_class = MistralMHCConfig
    family = MISTRAL
    base_class = MistralMHCModel
    _no_split_modules = ["MistralMHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(MistralMHCConfig, AutoModel=MistralMHCModel, AutoModelForCausalLM=MistralMHCForCausalLM)


class Phi3MHCDecoderLayer(HCDecoderLayerMixin, Phi3DecoderLayer):
    family = PHI3

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Phi3MHCModel(HCModelMixin, Phi3Model):
    config_class = Phi3MHCConfig
    family = PHI3
    decoder_layer_class = Phi3MHCDecoderLayer
    _no_split_modules = ["Phi3MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Phi3Attention}

    def __init__(self, config):
        super().__init__(config)


class Phi3MHCForCausalLM(HCForCausalLMMixin, Phi3ForCausalLM, GenerationMixin):
    config_class = Phi3MHCConfig
    family = PHI3
    base_class = Phi3MHCModel
    _no_split_modules = ["Phi3MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Phi3MHCConfig, AutoModel=Phi3MHCModel, AutoModelForCausalLM=Phi3MHCForCausalLM)


class Olmo2MHCDecoderLayer(HCDecoderLayerMixin, Olmo2DecoderLayer):
    family = OLMO2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Olmo2MHCModel(HCModelMixin, Olmo2Model):
    config_class = Olmo2MHCConfig
    family = OLMO2
    decoder_layer_class = Olmo2MHCDecoderLayer
    _no_split_modules = ["Olmo2MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Olmo2Attention}

    def __init__(self, config):
        super().__init__(config)


class Olmo2MHCForCausalLM(HCForCausalLMMixin, Olmo2ForCausalLM, GenerationMixin):
    config_class = Olmo2MHCConfig
    family = OLMO2
    base_class = Olmo2MHCModel
    _no_split_modules = ["Olmo2MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Olmo2MHCConfig, AutoModel=Olmo2MHCModel, AutoModelForCausalLM=Olmo2MHCForCausalLM)


class Gemma2MHCDecoderLayer(HCDecoderLayerMixin, Gemma2DecoderLayer):
    family = GEMMA2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Gemma2MHCModel(HCModelMixin, Gemma2Model):
    config_class = Gemma2MHCConfig
    family = GEMMA2
    decoder_layer_class = Gemma2MHCDecoderLayer
    _no_split_modules = ["Gemma2MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Gemma2Attention}

    def __init__(self, config):
        super().__init__(config)


class Gemma2MHCForCausalLM(HCForCausalLMMixin, Gemma2ForCausalLM, GenerationMixin):
    config_class = Gemma2MHCConfig
    family = GEMMA2
    base_class = Gemma2MHCModel
    _no_split_modules = ["Gemma2MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Gemma2MHCConfig, AutoModel=Gemma2MHCModel, AutoModelForCausalLM=Gemma2MHCForCausalLM)


class Gemma3TextMHCDecoderLayer(HCDecoderLayerMixin, Gemma3DecoderLayer):
    family = GEMMA3_TEXT

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Gemma3TextMHCModel(HCModelMixin, Gemma3TextModel):
    config_class = Gemma3TextMHCConfig
    family = GEMMA3_TEXT
    decoder_layer_class = Gemma3TextMHCDecoderLayer
    _no_split_modules = ["Gemma3TextMHCDecoderLayer"]
    _can_record_outputs = {"attentions": Gemma3Attention}

    def __init__(self, config):
        super().__init__(config)


class Gemma3TextMHCForCausalLM(HCForCausalLMMixin, Gemma3ForCausalLM, GenerationMixin):
    config_class = Gemma3TextMHCConfig
    family = GEMMA3_TEXT
    base_class = Gemma3TextMHCModel
    _no_split_modules = ["Gemma3TextMHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Gemma3TextMHCConfig, AutoModel=Gemma3TextMHCModel, AutoModelForCausalLM=Gemma3TextMHCForCausalLM
)


class GPT2MHCDecoderLayer(HCDecoderLayerMixin, GPT2Block):
    family = GPT2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class GPT2MHCModel(HCModelMixin, GPT2Model):
    config_class = GPT2MHCConfig
    family = GPT2
    decoder_layer_class = GPT2MHCDecoderLayer
    _no_split_modules = ["GPT2MHCDecoderLayer"]
    _can_record_outputs = {"attentions": GPT2Attention}

    def __init__(self, config):
        super().__init__(config)


class GPT2MHCForCausalLM(HCForCausalLMMixin, GPT2LMHeadModel, GenerationMixin):
    config_class = GPT2MHCConfig
    family = GPT2
    base_class = GPT2MHCModel
    _no_split_modules = ["GPT2MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(GPT2MHCConfig, AutoModel=GPT2MHCModel, AutoModelForCausalLM=GPT2MHCForCausalLM)


__all__ += [
    "GPT2MHCForCausalLM",
    "GPT2MHCModel",
    "Gemma2MHCForCausalLM",
    "Gemma2MHCModel",
    "Gemma3TextMHCForCausalLM",
    "Gemma3TextMHCModel",
    "LlamaMHCForCausalLM",
    "LlamaMHCModel",
    "MistralMHCForCausalLM",
    "MistralMHCModel",
    "Olmo2MHCForCausalLM",
    "Olmo2MHCModel",
    "Phi3MHCForCausalLM",
    "Phi3MHCModel",
    "Qwen2MHCForCausalLM",
    "Qwen2MHCModel",
    "Qwen3MHCForCausalLM",
    "Qwen3MHCModel",
]
# --- end generated classes ---
