"""The hyper-connection kernels against the eager equation, on CPU tensors under Triton's interpreter.

Not collected by the suite (no `test_` prefix): tests/kernels/test_hyper_connection_kernels.py runs it in its own
process with `TRITON_INTERPRET=1` (which Triton reads when a kernel is defined, so it must be set before
hyper_connections_triton.py is imported, and must not leak into the other tests of a pytest-xdist worker). Tiny shapes:
N = 7 tokens (no power of 2), D = 24 hidden units (a masked block), K = 1, 2 and 4.
"""

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run by test_hyper_connection_kernels.py with TRITON_INTERPRET=1", allow_module_level=True)

from batches import lm_batch  # noqa: E402
from stock_checkpoints import build_stock_llama  # noqa: E402

from interlayer import LlamaMHCForCausalLM  # noqa: E402
from interlayer.models import hyper_connections_kernels as dispatch  # noqa: E402
from interlayer.models import hyper_connections_triton as kernels  # noqa: E402
from interlayer.models.hyper_connections_maths import MHC_EPS, deepseek_comb, rms_norm, sinkhorn_knopp  # noqa: E402

N, D, ITERS = 7, 24, 4
# Liger-Kernel's projection divides in the padding rows of its blocks (masked out)
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
DTYPES = (torch.float32, torch.bfloat16)


def _streams(k: int, dtype, layout: str, g) -> torch.Tensor:
    """Streams `[N, K, D]` in `layout`: contiguous, a transposed view (no unit stride over D), or K views of one
    tensor (stride 0 over K, as the first layer's)."""
    if layout == "transposed":
        h = torch.randn(N, D, k, generator=g).to(dtype).transpose(1, 2)
    elif layout == "expanded":
        h = torch.randn(N, 1, D, generator=g).to(dtype).expand(N, k, D)
    else:
        h = torch.randn(N, k, D, generator=g).to(dtype)
    return h.requires_grad_()


def _cases():
    """(K, dtype, layout, per-token coefficients): every K in both dtypes, the layouts and coefficient kinds in turn."""
    layouts = ("contiguous", "transposed", "expanded")
    for i, (k, dtype) in enumerate((k, dtype) for k in (1, 2, 4) for dtype in DTYPES):
        yield k, dtype, layouts[i % 3], i % 2 == 0


def _compare(kernel_outputs, reference_outputs, inputs, what):
    """Outputs and the gradients of every input equal the reference's, computed in fp32 from the same inputs and
    cotangents, then in the kernel's dtype (one rounding of an fp32 accumulation, as the kernels do)."""
    cotangents = [
        torch.randn(o.shape, generator=torch.Generator().manual_seed(i)).to(o.dtype)
        for i, o in enumerate(kernel_outputs)
    ]
    for i, (out, ref) in enumerate(zip(kernel_outputs, reference_outputs)):
        torch.testing.assert_close(out, ref.to(out.dtype), msg=lambda m: f"{what} output {i}: {m}")
    got = torch.autograd.grad(kernel_outputs, inputs, cotangents)
    expected = torch.autograd.grad(reference_outputs, inputs, [c.float() for c in cotangents])
    for i, (a, b) in enumerate(zip(got, expected)):
        torch.testing.assert_close(a, b.to(a.dtype), msg=lambda m: f"{what} grad {i}: {m}")


def test_read_in_and_write_equal_the_equation():
    """`x = sum_k H_pre[k] h_k` and `h' = H_res h + H_post^T y`: outputs and the gradients of the streams, the
    sublayer output and every coefficient, static (`[K]`, `[K, K]`) and per token, for every stream layout."""
    g = torch.Generator().manual_seed(0)
    for k, dtype, layout, per_token in _cases():
        what = f"K={k} {dtype} {layout} {'per-token' if per_token else 'static'}"
        h = _streams(k, dtype, layout, g)
        shape = (N,) if per_token else ()
        pre = torch.randn(*shape, k, generator=g).requires_grad_()
        post = torch.randn(*shape, k, generator=g).requires_grad_()
        res = torch.randn(*shape, k, k, generator=g).mT.requires_grad_()  # [output, input] through strides
        y = torch.randn(N, 2 * D, generator=g).to(dtype)[:, ::2].requires_grad_()  # every other unit: stride 2
        x = torch.einsum("nk,nkd->nd", pre.expand(N, k), h.float())
        written = torch.einsum("nij,njd->nid", res.expand(N, k, k), h.float())
        written = written + post.unsqueeze(-1) * y.float().unsqueeze(-2)
        _compare([kernels.read_in_op(h, pre)], [x], (h, pre), f"read-in {what}")
        _compare([kernels.write_op(h, y, post, res)], [written], (h, y, post, res), f"write {what}")


def _logits(mix, base, scale, k):
    """The raw logits the coefficient kernels start from: `base + scale * mix`, split into pre, post and res."""
    logits = base if mix is None else base + mix * torch.cat([s.expand(n) for s, n in zip(scale, (k, k, k * k))])
    return logits[..., :k], logits[..., k : 2 * k], logits[..., 2 * k :].unflatten(-1, (k, k))


@pytest.mark.parametrize("variant", ["seed", "deepseek_v4"])
def test_mhc_coefficients_equal_the_equation(variant):
    """mHC's `(H_pre, H_post, H_res)` with their Sinkhorn rounds, from the projection `mix`, the static logits and
    the scales, and the gradients of all three: the seed's kernel (`sigmoid`, `2 sigmoid`, `sinkhorn_knopp`) and
    Liger-Kernel's for DeepSeek-V4 (`sigmoid + eps`, `2 sigmoid`, `deepseek_comb`, at a power of 2 streams), per
    token and static (no projection: one token)."""
    g = torch.Generator().manual_seed(1)
    maps = kernels.seed_maps_op if variant == "seed" else kernels.deepseek_maps_op
    for k in (1, 2, 4) if variant == "seed" else (2, 4):
        for per_token in (True, False):
            base = torch.randn(k * (k + 2), generator=g).requires_grad_()
            scale = torch.rand(3, generator=g).requires_grad_()
            mix = torch.randn(N, k * (k + 2), generator=g).requires_grad_() if per_token else None
            pre, post, res = _logits(mix, base, scale, k)
            if variant == "seed":
                expected = (torch.sigmoid(pre), 2 * torch.sigmoid(post), sinkhorn_knopp(res, ITERS))
            else:
                expected = (torch.sigmoid(pre) + MHC_EPS, 2 * torch.sigmoid(post), deepseek_comb(res, ITERS))
            if mix is None:
                expected = tuple(e.unsqueeze(0) for e in expected)
            inputs = (base,) if mix is None else (mix, base, scale)  # static: the scales are unused
            what = f"{variant} K={k} {'per-token' if per_token else 'static'}"
            _compare(list(maps(mix, base, scale, k, ITERS)), list(expected), inputs, what)


def test_projection_equals_rms_norm_then_linear():
    """Liger-Kernel's projection of the input-dependent coefficients, `RMSNorm(x) W` with `COEFFICIENT_EPS`, and the
    gradients of `x` and `W`, for fp32 and bf16 streams."""
    g = torch.Generator().manual_seed(2)
    for dtype in DTYPES:
        x = torch.randn(N, 4 * D, generator=g).to(dtype).requires_grad_()
        weight = torch.randn(4 * D, 24, generator=g).requires_grad_()
        mix = kernels.mm_norm_op(x, weight)[0]
        _compare([mix], [rms_norm(x.float()) @ weight], (x, weight), f"projection {dtype}")


def test_operators_pass_torch_opcheck():
    """Every operator passes `torch.library.opcheck`: its schema, its autograd registration, its fake implementation
    and AOT dispatch with dynamic shapes (what `torch.compile` traces, backward included), with per-token and static
    coefficients."""
    g = torch.Generator().manual_seed(3)
    k = 2
    h, y = torch.randn(3, k, 8, generator=g).requires_grad_(), torch.randn(3, 8, generator=g).requires_grad_()
    post, res = torch.randn(k, generator=g).requires_grad_(), torch.randn(k, k, generator=g).requires_grad_()
    base, scale = torch.randn(k * (k + 2), generator=g).requires_grad_(), torch.rand(3, generator=g).requires_grad_()
    mix = torch.randn(3, k * (k + 2), generator=g).requires_grad_()
    cases = [
        (kernels.read_in_op, (h, torch.randn(3, k, generator=g).requires_grad_())),
        (kernels.write_op, (h, y, post, res)),
        (kernels.seed_maps_op, (mix, base, scale, k, ITERS)),
        (kernels.seed_maps_op, (None, base, scale, k, ITERS)),
        (kernels.deepseek_maps_op, (mix, base, scale, k, ITERS)),
        (kernels.mm_norm_op, (h.detach().flatten(1).requires_grad_(), torch.randn(k * 8, 8, generator=g))),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


@pytest.fixture(scope="module")
def stock_llama(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("stock_llama"))
    build_stock_llama(folder, num_hidden_layers=2)  # 4 sublayers: the recomputation rebuilds 2 of them
    return folder


def test_model_with_kernels_equals_the_eager_equation(stock_llama, monkeypatch):
    """Dispatched to the kernels (CPU counted as a kernel device here), an input-dependent mHC model's logits and
    every parameter's gradient of a training step (through the stream recomputation, which rebuilds the streams with
    the write kernel), and its logits without grad, equal those of `hc_implementation="eager"`. One mode at 3 tokens:
    the interpreter runs a model's kernels at about 1 s a token; the other forms are held to the equation above."""
    monkeypatch.setattr(dispatch, "DEVICES", ("cuda", "cpu"))
    input_ids = lm_batch(lengths=(3,))["input_ids"]
    results = {}
    for implementation in ("eager", "fast"):
        model = LlamaMHCForCausalLM.from_pretrained(
            stock_llama, hc_implementation=implementation, hc_mode="mhc", sinkhorn_iters=4
        )
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "hc_" in name:
                    p.add_(0.3 * torch.randn(p.shape, generator=g))
        if implementation == "fast":
            assert all(dispatch.kernels_for(hc, torch.zeros(1, 1)) is not None for hc in model.hyper_connections)
        logits = model.train()(input_ids).logits
        (logits * torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))).sum().backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        with torch.no_grad():
            no_grad = model.eval()(input_ids).logits
        results[implementation] = logits.detach(), grads, no_grad
    (logits, grads, no_grad), (kernel_logits, kernel_grads, kernel_no_grad) = results["eager"], results["fast"]
    torch.testing.assert_close(kernel_logits, logits)
    torch.testing.assert_close(kernel_no_grad, no_grad)
    assert kernel_grads.keys() == grads.keys() and any("hc_" in n for n in grads)
    largest = max(g.abs().max() for g in grads.values())
    for name, grad in grads.items():
        atol = 1e-5 * grad.abs().max().item() + 1e-6 * largest.item()
        torch.testing.assert_close(kernel_grads[name], grad, rtol=1e-5, atol=atol, msg=name)
