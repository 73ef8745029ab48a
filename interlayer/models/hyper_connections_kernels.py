"""The hyper-connection boundary on a GPU: the Triton kernels of hyper_connections_triton.py (with Liger-Kernel's mHC
projection and DeepSeek-V4 coefficients), registered there as `torch.library` custom operators with their backward,
and the dispatch that chooses them, with a fallback to the PyTorch implementation of hyper_connections_fast.py.

Dispatch (`kernels_for`): a fast hyper-connection whose streams are on a device of `DEVICES` (CUDA) runs its boundary
with the kernels, in training, in inference and inside `torch.compile` (the operators have fake implementations, so a
compiled model calls them as they are). Everything else runs the PyTorch implementation, which is also what runs on
CUDA where the kernels cannot: Triton not installed, `hc_kernels=False`, a dtype other than fp32, bf16 and fp16, more
than `MAX_STREAMS` streams, `torch.export` and `torch.jit` tracing; each reason that applies on a device of `DEVICES`
is logged once per process. Without Liger-Kernel, and for DeepSeek-V4's formula at a number of streams that is not a
power of 2 (which Liger's kernels need), the read-in and write kernels run with coefficients from the PyTorch
implementation.

Per sublayer, `Kernels.forward` computes the coefficients (`coefficients`: one projection and one coefficient kernel
for input-dependent mHC, one projection and a few small operations for dynamic HC; static coefficients are the
parameters, or one coefficient kernel for static mHC, and are computed once and reused without grad), the read-in
`x = H_pre h` (one kernel), the sublayer `F(x)`, and the write and mix `h' = H_res h + H_post^T F(x)` (one kernel).
The equation is `HyperConnection.forward` of modeling_hyper_connections.py; the kernels use the fp32 coefficients as
they are (the PyTorch paths round them to the streams' dtype first) and accumulate in fp32. They are tested against
the equation with Triton's interpreter on CPU (tests/kernels/) and on a GPU by benchmarks/gpu_check.py.

This file ships with every saved model (hyper_connections_fast.py imports it) and never imports Triton itself: a saved
model loads and runs where Triton is not installed (hyper_connections_triton.py, shipped beside it, is imported at
the first boundary on a GPU).
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import functools

import torch

from .hyper_connections_maths import MHC_EPS, rms_norm
from .zoo_common import logger

DEVICES = ("cuda",)  # device types whose streams take the kernels (the tests add "cpu" under Triton's interpreter)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MODES = ("static", "dynamic", "mhc")  # the forms with kernels; Hy4's runs the PyTorch implementation (and Qwen3.8's
# gated residual, `FastGatedResidual`, never asks)
MAX_STREAMS = 16  # a write program keeps K accumulators of a hidden block and the K x K mixing in registers

_logged: set[str] = set()


def log_once(reason: str) -> None:
    """Say once per process why (part of) a hyper-connection boundary runs the PyTorch implementation."""
    if reason not in _logged:
        _logged.add(reason)
        logger.warning(f"hyper-connection kernels: {reason}; the PyTorch implementation runs instead")


@functools.cache
def load() -> tuple["Kernels | None", str | None]:
    """`(Kernels, None)` where Triton imports (the operators are registered then), else `(None, why)`."""
    try:
        from .hyper_connections_triton import LAUNCHERS, OPERATORS
    except ImportError as error:
        return None, f"{error} (pip install 'interlayer[gpu]')"
    return Kernels(OPERATORS, LAUNCHERS), None


def kernels_for(hc, streams: torch.Tensor) -> "Kernels | None":
    """The kernels that run `hc`'s boundary for `streams`, or None for the PyTorch implementation (see the module)."""
    if streams.device.type not in DEVICES or not hc.use_kernels:
        return None
    if torch.jit.is_tracing() or torch.compiler.is_exporting():
        return None
    if hc.mode not in MODES:
        log_once(f"hc_mode={hc.mode!r} (the kernels run {', '.join(MODES)})")
        return None
    if hc.variant == "deepseek_v4" and hc.eps != MHC_EPS:
        log_once(f"hc_eps={hc.eps} (the kernels run DeepSeek-V4's formula at its hc_eps, {MHC_EPS})")
        return None
    if streams.dtype not in DTYPES:
        log_once(f"streams of dtype {streams.dtype} (the kernels take {', '.join(map(str, DTYPES))})")
        return None
    if hc.streams > MAX_STREAMS:
        log_once(f"hc_streams={hc.streams} (the kernels take up to {MAX_STREAMS})")
        return None
    kernels, reason = load()
    if kernels is None:
        log_once(reason)
    return kernels


class Kernels:
    """The boundary of a fast hyper-connection (`FastHyperConnectionMixin`, whose `forward` hands over to `forward`
    here when `kernels_for` says so) with the operators of hyper_connections_triton.py: `operators` (custom operators
    with backward passes) and `launchers` (the functions they wrap, called without grad in eager mode: no dispatcher
    in between, which is what a decoded token pays for 2 or 3 calls per sublayer)."""

    def __init__(self, operators: dict, launchers: dict):
        self.operators, self.launchers = operators, launchers

    def calls(self) -> dict:
        """The operators, or the launchers without grad outside a traced graph."""
        return self.operators if torch.is_grad_enabled() or torch.compiler.is_compiling() else self.launchers

    def _coefficients_need_pytorch(self, hc) -> str | None:
        """Why `hc`'s coefficients come from the PyTorch implementation, or None."""
        liger = "mm_norm" in self.operators
        if hc.dynamic and not liger:
            return "Liger-Kernel is not installed for the input-dependent coefficients (pip install liger-kernel)"
        if hc.variant == "deepseek_v4" and not liger:
            return "Liger-Kernel is not installed for DeepSeek-V4's coefficients (pip install liger-kernel)"
        if hc.variant == "deepseek_v4" and hc.streams & (hc.streams - 1):
            return f"DeepSeek-V4's coefficient kernels (Liger-Kernel's) take a power of 2 streams, not {hc.streams}"
        return None

    def coefficients(self, hc, streams: torch.Tensor):
        """`(H_pre, H_post, H_res)` of `hc` for `streams` `[..., K, D]` in fp32: `[K]`, `[K]`, `[K, K]` when static,
        `[..., K]`, `[..., K]`, `[..., K, K]` when input-dependent; `H_res` indexed [output, input] (DeepSeek-V4's
        `comb^T`, a transposed view)."""
        reason = self._coefficients_need_pytorch(hc)
        if reason is not None:
            log_once(reason)
            return tuple(c.float() for c in hc._coefficients(streams))
        calls, k = self.calls(), hc.streams
        pre, post, res = hc.pre.float(), hc.post.float(), hc.res.float()
        if hc.dynamic:
            weight, scale = hc.dynamic_proj.weight.float().t(), hc.dynamic_scale.float()
        if hc.mode == "dynamic":  # per stream: z = Linear(RMSNorm(h_k)), [..., K, K + 2]
            z = self.project(calls, streams.reshape(-1, streams.shape[-1]), weight).unflatten(0, streams.shape[:-1])
            if hc.dynamic_tanh:
                z = torch.tanh(z)
            return pre + scale[0] * z[..., 0], post + scale[1] * z[..., 1], res + scale[2] * z[..., 2:].mT
        if hc.mode != "mhc":
            return pre, post, res
        base = torch.cat([pre, post, res.flatten()])
        maps = calls["deepseek_maps" if hc.variant == "deepseek_v4" else "seed_maps"]
        if hc.dynamic:  # z = Linear(RMSNorm(flatten(h))), [tokens, K(K + 2)]
            mix = self.project(calls, streams.reshape(-1, k * streams.shape[-1]), weight)
            coefficients = maps(mix, base, scale, k, hc.sinkhorn_iters)
            pre, post, res = (c.unflatten(0, streams.shape[:-2]) for c in coefficients)
        else:
            pre, post, res = (c[0] for c in maps(None, base, base.new_zeros(3), k, hc.sinkhorn_iters))
        return pre, post, res.mT if hc.variant == "deepseek_v4" else res

    @staticmethod
    def project(calls: dict, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """`RMSNorm(x) W` in fp32, `[tokens, outputs]`: Liger-Kernel's kernel, except for fp32 streams while torch's
        fp32 products are exact (`torch.get_float32_matmul_precision() == "highest"`, the default): Liger's `tl.dot`
        multiplies fp32 in TF32 on Ampere and newer (measured on an H200: relative errors up to 2.8e-3 in the logits
        of dynamic HC), so there the product is PyTorch's, exact as every other fp32 product of the model."""
        if x.dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
            return rms_norm(x) @ weight
        return calls["mm_norm"](x, weight)[0]

    def read_in(self, streams: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
        """`x = sum_k H_pre[k] h_k` for streams `[..., K, D]`: `[..., D]`."""
        k, d = streams.shape[-2:]
        coefficients = pre if pre.dim() == 1 else pre.reshape(-1, k)
        x = self.calls()["read_in"](streams.reshape(-1, k, d), coefficients)
        return x.unflatten(0, streams.shape[:-2])

    def write(self, streams: torch.Tensor, out: torch.Tensor, post: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        """`h' = H_res h + H_post^T F(x)` for streams `[..., K, D]` and the sublayer output `F(x)` `[..., D]`."""
        k, d = streams.shape[-2:]
        if post.dim() > 1:
            post, res = post.reshape(-1, k), res.reshape(-1, k, k)
        written = self.calls()["write"](streams.reshape(-1, k, d), out.reshape(-1, d), post, res)
        return written.unflatten(0, streams.shape[:-2])

    def rebuild(self, streams, res, post, out):
        """What the stream recomputation calls to rebuild a sublayer's output streams: `write`, as the forward did."""
        return self.write(streams, out, post, res)

    def forward(self, hc, streams: torch.Tensor, branch, recompute, gain) -> torch.Tensor:
        """`h' = H_res h + H_post^T branch(H_pre h)` with the kernels, and the forward pass's stream recomputation
        `recompute` and composite-gain tracker `gain` (either None when unused), as `FastHyperConnectionMixin.forward`
        uses them. The streams are read again by the write (after the branch), so the recomputation replaces what
        the coefficients, the read-in and the write keep of them."""
        if recompute is not None:
            recompute.reading(streams)
        if hc.dynamic:
            pre, post, res = self.coefficients(hc, streams)
        else:
            pre, post, res = hc._reused(lambda: self.coefficients(hc, streams), ("kernels", streams.dtype))
        if gain is not None and not gain.closed:
            gain.record(hc, pre, post, res)
        out = branch(self.read_in(streams, pre))
        written = self.write(streams, out, post, res)
        if recompute is not None:
            recompute.read(res, post, self.rebuild)
            recompute.wrote(out)
        return written
