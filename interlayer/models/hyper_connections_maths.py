"""The maths the hyper-connections' coefficients are made of (mHC's doubly-stochastic projections, the RMSNorm of the
input-dependent coefficients and their eps), shared by the equation (modeling_hyper_connections.py) and its fast
implementation (hyper_connections_fast.py), which both import it: the lowest of the three files.
"""

from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import torch
import torch.nn.functional as F

COEFFICIENT_EPS = 1e-6  # RMSNorm's eps in the input-dependent coefficients
MHC_EPS = 1e-6  # DeepSeek-V4's hc_eps (the default of `hc_eps`): added to its read-in and softmax, and to every
# normalisation's denominator


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


def mhc_mixing(logits: torch.Tensor, iters: int, variant: str, eps: float = MHC_EPS) -> torch.Tensor:
    """mHC's `H_res` (`[..., K, K]`, [output, input]) from its logits: the seed's `Sinkhorn-Knopp(exp(logits))`, or
    DeepSeek-V4's `comb^T` with its `eps` (its logits are `comb`'s, [input, output])."""
    if variant == "deepseek_v4":
        return deepseek_comb(logits, iters, eps).mT
    return sinkhorn_knopp(logits, iters)


def constrain(pre, post, res, mode: str, variant: str, iters: int, eps: float, magnitude: float, mixing=mhc_mixing):
    """`(H_pre, H_post, H_res)` of mHC (`mode="mhc"`) and of independent HC (`"independent"`, `H_res` None: no
    mixing) from the raw fp32 coefficients (static part plus input-dependent part): mHC's `sigmoid` (`+ eps` in
    DeepSeek-V4's variant), `2 sigmoid` and `mixing(res, iters, variant, eps)`; Hy4's `sigmoid + eps` and
    `magnitude * sigmoid + eps`. The fast implementation passes a `mixing` that recomputes its rounds in backward."""
    if mode == "independent":
        return torch.sigmoid(pre) + eps, magnitude * torch.sigmoid(post) + eps, None
    pre = torch.sigmoid(pre) + eps if variant == "deepseek_v4" else torch.sigmoid(pre)
    return pre, 2.0 * torch.sigmoid(post), mixing(res, iters, variant, eps)


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm without a weight over the last axis (the input of the input-dependent coefficients)."""
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + COEFFICIENT_EPS)


def read_in_shares(streams: int, focus: float, index: int) -> torch.Tensor:
    """Each stream's share of a read-in that sums to 1 (float64, `[K]`): `focus` on stream `index mod K`, the rest
    spread evenly (`hc_read_in_focus`)."""
    shares = torch.full((streams,), (1.0 - focus) / streams, dtype=torch.float64)
    shares[index % streams] += focus
    return shares


def gated_read(normed: torch.Tensor, down: torch.Tensor, up: torch.Tensor, inject: torch.Tensor | None):
    """Qwen3.8's gated read (transformers' `Qwen4ExpTextGatedResidual`) from the normalised streams `n` `[..., K, C]`
    and the fp32 weights of its projections: the gate `sigmoid(up silu(down flatten(n) / K))` (one per stream and
    channel), the sublayer input `x = mean_k(gate_k * n_k)` `[..., C]` and the write weights `2 sigmoid(inject
    flatten(n) / K)` `[..., K]` (None without `inject`: the final read-out). Returns `(x, write, gate)`."""
    k = normed.shape[-2]
    flat = normed.flatten(-2)
    gate = torch.sigmoid(F.linear(F.silu(F.linear(flat, down) / k), up)).unflatten(-1, normed.shape[-2:])
    x = (gate * normed).mean(-2)
    write = None if inject is None else 2.0 * torch.sigmoid(F.linear(flat, inject) / k)
    return x, write, gate


def dynamic_read_out_weights(streams: torch.Tensor, weight, base, scale, eps: float) -> torch.Tensor:
    """DeepSeek-V4's and Hy4's final collapse weights `sigmoid(Linear(RMSNorm(flatten(h))) * s + b) + eps` `[..., K]`
    (transformers' `DeepseekV4HyperHead`, `HYV4HyperHead`), in fp32 from streams `[..., K, C]`."""
    z = F.linear(rms_norm(streams.float().flatten(-2)), weight.float())
    return torch.sigmoid(z * scale.float() + base.float()) + eps
