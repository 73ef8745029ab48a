"""The fast implementation of hyper-connections (`hc_implementation="fast"`, the default): the function of
`HyperConnection.forward` in modeling_hyper_connections.py, which is its specification, computed with less time and
memory, plus the statistics and the composite-gain tracking that `mechanism_stats()` reports.

`FastHyperConnectionMixin` replaces the `coefficients` and `forward` of a `HyperConnection`, and
`FastGatedResidualMixin` the `forward` of a `GatedResidual` (same parameters, so the same checkpoints), as `kernels`'
`kernelize` replaces the forward of a layer marked with `use_kernel_forward_from_hub` in transformers: a layer whose
config says `hc_implementation="fast"` is built as modeling_hyper_connections.py's `FastHyperConnection` or
`FastGatedResidual` (the mixin before the equation's class, `hyper_connection_class`), and the eager equation is what
the tests hold it to (`test_fast_implementation_equals_the_eager_equation` in tests/mechanisms/test_hyper_connections.py
and test_hyper_connections_forms.py: outputs and every gradient, in every mode, with and without the stream
recomputation, under gradient checkpointing, `hc_fused`, K = 1..8 in the 2026 forms). What it does differently, and
why (docs/hyper_connections.md, "What the implementation does about cost"):

- read-in and mixing as one product `[H_pre; H_res] @ h`, and the write as one `addcmul`, with hand-written backward
  passes (`_ReadMix`, `_Write`) that keep only their inputs and write each gradient once;
- `StreamRecomputation` (`hc_recompute_streams`): the K-wide streams are kept for backward only at every
  ~sqrt(2L)-th sublayer and rebuilt bit for bit from there;
- `RMSNorm(h) W` computed as `(h W) / rms(h)` (no normalised copy kept) and, for per-token coefficients, Sinkhorn's
  rounds recomputed in backward instead of kept;
- `hc_fused`: the input-dependent mHC coefficients as one function compiled with `torch.compile(fullgraph=True)`;
  without grad, the coefficients, their rounding and the read-in and mixing product as one such function
  (`_fused_mhc_read`), which a decoded token at batch 1 runs as one inductor graph called directly
  (`zoo_common.Fused`); fp32 streams on a CPU take the boundary's read and write as two C++ functions instead
  (hyper_connections_cpu.py), whose coefficients the statistics split once per forward;
- the gated residual's read (its norms, gate and mean) computed again in backward from its inputs (`_GatedRead`)
  instead of keeping its K-wide intermediates;
- in `generate()`, static coefficients computed once for the call (`ForwardPassMachinery.reusing_static_maps`);
- `CompositeGain` and the deferred statistics: every sublayer hands its coefficients over, and the mean
  coefficients and the worst composite gain of the forward are computed once at its end (`ForwardPassMachinery`).
- on CUDA (`hc_kernels`, the default), the boundary with the Triton kernels instead: `forward` hands over to
  hyper_connections_kernels.py where `kernels_for` says so, with the same stream recomputation and statistics.

This file imports the maths it shares with the equation from hyper_connections_maths.py, never the modeling file,
which imports it (no cycle); `save_pretrained` ships the three files together.
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

from .hyper_connections_cpu import mhc_read as cpu_mhc_read
from .hyper_connections_cpu import mhc_write as cpu_mhc_write
from .hyper_connections_cpu import read_plan as cpu_read_plan
from .hyper_connections_cpu import split_coefficients
from .hyper_connections_kernels import kernels_for
from .hyper_connections_maths import COEFFICIENT_EPS, constrain, gated_read, mhc_mixing
from .zoo_common import Fused, StatsAccumulator


def _recomputed_mixing(res, iters: int, variant: str, eps: float):
    """`mhc_mixing` whose normalisation rounds are recomputed in backward (only the logits saved)."""
    return checkpoint(mhc_mixing, res, iters, variant, eps, use_reentrant=False)


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
    """`[..., 1, D]` when the K streams are views of one tensor (the expanded embeddings), else None. Never under
    compilation: a stride is symbolic there once shapes are dynamic (a layer compiled on its own, as regional
    compilation does, meets the streams of every layer), and dynamo cannot branch on it."""
    if torch.compiler.is_compiling():
        return None
    return streams[..., :1, :] if streams.shape[-2] > 1 and streams.stride(-2) == 0 else None


def _read_mix(maps: torch.Tensor, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(H_pre h, H_res h)`: rows 0 and 1.. of `_product` (views of it); a form without mixing (independent HC) has
    the maps `[H_pre]` alone, one row, and its streams pass unmixed."""
    product = _product(maps, streams)
    return product[..., 0, :], product[..., 1:, :] if maps.shape[-2] > 1 else streams


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


def _rebuild(streams: torch.Tensor, maps: torch.Tensor | None, post: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """A sublayer's output streams from its input streams, its maps `[H_pre; H_res]` (None for a form without mixing),
    `H_post` and output, as the forward pass computed them (what the stream recomputation runs)."""
    return _write(streams if maps is None else _read_mix(maps, streams)[1], post, out)


class _ReadMix(torch.autograd.Function):
    """`(H_pre h, H_res h)` from the maps `[H_pre; H_res]` in one product: the sublayer input `[..., D]` (a copy, so
    that what the sublayer keeps for backward does not hold the product) and the mixed streams `[..., K, D]` (a view;
    the streams themselves, as an alias, for maps `[H_pre]` without mixing). Backward writes each gradient once:
    autograd's product and slices would build the product's gradient from zeros and copies, and a shared map's
    gradient through `einsum`'s transposed copies. Only the inputs are kept."""

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
            grad_maps = _map_grad(grad_x.unsqueeze(-2), streams_, shared)
            if maps.shape[-2] > 1:
                grad_maps = torch.cat([grad_maps, _map_grad(grad_mixed, streams_, shared)], dim=-2)
            grad_maps = grad_maps.to(maps.dtype)
        if ctx.needs_input_grad[1]:
            read_in = (maps_[..., 0, :].unsqueeze(-1), grad_x.unsqueeze(-2))
            if maps.shape[-2] > 1:
                grad_streams = torch.matmul(maps_[..., 1:, :].mT, grad_mixed).addcmul_(*read_in)
            else:  # unmixed: the mixed streams' gradient passes to the streams as it is
                grad_streams = torch.addcmul(grad_mixed, *read_in)
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

    def read(self, maps: torch.Tensor | None, post: torch.Tensor, rebuild=None) -> None:
        """The sublayer has taken what it saves of its input streams; record what rebuilds its output:
        `rebuild(streams, maps, post, out)`, by default the read-in and mixing product (None for a form without
        mixing: the streams pass unmixed) and the write."""
        self.current = None
        self.steps.append((rebuild or _rebuild, None if maps is None else maps.detach(), post.detach()))

    def wrote(self, out: torch.Tensor) -> None:
        self.steps[-1] = (*self.steps[-1], out.detach())

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
                    rebuild, maps, post, out = self.steps[i]
                    streams = rebuild(streams, maps, post, out)
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
        # per sublayer, in order: (hyper-connection, pre, post, res), or (hyper-connection, coefficients) for
        # `record_coefficients`
        self.records: list[tuple] = []
        self.closed = False

    def record(self, hc, pre: torch.Tensor, post: torch.Tensor, res: torch.Tensor) -> None:
        if torch.is_grad_enabled():  # without grad (decoding) nothing is attached to detach
            pre, post, res = pre.detach(), post.detach(), res.detach()
        self.records.append((hc, pre, post, res))

    def record_coefficients(self, hc, coefficients: torch.Tensor) -> None:
        """`record` of a sublayer's coefficients in one tensor without grad, `[..., K (K + 2)]`: each token's `H_pre`,
        `H_post` and `H_res` (flattened), as the C++ read gives them (split at `close`: one split for every sublayer
        when all are recorded so, instead of three views each: `split_coefficients`)."""
        self.records.append((hc, coefficients))

    @staticmethod
    def prefix_products(res: torch.Tensor) -> torch.Tensor:
        """`P[i] = res[i] @ ... @ res[0]` for `res` `[n, ..., K, K]` (Hillis-Steele scan: the later block times the
        earlier prefix)."""
        shift = 1
        while shift < res.shape[0]:
            res = torch.cat([res[:shift], torch.matmul(res[shift:], res[:-shift])])
            shift *= 2
        return res

    @staticmethod
    def names(hcs: list, stats: "DeferredStatsAccumulator") -> dict[str, tuple[str, ...]]:
        """The statistics' names of the sublayers `hcs`, `{"pre" | "post" | "res": names}`, made once per model and
        sequence of sublayers (kept in `stats.name_cache`, the model's accumulator's)."""
        key = tuple(map(id, hcs))
        if key not in stats.name_cache:
            prefixes = [f"hc/L{hc.layer_idx}/{hc.sublayer}" for hc in hcs]
            stats.name_cache[key] = {what: tuple(f"{p}/{what}" for p in prefixes) for what in ("pre", "post", "res")}
        return stats.name_cache[key]

    @torch.no_grad()
    def close(self, attention_mask, stats: "DeferredStatsAccumulator") -> torch.Tensor | None:
        """Records each sublayer's mean coefficients in `stats` (the model's: three stacked additions, not three per
        sublayer) and returns the worst `(row, column)` gain over depth and over the tokens that `attention_mask` (2-d,
        when given) keeps. Closed, it is not updated again (gradient checkpointing runs the layers again in
        backward)."""
        self.closed = True
        records, self.records = self.records, []
        if not records:
            return None
        hcs = [r[0] for r in records]
        k = hcs[0].streams
        if all(len(r) == 2 for r in records):
            pre, post, res = split_coefficients(torch.stack([r[1] for r in records]).float(), k)
        else:
            records = [r if len(r) == 4 else (r[0], *split_coefficients(r[1], k)) for r in records]
            pre, post, res = (torch.stack([r[i] for r in records]).float() for i in (1, 2, 3))
        magnitude = self.prefix_products(res).abs()
        worst = torch.stack([magnitude.sum(-1).amax(-1), magnitude.sum(-2).amax(-1)], dim=-1).amax(0)
        if pre.dim() > 2:  # per-token coefficients: their mean over tokens
            pre, post = pre.flatten(1, -2).mean(1), post.flatten(1, -2).mean(1)
        if res.dim() > 3:
            res = res.flatten(1, -3).mean(1)
        names = self.names(hcs, stats)
        for what, values in (("pre", pre), ("post", post), ("res", res)):
            stats.add_each(names[what], values)
        if worst.dim() == 1:
            return worst
        if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2:
            keep = attention_mask[:, -worst.shape[-2] :].bool().unsqueeze(-1)
            worst = worst.masked_fill(~keep, 0.0)  # gains are >= 0: padding never wins, with no host sync
        return worst.flatten(0, -2).amax(0)


class DeferredStatsAccumulator(StatsAccumulator):
    """A `StatsAccumulator` that keeps what is added in a list and sums it when read (or every 256 forwards): one
    stacked sum instead of an addition per forward pass. `add_each` records statistics of one shape together (the
    hyper-connections' coefficients of every sublayer: one call a forward instead of one per sublayer, whose Python
    cost was about 3 ms a forward at the SmolLM2 shape, a tenth of a decoded token)."""

    FOLD_EVERY = 256

    def __init__(self):
        super().__init__()
        self._pending: dict[tuple[str, ...], list[torch.Tensor]] = {}  # names -> values stacked along them
        self._eval_names: dict[tuple[str, ...], tuple[str, ...]] = {}  # names -> under `eval/`, made once
        self.name_cache: dict = {}  # for a caller that makes its names once per model (`CompositeGain.names`)

    @torch.no_grad()
    def add(self, name: str, value: torch.Tensor) -> None:
        self.add_each((name,), value.unsqueeze(0))

    @torch.no_grad()
    def add_each(self, names: tuple[str, ...], values: torch.Tensor) -> None:
        """`add(names[i], values[i])` for every `i`, as one record; nothing in a compiled or exported forward."""
        recorded = self._named(names)
        if recorded is None:
            return
        if len(names) != values.shape[0]:
            raise ValueError(f"add_each: {len(names)} names for {values.shape[0]} values along dimension 0")
        names = recorded
        pending = self._pending.setdefault(names, [])
        pending.append(values.detach())
        if len(pending) >= self.FOLD_EVERY:
            self._fold(names)

    def _named(self, names: tuple[str, ...]) -> tuple[str, ...] | None:
        """As `StatsAccumulator._named`, with the names under `eval/` made once."""
        if self.training or torch.compiler.is_compiling():
            return super()._named(names)
        if names not in self._eval_names:
            self._eval_names[names] = super()._named(names)
        return self._eval_names[names]

    @torch.no_grad()
    def _fold(self, names: tuple[str, ...]) -> None:
        values = self._pending.pop(names)
        totals = torch.stack(values).float().sum(0)
        for name, total in zip(names, totals.unbind(0)):
            if name in self._sums:
                self._sums[name] = self._sums[name] + total
                self._counts[name] += len(values)
            else:
                self._sums[name], self._counts[name] = total, len(values)

    def read(self, reset: bool = True, split: str | None = None) -> dict[str, float]:
        for names in list(self._pending):
            self._fold(names)
        return super().read(reset=reset, split=split)


class RunningMaxAccumulator(StatsAccumulator):
    """A `StatsAccumulator` that keeps the largest value since the last read instead of the mean (for worst cases)."""

    def _record(self, name: str, value: torch.Tensor) -> None:
        value = value.float()
        self._sums[name] = torch.maximum(self._sums[name], value) if name in self._sums else value.clone()
        self._counts[name] = 1


def _mhc_coefficients(flat, weight, pre, post, res, scale, k: int, iters: int, recompute_sinkhorn: bool, form: tuple):
    """Input-dependent mHC and independent-HC coefficients from the flattened fp32 streams `[..., K*D]` and the fp32
    parameters (`res` None without mixing): `z = Linear(RMSNorm(flat))` split into its parts, each added to its static
    logits with its learned scale, then the constraints of `form`, `(mode, variant, eps, magnitude)` (`constrain`)."""
    z = nn.functional.linear(flat, weight) * _rms_scale(flat)
    pre = pre + scale[0] * z[..., :k]
    post = post + scale[1] * z[..., k : 2 * k]
    if res is not None:
        res = res + scale[2] * z[..., 2 * k :].unflatten(-1, (k, k))
    mixing = _recomputed_mixing if recompute_sinkhorn else mhc_mixing
    mode, variant, eps, magnitude = form
    return constrain(pre, post, res, mode, variant, iters, eps, magnitude, mixing)


# `hc_fused`: the coefficients as one compiled graph, eager where compiling cannot run (`Fused`); the tokens (`flat`
# is `[tokens, K*D]`) are a symbol, so one graph serves every batch and length (a single token has its own). The width
# stays a constant: a symbolic width made the single-token call about 10 us slower
_fused_mhc_coefficients = Fused(_mhc_coefficients, dynamic_dims={"flat": (0,)})


def _per_token(fn, streams: torch.Tensor, *args) -> tuple:
    """`fn(flat, *args)` of the streams `[..., K, D]` flattened in fp32 to `[tokens, K*D]` (the coefficient functions
    compute on that), its outputs (None or `[tokens, ...]`) given back the streams' leading shape."""
    flat = streams.float().flatten(-2)
    made = fn(flat.flatten(0, -2), *args)
    return tuple(None if c is None else c.unflatten(0, flat.shape[:-1]) for c in made)


def _mhc_read(streams, weight, pre, post, res, scale, k: int, iters: int, form: tuple):
    """Without grad, for input-dependent mHC: the coefficients of `streams` `[batch, seq, K, D]` from the parameters
    as they are (`_mhc_coefficients` in fp32), rounded to the streams' dtype, and the read-in and mixing product
    (`_read_mix`): `(x, mixed, pre, post, res)`, what `FastHyperConnectionMixin.forward` computes with grad in steps."""
    params = (weight.float(), pre.float(), post.float(), res.float(), scale.float())
    made = _per_token(_mhc_coefficients, streams, *params, k, iters, False, form)
    pre, post, res = (c.to(streams.dtype) for c in made)
    return *_read_mix(torch.cat([pre.unsqueeze(-2), res], dim=-2), streams), pre, post, res


# a decoded token's boundary up to the sublayer in one call (its ~20 eager operations cost 2-3 times the call);
# fp32 streams on a CPU are read by one C++ function instead (hyper_connections_cpu.py)
_fused_mhc_read = Fused(_mhc_read, dynamic_dims={"streams": (0, 1)})


class ForwardPassMachinery:
    """What a fast hyper-connection model runs around its layers in one eager forward pass, shared by its
    hyper-connections (`FastHyperConnection.machinery`): the stream recomputation and the composite-gain tracker of
    the forward under way, both None outside one (so also when gradient checkpointing reruns a layer in backward:
    statistics are recorded once per forward). Compiled and exported forwards run without it (Python-side state that
    torch.compile and torch.export cannot trace: same result; the streams are kept for backward and no statistics are
    recorded)."""

    def __init__(self):
        self.recompute: StreamRecomputation | None = None
        self.gain: CompositeGain | None = None
        self.compiling: bool | None = None  # `Fused.allowed()`, asked once for the forward under way
        self.static_maps: dict | None = None  # inside `reusing_static_maps`: {(hyper-connection, dtype): maps}

    @contextlib.contextmanager
    def reusing_static_maps(self):
        """Inside (one `generate()` call), the static coefficients of each hyper-connection are computed by its first
        forward and reused by the next ones, since no parameter changes during a call. Nothing outlives it: a value
        kept across calls would need to know when a parameter changes, and a write through `.data` (as DeepSpeed ZeRO
        makes every step) moves neither its storage pointer nor its version counter. Nested calls share the outermost
        one's."""
        if self.static_maps is not None:
            yield
            return
        self.static_maps = {}
        try:
            yield
        finally:
            self.static_maps = None

    @contextlib.contextmanager
    def around_layers(self, model, attention_mask):
        """Run the layers of `model` inside: then record the coefficients' means in `model.hc_coefficient_stats` and
        the worst composite gain in `model.hc_gain_stats`."""
        config = model.config
        recompute = None
        if config.hc_recompute_streams and torch.is_grad_enabled() and not model.gradient_checkpointing:
            recompute = StreamRecomputation(every=math.ceil(math.sqrt(2 * config.num_hidden_layers)))
        self.recompute, self.gain, self.compiling = recompute, CompositeGain(), Fused.allowed()
        try:
            with recompute if recompute is not None else contextlib.nullcontext():
                yield
        finally:
            gain, self.recompute, self.gain, self.compiling = self.gain, None, None, None
        worst = gain.close(attention_mask, model.hc_coefficient_stats)
        if worst is not None:
            model.hc_gain_stats.add("hc/amax_gain_row_worst", worst[0])
            model.hc_gain_stats.add("hc/amax_gain_col_worst", worst[1])


class FastHyperConnectionMixin:
    """The fast `coefficients` and `forward` of a `HyperConnection` (put before it: modeling_hyper_connections.py's
    `FastHyperConnection`): the same parameters and, to float rounding, the same function (`HyperConnection.forward`
    is the specification). Its mean coefficients are recorded through the forward pass's `CompositeGain`."""

    def __init__(self, config, layer_idx: int, sublayer: str):
        super().__init__(config, layer_idx, sublayer)
        # compiled where it wins: input-dependent mHC (Sinkhorn's rounds); dynamic HC's few operations cost less
        # eagerly than a compiled call. Not at K = 1: Sinkhorn of a 1 x 1 matrix has no reduction left to bound
        # inductor's fusion, whose expression then doubles with every round (it did not compile in 5 minutes)
        self.fused = config.hc_fused and self.mode == "mhc" and self.dynamic and self.streams > 1
        self.use_kernels = config.hc_kernels  # on CUDA, the Triton kernels of hyper_connections_kernels.py
        self.machinery = ForwardPassMachinery()  # the model's, shared by all its hyper-connections, once it is built

    def _reused(self, make, kind):
        """`make()`, a function of the parameters only (static coefficients of `kind`: a dtype, a path), computed
        once per `generate()` call (`ForwardPassMachinery.reusing_static_maps`: no parameter changes during one) and
        at every other forward, so that whatever changes a parameter reaches the next forward."""
        reused = self.machinery.static_maps
        if reused is None or torch.is_grad_enabled() or torch.compiler.is_compiling():
            return make()
        key = (self, kind)
        if key not in reused:
            reused[key] = make()
        return reused[key]

    def _static_maps(self, streams: torch.Tensor):
        """`_maps(streams)` of static coefficients (a function of the parameters and the streams' dtype only)."""
        return self._reused(lambda: self._maps(streams), streams.dtype)

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
        when input-dependent; `H_res` None without mixing (independent HC). Computed in fp32 (whatever the dtype of
        the streams and the parameters) and returned in the streams' dtype. Static coefficients are computed once per
        `generate()` call (`_static_maps`)."""
        if not self.dynamic:
            return self._static_maps(streams)[:3]
        return self._coefficients(streams)

    def _coefficients(self, streams: torch.Tensor):
        with torch.autocast(device_type=streams.device.type, enabled=False):
            pre, post = self.pre.float(), self.post.float()
            res = self.res.float() if self.mixes else None
            if self.mode == "dynamic":
                d_pre, d_post, d_res = self._dynamic_parts(streams.float())
                scale = self.dynamic_scale.float()
                pre, post, res = pre + scale[0] * d_pre, post + scale[1] * d_post, res + scale[2] * d_res
            elif self.dynamic:  # fused: one compiled graph (Sinkhorn's backward in it too, so nothing to recompute)
                fused = self.fused and self._compiled(_fused_mhc_coefficients)
                fn = _fused_mhc_coefficients.run if fused else _mhc_coefficients
                weight, scale = self.dynamic_proj.weight.float(), self.dynamic_scale.float()
                recompute = torch.is_grad_enabled() and not fused
                args = (weight, pre, post, res, scale, self.streams, self.sinkhorn_iters, recompute, self.form)
                pre, post, res = _per_token(fn, streams, *args)
            elif self.mode == "mhc":
                pre, post, res = constrain(
                    pre, post, res, self.mode, self.variant, self.sinkhorn_iters, self.eps, self.magnitude
                )
        dtype = streams.dtype
        return pre.to(dtype), post.to(dtype), None if res is None else res.to(dtype)

    def _compiled(self, fused: Fused) -> bool:
        """Whether the `Fused` function `fused` runs compiled now (`Fused.active`), asked of the forward pass under way
        (`machinery.compiling`: once, not at each of its sublayers) or, outside one (a layer run on its own or compiled
        on its own, gradient checkpointing's recomputation in backward), now."""
        compiling = self.machinery.compiling
        if compiling is None or torch.compiler.is_compiling():
            return fused.active()
        return compiling and fused.unavailable is None

    @property
    def form(self) -> tuple:
        """`(mode, variant, eps, magnitude)`: what the coefficient functions' constraints (`constrain`) take."""
        return (self.mode, self.variant, self.eps, self.magnitude)

    def _read_params(self) -> tuple:
        """The arguments of `_mhc_read` after the streams: the parameters as they are, then the settings."""
        params = (self.dynamic_proj.weight, self.pre, self.post, self.res, self.dynamic_scale)
        return (*params, self.streams, self.sinkhorn_iters, self.form)

    def _cpu_read_plan(self):
        """What the C++ read takes besides the streams (`cpu_read_plan`), or None where it does not run."""
        return cpu_read_plan(*self._read_params())

    def _fused_read(self, streams: torch.Tensor):
        """`(x, mixed, H_pre, H_post, H_res)` without grad, for input-dependent mHC, as one compiled call
        (`_fused_mhc_read`)."""
        if not torch.is_autocast_enabled(streams.device.type):
            return _fused_mhc_read.run(streams, *self._read_params())
        with torch.autocast(device_type=streams.device.type, enabled=False):
            return _fused_mhc_read.run(streams, *self._read_params())

    def _maps(self, streams: torch.Tensor):
        """`(H_pre, H_post, H_res, [H_pre; H_res])`, the last the maps of the read-in and mixing product (`[H_pre]`
        alone without mixing)."""
        pre, post, res = self._coefficients(streams)
        return pre, post, res, pre.unsqueeze(-2) if res is None else torch.cat([pre.unsqueeze(-2), res], dim=-2)

    def forward(self, streams: torch.Tensor, branch, input_norm=None) -> torch.Tensor:
        """`h' = H_res h + H_post^T branch(H_pre h)` for streams `[batch, seq, K, hidden]` (`H_res h` = `h` without
        mixing), with the forward pass's stream recomputation and composite-gain tracker (`machinery`) when it uses
        them; statistics are recorded with the tracker, once per eager forward. `input_norm` is not used (the branch
        applies it)."""
        recompute, gain = self.machinery.recompute, self.machinery.gain
        if torch.compiler.is_compiling():  # a layer compiled on its own (regional compilation): Python-side state
            recompute = gain = None  # that would make dynamo compile every layer anew (its list lengths are guards)
        kernels = kernels_for(self, streams)
        if kernels is not None:  # on CUDA: the boundary's Triton kernels
            return kernels.forward(self, streams, branch, recompute, gain)
        grad = torch.is_grad_enabled()
        fused = not grad and self.fused and self._compiled(_fused_mhc_read)
        if fused and recompute is None:  # fp32 streams on a CPU: the boundary as two C++ functions
            read = cpu_mhc_read(streams, self._reused(self._cpu_read_plan, "cpu read"))
            if read is not None:
                x, mixed, coefficients = read
                if gain is not None and not gain.closed:
                    gain.record_coefficients(self, coefficients)
                return cpu_mhc_write(mixed, coefficients, branch(x))
        if recompute is not None:
            recompute.reading(streams)
        if fused:
            x, mixed, pre, post, res = self._fused_read(streams)
            maps = None
        elif self.dynamic:
            pre, post, res, maps = self._maps(streams)
        else:
            pre, post, res, maps = self._static_maps(streams)
        if gain is not None and not gain.closed:
            gain.record(self, pre, post, _identity(self.streams, pre) if res is None else res)
        # read-in and mixing in one product: row 0 of [H_pre; H_res] @ h is the sublayer input, rows 1.. the mixed
        # streams
        if maps is not None:
            x, mixed = _ReadMix.apply(maps, streams) if grad else _read_mix(maps, streams)
        if recompute is not None:
            recompute.read(maps if self.mixes else None, post)
        out = branch(x)
        if recompute is not None:
            recompute.wrote(out)
        return _Write.apply(mixed, post, out) if grad else _write(mixed, post, out)


def _identity(k: int, like: torch.Tensor) -> torch.Tensor:
    """`H_res` of a form without mixing, as the statistics record it: the K x K identity."""
    return torch.eye(k, dtype=like.dtype, device=like.device)


class _GatedRead(torch.autograd.Function):
    """The gated residual's read, `read(streams, *weights) -> (x, write, gate)` (`FastGatedResidualMixin._reader`),
    keeping only its inputs for backward and computing it again there: autograd would keep about six K-wide
    intermediates of every sublayer (the normalised streams, the gate and their products). The streams are saved
    with `save_for_backward`, so that the stream recomputation's hooks replace them too. The gate is returned for the
    statistics only, without gradient."""

    @staticmethod
    def forward(ctx, read, streams, *weights):
        ctx.read = read
        device = streams.device.type
        ctx.autocast = {
            "device_type": device,
            "dtype": torch.get_autocast_dtype(device),
            "enabled": torch.is_autocast_enabled(device),
        }
        ctx.save_for_backward(streams, *weights)
        x, write, gate = read(streams, *weights)
        ctx.mark_non_differentiable(gate)
        return x, write, gate

    @staticmethod
    def backward(ctx, grad_x, grad_write, _):
        saved = ctx.saved_tensors
        inputs = [t.detach().requires_grad_(need) for t, need in zip(saved, ctx.needs_input_grad[1:])]
        wanted = [t for t in inputs if t.requires_grad]
        with torch.enable_grad(), torch.autocast(**ctx.autocast):
            x, write, _ = ctx.read(*inputs)
        grads = iter(torch.autograd.grad((x, write), wanted, (grad_x, grad_write), allow_unused=True))
        return (None, *(next(grads) if t.requires_grad else None for t in inputs))


class FastGatedResidualMixin:
    """The fast `forward` of a `GatedResidual` (put before it: modeling_hyper_connections.py's `FastGatedResidual`):
    the same parameters and function (`GatedResidual.forward` is the specification), its read computed again in
    backward instead of kept (`_GatedRead`), the write through `_Write`, the stream recomputation, and its statistics
    recorded through the forward pass's `CompositeGain`: as `pre_k` the mean share of stream `k`'s normalised stream
    in the read (`gate_k G_k / K`), as `post_k` its write weight, and the identity as `H_res`."""

    def __init__(self, config, layer_idx: int, sublayer: str):
        super().__init__(config, layer_idx, sublayer)
        self.machinery = ForwardPassMachinery()  # the model's, shared by all its hyper-connections, once it is built

    def _reader(self, input_norm):
        """`(read, weights)`: `read(streams, *weights) -> (x, write, gate)` (`GatedResidual.read` as a function of the
        tensors it reads) and those tensors, the input norm's parameters included (their gradients flow when the base
        trains)."""
        names = [name for name, _ in input_norm.named_parameters()]

        def read(streams, gain, down, up, inject, *norm_weights):
            normed = torch.func.functional_call(input_norm, dict(zip(names, norm_weights)), (streams,))
            with torch.autocast(device_type=streams.device.type, enabled=False):
                return gated_read(normed.float() * gain.float(), down.float(), up.float(), inject.float())

        weights = (self.norm_gain, self.read_down.weight, self.read_up.weight, self.inject.weight)
        return read, (*weights, *(p for _, p in input_norm.named_parameters()))

    def forward(self, streams: torch.Tensor, branch, input_norm) -> torch.Tensor:
        """`h'_k = h_k + w_k F'(x)` for streams `[batch, seq, K, hidden]`, with the forward pass's stream recomputation
        and composite-gain tracker (`machinery`) when it uses them."""
        recompute, gain = self.machinery.recompute, self.machinery.gain
        if torch.compiler.is_compiling():  # as `FastHyperConnectionMixin.forward`
            recompute = gain = None
        if recompute is not None:
            recompute.reading(streams)
        read, weights = self._reader(input_norm)
        grad = torch.is_grad_enabled()
        # under a dispatch mode (torch's FlopCounterMode) autograd keeps the read: the mode's module hooks cannot run
        # inside the `autograd.grad` that computes it again in backward; under torch.compile too: dynamo cannot trace
        # that `autograd.grad` (a graph break at every sublayer), and the compiled backward chooses what to recompute
        again = grad and not is_in_torch_dispatch_mode() and not torch.compiler.is_compiling()
        x, write, gate = _GatedRead.apply(read, streams, *weights) if again else read(streams, *weights)
        write = write.to(streams.dtype)
        if gain is not None and not gain.closed:  # each stream's mean share of the read, gate_k G_k / K
            share = torch.linalg.vecdot(gate, self.norm_gain.detach().float()) / self.streams
            gain.record(self, share, write, _identity(self.streams, write))
        del gate
        if recompute is not None:
            recompute.read(None, write)
        out = branch(x.to(streams.dtype), input_norm=False)
        if recompute is not None:
            recompute.wrote(out)
        return _Write.apply(streams, write, out) if grad else _write(streams, write, out)
