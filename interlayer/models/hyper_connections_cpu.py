"""A no-grad mHC boundary on a CPU as two C++ functions: the read (the input-dependent coefficients, i.e. RMSNorm,
projection, constraints and the mixing's normalisation rounds, and the read-in and mixing product of `_mhc_read`,
hyper_connections_fast.py, the equation it is held to) and the write (`H_res h + H_post^T F(x)`, `_write`, into the
mixed streams the read made), for fp32 streams of any number of tokens, shared among torch's threads.

Why: a decoded token meets 60 boundaries at SmolLM2's depth, and each one's coefficients are a few microseconds of
arithmetic behind torch's per-call machinery (the graph inductor compiles for them allocates a buffer per normalisation
round and runs through a Python wrapper): about 150-250 us a sublayer inside a model, where the read takes about 7 us
of arithmetic (SmolLM2's width, K = 4, its weights in cache) and about 20 us with its Python call and outputs. A
prompt's read is faster here too (64 tokens: 0.37 ms on 2 threads, where the compiled function took 6.9 ms and the
eager operations 1.2 ms; 2,048 tokens: 12.9 ms, 38 ms, 14 ms). The C++ source below is built once per machine by
inductor's C++ code cache (`CppPythonBindingsCodeCache`: the compiler and flags `torch.compile` uses on a CPU, OpenMP
included, with the compiler's loop vectorisation back on, `FLAGS`; the library kept in inductor's cache folder, so
later processes load it) and called with the tensors themselves. Where it cannot be built (no C++ compiler, torch's
private entry point moved), the reason is logged once and the compiled function of hyper_connections_fast.py runs
instead.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import functools

import torch

from .hyper_connections_maths import COEFFICIENT_EPS
from .zoo_common import logger

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <vector>

// sum_j a[j] b[j] in 16 independent partial sums (which the compiler vectorises without reordering a sum)
static inline float dot(const float* a, const float* b, int64_t n) {
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; ++l) acc[l] += a[j + l] * b[j + l];
    float s = 0;
    for (int l = 0; l < 16; ++l) s += acc[l];
    for (; j < n; ++j) s += a[j] * b[j];
    return s;
}

static inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// m [k, k] row-major: divide each column (rows: each row) by its sum plus eps
static void columns(float* m, int64_t k, float eps) {
    for (int64_t j = 0; j < k; ++j) {
        float s = 0;
        for (int64_t i = 0; i < k; ++i) s += m[i * k + j];
        for (int64_t i = 0; i < k; ++i) m[i * k + j] /= s + eps;
    }
}

static void rows(float* m, int64_t k, float eps) {
    for (int64_t i = 0; i < k; ++i) {
        float s = 0;
        for (int64_t j = 0; j < k; ++j) s += m[i * k + j];
        for (int64_t j = 0; j < k; ++j) m[i * k + j] /= s + eps;
    }
}

// streams [tokens, k, width]; weight [k (k + 2), k width]; pre0, post0 [k], res0 [k, k], scale [3] (the static
// logits and the scales); out: x [tokens, width], mixed [tokens, k, width], coefficients [tokens, k (k + 2)] (each
// token's H_pre [k], H_post [k] and H_res [k, k])
extern "C" void kernel(const float* streams, const float* weight, const float* pre0, const float* post0,
                       const float* res0, const float* scale, float* x, float* mixed, float* coefficients,
                       int64_t tokens, int64_t k, int64_t width, int64_t iters, int64_t deepseek, float eps,
                       float rms_eps) {
    const int64_t n = k * width, parts = k * (k + 2);
    // tokens are independent: shared among the threads torch uses (each token's arithmetic is the same on any)
    #pragma omp parallel for schedule(static) if (tokens > 1)
    for (int64_t t = 0; t < tokens; ++t) {
        std::vector<float> z(parts), m(k * k), maps((k + 1) * k);
        const float* h = streams + t * n;
        // z = Linear(RMSNorm(flatten(h))): the products, then 1 / RMS
        const float rms = std::sqrt(dot(h, h, n)) * (1.0f / std::sqrt((float)n));
        const float inverse = 1.0f / std::sqrt(rms * rms + rms_eps);
        for (int64_t p = 0; p < parts; ++p) z[p] = dot(h, weight + p * n, n) * inverse;
        float* tpre = coefficients + t * parts;
        float* tpost = tpre + k;
        float* tres = tpost + k;
        for (int64_t i = 0; i < k; ++i) {
            tpre[i] = sigmoid(pre0[i] + scale[0] * z[i]) + (deepseek ? eps : 0.0f);
            tpost[i] = 2.0f * sigmoid(post0[i] + scale[1] * z[k + i]);
        }
        for (int64_t i = 0; i < k * k; ++i) m[i] = res0[i] + scale[2] * z[2 * k + i];
        if (deepseek) {
            // comb [input, output]: a softmax over each row plus eps, the columns, then (rows, columns) rounds, each
            // divided by its sum plus eps; H_res is comb transposed
            for (int64_t i = 0; i < k; ++i) {
                float top = -INFINITY, s = 0;
                for (int64_t j = 0; j < k; ++j) top = std::fmax(top, m[i * k + j]);
                for (int64_t j = 0; j < k; ++j) s += (m[i * k + j] = std::exp(m[i * k + j] - top));
                for (int64_t j = 0; j < k; ++j) m[i * k + j] = m[i * k + j] / s + eps;
            }
            columns(m.data(), k, eps);
            for (int64_t round = 1; round < iters; ++round) {
                rows(m.data(), k, eps);
                columns(m.data(), k, eps);
            }
            for (int64_t i = 0; i < k; ++i)
                for (int64_t j = 0; j < k; ++j) tres[i * k + j] = m[j * k + i];
        } else {
            // Sinkhorn-Knopp of exp(m): the first round in the log domain (each column, then each row shifted by its
            // log-sum-exp), the later ones (columns, then rows) in the exp domain
            for (int64_t j = 0; j < k; ++j) {
                float top = -INFINITY, s = 0;
                for (int64_t i = 0; i < k; ++i) top = std::fmax(top, m[i * k + j]);
                for (int64_t i = 0; i < k; ++i) s += std::exp(m[i * k + j] - top);
                const float lse = top + std::log(s);
                for (int64_t i = 0; i < k; ++i) m[i * k + j] -= lse;
            }
            for (int64_t i = 0; i < k; ++i) {
                float top = -INFINITY, s = 0;
                for (int64_t j = 0; j < k; ++j) top = std::fmax(top, m[i * k + j]);
                for (int64_t j = 0; j < k; ++j) s += std::exp(m[i * k + j] - top);
                const float lse = top + std::log(s);
                for (int64_t j = 0; j < k; ++j) m[i * k + j] = std::exp(m[i * k + j] - lse);
            }
            for (int64_t round = 1; round < iters; ++round) {
                columns(m.data(), k, 0.0f);
                rows(m.data(), k, 0.0f);
            }
            for (int64_t i = 0; i < k * k; ++i) tres[i] = m[i];
        }
        // [H_pre; H_res] h: row 0 the sublayer's input, rows 1.. the mixed streams
        for (int64_t i = 0; i < k; ++i) maps[i] = tpre[i];
        for (int64_t i = 0; i < k * k; ++i) maps[k + i] = tres[i];
        for (int64_t r = 0; r <= k; ++r) {
            float* row = r == 0 ? x + t * width : mixed + t * n + (r - 1) * width;
            for (int64_t c = 0; c < width; ++c) row[c] = 0;
            for (int64_t s = 0; s < k; ++s) {
                const float w = maps[r * k + s];
                const float* stream = h + s * width;
                for (int64_t c = 0; c < width; ++c) row[c] += w * stream[c];
            }
        }
    }
}
"""
ARGUMENTS = ["const float*"] * 6 + ["float*"] * 3 + ["int64_t"] * 5 + ["float"] * 2

WRITE_SOURCE = r"""
#include <cmath>
#include <cstdint>

// mixed [tokens, k, width] += H_post [tokens, k] (outer) out [tokens, width], each element as a fused multiply-add
// (one rounding), as torch.addcmul computes it on a CPU; H_post is read from the read's coefficients
extern "C" void kernel(float* mixed, const float* coefficients, const float* out, int64_t tokens, int64_t k,
                       int64_t width) {
    const int64_t parts = k * (k + 2);
    #pragma omp parallel for schedule(static) if (tokens > 1)
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t s = 0; s < k; ++s) {
            float* row = mixed + (t * k + s) * width;
            const float w = coefficients[t * parts + k + s];
            const float* o = out + t * width;
            for (int64_t c = 0; c < width; ++c) row[c] = std::fma(w, o[c], row[c]);
        }
}
"""
WRITE_ARGUMENTS = ["float*", "const float*", "const float*"] + ["int64_t"] * 3
# inductor builds with `-fno-tree-loop-vectorize` (its own C++ is written with explicit vectors); `dot` relies on the
# compiler's, which this turns back on: the projection's products in 8-wide instructions with the same partial sums,
# so the same result bit for bit (measured on this 2-core AVX2 machine: 29 us a read at SmolLM2's width, K = 4, 6.6 us)
FLAGS = ("-ftree-loop-vectorize",)


@functools.cache
def load():
    """`((read, write), None)`, the built functions, or `(None, why)` where they cannot be built in this process."""
    try:
        from torch._inductor.codecache import CppPythonBindingsCodeCache

        build = CppPythonBindingsCodeCache.load_pybinding
        return (
            build(ARGUMENTS, SOURCE, extra_flags=FLAGS),
            build(WRITE_ARGUMENTS, WRITE_SOURCE, extra_flags=FLAGS),
        ), None
    except Exception as error:  # noqa: BLE001 - any failure only means the compiled function runs instead
        reason = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
        logger.warning(f"the mHC boundary's C++ functions cannot be built ({reason}); its compiled read runs instead")
        return None, reason


def read_plan(weight, pre, post, res, scale, k: int, iters: int, form: tuple) -> tuple | None:
    """What `mhc_read` passes its C++ read besides the streams, from a hyper-connection's parameters (`weight`, `pre`,
    `post`, `res`, `scale`, as `_mhc_read` takes them) and settings, checked once (a hyper-connection keeps it for a
    `generate()` call): `(functions, parameters, numbers)`; or None where the functions do not run: a parameter not
    fp32 or not on a CPU, or the functions not built."""
    params = (weight, pre, post, res, scale)
    if not all(p.dtype == torch.float32 and p.is_cpu for p in params):
        return None
    functions, _ = load()
    if functions is None:
        return None
    _, variant, eps, _ = form
    numbers = (k, iters, int(variant == "deepseek_v4"), eps, COEFFICIENT_EPS)
    return functions, tuple(p.contiguous() for p in params), numbers


def mhc_read(streams: torch.Tensor, plan: tuple | None):
    """`(x, mixed, coefficients)`: `_mhc_read`'s `x` and `mixed` and its `H_pre`, `H_post` and `H_res` as each
    token's row of `coefficients` `[..., K (K + 2)]` (`split_coefficients` gives them apart), computed here with the
    hyper-connection's `read_plan`; or None where this function does not run: no plan, or streams not on a CPU or not
    fp32. `mixed` is a new tensor of its own, which `mhc_write` writes into."""
    if plan is None or streams.device.type != "cpu" or streams.dtype != torch.float32:
        return None
    functions, params, (k, iters, deepseek, eps, rms_eps) = plan
    lead, width = streams.shape[:-2], streams.shape[-1]
    streams = streams.contiguous()
    x, mixed = streams.new_empty((*lead, width)), torch.empty_like(streams)
    coefficients = streams.new_empty((*lead, k * (k + 2)))
    functions[0](streams, *params, x, mixed, coefficients, lead.numel(), k, width, iters, deepseek, eps, rms_eps)
    return x, mixed, coefficients


def split_coefficients(coefficients: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(H_pre, H_post, H_res)` (`[..., K]`, `[..., K]`, `[..., K, K]`, views) of the read's `coefficients`."""
    pre, post, res = coefficients.split((k, k, k * k), dim=-1)
    return pre, post, res.unflatten(-1, (k, k))


def mhc_write(mixed: torch.Tensor, coefficients: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`_write(mixed, H_post, out)` written into `mixed` and returned, for the `mixed` (`[..., K, D]`) and
    `coefficients` of `mhc_read` and the sublayer output `out` `[..., D]`; where `out` is not fp32 (autocast, a
    sublayer of another dtype) or of another shape than the streams' tokens (broadcast), `torch.addcmul` writes, as
    `_write` computes it."""
    k, width = mixed.shape[-2:]
    if out.dtype != torch.float32 or out.shape[:-1] != mixed.shape[:-2] or out.shape[-1] != width:
        return mixed.addcmul_(split_coefficients(coefficients, k)[1].unsqueeze(-1), out.unsqueeze(-2))
    load()[0][1](mixed, coefficients, out.contiguous(), mixed.numel() // (k * width), k, width)
    return mixed
