"""The hyper-connection forms of 2026 against the transformers modules that define them (5.24: DeepSeek-V4's and
GLM-5.3's mHC, Hy4's independent HC, Qwen3.8's gated residual, and their read-outs): our parameters mapped into the
native module (`interlayer.native.to_native`), the same streams, and the read-in, the write weights, the mixing and
the sublayer output compared within 1e-6 of their magnitude in fp32, forward and every gradient, with random
parameters; the parity check failing for DeepSeek's `comb` transposed or its `[pre, post, comb]` order swapped; the
conversions to and from the native layout; the fast implementation against the eager equation at K = 1..8; the exact
starts (bit for bit for the gated residual, measured with Qwen's own module too) and each form's tolerance; stream
symmetry and how the options break it; fp32 parameters and arithmetic under bf16 and fp16 weights and autocast."""

import pytest
import torch
from batches import lm_batch, lm_labels
from converted_models import stream_spread
from stock_checkpoints import (
    build_stock_gemma2,
    build_stock_gemma3,
    build_stock_gpt2_decoder,
    build_stock_llama,
    build_stock_mistral,
    build_stock_olmo2,
    build_stock_phi3,
    build_stock_qwen2,
    build_stock_qwen3,
)

from interlayer import (
    Gemma2MHCForCausalLM,
    Gemma3TextMHCForCausalLM,
    GPT2MHCForCausalLM,
    LlamaMHCForCausalLM,
    MistralMHCForCausalLM,
    Olmo2MHCForCausalLM,
    Phi3MHCForCausalLM,
    Qwen2MHCForCausalLM,
    Qwen3MHCForCausalLM,
)
from interlayer.models.modeling_hyper_connections import FastGatedResidual, GatedResidual
from interlayer.native import from_native, to_native

FAMILIES = {
    "llama": (build_stock_llama, LlamaMHCForCausalLM),
    "qwen3": (build_stock_qwen3, Qwen3MHCForCausalLM),
    "gemma2": (build_stock_gemma2, Gemma2MHCForCausalLM),
}
# the fused (compiled) coefficients only where asked: each K compiles graphs of its own
DEEPSEEK = dict(hc_mode="mhc", mhc_variant="deepseek_v4", hc_fused=False)
FORMS = {  # the forms a transformers module defines, each with that module's own read-out
    "deepseek_v4": dict(**DEEPSEEK, hc_read_out="dynamic"),
    "glm5_next": dict(**DEEPSEEK, hc_read_out="mean"),
    "independent": dict(hc_mode="independent"),
    "gated": dict(hc_mode="gated", hc_lowrank=8),
}
RELATIVE = 1e-6  # the parity bound: of the largest magnitude of what is compared, in fp32
# gradients that are sums over every token (and for the scales over every output) of terms of both signs, through
# DeepSeek's 20 normalisation rounds: fp32 cancellation reaches 1.2e-5 (scales) and 1.7e-6 (`res`) of their largest
# magnitude, eager or fused, while a transposed or reordered formula moves them by O(1)
REDUCED = {"dynamic_scale": 2e-5, "res": 4e-6}


@pytest.fixture(scope="module")
def stock_folders(tmp_path_factory):
    """The tiny stock checkpoints, their norm weights made random (in [0.3, 2] as a multiplier), so that the gated
    residual's exact start is not helped by norm weights of 1."""
    folders = {}
    for family, (build, _) in FAMILIES.items():
        folder = str(tmp_path_factory.mktemp(family))
        model = build(folder)
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:  # Gemma's multiplier is 1 + weight
                    offset = 1.0 if family == "gemma2" else 0.0
                    p.copy_(torch.rand(p.shape, generator=g) * 1.7 + 0.3 - offset)
        model.save_pretrained(folder)
        folders[family] = folder
    return folders


def converted(folder, family, seed=None, **options):
    """A converted model (the random parts of its init drawn with seed 0); with `seed`, every hyper-connection
    parameter moved by random noise (std 0.3), so that no stream equals another and no coefficient sits at its
    initial value."""
    torch.manual_seed(0)
    model = FAMILIES[family][1].from_pretrained(folder, **options).eval()
    if seed is not None:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if model.is_mechanism_parameter(name):
                    p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model


def assert_relative(ours, theirs, bound=RELATIVE, what=""):
    """`|ours - theirs| <= bound * max |theirs|` everywhere (the parity criterion); returns the ratio measured."""
    scale = theirs.abs().max().item()
    ratio = (ours - theirs).abs().max().item() / scale if scale else (ours - theirs).abs().max().item()
    assert ratio <= bound, f"{what}: {ratio:.3g} of the largest magnitude {scale:.3g}"
    return ratio


def streams_for(model, seed=3, batch=2, seq=7):
    """Random streams `[batch, seq, K, hidden]` (every stream different)."""
    k, width = model.config.hc_streams, model.config.hidden_size
    return torch.randn(batch, seq, k, width, generator=torch.Generator().manual_seed(seed))


def mlp_sublayer(layer):
    """`(F, F without its input norm, input norm)` of the layer's MLP branch."""
    return layer.mlp_branch, lambda x: layer.mlp_branch(x, input_norm=False), layer.input_norm("mlp")


# -- the native compositions, as transformers' decoder layers write them ---------------------------------------------


def native_deepseek(native, streams, branch):
    """`DeepseekV4DecoderLayer` / `Glm5NextTextDecoderLayer` around one sublayer: `(collapsed, post, comb, out)`,
    `out = post F(collapsed) + comb^T h`."""
    post, comb, collapsed = native(streams)
    out = post.unsqueeze(-1) * branch(collapsed).unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), streams)
    return collapsed, post, comb, out


def native_hy4(native, streams, branch):
    """`HYV4DecoderLayer` around one sublayer: `(collapsed, post, out)`, `out = post F(collapsed) + h` in fp32."""
    post, collapsed = native(streams)
    out = post.float().unsqueeze(-1) * branch(collapsed).float().unsqueeze(-2) + streams.float()
    return collapsed, post, out


def native_qwen(native, streams, branch_without_norm):
    """`Qwen4ExpTextDecoderLayer` around one sublayer: `(x, write, out)`, `out = h + write F'(x)` on the flattened
    streams (Qwen's layout `[..., K*C]`)."""
    x, hyper_input, write = native(streams.flatten(-2))
    out = hyper_input + (branch_without_norm(x).unsqueeze(-2) * write.unsqueeze(-1)).flatten(-2)
    return x, write, out.unflatten(-1, streams.shape[-2:])


# -- parity, forward and gradients -------------------------------------------------------------------------------------


def _ours_and_native(model, form, layer, streams):
    """For one MLP sublayer: ours `(read-in, write weights, mixing or None, output)` and the native module's, each a
    function of the streams and of the parameters, with the native module built from ours (`to_native`)."""
    branch, without_norm, norm = mlp_sublayer(layer)
    hc = layer.hc_mlp
    if form == "gated":
        native = to_native(hc, input_norm=norm)

        def ours():
            x, write, _ = hc.read(streams, norm)
            return x, write, None, hc(streams, branch, norm)

        def theirs():
            x, write, out = native_qwen(native, streams, without_norm)
            return x, write, None, out

        return ours, theirs, native
    native = to_native(hc, native="glm5_next" if form == "glm5_next" else None)

    def ours():
        pre, post, res = hc.coefficients(streams)
        return torch.einsum("...k,...kc->...c", pre, streams), post, res, hc(streams, branch)

    def theirs():
        if form == "independent":
            x, post, out = native_hy4(native, streams, branch)
            return x, post, None, out
        x, post, comb, out = native_deepseek(native, streams, branch)
        return x, post, comb.mT, out

    return ours, theirs, native


def _native_grads(native, hc, form) -> dict:
    """The native module's parameter gradients in our layout (the inverse of `to_native`'s mapping)."""
    g = {name: p.grad for name, p in native.named_parameters()}
    if form == "gated":
        names = {
            "read_down": "input_mix_weight_down",
            "read_up": "input_mix_weight_up",
            "inject": "block_inject_weight",
        }
        return {f"{ours}.weight": g[f"{theirs}.weight"] for ours, theirs in names.items()}
    k = hc.streams
    grads = {"pre": g["base"][:k], "post": g["base"][k : 2 * k], "dynamic_proj.weight": g["fn"]}
    grads["dynamic_scale"] = g["scale"]
    if hc.mixes:
        grads["res"] = g["base"][2 * k :].view(k, k)
    return grads


@pytest.mark.parametrize("implementation", ["fast", "eager"])
@pytest.mark.parametrize("streams", [2, 3, 4, 8])
@pytest.mark.parametrize("form", list(FORMS))
def test_sublayer_equals_the_native_module(stock_folders, form, streams, implementation):
    """One MLP sublayer of a converted Qwen3 with random parameters, against the transformers module of its form built
    from our parameters: the read-in, the write weights, the mixing (DeepSeek's `comb^T`) and the sublayer output agree
    within 1e-6 of their magnitude in fp32, and so do the gradients of every hyper-connection parameter (mapped to
    our layout; DeepSeek's scales and mixing logits within `REDUCED`), of the stock MLP weights and of the input
    streams, for a random cotangent of the output."""
    # the fused (compiled) coefficients of DeepSeek's form at K = 4 only: each K compiles a graph of its own
    options = {**FORMS[form], "hc_fused": streams == 4}
    model = converted(stock_folders["qwen3"], "qwen3", seed=0, hc_streams=streams, hc_implementation=implementation,
                      freeze_base=False, **options)  # fmt: skip
    layer = model.model.layers[1]
    h = streams_for(model).requires_grad_(True)
    ours, theirs, native = _ours_and_native(model, form, layer, h)
    got, expected = ours(), theirs()
    for name, a, b in zip(("read-in", "write", "mixing", "output"), got, expected):
        if b is not None:
            assert_relative(a, b, what=f"{form} {name}")
    cotangent = torch.randn(got[3].shape, generator=torch.Generator().manual_seed(1))
    stock = {n: p for n, p in layer.mlp.named_parameters()}
    runs = []  # each backward on a forward of its own (the fused coefficients' compiled backward frees its buffers)
    for compute, params in ((ours, dict(layer.hc_mlp.named_parameters())), (theirs, None)):
        model.zero_grad()
        native.zero_grad()
        h.grad = None
        (compute()[3] * cotangent).sum().backward()
        grads = {n: p.grad.clone() for n, p in params.items()} if params else _native_grads(native, layer.hc_mlp, form)
        grads |= {f"mlp.{n}": p.grad.clone() for n, p in stock.items()} | {"streams": h.grad.clone()}
        runs.append(grads)
    ours_grads, native_grads = runs
    if form == "gated":  # Qwen's hc_norm weight is `m G - 1`: its gradient is ours divided by the norm multiplier
        norm = layer.input_norm("mlp")
        m = norm(torch.full((model.config.hidden_size,), 1024.0)).detach()
        native_grads["norm_gain"] = native.hc_norm.weight.grad.view(streams, -1) * m
    assert native_grads.keys() == ours_grads.keys(), sorted(native_grads.keys() ^ ours_grads.keys())
    for name, grad in native_grads.items():
        assert_relative(ours_grads[name], grad, REDUCED.get(name, RELATIVE), what=f"{form} gradient of {name}")


@pytest.mark.parametrize("form", ["deepseek_v4", "independent"])
def test_read_out_equals_the_native_head(stock_folders, form):
    """The input-dependent read-out (`DynamicReadOut`) against `DeepseekV4HyperHead` and `HYV4HyperHead`, the mean
    against `Glm5NextTextHyperHead`, and the gated read-out (`hc_mixer`) against Qwen's `use_combine=False` mixer,
    forward and gradients, random parameters."""
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextTextHyperHead

    model = converted(stock_folders["qwen3"], "qwen3", seed=0, **{**FORMS[form], "hc_read_out": "dynamic"})
    h = streams_for(model).requires_grad_(True)
    head = model.model.hc_head
    native = to_native(head, native="hy_v4" if form == "independent" else "deepseek_v4")
    ours, theirs = head(h), native(h)
    assert_relative(ours, theirs, what="dynamic read-out")
    cotangent = torch.randn(ours.shape, generator=torch.Generator().manual_seed(1))
    (ours * cotangent).sum().backward()
    (theirs * cotangent).sum().backward()
    for name, native_name in (("weight", "hc_fn"), ("base", "hc_base"), ("scale", "hc_scale")):
        assert_relative(getattr(head, name).grad, getattr(native, native_name).grad, what=name)
    glm = converted(stock_folders["qwen3"], "qwen3", **FORMS["glm5_next"])
    torch.testing.assert_close(glm.model.read_state(h), Glm5NextTextHyperHead()(h), rtol=0, atol=0)
    gated = converted(stock_folders["qwen3"], "qwen3", seed=2, **FORMS["gated"])
    norm = gated.model.norm
    mixer = to_native(gated.model.hc_mixer, input_norm=norm)
    assert mixer.block_inject_weight is None
    assert_relative(gated.model.leave_layers(h), mixer(h.flatten(-2)), what="gated read-out")


def test_native_parity_fails_for_a_transposed_comb_or_a_swapped_order(stock_folders):
    """The DeepSeek parity check can fail: mapping our mixing logits transposed into `base`, swapping `[pre, post,
    comb]` to `[post, pre, comb]` or `[comb, pre, post]`, or applying `comb` untransposed (the defect ports shipped)
    moves the sublayer output by far more than the parity bound. The measured ratios are printed."""
    model = converted(stock_folders["qwen3"], "qwen3", seed=0, **FORMS["deepseek_v4"])
    layer = model.model.layers[1]
    hc, h = layer.hc_mlp, streams_for(model)
    branch = layer.mlp_branch
    k = hc.streams
    with torch.no_grad():
        ours = hc(h, branch)
        native = to_native(hc)
        assert_relative(ours, native_deepseek(native, h, branch)[3], what="faithful mapping")
        pre, post, res = hc.pre, hc.post, hc.res
        broken = {
            "comb transposed in base": torch.cat([pre, post, res.mT.flatten()]),
            "[post, pre, comb]": torch.cat([post, pre, res.flatten()]),
            "[comb, pre, post]": torch.cat([res.flatten(), pre, post]),
        }
        ratios = {}
        for name, base in broken.items():
            native.base.copy_(base)
            if name == "[comb, pre, post]":  # the projection's outputs in the same wrong order
                rows = hc.dynamic_proj.weight
                native.fn.copy_(torch.cat([rows[2 * k :], rows[:k], rows[k : 2 * k]]))
            out = native_deepseek(native, h, branch)[3]
            ratios[name] = ((out - ours).abs().max() / ours.abs().max()).item()
        native = to_native(hc)
        post_, comb, collapsed = native(h)
        untransposed = post_.unsqueeze(-1) * branch(collapsed).unsqueeze(-2) + torch.matmul(comb, h)
        ratios["comb applied untransposed"] = ((untransposed - ours).abs().max() / ours.abs().max()).item()
    print("relative output change:", {name: f"{r:.3g}" for name, r in ratios.items()})
    assert all(r > 1e3 * RELATIVE for r in ratios.values()), ratios


# -- the conversions -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", list(FORMS))
def test_from_native_inverts_to_native(stock_folders, form):
    """`from_native(module, to_native(module))` gives back every parameter (the gated residual's gains to rounding: they
    go through `m G - 1` and back), for the sublayers and the read-out; a native module with other values moves ours
    to its values."""
    model = converted(stock_folders["gemma2"], "gemma2", seed=0, **FORMS[form])
    layer = model.model.layers[0]
    modules = [(layer.hc_attn, layer.input_norm("attn"))]
    if form in ("deepseek_v4", "gated"):
        modules.append(
            (model.model.hc_head, None) if form == "deepseek_v4" else (model.model.hc_mixer, model.model.norm)
        )
    for module, norm in modules:
        before = {n: p.detach().clone() for n, p in module.named_parameters()}
        native = to_native(module, input_norm=norm)
        with torch.no_grad():
            for p in module.parameters():
                p.zero_()
        from_native(module, native, input_norm=norm)
        for name, p in module.named_parameters():
            torch.testing.assert_close(p, before[name], rtol=1e-6, atol=1e-6, msg=name)


def test_conversions_refuse_what_has_no_native_layout(stock_folders, tmp_path):
    """The seed's forms have no transformers module; Qwen's `hc_norm` is an RMS norm, so GPT-2's gated residual (whose
    input norm is a LayerNorm) has no Qwen layout; a static DeepSeek sublayer cannot hold a native `fn`."""
    seed = converted(stock_folders["llama"], "llama", hc_mode="mhc")
    with pytest.raises(ValueError, match="has no module in transformers"):
        to_native(seed.model.layers[0].hc_attn)
    build_stock_gpt2_decoder(str(tmp_path / "gpt2"))
    gpt2 = GPT2MHCForCausalLM.from_pretrained(str(tmp_path / "gpt2"), hc_mode="gated", hc_lowrank=8)
    block = gpt2.transformer.h[0]
    with pytest.raises(ValueError, match="LayerNorm.*is not one"):
        to_native(block.hc_attn, input_norm=block.input_norm("attn"))
    static = converted(stock_folders["llama"], "llama", **DEEPSEEK, mhc_dynamic=False)
    dynamic = converted(stock_folders["llama"], "llama", seed=0, **DEEPSEEK)
    native = to_native(dynamic.model.layers[0].hc_attn)
    with pytest.raises(ValueError, match="static mHC sublayer"):
        from_native(static.model.layers[0].hc_attn, native)


# -- the whole model, and the fast implementation against the eager equation ------------------------------------------


def native_logits(model, form, input_ids):
    """The converted Llama or Qwen3 as transformers' own modules compute it: every sublayer through the native module
    of its form built from ours (`to_native`) and composed as the native decoder layers do, the stock attention and
    MLP modules, and the native read-out."""
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextTextHyperHead

    base, k = model.model, model.config.hc_streams
    embeds = base.embed_tokens(input_ids)
    rope = base.rotary_emb(embeds, torch.arange(input_ids.shape[1])[None])
    h = embeds.unsqueeze(-2).expand(*embeds.shape[:-1], k, -1).contiguous()  # as the native models start them
    for layer in base.layers:
        attention = (lambda x, layer=layer: layer.self_attn(x, rope, None)[0], layer.input_layernorm)
        mlp = (layer.mlp, layer.post_attention_layernorm)
        for hc, (sublayer, norm) in ((layer.hc_attn, attention), (layer.hc_mlp, mlp)):
            if form == "gated":
                h = native_qwen(to_native(hc, input_norm=norm), h, sublayer)[2]
                continue
            native = to_native(hc, native="glm5_next" if form == "glm5_next" else None)
            composed = native_hy4 if form == "independent" else native_deepseek
            h = composed(native, h, lambda x, sublayer=sublayer, norm=norm: sublayer(norm(x)))[-1]
    if form == "gated":
        hidden = to_native(base.hc_mixer, input_norm=base.norm)(h.flatten(-2))
    elif form == "glm5_next":
        hidden = base.norm(Glm5NextTextHyperHead()(h))
    else:
        hidden = base.norm(to_native(base.hc_head, native="hy_v4" if form == "independent" else None)(h))
    return model.lm_head(hidden)


@pytest.mark.parametrize("form", list(FORMS))
def test_model_equals_the_native_modules_composed(stock_folders, form):
    """A whole converted Qwen3 (3 layers, random parameters) gives the logits of the same model built from the native
    modules, and the same gradients of every stock weight."""
    model = converted(stock_folders["qwen3"], "qwen3", seed=0, freeze_base=False, **FORMS[form])
    input_ids = lm_batch(lengths=(10, 10))["input_ids"]
    logits = model(input_ids).logits
    expected = native_logits(model, form, input_ids)
    assert_relative(logits, expected, bound=1e-5, what="logits")
    cotangent = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
    grads = []
    for compute in (lambda: model(input_ids).logits, lambda: native_logits(model, form, input_ids)):
        model.zero_grad()
        (compute() * cotangent).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if not model.is_mechanism_parameter(n)})
    for name, grad in grads[1].items():
        if grad is not None:  # the gated residual's stock input norms: natively folded into `hc_norm`
            assert_relative(grads[0][name], grad, bound=1e-5, what=name)


NEW_FORMS = {
    "independent": dict(hc_mode="independent"),
    "gated": dict(hc_mode="gated", hc_lowrank=8),
    "deepseek-head": dict(**DEEPSEEK, hc_read_out="dynamic"),
    "gated-read-out": dict(hc_mode="static", hc_read_out="gated", hc_lowrank=8),
}


@pytest.mark.parametrize("streams", range(1, 9))
@pytest.mark.parametrize("form", list(NEW_FORMS))
def test_fast_implementation_equals_the_eager_equation(stock_folders, form, streams):
    """The fast implementation (the default) computes the eager equation in the new forms at K = 1..8: logits and
    every gradient of a training step (stream recomputation on), and the logits without grad."""
    batch = lm_batch(lengths=(10, 7))
    options = dict(hc_streams=streams, freeze_base=False, **NEW_FORMS[form])
    results = {}
    for implementation in ("eager", "fast"):
        model = converted(stock_folders["llama"], "llama", seed=0, hc_implementation=implementation, **options)
        model.train()
        logits = model(**batch).logits
        (logits * torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))).sum().backward()
        with torch.no_grad():
            no_grad = model.eval()(**batch).logits
        results[implementation] = logits.detach(), no_grad, {n: p.grad for n, p in model.named_parameters()}
    (logits, no_grad, grads), (fast_logits, fast_no_grad, fast_grads) = results["eager"], results["fast"]
    torch.testing.assert_close(fast_logits, logits)
    torch.testing.assert_close(fast_no_grad, no_grad)
    largest = max(g.abs().max() for g in grads.values() if g is not None)
    for name, grad in grads.items():
        assert (fast_grads[name] is None) == (grad is None), name
        if grad is not None:
            atol = 1e-5 * grad.abs().max().item() + 1e-6 * largest.item()
            torch.testing.assert_close(fast_grads[name], grad, rtol=1e-5, atol=atol, msg=name)


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "kept"])
def test_fast_gated_residual_under_checkpointing_and_recomputation(stock_folders, recompute):
    """The fast gated residual (its read computed again in backward) gives the eager gradients with the stream
    recomputation on and off and under gradient checkpointing; its layers are `FastGatedResidual`."""
    batch = lm_batch(lengths=(9, 9))
    batch["labels"] = lm_labels(batch)
    grads = []
    for implementation, checkpointing in (("eager", False), ("fast", False), ("fast", True)):
        model = converted(stock_folders["gemma2"], "gemma2", seed=0, hc_implementation=implementation,
                          hc_recompute_streams=recompute, freeze_base=False, **FORMS["gated"])  # fmt: skip
        expected = FastGatedResidual if implementation == "fast" else GatedResidual
        assert all(type(hc) is expected for hc in model.hyper_connections)
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.train()(**batch).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    for other in grads[1:]:
        assert other.keys() == grads[0].keys()
        for name, grad in grads[0].items():
            torch.testing.assert_close(other[name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_fast_gated_residual_trains_under_a_flop_counter(stock_folders):
    """Under torch's FlopCounterMode (a dispatch mode whose module hooks `interlayer bench` counts a training step's
    FLOPs with) the fast gated residual takes the plain autograd path: the step counts FLOPs and gives the eager
    implementation's gradients (before: its read computed again in backward failed in torch's hooks, "A leaf node
    was passed to _will_engine_execute_node")."""
    from torch.utils.flop_counter import FlopCounterMode

    batch = lm_batch(lengths=(9, 9))
    batch["labels"] = lm_labels(batch)
    grads = []
    for implementation in ("eager", "fast"):
        model = converted(stock_folders["gemma2"], "gemma2", seed=0, hc_implementation=implementation,
                          freeze_base=False, **FORMS["gated"])  # fmt: skip
        with FlopCounterMode(display=False) as counter:
            model.train()(**batch).loss.backward()
        assert counter.get_total_flops() > 0
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[1].keys() == grads[0].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")


# -- exact starts and tolerances ---------------------------------------------------------------------------------------


def _identity_difference(model, stock, batch) -> float:
    with torch.no_grad():
        return (model(**batch).logits - stock(**batch).logits).abs().max().item()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_gated_residual_starts_as_the_stock_model_bit_for_bit(stock_folders, family):
    """With random stock norm weights, the converted gated residual (fast and eager) gives the stock logits bit for bit
    at K = 1, 2, 4 and 8 (`stock_function_tolerance` 0); at K = 3 and 5 (the mean's division and the gain 2K round)
    within the stated 1e-4 of the largest logit."""
    build, model_class = FAMILIES[family]
    stock = model_class.family.causal_lm.from_pretrained(stock_folders[family]).eval()
    batch = lm_batch()
    for streams in (1, 2, 3, 4, 5, 8):
        for implementation in ("fast", "eager"):
            model = converted(stock_folders[family], family, hc_streams=streams, hc_implementation=implementation,
                              **FORMS["gated"])  # fmt: skip
            diff = _identity_difference(model, stock, batch)
            if streams & (streams - 1) == 0:
                assert model.stock_function_tolerance == 0.0 and diff == 0.0, (streams, implementation, diff)
            else:
                scale = stock(**batch).logits.abs().max().item()
                assert model.stock_function_tolerance == 1e-4 and diff <= 1e-4 * scale, (streams, diff)


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma2"])
def test_qwens_own_module_reproduces_the_stock_block_from_a_conversion(stock_folders, family):
    """Measured from outside the project: Qwen's `Qwen4ExpTextGatedResidual`, holding a converted layer's parameters
    (its `hc_norm` weight `m G - 1`: `2 K m - 1` on the focused stream, -1 elsewhere), on K copies of a hidden state
    `h`, gives the stock input norm of `h` bit for bit and write weights of exactly 1, so the native block
    `h + 1 * attn(x)` is the stock block bit for bit."""
    model = converted(stock_folders[family], family, **FORMS["gated"])
    layer = model.model.layers[1]
    h = torch.randn(2, 6, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    streams = h.unsqueeze(-2).expand(2, 6, 4, -1)
    rope = model.model.rotary_emb(h, torch.arange(6)[None])
    after = {  # Gemma's norms after each branch, which the gated residual keeps inside it
        "attn": getattr(layer, "post_attention_layernorm") if family == "gemma2" else torch.nn.Identity(),
        "mlp": getattr(layer, "post_feedforward_layernorm", torch.nn.Identity()),
    }
    modules = {"attn": lambda x: layer.self_attn(x, rope, None)[0], "mlp": layer.mlp}
    for sublayer in ("attn", "mlp"):
        norm = layer.input_norm(sublayer)
        without_norm = lambda x, sublayer=sublayer: after[sublayer](modules[sublayer](x))  # noqa: E731
        native = to_native(getattr(layer, f"hc_{sublayer}"), input_norm=norm)
        with torch.no_grad():
            x, _, write = native(streams.flatten(-2))
            out = native_qwen(native, streams, without_norm)[2]
            stock_block = h + without_norm(norm(h))
        assert torch.equal(x, norm(h)) and torch.equal(write, torch.ones_like(write)), sublayer
        assert torch.equal(out, stock_block.unsqueeze(-2).expand_as(out)), sublayer


@pytest.mark.parametrize("form", ["deepseek_v4", "glm5_next", "independent"])
def test_deepseek_and_hy4_start_within_k_times_eps(stock_folders, form):
    """DeepSeek-V4's, GLM-5.3's and Hy4's forms start as the stock model within K x eps per sublayer: measured with
    their own modules holding a converted layer's parameters, on K copies of `h`, the read-in is `h` and every
    stream's output `h + F(h)` within `K eps` of their magnitude, and the whole model's logits within its stated
    tolerance."""
    model = converted(stock_folders["qwen3"], "qwen3", **FORMS[form])
    k, eps = model.config.hc_streams, model.config.hc_eps
    layer = model.model.layers[1]
    h = torch.randn(2, 6, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    streams = h.unsqueeze(-2).expand(2, 6, k, -1).contiguous()  # the native modules view them flat
    branch = layer.mlp_branch
    with torch.no_grad():
        native = to_native(layer.hc_mlp, native="glm5_next" if form == "glm5_next" else None)
        composed = native_hy4 if form == "independent" else native_deepseek
        parts = composed(native, streams, branch)
        assert_relative(parts[0], h, bound=k * eps, what="read-in")
        expected = (h + branch(h)).unsqueeze(-2).expand_as(streams)
        assert_relative(parts[-1], expected, bound=k * eps, what="output")
    stock = Qwen3MHCForCausalLM.family.causal_lm.from_pretrained(stock_folders["qwen3"]).eval()
    batch = lm_batch()
    scale = stock(**batch).logits.abs().max().item()
    assert _identity_difference(model, stock, batch) <= model.stock_function_tolerance * scale


# -- symmetry ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["independent", "gated", "glm5_next"])
def test_streams_diverge_in_training_only_when_symmetry_is_broken(stock_folders, form):
    """From a start with every stream's read-in share equal (`hc_read_in_focus=0`, no noise) the K streams get equal
    gradients and stay copies of each other through 3 SGD steps at lr 0.5 (their spread is rounding); with the form's
    default focus (0.5, one-hot for the gated residual) or with `hc_init_noise` they diverge, the converted model
    still being stock (up to the noise)."""
    batch = lm_batch()
    batch["labels"] = lm_labels(batch)
    spreads = {}
    for name, options in (("focus 0", dict(hc_read_in_focus=0.0)), ("default", {}), ("noise", dict(hc_init_noise=0.1))):
        torch.manual_seed(0)
        model = converted(stock_folders["llama"], "llama", **FORMS[form], **options).train()
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        for _ in range(3):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        spreads[name] = stream_spread(model, batch)
    assert spreads["focus 0"] < 1e-6 and spreads["default"] > 1e-4 and spreads["noise"] > 1e-4, spreads


# -- dtypes ------------------------------------------------------------------------------------------------------------

HALF_TOLERANCE = {torch.bfloat16: 0.05, torch.float16: 5e-3}  # of the largest logit


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("form", list(FORMS))
def test_half_precision_checkpoints_keep_fp32_hyper_connections(stock_folders, tmp_path, form, dtype):
    """A stock checkpoint stored in bf16 or fp16 converts to a model whose stock weights keep that dtype and whose
    hyper-connection parameters are fp32 (as transformers keeps the native modules' parameters); its logits agree with
    the fp32 conversion's within the dtype's precision, it trains (fp32 gradients of the hyper-connection parameters,
    finite) and generates."""
    folder = str(tmp_path / "half")
    FAMILIES["qwen3"][1].family.causal_lm.from_pretrained(stock_folders["qwen3"]).to(dtype).save_pretrained(folder)
    reference = converted(stock_folders["qwen3"], "qwen3", seed=0, freeze_base=False, **FORMS[form])
    half = Qwen3MHCForCausalLM.from_pretrained(folder, freeze_base=False, **FORMS[form])
    values = dict(reference.named_parameters())
    with torch.no_grad():
        for name, p in half.named_parameters():
            p.copy_(values[name])
            expected = torch.float32 if half.is_mechanism_parameter(name) else dtype
            assert p.dtype == expected, (name, p.dtype)
    batch = lm_batch()
    batch["labels"] = lm_labels(batch)
    with torch.no_grad():
        fp32 = reference(**batch).logits
        logits = half.eval()(**batch).logits
    assert logits.dtype == dtype
    assert_relative(logits.float(), fp32, bound=HALF_TOLERANCE[dtype], what=str(dtype))
    half.train()(**batch).loss.backward()
    for name, p in half.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
        if half.is_mechanism_parameter(name):
            assert p.grad is not None and p.grad.dtype == torch.float32, name
    generated = half.eval().generate(batch["input_ids"][:1, :5], max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert generated.shape == (1, 8)


@pytest.mark.parametrize("form", ["independent", "gated"])
def test_coefficients_and_gated_read_are_fp32_under_bf16_autocast(stock_folders, form):
    """Under bf16 autocast over fp32 weights the coefficients (Hy4) and the gated read and write weights (Qwen) are
    computed in fp32: the same bits as without autocast."""
    model = converted(stock_folders["llama"], "llama", seed=0, **FORMS[form])
    layer = model.model.layers[1]
    h = streams_for(model)
    if form == "gated":
        compute = lambda: layer.hc_mlp.read(h, layer.input_norm("mlp"))[:2]  # noqa: E731
    else:
        compute = lambda: layer.hc_mlp.coefficients(h)[:2]  # noqa: E731
    expected = compute()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = compute()
    for e, g in zip(expected, got):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_olmo2_refuses_the_gated_residual_at_config_creation():
    """OLMo 2's branches start with no norm (theirs follow the sublayer), so no gated residual can stand in for one:
    its config refuses `hc_mode='gated'`, naming the family and the modes it takes; Gemma 2 (a norm before and after
    each branch) keeps its norm after the sublayer inside the branch."""
    from interlayer import Olmo2MHCConfig
    from interlayer.models.zoo_common import ConfigError

    with pytest.raises(ConfigError, match=r"hc_mode='gated'.*olmo2 family.*start with none.*'independent'"):
        Olmo2MHCConfig(hc_mode="gated")
    assert not Olmo2MHCConfig.branch_input_norms and Gemma2MHCForCausalLM.config_class.branch_input_norms


OTHER_FAMILIES = {  # the HC families beyond the Llama, Qwen3 and Gemma 2 of the rest of this file and the suite
    "qwen2": (build_stock_qwen2, Qwen2MHCForCausalLM),
    "mistral": (build_stock_mistral, MistralMHCForCausalLM),
    "phi3": (build_stock_phi3, Phi3MHCForCausalLM),
    "olmo2": (build_stock_olmo2, Olmo2MHCForCausalLM),
    "gemma3_text": (build_stock_gemma3, Gemma3TextMHCForCausalLM),
    "gpt2": (build_stock_gpt2_decoder, GPT2MHCForCausalLM),
}


@pytest.mark.parametrize("form", ["independent", "gated", "glm5_next"])
def test_every_other_family_converts_to_the_form_as_the_stock_model(tmp_path, form):
    """Qwen2, Mistral, Phi-3, OLMo 2, Gemma 3 text and GPT-2 convert to each 2026 form (OLMo 2 but to the gated
    residual, which it refuses) and give the stock logits within the model's `stock_function_tolerance` of their
    largest magnitude (0 for the gated residual at K = 4)."""
    batch = lm_batch()
    for family, (build, model_class) in OTHER_FAMILIES.items():
        if form == "gated" and family == "olmo2":
            continue
        folder = str(tmp_path / family)
        stock = build(folder).eval()
        model = model_class.from_pretrained(folder, **FORMS[form]).eval()
        scale = stock(**batch).logits.abs().max().item()
        assert _identity_difference(model, stock, batch) <= model.stock_function_tolerance * scale, family
