"""The maths the hyper-connections' coefficients are made of (mHC's doubly-stochastic projections, the RMSNorm of the
input-dependent coefficients and their eps), shared by the equation (modeling_hyper_connections.py) and its fast
implementation (hyper_connections_fast.py), which both import it: the lowest of the three files.
"""

from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import torch

COEFFICIENT_EPS = 1e-6  # RMSNorm's eps in the input-dependent coefficients
MHC_EPS = 1e-6  # DeepSeek-V4's hc_eps: added to its read-in and softmax, and to every normalisation's denominator


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


def mhc_mixing(logits: torch.Tensor, iters: int, variant: str) -> torch.Tensor:
    """mHC's `H_res` (`[..., K, K]`, [output, input]) from its logits: the seed's `Sinkhorn-Knopp(exp(logits))`, or
    DeepSeek-V4's `comb^T` (its logits are `comb`'s, [input, output])."""
    if variant == "deepseek_v4":
        return deepseek_comb(logits, iters).mT
    return sinkhorn_knopp(logits, iters)


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm without a weight over the last axis (the input of the input-dependent coefficients)."""
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + COEFFICIENT_EPS)
