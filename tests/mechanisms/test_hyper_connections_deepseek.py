"""`mhc_variant="deepseek_v4"`: the mHC of DeepSeek-V4 against a reference written from DeepSeek's published code
(TileKernels `tile_kernels/torch/mhc.py`: `mhc_pre_norm_fn_ref`, `mhc_pre_split_mixes_ref`, `sinkhorn_normalize_ref`,
`mhc_pre_apply_mix_ref`, `mhc_post_ref`; transformers' `DeepseekV4HyperConnection` and decoder layer compute the
same), for one sublayer and for whole Qwen3 and Llama models, forward and gradients; the orientation of the mixing
matrix (a reference that multiplies the streams by `comb` instead of `comb^T` is far off); identity at init; the
fused (compiled) coefficients."""

import pytest
import torch
from batches import lm_batch, lm_labels
from fused_calls import counting_fused
from stock_checkpoints import build_stock_llama, build_stock_qwen3

from interlayer import LlamaMHCConfig, LlamaMHCForCausalLM, Qwen3MHCForCausalLM
from interlayer.models.modeling_hyper_connections import deepseek_comb
from interlayer.models.zoo_common import ConfigError

EPS = 1e-6  # DeepSeek-V4's hc_eps (and TileKernels' pre_eps and sinkhorn_eps); its RMS-norm eps is 1e-6 as well
DEEPSEEK = dict(hc_mode="mhc", mhc_variant="deepseek_v4")
FAMILIES = {"qwen3": (build_stock_qwen3, Qwen3MHCForCausalLM), "llama": (build_stock_llama, LlamaMHCForCausalLM)}


@pytest.fixture(scope="module", params=list(FAMILIES))
def stock(request, tmp_path_factory):
    build, model_class = FAMILIES[request.param]
    folder = str(tmp_path_factory.mktemp(request.param))
    return folder, build(folder).eval(), model_class


def randomised(folder, model_class, seed=0, **options):
    """A converted DeepSeek-variant model whose every hyper-connection parameter is random, so that no stream equals
    another and `comb` is far from symmetric."""
    model = model_class.from_pretrained(folder, **{**DEEPSEEK, **options}).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "hc_" in name:
                p.add_(0.5 * torch.randn(p.shape, generator=g))
    return model


# -- the reference, from DeepSeek's code ------------------------------------------------------------------------------


def deepseek_weights(hc):
    """The module's parameters in DeepSeek's layout: `fn` [K(K+2), K*D] (None when static: no input-dependent
    part), `base` [K(K+2)] (pre, post, then comb row by row, comb indexed [input stream, output stream]) and `scale`
    [3] (zeros when static)."""
    base = torch.cat([hc.pre, hc.post, hc.res.flatten()])
    if hc.dynamic:
        return hc.dynamic_proj.weight, base, hc.dynamic_scale
    return None, base, torch.zeros(3)


def deepseek_comb_reference(logits, iters, eps=EPS):
    """`sinkhorn_normalize_ref`: softmax over the last axis plus eps; then columns; then (rows, columns) x iters-1,
    every division by the sum plus eps."""
    comb = logits.softmax(-1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return comb


def deepseek_sublayer(hc, streams, sublayer, transpose_comb=False):
    """One DeepSeek-V4 mHC sublayer on streams `[..., K, D]`: the RMS-normalised flattened streams times `fn`, each
    part times its scale plus its bias; `pre = sigmoid + eps`, `post = 2 sigmoid`, `comb` as above; the sublayer reads
    `sum_m pre_m h_m` and the new stream `n` is `post_n F(x) + sum_m comb[m, n] h_m` (`transpose_comb=True`: the
    defect, `sum_m comb[n, m] h_m`)."""
    k = hc.streams
    fn, base, scale = deepseek_weights(hc)
    flat = streams.flatten(-2).float()
    if fn is not None:
        mixes = (flat @ fn.float().T) * torch.rsqrt(flat.square().sum(-1, keepdim=True) / flat.shape[-1] + EPS)
    else:
        mixes = torch.zeros(*flat.shape[:-1], k * (k + 2))
    per_output_scale = torch.cat([scale[0].expand(k), scale[1].expand(k), scale[2].expand(k * k)])
    mixes = mixes * per_output_scale + base
    pre = torch.sigmoid(mixes[..., :k]) + EPS
    post = 2 * torch.sigmoid(mixes[..., k : 2 * k])
    comb = deepseek_comb_reference(mixes[..., 2 * k :].unflatten(-1, (k, k)), hc.sinkhorn_iters)
    x = (pre.unsqueeze(-1) * streams).sum(-2)
    out = sublayer(x)
    if transpose_comb:
        comb = comb.mT
    mixed = torch.einsum("...mn,...md->...nd", comb, streams)
    return post.unsqueeze(-1) * out.unsqueeze(-2) + mixed


def deepseek_logits(model, input_ids, transpose_comb=False):
    """The whole model with every sublayer as `deepseek_sublayer`: the embedding copied into every stream, the stock
    attention and MLP branches, and the read-out `sum_k r_k h_k` into the stock final norm and head."""
    base = model.model
    k = model.config.hc_streams
    embeds = base.embed_tokens(input_ids)
    rope = base.rotary_emb(embeds, torch.arange(input_ids.shape[1])[None])
    h = embeds.unsqueeze(-2).expand(*embeds.shape[:-1], k, -1)
    for layer in base.layers:
        h = deepseek_sublayer(
            layer.hc_attn, h, lambda x: layer.self_attn(layer.input_layernorm(x), rope, None)[0], transpose_comb
        )
        h = deepseek_sublayer(layer.hc_mlp, h, lambda x: layer.mlp(layer.post_attention_layernorm(x)), transpose_comb)
    return model.lm_head(base.norm((base.hc_read_out.unsqueeze(-1) * h).sum(-2)))


def far_apart(a, b):
    """How far `a` is from `b` in units of `assert_close`'s fp32 tolerance (above 1: not close)."""
    return ((a - b).abs() / (1e-5 + 1.3e-6 * b.abs())).max().item()


DYNAMIC = pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "static"])


# -- the formula, and which side of comb multiplies the streams -------------------------------------------------------


@DYNAMIC
def test_sublayer_equals_the_deepseek_reference_and_not_its_transpose(stock, dynamic):
    """One attention and one MLP sublayer on K distinct random streams (where the mixing matters): the option
    computes DeepSeek's formula to float rounding; the same formula with `comb` not transposed is thousands of
    tolerances away, so this test fails if the orientation is wrong."""
    folder, _, model_class = stock
    model = randomised(folder, model_class, mhc_dynamic=dynamic)
    layer, base = model.model.layers[1], model.model
    shape = (2, 7, model.config.hc_streams, model.config.hidden_size)
    streams = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    rope = base.rotary_emb(streams[..., 0, :], torch.arange(7)[None])
    sublayers = (
        (layer.hc_attn, lambda x: layer.self_attn(layer.input_layernorm(x), rope, None)[0]),
        (layer.hc_mlp, lambda x: layer.mlp(layer.post_attention_layernorm(x))),
    )
    with torch.no_grad():
        for hc, sublayer in sublayers:
            ours = hc(streams, sublayer)
            torch.testing.assert_close(ours, deepseek_sublayer(hc, streams, sublayer), msg=hc.sublayer)
            assert far_apart(ours, deepseek_sublayer(hc, streams, sublayer, transpose_comb=True)) > 1000, hc.sublayer


def test_comb_equals_deepseeks_normalisation_in_float64():
    """`deepseek_comb` places every eps where DeepSeek does and normalises in its order: in float64 it equals the
    reference to 1e-12 on logits of spread 0.3 to 30, where leaving the eps out or normalising rows last moves it by
    more than 1e-8 (so fp32 rounding elsewhere cannot hide such a slip)."""
    scales = torch.tensor([0.3, 1.0, 3.0, 30.0], dtype=torch.float64).view(-1, 1, 1, 1)
    logits = scales * torch.randn(4, 5, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = deepseek_comb_reference(logits, 20)
    torch.testing.assert_close(deepseek_comb(logits, 20), expected, rtol=0, atol=1e-12)
    without_eps = deepseek_comb_reference(logits, 20, eps=0.0)
    rows_last = deepseek_comb_reference(logits.mT, 20).mT
    for slip in (without_eps, rows_last):
        assert (slip - expected).abs().amax((-2, -1)).min() > 1e-8


def test_static_coefficients_equal_deepseeks_to_fp32_rounding(stock):
    """The static coefficients (no input-dependent part) against the reference's, to a tenth of DeepSeek's eps: the
    read-in's `+ eps` is there, and `H_res` is `comb` transposed."""
    folder, _, model_class = stock
    hc = randomised(folder, model_class, mhc_dynamic=False).model.layers[1].hc_mlp
    k = hc.streams
    with torch.no_grad():
        pre, post, res = hc.coefficients(torch.zeros(1, 1, k, 32))
        comb = deepseek_comb_reference(hc.res, hc.sinkhorn_iters)
        torch.testing.assert_close(pre, torch.sigmoid(hc.pre) + EPS, rtol=0, atol=1e-7)
        torch.testing.assert_close(post, 2 * torch.sigmoid(hc.post), rtol=0, atol=1e-7)
        torch.testing.assert_close(res, comb.mT, rtol=0, atol=1e-7)
        assert (res - comb).abs().max() > 1e-2


@DYNAMIC
def test_model_equals_the_deepseek_reference_and_not_its_transpose(stock, dynamic):
    """The whole model (3 layers, 6 sublayers): logits equal the reference's to float rounding, and not the
    reference's with `comb` untransposed (over 100 tolerances away). The recorded `H_res` is `comb^T`: its rows sum
    to 1 (to `eps`), so the composite gain's row side stays 1."""
    folder, _, model_class = stock
    model = randomised(folder, model_class, mhc_dynamic=dynamic)
    input_ids = lm_batch(lengths=(10, 10))["input_ids"]
    with torch.no_grad():
        logits = model(input_ids).logits
        torch.testing.assert_close(logits, deepseek_logits(model, input_ids))
        assert far_apart(logits, deepseek_logits(model, input_ids, transpose_comb=True)) > 100
    assert model.mechanism_stats(split="eval")["hc/amax_gain_row_worst"] == pytest.approx(1.0, abs=1e-5)


def test_gradients_equal_the_deepseek_reference(stock):
    """Every parameter's gradient (hyper-connection and stock) equals autograd's through the reference, with the
    stream recomputation on (the default)."""
    folder, _, model_class = stock
    model = randomised(folder, model_class, freeze_base=False).train()
    input_ids = lm_batch(lengths=(10, 10))["input_ids"]
    cotangent = torch.randn(model(input_ids).logits.shape, generator=torch.Generator().manual_seed(1))
    grads = []
    for logits in (lambda: model(input_ids).logits, lambda: deepseek_logits(model, input_ids)):
        model.zero_grad()
        (logits() * cotangent).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any("hc_" in n for n in grads[0])
    largest = max(g.abs().max() for g in grads[1].values())
    for name, grad in grads[1].items():
        atol = 1e-5 * grad.abs().max().item() + 1e-6 * largest.item()
        torch.testing.assert_close(grads[0][name], grad, rtol=1e-5, atol=atol, msg=name)


# -- init, validation, the fused path ---------------------------------------------------------------------------------


@pytest.mark.parametrize("streams", [1, 2, 4])
def test_identity_init_computes_the_stock_function_to_eps(stock, streams):
    """DeepSeek's formula cannot start as the exact identity: after its last column normalisation every column of
    `comb` (row of `H_res`) sums to `s / (s + eps)`, about `1 - eps`. The read-in's `+ eps` is absorbed by the raw
    init (it sums to 1), the write is 1, so the converted model is the stock model with the residual scaled by about
    `1 - 1e-6` per sublayer: equal within fp32 `assert_close` (a 3-layer model). One stream works too (the seed's
    sigmoid read-in cannot reach 1; DeepSeek's `sigmoid + eps` can)."""
    folder, stock_model, model_class = stock
    model = model_class.from_pretrained(folder, hc_streams=streams, **DEEPSEEK).eval()
    batch = lm_batch()
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, stock_model(**batch).logits)
        pre, post, res = model.model.layers[0].hc_attn.coefficients(torch.zeros(1, 1, streams, 32))
    torch.testing.assert_close(pre.sum(-1), torch.ones(1, 1), rtol=0, atol=1e-6)
    torch.testing.assert_close(post, torch.ones_like(post))
    assert ((res.sum(-1) - 1).abs() < 3e-6).all() and (res.sum(-1) < 1).all()


def test_without_identity_init_the_raw_coefficients_start_at_deepseeks_zeros(stock):
    """`identity_init=False` initialises the biases as DeepSeek-V4 does (zeros): read-in 0.5 + eps per stream, write
    2 sigmoid(0) = 1, mixing uniform."""
    folder, _, model_class = stock
    model = model_class.from_pretrained(folder, identity_init=False, **DEEPSEEK)
    with torch.no_grad():
        pre, post, res = model.model.layers[0].hc_attn.coefficients(torch.zeros(1, 1, 4, 32))
    torch.testing.assert_close(pre, torch.full_like(pre, 0.5 + EPS))
    torch.testing.assert_close(post, torch.ones_like(post))
    torch.testing.assert_close(res, torch.full_like(res, 0.25))


def test_a_misspelt_variant_is_refused_with_the_allowed_values():
    with pytest.raises(ConfigError, match=r"mhc_variant.*'seed', 'deepseek_v4'.*deepseek-v4"):
        LlamaMHCConfig(mhc_variant="deepseek-v4")


def test_fused_coefficients_compute_the_deepseek_formula(stock, monkeypatch):
    """`hc_fused=True` (the default) compiles the DeepSeek variant's coefficients (inductor, `fullgraph=True`): a
    training step gives the eager loss and gradients to rounding, and the compiled function is what ran."""
    from interlayer.models import hyper_connections_fast as hc_module

    folder, _, model_class = stock
    calls = counting_fused(monkeypatch, hc_module, "_fused_mhc_coefficients")
    batch = lm_batch(lengths=(12, 9))
    batch["labels"] = lm_labels(batch)
    results = []
    for fused in (False, True):
        model = randomised(folder, model_class, freeze_base=False, hc_fused=fused).train()
        out = model(**batch)
        out.loss.backward()
        results.append((out.loss, {n: p.grad for n, p in model.named_parameters()}))
    assert calls == ["_mhc_coefficients"] * 2 * model.config.num_hidden_layers
    (loss, grads), (fused_loss, fused_grads) = results
    torch.testing.assert_close(fused_loss, loss)
    for name, grad in grads.items():
        torch.testing.assert_close(fused_grads[name], grad, msg=name)


def test_without_eps_comb_transposed_is_the_seed_projection_of_the_transposed_logits():
    """What docs/hyper_connections.md says of the two orientations: without DeepSeek's eps, `comb(L)^T` is the seed
    variant's Sinkhorn-Knopp of `L^T` (both start from `exp` and alternate, DeepSeek rows-then-columns on `L`, the
    seed columns-then-rows), so the variants differ in the eps and in the layout of the logits, and agree on which
    side of `H_res` is exact."""
    from interlayer.models.modeling_hyper_connections import sinkhorn_knopp

    logits = 2 * torch.randn(5, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    without_eps = deepseek_comb(logits, 20, eps=0.0)
    torch.testing.assert_close(without_eps.mT, sinkhorn_knopp(logits.mT, 20), rtol=0, atol=1e-12)
