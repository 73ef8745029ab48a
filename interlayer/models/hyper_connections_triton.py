"""Triton kernels of the hyper-connection boundary, and their launchers (hyper_connections_kernels.py calls them; the
equation they compute is `HyperConnection.forward` of modeling_hyper_connections.py, which stays the specification).

Streams `h` are `[N, K, D]` (N tokens, K streams, D hidden units) with any strides (the first layer's streams are
K views of the embeddings: stride 0 over K, read as they are); coefficients are fp32, per token (`[N, K]`,
`[N, K, K]`) or shared by every token (`[K]`, `[K, K]`: read with a token stride of 0), `H_res` indexed [output,
input] through its strides (DeepSeek-V4's `comb^T` is a transposed view). Every kernel accumulates in fp32 and writes
each output once, in the dtype of the tensor it stands for; reductions over the hidden units run inside one program
per token (no atomics, so the gradients are deterministic).

- read-in `x = sum_k H_pre[k] h_k`: forward (reads K vectors, writes 1) and backward (`grad h_k = H_pre[k] grad x`,
  `grad H_pre[k] = <grad x, h_k>`);
- write and mix `h'_i = sum_j H_res[i, j] h_j + H_post[i] y`: forward (reads K + 1, writes K) and backward;
- the seed's mHC coefficients (`mhc_variant="seed"`): static logits plus the scaled input-dependent part, sigmoid
  read-in, `2 sigmoid` write and Sinkhorn-Knopp (first round in the log domain, then columns and rows, rows last) in
  one program per token, and its backward, which recomputes the rounds instead of keeping them.

The projection of the input-dependent coefficients (`RMSNorm(h) W`) and DeepSeek-V4's coefficients come from
Liger-Kernel (`liger_kernel.ops.mhc`), whose formulas are ours there (docs/hyper_connections.md, "Kernels on a GPU").

This file is imported only where Triton is installed (hyper_connections_kernels.py imports it lazily and falls back to
the PyTorch implementation otherwise); `TRITON_INTERPRET=1` set before that import runs the kernels on CPU tensors
with Triton's interpreter (what the tests do).
"""

# imports inside try blocks: transformers' remote-code loader requires only the packages imported outside them, so a
# saved model loads where Triton or Liger-Kernel are not installed (this file is then never imported)
try:
    import triton
    import triton.language as tl
except ImportError as error:
    raise ImportError("the hyper-connection kernels need Triton") from error
try:
    from liger_kernel.ops import mhc as liger_mhc
except ImportError:
    liger_mhc = None

import hashlib

import torch
from torch import Tensor

from .hyper_connections_maths import COEFFICIENT_EPS, MHC_EPS

# one operator namespace per copy of this file: a saved model's remote code imports its own copy beside the package's
NAMESPACE = "interlayer_hc_" + hashlib.sha1(__name__.encode()).hexdigest()[:10]
MAX_BLOCK_D = 1024  # hidden units a program of the read-in and write kernels handles at once


def _block_d(d: int) -> int:
    return min(triton.next_power_of_2(d), MAX_BLOCK_D)


def _num_warps(block: int) -> int:
    return 8 if block >= 4096 else 4 if block >= 1024 else 2


def _token_strides(coefficient: torch.Tensor, matrix: bool) -> tuple[int, ...]:
    """Strides of a coefficient tensor as (token, index...) with a token stride of 0 when it is shared (static)."""
    shared = coefficient.dim() == (2 if matrix else 1)
    return (0, *coefficient.stride()) if shared else tuple(coefficient.stride())


# -- read-in: x = sum_k H_pre[k] h_k ------------------------------------------------------------------------------


@triton.jit
def _read_in_fwd(
    h_ptr,
    pre_ptr,
    x_ptr,
    D,
    s_hn,
    s_hk,
    s_hd,
    s_pn,
    s_pk,
    s_xn,
    s_xd,
    K: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    n = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = d < D
    acc = tl.zeros((BLOCK_D,), tl.float32)
    for k in tl.static_range(K):
        w = tl.load(pre_ptr + n * s_pn + k * s_pk)
        acc += w * tl.load(h_ptr + n * s_hn + k * s_hk + d * s_hd, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_ptr + n * s_xn + d * s_xd, acc.to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _read_in_bwd(
    h_ptr,
    pre_ptr,
    gx_ptr,
    gh_ptr,
    gpre_ptr,
    D,
    s_hn,
    s_hk,
    s_hd,
    s_pn,
    s_pk,
    s_gxn,
    s_gxd,
    K: tl.constexpr,
    KP: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """grad h_k = H_pre[k] grad x (written `[N, K, D]` contiguous) and grad H_pre `[N, K]` (one program per token)."""
    n = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, KP)
    kmask = k < K
    pre = tl.load(pre_ptr + n * s_pn + k * s_pk, mask=kmask, other=0.0)
    gpre = tl.zeros((KP,), tl.float32)
    for d0 in range(0, D, BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        mask = kmask[:, None] & (d < D)[None, :]
        gx = tl.load(gx_ptr + n * s_gxn + d * s_gxd, mask=d < D, other=0.0).to(tl.float32)
        h = tl.load(h_ptr + n * s_hn + k[:, None] * s_hk + d[None, :] * s_hd, mask=mask, other=0.0).to(tl.float32)
        gpre += tl.sum(h * gx[None, :], axis=1)
        gh = pre[:, None] * gx[None, :]
        tl.store(gh_ptr + (n * K + k[:, None]) * D + d[None, :], gh.to(gh_ptr.dtype.element_ty), mask=mask)
    tl.store(gpre_ptr + n * K + k, gpre, mask=kmask)


def read_in(streams: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """`sum_k pre[..., k] streams[..., k, :]` for streams `[N, K, D]` and fp32 `pre` `[N, K]` or `[K]`."""
    n, k, d = streams.shape
    x = torch.empty((n, d), device=streams.device, dtype=streams.dtype)
    if n == 0:
        return x
    block = _block_d(d)
    _read_in_fwd[(n, triton.cdiv(d, block))](
        streams,
        pre,
        x,
        d,
        *streams.stride(),
        *_token_strides(pre, False),
        *x.stride(),
        K=k,
        BLOCK_D=block,
        num_warps=_num_warps(block),
    )
    return x


def read_in_backward(streams: torch.Tensor, pre: torch.Tensor, grad_x: torch.Tensor):
    """`(grad streams [N, K, D] in the streams' dtype, grad pre [N, K] fp32)`."""
    n, k, d = streams.shape
    grad_streams = torch.empty((n, k, d), device=streams.device, dtype=streams.dtype)
    grad_pre = torch.empty((n, k), device=streams.device, dtype=torch.float32)
    if n == 0:
        return grad_streams, grad_pre
    block = _block_d(d)
    _read_in_bwd[(n,)](
        streams,
        pre,
        grad_x,
        grad_streams,
        grad_pre,
        d,
        *streams.stride(),
        *_token_strides(pre, False),
        *grad_x.stride(),
        K=k,
        KP=triton.next_power_of_2(k),
        BLOCK_D=block,
        num_warps=_num_warps(k * block),
    )
    return grad_streams, grad_pre


# -- write and mix: h'_i = sum_j H_res[i, j] h_j + H_post[i] y ----------------------------------------------------


@triton.jit
def _write_fwd(
    h_ptr,
    y_ptr,
    post_ptr,
    res_ptr,
    out_ptr,
    D,
    s_hn,
    s_hk,
    s_hd,
    s_yn,
    s_yd,
    s_pn,
    s_pk,
    s_rn,
    s_ri,
    s_rj,
    K: tl.constexpr,
    KP: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    n = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    i = tl.arange(0, KP)
    imask = i < K
    dmask = d < D
    y = tl.load(y_ptr + n * s_yn + d * s_yd, mask=dmask, other=0.0).to(tl.float32)
    post = tl.load(post_ptr + n * s_pn + i * s_pk, mask=imask, other=0.0)
    acc = post[:, None] * y[None, :]
    for j in tl.static_range(K):
        w = tl.load(res_ptr + n * s_rn + i * s_ri + j * s_rj, mask=imask, other=0.0)
        hj = tl.load(h_ptr + n * s_hn + j * s_hk + d * s_hd, mask=dmask, other=0.0).to(tl.float32)
        acc += w[:, None] * hj[None, :]
    mask = imask[:, None] & dmask[None, :]
    tl.store(out_ptr + (n * K + i[:, None]) * D + d[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _write_bwd(
    h_ptr,
    y_ptr,
    post_ptr,
    res_ptr,
    g_ptr,
    gh_ptr,
    gy_ptr,
    gpost_ptr,
    gres_ptr,
    D,
    s_hn,
    s_hk,
    s_hd,
    s_yn,
    s_yd,
    s_pn,
    s_pk,
    s_rn,
    s_ri,
    s_rj,
    s_gn,
    s_gk,
    s_gd,
    K: tl.constexpr,
    KP: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per token: grad h_j = sum_i H_res[i, j] g_i, grad y = sum_i H_post[i] g_i (written contiguous),
    grad H_post[i] = <g_i, y> `[N, K]`, grad H_res[i, j] = <g_i, h_j> `[N, K, K]`."""
    n = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, KP)
    imask = i < K
    post = tl.load(post_ptr + n * s_pn + i * s_pk, mask=imask, other=0.0)
    gpost = tl.zeros((KP,), tl.float32)
    gres = tl.zeros((KP, KP), tl.float32)
    for d0 in range(0, D, BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        dmask = d < D
        mask = imask[:, None] & dmask[None, :]
        g = tl.load(g_ptr + n * s_gn + i[:, None] * s_gk + d[None, :] * s_gd, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_ptr + n * s_yn + d * s_yd, mask=dmask, other=0.0).to(tl.float32)
        gpost += tl.sum(g * y[None, :], axis=1)
        tl.store(gy_ptr + n * D + d, tl.sum(g * post[:, None], axis=0).to(gy_ptr.dtype.element_ty), mask=dmask)
        for j in tl.static_range(K):
            w = tl.load(res_ptr + n * s_rn + i * s_ri + j * s_rj, mask=imask, other=0.0)
            hj = tl.load(h_ptr + n * s_hn + j * s_hk + d * s_hd, mask=dmask, other=0.0).to(tl.float32)
            tl.store(
                gh_ptr + (n * K + j) * D + d, tl.sum(g * w[:, None], axis=0).to(gh_ptr.dtype.element_ty), mask=dmask
            )
            column = tl.sum(g * hj[None, :], axis=1)
            gres += tl.where(i[None, :] == j, column[:, None], 0.0)
    tl.store(gpost_ptr + n * K + i, gpost, mask=imask)
    tl.store(gres_ptr + (n * K + i[:, None]) * K + i[None, :], gres, mask=imask[:, None] & imask[None, :])


def write(streams: torch.Tensor, y: torch.Tensor, post: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
    """`res @ streams + post^T y` for streams `[N, K, D]`, the sublayer output `y` `[N, D]` and fp32 `post`
    (`[N, K]` or `[K]`) and `res` (`[N, K, K]` or `[K, K]`, [output, input]); in the streams' dtype, contiguous."""
    n, k, d = streams.shape
    out = torch.empty((n, k, d), device=streams.device, dtype=streams.dtype)
    if n == 0:
        return out
    block = _block_d(d)
    _write_fwd[(n, triton.cdiv(d, block))](
        streams,
        y,
        post,
        res,
        out,
        d,
        *streams.stride(),
        *y.stride(),
        *_token_strides(post, False),
        *_token_strides(res, True),
        K=k,
        KP=triton.next_power_of_2(k),
        BLOCK_D=block,
        num_warps=_num_warps(k * block),
    )
    return out


def write_backward(streams, y, post, res, grad_out):
    """`(grad streams, grad y, grad post [N, K] fp32, grad res [N, K, K] fp32)` of `write`."""
    n, k, d = streams.shape
    grad_streams = torch.empty((n, k, d), device=streams.device, dtype=streams.dtype)
    grad_y = torch.empty((n, d), device=y.device, dtype=y.dtype)
    grad_post = torch.empty((n, k), device=streams.device, dtype=torch.float32)
    grad_res = torch.empty((n, k, k), device=streams.device, dtype=torch.float32)
    if n == 0:
        return grad_streams, grad_y, grad_post, grad_res
    block = _block_d(d)
    _write_bwd[(n,)](
        streams,
        y,
        post,
        res,
        grad_out,
        grad_streams,
        grad_y,
        grad_post,
        grad_res,
        d,
        *streams.stride(),
        *y.stride(),
        *_token_strides(post, False),
        *_token_strides(res, True),
        *grad_out.stride(),
        K=k,
        KP=triton.next_power_of_2(k),
        BLOCK_D=block,
        num_warps=_num_warps(k * block),
    )
    return grad_streams, grad_y, grad_post, grad_res


# -- the seed's mHC coefficients ----------------------------------------------------------------------------------


@triton.jit
def _masked_logsumexp(x, mask, axis: tl.constexpr):
    """`logsumexp` of the entries `mask` keeps along `axis` (kept as a dimension of 1); 0 where it keeps none."""
    x = tl.where(mask, x, float("-inf"))
    top = tl.max(x, axis=axis, keep_dims=True)
    top = tl.where(top == float("-inf"), 0.0, top)
    total = tl.sum(tl.where(mask, tl.exp(x - top), 0.0), axis=axis, keep_dims=True)
    return top + tl.log(tl.where(total > 0.0, total, 1.0))


@triton.jit
def _normalised(m, axis: tl.constexpr):
    """`(m / sum, sum)` along `axis` (a sum of 0, of padding, divides by 1)."""
    total = tl.sum(m, axis=axis, keep_dims=True)
    total = tl.where(total > 0.0, total, 1.0)
    return m / total, total


@triton.jit
def _seed_indices(N, K: tl.constexpr, KP: tl.constexpr, BLOCK_N: tl.constexpr):
    """The tokens of this program `[BLOCK_N, 1]` and `[BLOCK_N, 1, 1]`, the stream indices `[1, KP]`, `[1, KP, 1]`
    (rows) and `[1, 1, KP]` (columns), and the masks of the vectors `[BLOCK_N, KP]` and matrices
    `[BLOCK_N, KP, KP]`."""
    n = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, KP)
    n2, k2 = n[:, None], k[None, :]
    n3, i3, j3 = n[:, None, None], k[None, :, None], k[None, None, :]
    vmask = (n2 < N) & (k2 < K)
    mmask = (n3 < N) & (i3 < K) & (j3 < K)
    return n2, k2, n3, i3, j3, vmask, mmask


@triton.jit
def _seed_logits(
    mix_ptr, base_ptr, scale_ptr, n2, k2, n3, i3, j3, vmask, mmask, s_mn, K: tl.constexpr, HAS_MIX: tl.constexpr
):
    """The raw read-in, write and mixing logits (`[BLOCK_N, KP]`, `[BLOCK_N, KP]`, `[BLOCK_N, KP, KP]`): the static
    `base` (`[K + K + K*K]`) plus, with `HAS_MIX`, `scale * mix` (the RMS-normalised projection)."""
    flat = i3 * K + j3
    pre = tl.load(base_ptr + k2, mask=vmask, other=0.0)
    post = tl.load(base_ptr + K + k2, mask=vmask, other=0.0)
    res = tl.load(base_ptr + 2 * K + flat, mask=mmask, other=0.0)
    if HAS_MIX:
        pre += tl.load(scale_ptr) * tl.load(mix_ptr + n2 * s_mn + k2, mask=vmask, other=0.0)
        post += tl.load(scale_ptr + 1) * tl.load(mix_ptr + n2 * s_mn + K + k2, mask=vmask, other=0.0)
        res += tl.load(scale_ptr + 2) * tl.load(mix_ptr + n3 * s_mn + 2 * K + flat, mask=mmask, other=0.0)
    return pre, post, res


@triton.jit
def _seed_first_round(res, mmask):
    """Sinkhorn's first round in the log domain: `(m0, exp(a))` with `a` the logits shifted by their columns'
    log-sum-exp and `m0 = exp(a - logsumexp of a's rows)` (`sinkhorn_knopp` of hyper_connections_maths.py)."""
    a = res - _masked_logsumexp(res, mmask, 1)
    b = a - _masked_logsumexp(a, mmask, 2)
    return tl.where(mmask, tl.exp(b), 0.0), tl.where(mmask, tl.exp(a), 0.0)


@triton.jit
def _mhc_seed_fwd(
    mix_ptr,
    base_ptr,
    scale_ptr,
    pre_ptr,
    post_ptr,
    res_ptr,
    N,
    s_mn,
    K: tl.constexpr,
    KP: tl.constexpr,
    ITERS: tl.constexpr,
    HAS_MIX: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    n2, k2, n3, i3, j3, vmask, mmask = _seed_indices(N, K, KP, BLOCK_N)
    pre, post, res = _seed_logits(mix_ptr, base_ptr, scale_ptr, n2, k2, n3, i3, j3, vmask, mmask, s_mn, K, HAS_MIX)
    m, _ = _seed_first_round(res, mmask)
    for _ in range(ITERS - 1):
        m, _ = _normalised(m, 1)
        m, _ = _normalised(m, 2)
    tl.store(pre_ptr + n2 * K + k2, tl.sigmoid(pre), mask=vmask)
    tl.store(post_ptr + n2 * K + k2, 2.0 * tl.sigmoid(post), mask=vmask)
    tl.store(res_ptr + (n3 * K + i3) * K + j3, m, mask=mmask)


@triton.jit
def _mhc_seed_bwd(
    mix_ptr,
    base_ptr,
    scale_ptr,
    gpre_ptr,
    gpost_ptr,
    gres_ptr,
    glogits_ptr,
    N,
    s_mn,
    K: tl.constexpr,
    KP: tl.constexpr,
    ITERS: tl.constexpr,
    HAS_MIX: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """The gradient of the raw logits `[N, K + K + K*K]` (pre, post, res) from those of `H_pre`, `H_post`, `H_res`.
    The Sinkhorn rounds are recomputed, not kept: round `t`'s input is rebuilt from the first round's result
    (ITERS^2 / 2 small rounds in all, nothing stored per token)."""
    n2, k2, n3, i3, j3, vmask, mmask = _seed_indices(N, K, KP, BLOCK_N)
    pre, post, res = _seed_logits(mix_ptr, base_ptr, scale_ptr, n2, k2, n3, i3, j3, vmask, mmask, s_mn, K, HAS_MIX)
    m0, softmax_columns = _seed_first_round(res, mmask)
    g = tl.load(gres_ptr + (n3 * K + i3) * K + j3, mask=mmask, other=0.0)
    for back in range(ITERS - 1):
        m = m0
        for _ in range(ITERS - 2 - back):  # m = the input of round ITERS - 1 - back
            m, _ = _normalised(m, 1)
            m, _ = _normalised(m, 2)
        c, columns = _normalised(m, 1)
        out, rows = _normalised(c, 2)
        g = (g - tl.sum(g * out, axis=2, keep_dims=True)) / rows  # through the rows' normalisation
        g = (g - tl.sum(g * c, axis=1, keep_dims=True)) / columns  # through the columns'
        g = tl.where(mmask, g, 0.0)
    g = g * m0  # through exp
    g = g - m0 * tl.sum(g, axis=2, keep_dims=True)  # through the rows' log-sum-exp
    g = g - softmax_columns * tl.sum(g, axis=1, keep_dims=True)  # through the columns'
    sig_pre = tl.sigmoid(pre)
    sig_post = tl.sigmoid(post)
    gpre = tl.load(gpre_ptr + n2 * K + k2, mask=vmask, other=0.0) * sig_pre * (1.0 - sig_pre)
    gpost = tl.load(gpost_ptr + n2 * K + k2, mask=vmask, other=0.0) * 2.0 * sig_post * (1.0 - sig_post)
    width = K * (K + 2)
    tl.store(glogits_ptr + n2 * width + k2, gpre, mask=vmask)
    tl.store(glogits_ptr + n2 * width + K + k2, gpost, mask=vmask)
    tl.store(glogits_ptr + n3 * width + 2 * K + i3 * K + j3, g, mask=mmask)


def _seed_launch(kernel, mix, base, n: int, k: int, iters: int, *args):
    block = min(triton.next_power_of_2(max(n, 1)), 16)
    kernel[(triton.cdiv(n, block),)](
        base if mix is None else mix,
        base,
        *args,
        n,
        0 if mix is None else mix.stride(0),
        K=k,
        KP=triton.next_power_of_2(k),
        ITERS=iters,
        HAS_MIX=mix is not None,
        BLOCK_N=block,
        num_warps=1,
    )


def seed_maps(mix, base, scale, k: int, iters: int):
    """The seed's `(H_pre [N, K], H_post [N, K], H_res [N, K, K])` (fp32) from the RMS-normalised projection `mix`
    `[N, K(K + 2)]` (None: the static coefficients alone, N = 1), the static logits `base` `[K(K + 2)]` (pre, post,
    res flattened) and the scales `scale` `[3]`."""
    n = 1 if mix is None else mix.shape[0]
    pre = torch.empty((n, k), device=base.device, dtype=torch.float32)
    post = torch.empty((n, k), device=base.device, dtype=torch.float32)
    res = torch.empty((n, k, k), device=base.device, dtype=torch.float32)
    if n:
        _seed_launch(_mhc_seed_fwd, mix, base, n, k, iters, scale, pre, post, res)
    return pre, post, res


def seed_maps_backward(mix, base, scale, k: int, iters: int, grad_pre, grad_post, grad_res):
    """The gradient of the logits `[N, K(K + 2)]` (fp32) of `seed_maps` from those of its three outputs."""
    n = grad_pre.shape[0]
    grad_logits = torch.empty((n, k * (k + 2)), device=base.device, dtype=torch.float32)
    if n:
        grads = (g.float().contiguous() for g in (grad_pre, grad_post, grad_res))
        _seed_launch(_mhc_seed_bwd, mix, base, n, k, iters, scale, *grads, grad_logits)
    return grad_logits


# -- the operators: custom operators with fake implementations (so `torch.compile` calls them as they are) and backward
# passes; the names of `ops` below


def _custom_op(name: str):
    return torch.library.custom_op(f"{NAMESPACE}::{name}", mutates_args=())


def _save_inputs(ctx, inputs, output):
    ctx.save_for_backward(*(t for t in inputs if isinstance(t, Tensor)))


def _empty_like(t: Tensor) -> Tensor:
    return torch.empty_like(t, memory_format=torch.contiguous_format)


@_custom_op("read_in")
def read_in_op(streams: Tensor, pre: Tensor) -> Tensor:
    return read_in(streams, pre)


@read_in_op.register_fake
def _(streams, pre):
    return streams.new_empty(streams.shape[0], streams.shape[2])


@_custom_op("read_in_backward")
def read_in_backward_op(streams: Tensor, pre: Tensor, grad_x: Tensor) -> tuple[Tensor, Tensor]:
    return read_in_backward(streams, pre, grad_x)


@read_in_backward_op.register_fake
def _(streams, pre, grad_x):
    return _empty_like(streams), pre.new_empty(streams.shape[:2])


def _read_in_grad(ctx, grad_x):
    streams, pre = ctx.saved_tensors
    grad_streams, grad_pre = read_in_backward_op(streams, pre, grad_x)
    return grad_streams, grad_pre.sum(0) if pre.dim() == 1 else grad_pre


read_in_op.register_autograd(_read_in_grad, setup_context=_save_inputs)


@_custom_op("write")
def write_op(streams: Tensor, y: Tensor, post: Tensor, res: Tensor) -> Tensor:
    return write(streams, y, post, res)


@write_op.register_fake
def _(streams, y, post, res):
    return _empty_like(streams)


@_custom_op("write_backward")
def write_backward_op(
    streams: Tensor, y: Tensor, post: Tensor, res: Tensor, grad_out: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return write_backward(streams, y, post, res, grad_out)


@write_backward_op.register_fake
def _(streams, y, post, res, grad_out):
    n, k, _ = streams.shape
    return _empty_like(streams), _empty_like(y), post.new_empty(n, k), res.new_empty(n, k, k)


def _write_grad(ctx, grad_out):
    streams, y, post, res = ctx.saved_tensors
    grad_streams, grad_y, grad_post, grad_res = write_backward_op(streams, y, post, res, grad_out)
    return (
        grad_streams,
        grad_y,
        grad_post.sum(0) if post.dim() == 1 else grad_post,
        grad_res.sum(0) if res.dim() == 2 else grad_res,
    )


write_op.register_autograd(_write_grad, setup_context=_save_inputs)


def _maps_fake(mix, base, scale, k, iters):
    n = 1 if mix is None else mix.shape[0]
    return base.new_empty(n, k), base.new_empty(n, k), base.new_empty(n, k, k)


def _logits_fake(mix, base, scale, k, iters, grad_pre, grad_post, grad_res):
    return grad_pre.new_empty(grad_pre.shape[0], k * (k + 2))


def _save_maps_inputs(ctx, inputs, output):
    mix, base, scale, ctx.k, ctx.iters = inputs
    ctx.has_mix = mix is not None
    ctx.save_for_backward(*((mix,) if ctx.has_mix else ()), base, scale)


def _maps_grad(backward_op):
    """The backward of a maps operator: the logits' gradient from `backward_op`, then those of the projection `mix`
    (times the scales), the static logits `base` (summed over tokens) and the scales."""

    def grad(ctx, grad_pre, grad_post, grad_res):
        mix, base, scale = ctx.saved_tensors if ctx.has_mix else (None, *ctx.saved_tensors)
        k = ctx.k
        grad_logits = backward_op(mix, base, scale, k, ctx.iters, grad_pre, grad_post, grad_res)
        if mix is None:
            return None, grad_logits.sum(0), None, None, None
        parts = (k, k, k * k)
        grad_mix = grad_logits * torch.cat([s.expand(n) for s, n in zip(scale, parts)])
        grad_scale = torch.stack([g.sum() for g in (grad_logits * mix).split(parts, dim=1)])
        return grad_mix, grad_logits.sum(0), grad_scale, None, None

    return grad


@_custom_op("seed_maps")
def seed_maps_op(mix: Tensor | None, base: Tensor, scale: Tensor, k: int, iters: int) -> tuple[Tensor, Tensor, Tensor]:
    return seed_maps(mix, base, scale, k, iters)


@_custom_op("seed_maps_backward")
def seed_maps_backward_op(
    mix: Tensor | None,
    base: Tensor,
    scale: Tensor,
    k: int,
    iters: int,
    grad_pre: Tensor,
    grad_post: Tensor,
    grad_res: Tensor,
) -> Tensor:
    return seed_maps_backward(mix, base, scale, k, iters, grad_pre, grad_post, grad_res)


seed_maps_op.register_fake(_maps_fake)
seed_maps_backward_op.register_fake(_logits_fake)
seed_maps_op.register_autograd(_maps_grad(seed_maps_backward_op), setup_context=_save_maps_inputs)


# -- Liger-Kernel's: the projection of the input-dependent coefficients and DeepSeek-V4's coefficients

if liger_mhc is not None:

    def mm_norm(x: Tensor, phi: Tensor) -> tuple[Tensor, Tensor]:
        """`((x @ phi) / RMS(x), 1 / RMS(x))` for `x` `[N, W]` and `phi` `[W, M]`, fp32, with RMSNorm's eps
        `COEFFICIENT_EPS` (Liger-Kernel's `mhc_mm_norm_fwd`)."""
        return liger_mhc.mhc_mm_norm_fwd(x.contiguous(), phi.contiguous(), COEFFICIENT_EPS)

    @_custom_op("mm_norm")
    def mm_norm_op(x: Tensor, phi: Tensor) -> tuple[Tensor, Tensor]:
        """`mm_norm`, whose second output is not differentiable."""
        return mm_norm(x, phi)

    @mm_norm_op.register_fake
    def _(x, phi):
        return x.new_empty(x.shape[0], phi.shape[1], dtype=torch.float32), x.new_empty(x.shape[0], dtype=torch.float32)

    @_custom_op("mm_norm_backward")
    def mm_norm_backward_op(
        x: Tensor, phi: Tensor, mix: Tensor, inverse_rms: Tensor, grad_mix: Tensor
    ) -> tuple[Tensor, Tensor]:
        grad_x, grad_phi = liger_mhc.mhc_mm_norm_bwd(
            x.contiguous(), phi.contiguous(), mix, inverse_rms, grad_mix.contiguous()
        )
        return grad_x, grad_phi

    @mm_norm_backward_op.register_fake
    def _(x, phi, mix, inverse_rms, grad_mix):
        return _empty_like(x), _empty_like(phi)

    def _mm_norm_setup(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(*inputs, *output)

    def _mm_norm_grad(ctx, grad_mix, _):
        return mm_norm_backward_op(*ctx.saved_tensors, grad_mix)

    mm_norm_op.register_autograd(_mm_norm_grad, setup_context=_mm_norm_setup)

    def _deepseek_mix(mix: Tensor | None, base: Tensor) -> Tensor:
        """The projection Liger's kernels read: zeros for static coefficients (one token)."""
        return base.new_zeros(1, base.shape[0]) if mix is None else mix.contiguous()

    def deepseek_maps(mix: Tensor | None, base: Tensor, scale: Tensor, k: int, iters: int):
        """DeepSeek-V4's `(H_pre, H_post, comb)` (Liger-Kernel's `mhc_split_sinkhorn_fwd`), arguments as `seed_maps`'s;
        `comb` is indexed [input, output]: the streams are mixed by its transpose."""
        return liger_mhc.mhc_split_sinkhorn_fwd(
            _deepseek_mix(mix, base),
            base,
            scale[0],
            scale[1],
            scale[2],
            tmax=iters,
            pre_eps=MHC_EPS,
            sinkhorn_eps=MHC_EPS,
            post_mult=2.0,
        )

    @_custom_op("deepseek_maps")
    def deepseek_maps_op(
        mix: Tensor | None, base: Tensor, scale: Tensor, k: int, iters: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        return deepseek_maps(mix, base, scale, k, iters)

    @_custom_op("deepseek_maps_backward")
    def deepseek_maps_backward_op(
        mix: Tensor | None,
        base: Tensor,
        scale: Tensor,
        k: int,
        iters: int,
        grad_pre: Tensor,
        grad_post: Tensor,
        grad_res: Tensor,
    ) -> Tensor:
        """The logits' gradient: Liger-Kernel's `mhc_sinkhorn_bwd` for `comb` (its rounds recomputed, nothing kept),
        the sigmoids' here."""
        mix = _deepseek_mix(mix, base)
        grad_comb = liger_mhc.mhc_sinkhorn_bwd(
            mix, base, scale[2], grad_res.float().contiguous(), tmax=iters, sinkhorn_eps=MHC_EPS
        )
        pre = torch.sigmoid(base[:k] + scale[0] * mix[:, :k])
        post = torch.sigmoid(base[k : 2 * k] + scale[1] * mix[:, k : 2 * k])
        grad_pre = grad_pre * pre * (1.0 - pre)
        grad_post = grad_post * 2.0 * post * (1.0 - post)
        return torch.cat([grad_pre, grad_post, grad_comb.flatten(1)], dim=1)

    deepseek_maps_op.register_fake(_maps_fake)
    deepseek_maps_backward_op.register_fake(_logits_fake)
    deepseek_maps_op.register_autograd(_maps_grad(deepseek_maps_backward_op), setup_context=_save_maps_inputs)


# what hyper_connections_kernels.py calls: the operators (autograd, torch.compile) and, without grad in eager mode,
# the launchers they wrap (no dispatcher in between)
OPERATORS = {"read_in": read_in_op, "write": write_op, "seed_maps": seed_maps_op}
LAUNCHERS = {"read_in": read_in, "write": write, "seed_maps": seed_maps}
if liger_mhc is not None:
    OPERATORS.update(mm_norm=mm_norm_op, deepseek_maps=deepseek_maps_op)
    LAUNCHERS.update(mm_norm=mm_norm, deepseek_maps=deepseek_maps)
