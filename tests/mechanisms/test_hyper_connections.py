"""Hyper-connections: the equations against a loop-by-loop reference, Sinkhorn (also on extreme logits), fp32
coefficients, bf16 and fp16 weights, generation with the KV cache, freezing, the composite-gain statistics (also their
worst case over depth and tokens), a high-learning-rate mHC run, torch.compile and torch.export, and why the read-in
focus matters."""

import copy
import gc
import itertools
import weakref

import pytest
import torch
from batches import lm_batch, lm_labels
from converted_models import stream_spread
from fused_calls import counting_fused
from stock_checkpoints import build_stock_llama, build_stock_qwen3
from transformers import Trainer, TrainingArguments

from interlayer import LlamaMHCForCausalLM, Qwen3MHCForCausalLM
from interlayer.callbacks import MechanismStatsCallback
from interlayer.models import hyper_connections_cpu as cpu_read
from interlayer.models import hyper_connections_fast as hc_module
from interlayer.models.modeling_hyper_connections import FastHyperConnection, HyperConnection, sinkhorn_knopp
from interlayer.models.zoo_common import Fused

MODES = [
    dict(hc_mode="static"),
    dict(hc_mode="dynamic"),
    dict(hc_mode="dynamic", hc_dynamic_tanh=False),
    dict(hc_mode="mhc"),
    dict(hc_mode="mhc", mhc_dynamic=False),
]


@pytest.fixture(scope="module")
def stock_llama(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("stock_llama"))
    return folder, build_stock_llama(folder).eval()


def randomised(folder, seed=0, **options):
    """A converted model whose every hyper-connection parameter is random (so no equation is trivially satisfied)."""
    model = LlamaMHCForCausalLM.from_pretrained(folder, **options).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "hc_" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model


# -- a loop-by-loop reference of the seed equations ------------------------------------------------------------------


def reference_sinkhorn(m, iters):
    """Sinkhorn-Knopp on a K x K list of lists of tensors: columns then rows, `iters` times."""
    k = len(m)
    m = [[torch.exp(v) for v in row] for row in m]
    for _ in range(iters):
        cols = [sum(m[i][j] for i in range(k)) for j in range(k)]
        m = [[m[i][j] / cols[j] for j in range(k)] for i in range(k)]
        rows = [sum(m[i][j] for j in range(k)) for i in range(k)]
        m = [[m[i][j] / rows[i] for j in range(k)] for i in range(k)]
    return m


def reference_coefficients(hc, config, h):
    """H_pre (list of K), H_post (list of K), H_res (K x K, [i][j] = weight of input stream j in output stream i),
    each entry a `[batch, seq]` tensor, from the list of streams `h`."""
    k = config.hc_streams
    ones = torch.ones(h[0].shape[:-1])
    pre = [hc.pre[i] * ones for i in range(k)]
    post = [hc.post[i] * ones for i in range(k)]
    res = [[hc.res[i, j] * ones for j in range(k)] for i in range(k)]
    if hc.dynamic:
        s_pre, s_post, s_res = hc.dynamic_scale
        w = hc.dynamic_proj.weight
        if config.hc_mode == "dynamic":
            for j in range(k):
                normed = h[j] / torch.sqrt((h[j] ** 2).mean(-1, keepdim=True) + 1e-6)
                z = normed @ w.T
                if config.hc_dynamic_tanh:
                    z = torch.tanh(z)
                pre[j] = pre[j] + s_pre * z[..., 0]
                post[j] = post[j] + s_post * z[..., 1]
                for i in range(k):
                    res[i][j] = res[i][j] + s_res * z[..., 2 + i]
        else:
            flat = torch.cat(h, dim=-1)
            z = (flat / torch.sqrt((flat**2).mean(-1, keepdim=True) + 1e-6)) @ w.T
            for i in range(k):
                pre[i] = pre[i] + s_pre * z[..., i]
                post[i] = post[i] + s_post * z[..., k + i]
                for j in range(k):
                    res[i][j] = res[i][j] + s_res * z[..., 2 * k + i * k + j]
    if config.hc_mode == "mhc":
        pre = [torch.sigmoid(v) for v in pre]
        post = [2 * torch.sigmoid(v) for v in post]
        res = reference_sinkhorn(res, config.sinkhorn_iters)
    return pre, post, res


def reference_logits(model, input_ids):
    config, base = model.config, model.model
    k = config.hc_streams
    embeds = base.embed_tokens(input_ids)
    positions = torch.arange(input_ids.shape[1])[None]
    rope = base.rotary_emb(embeds, positions)
    h = [embeds.clone() for _ in range(k)]
    for layer in base.layers:
        sublayers = (
            (layer.hc_attn, lambda x: layer.self_attn(layer.input_layernorm(x), rope, None)[0]),
            (layer.hc_mlp, lambda x: layer.mlp(layer.post_attention_layernorm(x))),
        )
        for hc, sublayer in sublayers:
            pre, post, res = reference_coefficients(hc, config, h)
            y = sublayer(sum(pre[i][..., None] * h[i] for i in range(k)))
            h = [sum(res[i][j][..., None] * h[j] for j in range(k)) + post[i][..., None] * y for i in range(k)]
    hidden = base.norm(sum(base.hc_read_out[i] * h[i] for i in range(k)))
    return model.lm_head(hidden)


@pytest.mark.parametrize("implementation", ["eager", "fast"])
@pytest.mark.parametrize("options", MODES, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_forward_matches_loop_reference(stock_llama, options, implementation):
    model = randomised(stock_llama[0], hc_implementation=implementation, **options)
    input_ids = lm_batch(lengths=(10, 10))["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, reference_logits(model, input_ids))


@pytest.mark.parametrize("options", MODES, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_gradients_match_loop_reference(stock_llama, options):
    """The hand-written backward of the read-in/mixing product and of the write (shared and per-token maps; the first
    layer's streams are stride-0 views of the embeddings) gives autograd's gradients of the loop reference, for every
    parameter, base weights included."""
    model = randomised(stock_llama[0], freeze_base=False, **options).train()
    input_ids = lm_batch(lengths=(10, 10))["input_ids"]
    cotangent = torch.randn(model(input_ids).logits.shape, generator=torch.Generator().manual_seed(1))
    grads = []
    for logits in (lambda: model(input_ids).logits, lambda: reference_logits(model, input_ids)):
        model.zero_grad()
        (logits() * cotangent).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any("hc_" in n for n in grads[0])
    largest = max(g.abs().max() for g in grads[1].values())
    for name, grad in grads[1].items():
        # sums in another order: 1e-5 of each tensor's own scale (the first mHC H_res only gets rounding-level
        # gradients when every stream is the embedding: 1e-6 of the largest gradient)
        atol = 1e-5 * grad.abs().max().item() + 1e-6 * largest.item()
        torch.testing.assert_close(grads[0][name], grad, rtol=1e-5, atol=atol, msg=name)


# -- the fast implementation against the eager equation ----------------------------------------------------------

FAST_CASES = [
    *[(options, False) for options in MODES],
    (dict(hc_mode="mhc", mhc_variant="deepseek_v4"), False),
    (dict(hc_mode="mhc", mhc_variant="deepseek_v4", mhc_dynamic=False), False),
    (dict(hc_mode="static", hc_streams=1), False),
    (dict(hc_mode="dynamic", hc_streams=1), False),
    (dict(hc_mode="mhc", mhc_variant="deepseek_v4", hc_streams=1), False),
    (dict(hc_mode="mhc", hc_recompute_streams=False), False),
    (dict(hc_mode="mhc", hc_fused=True), False),
    (dict(hc_mode="static"), True),
    (dict(hc_mode="dynamic"), True),
    (dict(hc_mode="mhc"), True),
    (dict(hc_mode="mhc", mhc_variant="deepseek_v4"), True),
]


def _case_id(case) -> str:
    options, checkpointing = case
    return "-".join(f"{k}={v}" for k, v in options.items()) + ("-checkpointing" if checkpointing else "")


@pytest.mark.parametrize("options, checkpointing", FAST_CASES, ids=[_case_id(c) for c in FAST_CASES])
def test_fast_implementation_equals_the_eager_equation(stock_llama, options, checkpointing):
    """The fast implementation (the default: hand-written backward passes, the stream recomputation, `hc_fused`,
    static coefficients reused without grad) computes `HyperConnection.forward`, the equation as written: the logits
    and every parameter's gradient of a training step, and the logits without grad, equal those of
    `hc_implementation="eager"`, in every mode, at K = 1 and 4, with and without the stream recomputation and under
    gradient checkpointing."""
    input_ids = lm_batch(lengths=(10, 10))["input_ids"]
    cotangent = None
    results = {}
    for implementation in ("eager", "fast"):
        model = randomised(stock_llama[0], freeze_base=False, hc_implementation=implementation, **options).train()
        expected = FastHyperConnection if implementation == "fast" else HyperConnection
        assert all(type(hc) is expected for hc in model.hyper_connections)
        if checkpointing:
            model.gradient_checkpointing_enable()
        logits = model(input_ids).logits
        if cotangent is None:
            cotangent = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
        (logits * cotangent).sum().backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        with torch.no_grad():
            model.eval()
            no_grad = [model(input_ids).logits for _ in range(2)]  # the second reuses the fast static coefficients
        results[implementation] = logits.detach(), grads, no_grad
    (logits, grads, no_grad), (fast_logits, fast_grads, fast_no_grad) = results["eager"], results["fast"]
    torch.testing.assert_close(fast_logits, logits)
    for fast, eager in zip(fast_no_grad, no_grad):
        torch.testing.assert_close(fast, eager)
    assert fast_grads.keys() == grads.keys() and any("hc_" in n for n in grads)
    largest = max(g.abs().max() for g in grads.values())
    for name, grad in grads.items():
        # sums in another order, as against the loop reference
        atol = 1e-5 * grad.abs().max().item() + 1e-6 * largest.item()
        torch.testing.assert_close(fast_grads[name], grad, rtol=1e-5, atol=atol, msg=name)


def test_eager_implementation_records_no_statistics_and_the_fast_one_does(stock_llama):
    """The statistics and the composite-gain tracking belong to the fast implementation; the eager equation records
    none (its `mechanism_stats()` has no `hc/` entry)."""
    batch = lm_batch()
    for implementation, recorded in (("eager", False), ("fast", True)):
        model = randomised(stock_llama[0], hc_implementation=implementation)
        with torch.no_grad():
            model(**batch)
        stats = model.mechanism_stats(split="eval")
        assert ("hc/amax_gain_row_worst" in stats) == recorded and ("hc/L0/attn/pre_0" in stats) == recorded


def test_coefficient_statistics_are_their_means_recorded_once_a_forward(stock_llama, monkeypatch):
    """`hc/L{i}/{sublayer}/pre_k`, `post_k` and `res_i_j` are each sublayer's coefficients averaged over the tokens of
    a forward, then over the forwards since the last read, training and eval forwards apart; a forward records all
    of them in three accumulator calls, whatever the depth (before: three per sublayer, about 3 ms of Python a
    decoded token at the SmolLM2 shape, 30 layers)."""
    model = randomised(stock_llama[0], hc_mode="mhc")
    captured = {}
    hooks = [
        module.register_forward_pre_hook(
            lambda m, args: captured.setdefault(m, []).append([c.mean((0, 1)) for c in m.coefficients(args[0])])
        )
        for module in model.hyper_connections
    ]
    records = []
    add_each = hc_module.DeferredStatsAccumulator.add_each
    monkeypatch.setattr(
        hc_module.DeferredStatsAccumulator, "add_each", lambda self, *a: records.append(a[0]) or add_each(self, *a)
    )
    for split, training in (("train", True), ("eval", False)):
        model.train(training)
        captured.clear()
        with torch.no_grad():
            for seed in range(2):
                records.clear()
                model(**lm_batch(lengths=(12, 12), seed=seed))
                assert len(records) == 3, records
        stats = model.mechanism_stats(split=split)
        for module, forwards in captured.items():
            name = f"hc/L{module.layer_idx}/{module.sublayer}"
            pre, post, res = (torch.stack(c).mean(0) for c in zip(*forwards))
            for what, values in (("pre", pre), ("post", post), ("res", res)):
                got = torch.tensor(
                    [
                        stats[f"{name}/{what}_{'_'.join(map(str, i))}"]
                        for i in itertools.product(*map(range, values.shape))
                    ]
                )
                torch.testing.assert_close(got, values.flatten(), msg=f"{split} {name}/{what}")
    for hook in hooks:
        hook.remove()
    with pytest.raises(ValueError, match="add_each: 2 names for 3 values along dimension 0"):
        hc_module.DeferredStatsAccumulator().add_each(("a", "b"), torch.zeros(3, 4))


def test_hc_implementation_is_chosen_when_the_model_is_built(stock_llama):
    """`hc_implementation` chooses the hyper-connections' class once, when the model is built (or reloaded with the
    option); a value set later on the built model's config is refused when the model runs, not ignored."""
    input_ids = lm_batch(lengths=(6,))["input_ids"]
    for built, other in (("fast", "eager"), ("eager", "fast")):
        model = randomised(stock_llama[0], hc_implementation=built)
        model.config.hc_implementation = other
        with pytest.raises(ValueError, match=rf"hc_implementation='{other}'.* are '{built}'.*from_pretrained"):
            model(input_ids)


# -- Sinkhorn and fp32 coefficients ----------------------------------------------------------------------------------


def test_sinkhorn_is_doubly_stochastic_and_keeps_rows_exact():
    logits = torch.randn(5, 4, 4, generator=torch.Generator().manual_seed(0))
    m = sinkhorn_knopp(logits, 20)
    torch.testing.assert_close(m.sum(-1), torch.ones(5, 4), rtol=0, atol=1e-6)
    torch.testing.assert_close(m.sum(-2), torch.ones(5, 4), rtol=0, atol=1e-5)
    assert (m > 0).all()
    one_round = sinkhorn_knopp(logits, 1)
    assert (one_round.sum(-2) - 1).abs().max() > (m.sum(-2) - 1).abs().max()
    torch.testing.assert_close(sinkhorn_knopp(logits + 1000.0, 20), m)  # no overflow


def test_coefficients_are_fp32_under_bf16_autocast(stock_llama):
    model = randomised(stock_llama[0], hc_mode="mhc")
    hc = model.model.layers[1].hc_mlp
    streams = torch.randn(2, 5, 4, 32)
    expected = hc.coefficients(streams)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = hc.coefficients(streams)
        assert torch.nn.functional.linear(streams.flatten(-2), hc.dynamic_proj.weight).dtype == torch.bfloat16
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    bf16 = hc.coefficients(streams.bfloat16())
    assert all(t.dtype == torch.bfloat16 for t in bf16)
    torch.testing.assert_close(bf16[2].float(), expected[2], rtol=1e-2, atol=1e-2)


def log_domain_sinkhorn(logits, iters):
    """The same rounds (columns then rows) in float64 and entirely in the log domain."""
    m = logits.double()
    for _ in range(iters):
        m = m - m.logsumexp(-2, keepdim=True)
        m = m - m.logsumexp(-1, keepdim=True)
    return m.exp()


def test_sinkhorn_matches_the_exp_domain_iterations_on_normal_logits():
    """The stable projection gives what plain exp-domain iterations give (the implementation before the fix)."""
    logits = 3 * torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    expected = reference_sinkhorn([[logits[..., i, j] for j in range(4)] for i in range(4)], 20)
    torch.testing.assert_close(sinkhorn_knopp(logits, 20), torch.stack([torch.stack(row, -1) for row in expected], -2))


EXTREME_LOGITS = {
    "column 120 below the maximum": torch.tensor([[0.0, -120.0], [0.0, -130.0]]),  # the review's example
    "row 200 below": torch.tensor([[0.0, 0.0], [-200.0, -200.0]]),
    "spread 300": 100 * torch.randn(8, 4, 4, generator=torch.Generator().manual_seed(0)),
}


@pytest.mark.parametrize("name", EXTREME_LOGITS)
def test_sinkhorn_is_exact_and_differentiable_on_extreme_logits(name):
    logits = EXTREME_LOGITS[name].clone().requires_grad_()
    m = sinkhorn_knopp(logits, 20)
    torch.testing.assert_close(m, log_domain_sinkhorn(logits.detach(), 20).float(), rtol=1e-4, atol=1e-6)
    (m * torch.arange(m.shape[-1])).sum().backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("scale", [1e4, 1e37])
def test_sinkhorn_stays_a_row_stochastic_matrix_for_any_finite_logits(scale):
    logits = scale * (2 * torch.rand(64, 4, 4, generator=torch.Generator().manual_seed(0)) - 1)
    m = sinkhorn_knopp(logits, 20)
    assert torch.isfinite(m).all() and (m >= 0).all()
    torch.testing.assert_close(m.sum(-1), torch.ones(64, 4))


def test_mhc_trains_at_a_high_learning_rate_without_nan(tmp_path):
    """The input-dependent Sinkhorn logits are unbounded: at lr 0.3 their spread outgrows fp32's exp, and this run
    turned NaN at step 15 before the projection was made stable. Through the stock Trainer (NaN losses logged as such),
    20 steps stay finite and the composite gain stays bounded (rows of every H_res sum to 1; columns are
    non-negative, so their sums stay <= K)."""
    folder = str(tmp_path / "stock")
    build_stock_llama(folder, hidden_size=64, head_dim=16)
    model = LlamaMHCForCausalLM.from_pretrained(folder, hc_mode="mhc")
    rows = []
    for seed in range(8):
        for ids in lm_batch(lengths=(32, 32), seed=seed)["input_ids"]:
            rows.append({"input_ids": ids, "labels": ids.clone()})
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        max_steps=20,
        learning_rate=0.3,
        logging_steps=1,
        logging_nan_inf_filter=False,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    MechanismStatsCallback.attach(trainer)
    trainer.train()
    logs = [r for r in trainer.state.log_history if "loss" in r]
    assert len(logs) == 20 and all(torch.isfinite(torch.tensor(r["loss"])) for r in logs), [r["loss"] for r in logs]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    for r in logs:
        assert r["hc/amax_gain_row"] == pytest.approx(1.0, abs=1e-4) and 1 - 1e-4 <= r["hc/amax_gain_col"] <= 4
        assert r["hc/amax_gain_row_worst"] == pytest.approx(1.0, abs=1e-4)
        assert r["hc/amax_gain_col"] - 1e-4 <= r["hc/amax_gain_col_worst"] <= 4


# -- bf16 and fp16 weights --------------------------------------------------------------------------------------------

HALF_TOLERANCE = {torch.bfloat16: dict(rtol=0.05, atol=0.05), torch.float16: dict(rtol=5e-3, atol=5e-3)}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("options", MODES, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_half_precision_weights_train_and_generate_close_to_fp32(stock_llama, options, dtype):
    """Weights in bf16 or fp16 (`.to(torch.bfloat16)`, `.half()`): forward, backward and generate() run, the
    coefficients are still computed in fp32, and the logits match the fp32 model within the dtype's precision."""
    model = randomised(stock_llama[0], freeze_base=False, **options)
    batch = lm_batch()
    batch["labels"] = lm_labels(batch)
    with torch.no_grad():
        expected = model(**batch).logits
    half = (copy.deepcopy(model).half() if dtype == torch.float16 else copy.deepcopy(model).to(dtype)).train()
    out = half(**batch)
    assert out.logits.dtype == dtype
    torch.testing.assert_close(out.logits.float(), expected, **HALF_TOLERANCE[dtype])
    out.loss.backward()
    for name, p in half.named_parameters():
        assert p.grad is not None and p.grad.dtype == dtype and torch.isfinite(p.grad).all(), name
    half.eval()
    prompt = batch["input_ids"][:1, :6]
    generated = half.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert generated.shape == (1, 10) and torch.equal(generated[:, :6], prompt)


def _dtypes(model) -> dict[bool, set]:
    """`{is a hyper-connection parameter: the dtypes of those parameters}`."""
    found = {True: set(), False: set()}
    for name, p in model.named_parameters():
        found[model.is_mechanism_parameter(name)].add(p.dtype)
    return found


def test_bf16_checkpoint_loads_in_bf16_and_computes_the_stock_function(tmp_path):
    """Qwen3-0.6B is stored in bf16 and transformers 5 loads a checkpoint in its stored dtype: converting it gives an
    mHC model with bf16 stock weights and fp32 hyper-connection parameters (as transformers keeps the native modules'),
    which says it is bf16, runs, trains, generates the stock tokens, and saves and reloads so."""
    folder = str(tmp_path / "stock")
    build_stock_qwen3(folder).to(torch.bfloat16).save_pretrained(folder)
    stock = build_stock_qwen3(str(tmp_path / "unused")).to(torch.bfloat16).eval()
    model = Qwen3MHCForCausalLM.from_pretrained(folder, freeze_base=False).eval()
    assert _dtypes(model) == {True: {torch.float32}, False: {torch.bfloat16}} and model.dtype == torch.bfloat16
    batch = lm_batch()
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, stock(**batch).logits, **HALF_TOLERANCE[torch.bfloat16])
    prompt = batch["input_ids"][:1, :6]
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, **kwargs), stock.generate(prompt, **kwargs))
    model.train()
    model(**batch, labels=lm_labels(batch)).loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    model.save_pretrained(tmp_path / "mhc")
    reloaded = Qwen3MHCForCausalLM.from_pretrained(tmp_path / "mhc").eval()
    assert _dtypes(reloaded) == {True: {torch.float32}, False: {torch.bfloat16}}
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model.eval()(**batch).logits, rtol=0, atol=0)


# -- identity and hidden states ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("streams", [1, 3])
def test_identity_holds_for_any_stream_count(stock_llama, streams):
    folder, stock = stock_llama
    batch = lm_batch()
    for options in (dict(hc_mode="static"), dict(hc_mode="dynamic"), dict(hc_mode="mhc")):
        if options["hc_mode"] == "mhc" and streams == 1:
            continue
        model = LlamaMHCForCausalLM.from_pretrained(folder, hc_streams=streams, **options).eval()
        with torch.no_grad():
            torch.testing.assert_close(model(**batch).logits, stock(**batch).logits)


def test_hidden_states_are_stock_at_identity(stock_llama):
    folder, stock = stock_llama
    model = LlamaMHCForCausalLM.from_pretrained(folder).eval()
    batch = lm_batch()
    with torch.no_grad():
        ours = model(**batch, output_hidden_states=True).hidden_states
        theirs = stock(**batch, output_hidden_states=True).hidden_states
    assert len(ours) == len(theirs) == model.config.num_hidden_layers + 1
    for i, (a, b) in enumerate(zip(ours, theirs)):
        torch.testing.assert_close(a, b, msg=f"hidden state {i}")


def test_seed_init_of_mhc_is_not_the_stock_function(stock_llama):
    """identity_init=False reproduces the original's raw init: every write scaled by 2*sigmoid(1)."""
    model = LlamaMHCForCausalLM.from_pretrained(stock_llama[0], hc_mode="mhc", identity_init=False)
    post = model.model.layers[0].hc_attn.coefficients(torch.zeros(1, 1, 4, 32))[1]
    torch.testing.assert_close(post, torch.full_like(post, 2 * torch.sigmoid(torch.tensor(1.0)).item()))


# -- generation -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options", MODES[:2] + MODES[3:4], ids=lambda o: o["hc_mode"])
def test_cached_decoding_matches_full_forward(stock_llama, options):
    model = randomised(stock_llama[0], **options)
    input_ids = lm_batch(lengths=(12,))["input_ids"]
    with torch.no_grad():
        full = model(input_ids).logits
        out = model(input_ids[:, :5], use_cache=True)
        steps = [out.logits]
        for t in range(5, 12):
            out = model(input_ids[:, t : t + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_greedy_generation_with_cache_matches_recomputation_and_stock(tmp_path):
    folder = str(tmp_path / "stock")
    stock = build_stock_qwen3(folder).eval()
    prompt = lm_batch(lengths=(6,))["input_ids"]
    kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    active = Qwen3MHCForCausalLM.from_pretrained(folder, hc_init_noise=0.5).eval()
    cached = active.generate(prompt, use_cache=True, **kwargs)
    assert torch.equal(cached, active.generate(prompt, use_cache=False, **kwargs))
    identity = Qwen3MHCForCausalLM.from_pretrained(folder).eval()
    assert torch.equal(identity.generate(prompt, **kwargs), stock.generate(prompt, **kwargs))
    with torch.no_grad():
        assert not torch.allclose(active(prompt).logits, stock(prompt).logits)


@pytest.mark.parametrize("mode", ["static", "mhc"])
def test_static_coefficients_computed_once_per_generate_call(stock_llama, mode, monkeypatch):
    """In `generate()` each static hyper-connection computes its coefficients at its first forward and reuses them for
    every later token; any other forward computes them (nothing outlives a call), so a parameter written through
    `.data` between two calls reaches the second, which gives a fresh model's logits."""
    model = randomised(stock_llama[0], hc_mode=mode, mhc_dynamic=False)
    calls = {}
    maps = hc_module.FastHyperConnectionMixin._maps

    def counted(hc, streams):
        calls[hc] = calls.get(hc, 0) + 1
        return maps(hc, streams)

    monkeypatch.setattr(hc_module.FastHyperConnectionMixin, "_maps", counted)
    prompt = lm_batch()["input_ids"][:1]
    settings = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, output_logits=True)
    settings["return_dict_in_generate"] = True
    model.generate(prompt, **settings)
    assert len(calls) == len(model.model.hyper_connections) and set(calls.values()) == {1}, calls
    calls.clear()
    with torch.no_grad():
        model(prompt)
        model(prompt)
    assert set(calls.values()) == {2}, calls
    with torch.no_grad():
        for hc in model.model.hyper_connections:
            hc.res.data.add_(0.5)  # as DeepSpeed ZeRO writes a step's weights: no version counter moves
    fresh = LlamaMHCForCausalLM.from_pretrained(stock_llama[0], hc_mode=mode, mhc_dynamic=False).eval()
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(
        torch.stack(model.generate(prompt, **settings).logits), torch.stack(fresh.generate(prompt, **settings).logits)
    )


# -- freezing ---------------------------------------------------------------------------------------------------------


def test_freeze_base_trains_only_hyper_connections(stock_llama, tmp_path):
    folder, _ = stock_llama
    model = LlamaMHCForCausalLM.from_pretrained(folder)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("hc_" in n for n in trainable)
    report = model.parameter_report()
    assert report["trainable"] == report["mechanism"] < report["total"]
    model.save_pretrained(tmp_path / "saved")
    reloaded = LlamaMHCForCausalLM.from_pretrained(tmp_path / "saved")
    assert [n for n, p in reloaded.named_parameters() if p.requires_grad] == trainable
    unfrozen = LlamaMHCForCausalLM.from_pretrained(folder, freeze_base=False)
    assert all(p.requires_grad for p in unfrozen.parameters())


# -- watching it ------------------------------------------------------------------------------------------------------


def test_composite_gain_grows_for_hc_and_stays_bounded_for_mhc(stock_llama):
    folder, _ = stock_llama
    batch = lm_batch()
    hc = LlamaMHCForCausalLM.from_pretrained(folder, hc_mode="static").eval()
    with torch.no_grad():
        for module in hc.hyper_connections:
            module.res.copy_(torch.eye(4) * 1.1)
        hc(**batch)
    stats = hc.mechanism_stats(split="eval")
    assert stats["hc/amax_gain_row"] == pytest.approx(1.1**6)
    assert stats["hc/L2/mlp/res_1_1"] == pytest.approx(1.1) and stats["hc/L2/mlp/res_col_sum_max"] == pytest.approx(1.1)
    assert stats["hc/L0/attn/pre_0"] == 1.0 and stats["hc/L1/attn/pre_0"] == 0.0  # layer l reads stream l mod K

    mhc = randomised(folder, seed=3, hc_mode="mhc")
    with torch.no_grad():
        mhc(**batch)
        mhc(**lm_batch(seed=1))
    stats = mhc.mechanism_stats(split="eval")
    assert stats["hc/amax_gain_row"] == pytest.approx(1.0, abs=1e-5)
    assert stats["hc/amax_gain_col"] == pytest.approx(1.0, abs=1e-2)
    assert 0 < stats["hc/L1/mlp/post_2"] < 2
    assert not mhc.mechanism_stats(split="eval"), "reading resets the statistics"


def test_worst_composite_gain_over_depth_matches_hand_computation(stock_llama):
    """The paper's figure is the worst over depth: a gain reached early and undone later is still reported."""
    model = LlamaMHCForCausalLM.from_pretrained(stock_llama[0], hc_mode="static").eval()
    fan = torch.eye(4)
    fan[0] = 1.0  # stream 0 receives every stream: row sums (4, 1, 1, 1), column sums (1, 2, 2, 2)
    with torch.no_grad():
        for n, module in enumerate(model.hyper_connections):
            module.res.copy_(fan if n == 0 else 0.5 * torch.eye(4))
        model(**lm_batch())
    stats = model.mechanism_stats(split="eval")
    # after sublayer n = 1..6 the composite is 0.5^(n-1) * fan: worst after the first, 1/32 of it at full depth
    assert stats["hc/amax_gain_row_worst"] == pytest.approx(4.0)
    assert stats["hc/amax_gain_col_worst"] == pytest.approx(2.0)
    assert stats["hc/amax_gain_row"] == pytest.approx(4 / 32) and stats["hc/amax_gain_col"] == pytest.approx(2 / 32)


def test_worst_composite_gain_over_tokens_matches_hand_computation(stock_llama):
    """Input-dependent H_res: the worst token's composite, over depth, the real tokens of every forward since the
    last read; the composite of the token-mean matrices understates it."""
    model = randomised(stock_llama[0], hc_mode="dynamic", hc_dynamic_tanh=False)
    with torch.no_grad():
        for module in model.hyper_connections:
            module.dynamic_scale.mul_(30)
    captured = []
    hooks = [
        module.register_forward_pre_hook(lambda m, args: captured.append(m.coefficients(args[0])[2].double()))
        for module in model.hyper_connections
    ]
    batches = [lm_batch(), lm_batch(lengths=(7, 3), seed=1)]
    with torch.no_grad():
        for batch in batches:
            model(**batch)
    for hook in hooks:
        hook.remove()
    stats = model.mechanism_stats(split="eval")
    worst = [0.0, 0.0]
    for index, batch in enumerate(batches):
        matrices = captured[6 * index : 6 * index + 6]
        for b, length in enumerate(batch["attention_mask"].sum(1).tolist()):
            for t in range(length):
                product = torch.eye(4, dtype=torch.float64)
                for res in matrices:
                    product = res[b, t] @ product
                    worst[0] = max(worst[0], product.abs().sum(1).max().item())
                    worst[1] = max(worst[1], product.abs().sum(0).max().item())
    assert stats["hc/amax_gain_row_worst"] == pytest.approx(worst[0], rel=1e-5)
    assert stats["hc/amax_gain_col_worst"] == pytest.approx(worst[1], rel=1e-5)
    assert stats["hc/amax_gain_row"] < worst[0] / 2, (stats["hc/amax_gain_row"], worst[0])


@pytest.mark.parametrize("focus, diverges", [(1.0, True), (0.0, False)])
def test_read_in_focus_breaks_stream_symmetry_in_training(stock_llama, focus, diverges):
    """With a uniform read-in (focus 0) and no noise the K streams stay copies of each other however long one
    trains; the per-layer read-in focus makes them diverge while the converted model is still exactly stock."""
    model = LlamaMHCForCausalLM.from_pretrained(stock_llama[0], hc_mode="static", hc_read_in_focus=focus).train()
    batch = lm_batch()
    batch["labels"] = lm_labels(batch)
    assert stream_spread(model, batch) == 0.0
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(5):
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    spread = stream_spread(model, batch)
    assert (spread > 1e-2) if diverges else (spread < 1e-4), spread  # copies differ only by rounding


def _streams_alive_after_forward(model, batch) -> int:
    """How many sublayer outputs (K-wide streams) are still alive once the forward pass is done (held for backward);
    checks too that all are released with the graph after backward, without the garbage collector's help."""
    refs = []
    hooks = [
        hc.register_forward_hook(lambda m, a, out: refs.append(weakref.ref(out))) for hc in model.hyper_connections
    ]
    gc.collect()
    gc.disable()
    try:
        loss = model(**batch).loss
        for hook in hooks:
            hook.remove()
        alive = sum(r() is not None for r in refs)
        loss.backward()
        del loss
        assert all(r() is None for r in refs), "streams outlive the graph"
    finally:
        gc.enable()
    return alive


@pytest.mark.parametrize("options", MODES, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_stream_recomputation_gives_the_same_gradients_and_frees_streams(stock_llama, options):
    batch = lm_batch(lengths=(12, 12))
    batch["labels"] = lm_labels(batch)
    grads, alive = [], []
    for recompute in (False, True):
        model = randomised(stock_llama[0], freeze_base=False, hc_recompute_streams=recompute, **options).train()
        alive.append(_streams_alive_after_forward(model, batch))
        model.zero_grad()
        model(**batch).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=0, atol=0, msg=name)
    assert alive == [6, 2], alive  # 3 layers, 6 sublayers; kept: every ceil(sqrt(6)) = 3rd, the last read-out input


# -- torch.compile and torch.export ----------------------------------------------------------------------------------


@pytest.mark.parametrize("hc_mode", ["mhc", "gated"])
def test_compiled_fullgraph_training_step_equals_eager(tmp_path, hc_mode):
    """`torch.compile(model, fullgraph=True)` traces forward and backward of the default (input-dependent) mHC and of
    the gated residual (whose eager read is computed again in backward by an autograd Function, which a compiled
    graph leaves to the compiled backward) in one graph, as for the stock model, and gives the eager loss and
    gradients. Compiled forwards run without the stream recomputation and the statistics (Python-side state); the
    AOT-autograd backend keeps the test fast."""
    folder = str(tmp_path / "stock")
    build_stock_llama(folder, num_hidden_layers=2)
    model = randomised(folder, freeze_base=False, hc_mode=hc_mode).train()
    batch = lm_batch()
    batch["labels"] = lm_labels(batch)
    eager = model(**batch)
    eager.loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    out = compiled(**batch)
    out.loss.backward()
    torch.testing.assert_close(out.logits, eager.logits)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], msg=name)


@pytest.mark.parametrize("options", [dict(hc_mode="mhc"), dict(hc_mode="static")], ids=lambda o: o["hc_mode"])
def test_exported_forward_equals_eager(stock_llama, options):
    """`torch.export.export` of the forward (without the KV cache, which the stock model cannot export either), in
    eval mode under no_grad and, for the default mHC, in training mode with grad enabled."""
    model = randomised(stock_llama[0], **options)
    input_ids = lm_batch()["input_ids"]
    with torch.no_grad():
        expected = model(input_ids, use_cache=False).logits
        exported = torch.export.export(model, (input_ids,), kwargs=dict(use_cache=False))
        torch.testing.assert_close(exported.module()(input_ids, use_cache=False).logits, expected)
    if options["hc_mode"] == "mhc":
        model.train()
        exported = torch.export.export(model, (input_ids,), kwargs=dict(use_cache=False))
        torch.testing.assert_close(exported.module()(input_ids, use_cache=False).logits, model(input_ids).logits)


# -- the fused (compiled) coefficient path and the cheaper internals ---------------------------------------------------


def test_fused_coefficients_are_the_default_and_equal_the_eager_path(stock_llama, monkeypatch):
    """The input-dependent mHC coefficients (projection, sigmoids, Sinkhorn and its backward) are computed by default
    (`hc_fused=True`) through one function compiled with `fullgraph=True` (inductor): the loss, every gradient and
    the statistics of a training step equal those of the eager path (`hc_fused=False`), and the compiled function is
    what ran, once per sublayer."""
    calls = counting_fused(monkeypatch, hc_module, "_fused_mhc_coefficients")
    batch = lm_batch(lengths=(12, 9))
    batch["labels"] = lm_labels(batch)
    results = []
    for options in (dict(hc_fused=False), {}):
        model = randomised(stock_llama[0], freeze_base=False, **options).train()
        out = model(**batch)
        out.loss.backward()
        results.append(
            (out.loss, {n: p.grad for n, p in model.named_parameters()}, model.mechanism_stats(split="train"))
        )
    assert model.config.hc_fused and model.config.hc_mode == "mhc" and model.config.mhc_dynamic
    assert calls == ["_mhc_coefficients"] * 2 * model.config.num_hidden_layers
    (loss, grads, stats), (fused_loss, fused_grads, fused_stats) = results
    torch.testing.assert_close(fused_loss, loss)
    for name, grad in grads.items():
        torch.testing.assert_close(fused_grads[name], grad, msg=name)
    assert fused_stats.keys() == stats.keys() and all(fused_stats[k] == pytest.approx(stats[k]) for k in stats)


@pytest.fixture
def compiled_read(monkeypatch):
    """Every no-grad read through the compiled function (`_fused_mhc_read`), as for bf16 streams or where the C++
    functions of hyper_connections_cpu.py cannot be built; they read fp32 streams on a CPU otherwise."""
    monkeypatch.setattr(cpu_read, "load", lambda: (None, "switched off by the test"))


def test_fused_coefficients_compile_once_for_every_batch_shape(stock_llama, monkeypatch, compiled_read):
    """The fused coefficients' graph has the number of tokens as a symbol: training steps at three batch shapes
    compile it once, and no-grad forwards at the same shapes compile the no-grad boundary (`_fused_mhc_read`, batch and
    length symbolic) twice, once for a batch of one (torch specialises a size of 1), so a new batch or length does not
    compile either again, and processes on one machine share them through inductor's cache (before: four times,
    static then dynamic in each grad mode)."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()  # the functions' earlier compilations in this process
    counters = {name: CompileCounter() for name in ("_fused_mhc_coefficients", "_fused_mhc_read")}
    calls = [counting_fused(monkeypatch, hc_module, name, backend=counter) for name, counter in counters.items()]
    model = randomised(stock_llama[0], freeze_base=False).train()
    for lengths in ((12, 9), (7, 7, 5), (4,)):
        batch = lm_batch(lengths=lengths)
        batch["labels"] = lm_labels(batch)
        model(**batch).loss.backward()
        with torch.no_grad():
            model(**batch)
    sublayers = 2 * model.config.num_hidden_layers
    assert calls == [["_mhc_coefficients"] * 3 * sublayers, ["_mhc_read"] * 3 * sublayers]  # every call compiled
    assert [counter.frame_count for counter in counters.values()] == [1, 2]


def test_decoded_tokens_run_one_direct_inductor_graph(stock_llama, monkeypatch, compiled_read):
    """Without grad, where the C++ read does not run (bf16 streams, no compiler; here switched off), a call whose
    shapes are all fixed (a decoded token at batch 1) runs one inductor graph of exactly that call, built once and
    called directly (`zoo_common._inductor_graph`: no guards or runtime wrappers, about 50 us less per call than
    through `torch.compile`): cached greedy decoding gives the tokens and scores of the eager path (`hc_fused=False`),
    and the graph is built once for every decoded token of every sublayer."""
    from interlayer.models import zoo_common

    built = []
    build = zoo_common._inductor_graph
    monkeypatch.setattr(zoo_common, "_inductor_graph", lambda fn, args: built.append(fn.__name__) or build(fn, args))
    monkeypatch.setattr(hc_module, "_fused_mhc_read", Fused(hc_module._mhc_read, {"streams": (0, 1)}))
    prompt = lm_batch(lengths=(6,))["input_ids"]
    outputs, greedy = [], dict(max_new_tokens=4, do_sample=False, output_scores=True, return_dict_in_generate=True)
    for options in (dict(hc_fused=False), {}):
        model = randomised(stock_llama[0], **options).eval()
        with torch.no_grad():
            outputs.append(model.generate(prompt, **greedy))
    assert built == ["_mhc_read"] and len(hc_module._fused_mhc_read.graphs) == 2  # the prompt's graph and the token's
    torch.testing.assert_close(outputs[1].sequences, outputs[0].sequences)
    torch.testing.assert_close(torch.stack(outputs[1].scores), torch.stack(outputs[0].scores))


def test_a_forward_asks_the_compile_switches_once(stock_llama, monkeypatch, compiled_read):
    """Whether a compiled function may run (`Fused.allowed`, whose check of torch's switches walks the Python stack)
    is asked once per eager forward pass, not at every sublayer (twice at each, before: about 2% of a decoded token),
    with grad and without (the no-grad read compiled, as where the C++ functions do not run); every sublayer's call
    still runs compiled."""
    from interlayer.models import zoo_common

    asked = []
    check = zoo_common.compiling_switched_off
    monkeypatch.setattr(zoo_common, "compiling_switched_off", lambda: asked.append(1) or check())
    model = randomised(stock_llama[0]).train()
    batch = lm_batch()
    batch["labels"] = lm_labels(batch)
    for grad in (True, False):
        asked.clear()
        before = Fused.compiled_calls
        with torch.set_grad_enabled(grad):
            model(**batch)
        assert len(asked) == 1, f"grad={grad}: asked {len(asked)} times"
        assert Fused.compiled_calls - before == 2 * model.config.num_hidden_layers


def test_fused_runs_where_the_direct_graph_cannot_be_built(monkeypatch):
    """Where inductor's direct entry points fail (moved in another torch, say), a fixed-shape call without grad is
    compiled by `torch.compile` instead, with the same result."""
    import torch._inductor.compile_fx

    from interlayer.models import zoo_common

    def fails(*args, **kwargs):
        raise ImportError("compile_fx_inner moved")

    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx_inner", fails)
    fused = Fused(hc_module._rms_scale, dynamic_dims={"x": (0,)})
    x = torch.randn(1, 8)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), hc_module._rms_scale(x))
    assert zoo_common._inductor_graph(hc_module._rms_scale, (x,)) is None
    assert Fused.compiled_calls > 0 and len(fused.graphs) == 1


def test_fused_refuses_dynamic_dims_of_an_unknown_argument():
    with pytest.raises(ValueError, match=r"dynamic_dims names \['flats'\], which are not arguments of _mhc_coeff"):
        Fused(hc_module._mhc_coefficients, dynamic_dims={"flats": (0,)})


def test_fused_coefficients_fall_back_to_eager_where_compiling_fails(stock_llama, monkeypatch):
    """Where `torch.compile` cannot compile (here a backend that fails as inductor does without a C++ compiler), the
    default model still trains: one warning names the reason, the coefficients are computed eagerly for the rest of
    the process, and the step equals the eager path's."""

    def no_compiler(graph, example_inputs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    from interlayer.models import zoo_common

    torch._dynamo.reset()  # the function's earlier compilations in this process: a new backend must compile it
    calls = counting_fused(monkeypatch, hc_module, "_fused_mhc_coefficients", backend=no_compiler)
    warnings = []
    monkeypatch.setattr(zoo_common.logger, "warning", warnings.append)
    batch = lm_batch(lengths=(12, 9))
    batch["labels"] = lm_labels(batch)
    losses, grads = [], []
    for options in (dict(hc_fused=False), {}, {}):
        model = randomised(stock_llama[0], freeze_base=False, **options).train()
        loss = model(**batch).loss
        loss.backward()
        losses.append(loss)
        grads.append({n: p.grad for n, p in model.named_parameters()})
    eager = [w for w in warnings if "runs eagerly" in w]
    assert len(eager) == 1 and "torch.compile failed" in eager[0] and "No working C++ compiler" in eager[0], eager
    assert calls == ["_mhc_coefficients"]  # tried once, then eager
    for loss, grad in zip(losses[1:], grads[1:]):
        torch.testing.assert_close(loss, losses[0])
        for name, expected in grads[0].items():
            torch.testing.assert_close(grad[name], expected, msg=name)


def test_fused_coefficients_run_under_a_flop_counter(stock_llama):
    """Under a dispatch mode such as torch's FlopCounterMode (which torch.compile refuses to run under) `hc_fused`
    takes the eager path: a training step counts the FLOPs of the unfused model."""
    from torch.utils.flop_counter import FlopCounterMode

    batch = lm_batch()
    batch["labels"] = lm_labels(batch)
    flops = []
    for fused in (False, True):
        model = randomised(stock_llama[0], freeze_base=False, hc_fused=fused).train()
        with FlopCounterMode(display=False) as counter:
            model(**batch).loss.backward()
        flops.append(counter.get_total_flops())
    assert flops[0] > 0 and flops[1] == flops[0]


def test_composite_gain_prefix_scan_equals_the_sequential_products():
    """The parallel scan behind the composite-gain statistics gives every prefix product `res[i] ... res[0]`."""
    from interlayer.models.hyper_connections_fast import CompositeGain

    res = torch.randn(11, 3, 4, 4, dtype=torch.float64)
    expected, product = [], None
    for r in res:
        product = r if product is None else r @ product
        expected.append(product)
    torch.testing.assert_close(CompositeGain.prefix_products(res), torch.stack(expected))


def test_no_grad_forward_equals_the_training_path(stock_llama):
    """Without grad the static maps are cached and the product takes a plain `matmul` without the sublayer-input copy:
    the logits equal those of a forward with grad enabled (every mode)."""
    input_ids = lm_batch()["input_ids"]
    for options in MODES:
        model = randomised(stock_llama[0], **options)
        with torch.no_grad():
            cached = model(input_ids).logits
            again = model(input_ids).logits
        torch.testing.assert_close(cached, model(input_ids).logits, msg=str(options))
        assert torch.equal(again, cached)


def test_each_layer_compiled_on_its_own_trains_as_the_eager_model(stock_llama):
    """Regional compilation (`layer.compile()` on every decoder layer: one compiled layer serves the whole depth),
    after the stock model's layers were compiled the same way, as a comparison with stock does: the stock layers'
    compiled code meets the K-wide streams, shapes turn dynamic, and dynamo stopped on a branch on the streams'
    stride. The loss and every gradient equal the eager model's."""
    torch._dynamo.reset()
    batch = {**lm_batch(lengths=(7, 7)), "use_cache": False}
    batch["labels"] = batch["input_ids"]
    stock = copy.deepcopy(stock_llama[1]).train()
    for layer in stock.model.layers:
        layer.compile()
    stock(**batch).loss.backward()
    eager = randomised(stock_llama[0]).train()
    compiled = copy.deepcopy(eager)
    for layer in compiled.model.layers:
        layer.compile()
    expected, loss = eager(**batch).loss, compiled(**batch).loss
    expected.backward()
    loss.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    torch._dynamo.reset()
