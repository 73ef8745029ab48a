"""A decoded token's mHC read on a CPU as one C++ function: the input-dependent coefficients (RMSNorm, projection,
constraints, the mixing's normalisation rounds) and the read-in and mixing product of `_mhc_read`
(hyper_connections_fast.py, the equation this is held to), for fp32 streams of at most `MAX_TOKENS` tokens, without
grad.

Why: a decoded token meets 60 boundaries at SmolLM2's depth, and each one's coefficients are a few microseconds of
arithmetic behind torch's per-call machinery (the graph inductor compiles for them allocates a buffer per normalisation
round and runs through a Python wrapper): about 150-250 us a sublayer inside a model, where this function takes about
7 us of arithmetic (SmolLM2's width, K = 4, its weights in cache) and about 20 us with its Python call and outputs. The
C++ source below is built once per machine by inductor's C++ code cache (`CppPythonBindingsCodeCache`: the compiler
and flags `torch.compile` uses on a CPU, with the compiler's loop vectorisation back on, `FLAGS`; the library kept in
inductor's cache folder, so later processes load it) and called with the tensors themselves. Where it cannot be
built (no C++ compiler, torch's private entry point moved), the reason is logged once and the compiled function of
hyper_connections_fast.py runs instead.

It runs one token after the other on one thread: for more tokens (a prompt, a batch of sequences) the compiled
function's threaded products are faster, hence `MAX_TOKENS`.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import functools

import torch

from .hyper_connections_maths import COEFFICIENT_EPS
from .zoo_common import logger

MAX_TOKENS = 8  # tokens per call up to which the read runs here (a decoded step of up to 8 sequences)

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
// logits and the scales); out: x [tokens, width], mixed [tokens, k, width], pre, post [tokens, k], res [tokens, k, k]
extern "C" void kernel(const float* streams, const float* weight, const float* pre0, const float* post0,
                       const float* res0, const float* scale, float* x, float* mixed, float* pre, float* post,
                       float* res, int64_t tokens, int64_t k, int64_t width, int64_t iters, int64_t deepseek,
                       float eps, float rms_eps) {
    const int64_t n = k * width, parts = k * (k + 2);
    std::vector<float> z(parts), m(k * k), maps((k + 1) * k);
    for (int64_t t = 0; t < tokens; ++t) {
        const float* h = streams + t * n;
        // z = Linear(RMSNorm(flatten(h))): the products, then 1 / RMS
        const float rms = std::sqrt(dot(h, h, n)) * (1.0f / std::sqrt((float)n));
        const float inverse = 1.0f / std::sqrt(rms * rms + rms_eps);
        for (int64_t p = 0; p < parts; ++p) z[p] = dot(h, weight + p * n, n) * inverse;
        float* tpre = pre + t * k;
        float* tpost = post + t * k;
        float* tres = res + t * k * k;
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
ARGUMENTS = ["const float*"] * 6 + ["float*"] * 5 + ["int64_t"] * 5 + ["float"] * 2
# inductor builds with `-fno-tree-loop-vectorize` (its own C++ is written with explicit vectors); `dot` relies on the
# compiler's, which this turns back on: the projection's products in 8-wide instructions with the same partial sums,
# so the same result bit for bit (measured on this 2-core AVX2 machine: 29 us a read at SmolLM2's width, K = 4, 6.6 us)
FLAGS = ("-ftree-loop-vectorize",)


@functools.cache
def load():
    """`(kernel, None)`, the built function, or `(None, why)` where it cannot be built in this process."""
    try:
        from torch._inductor.codecache import CppPythonBindingsCodeCache

        return CppPythonBindingsCodeCache.load_pybinding(ARGUMENTS, SOURCE, extra_flags=FLAGS), None
    except Exception as error:  # noqa: BLE001 - any failure only means the compiled function runs instead
        reason = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
        logger.warning(f"the mHC read's C++ function cannot be built ({reason}); its compiled function runs instead")
        return None, reason


def mhc_read(streams, weight, pre, post, res, scale, k: int, iters: int, form: tuple):
    """`_mhc_read`'s `(x, mixed, pre, post, res)` computed here, or None where this function does not run it: streams
    not on a CPU, not fp32, more than `MAX_TOKENS` tokens, a parameter not fp32, or the function not built."""
    if streams.device.type != "cpu" or streams.dtype != torch.float32:
        return None
    lead, width = streams.shape[:-2], streams.shape[-1]
    tokens = lead.numel()
    if tokens > MAX_TOKENS or not weight.dtype == pre.dtype == post.dtype == res.dtype == scale.dtype == torch.float32:
        return None
    kernel, _ = load()
    if kernel is None:
        return None
    _, variant, eps, _ = form
    streams = streams.contiguous()
    x, mixed = streams.new_empty((*lead, width)), torch.empty_like(streams)
    h_pre, h_post, h_res = (streams.new_empty((*lead, *shape)) for shape in ((k,), (k,), (k, k)))
    weight, res = weight.contiguous(), res.contiguous()
    deepseek = int(variant == "deepseek_v4")
    kernel(
        streams,
        weight,
        pre,
        post,
        res,
        scale,
        x,
        mixed,
        h_pre,
        h_post,
        h_res,
        tokens,
        k,
        width,
        iters,
        deepseek,
        eps,
        COEFFICIENT_EPS,
    )
    return x, mixed, h_pre, h_post, h_res
