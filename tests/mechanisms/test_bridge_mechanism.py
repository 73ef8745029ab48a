"""Behaviour specific to the cross-layer bridges: router gradient, chunking, the fused HDIM scorer, gates, masks,
presets, statistics."""

import math

import pytest
import torch
from batches import labels_for, pair_batch
from fused_calls import counting_fused
from stock_checkpoints import TINY_ENCODER, build_stock_bert, build_stock_roberta, encoder_builder
from transformers import AutoConfig, AutoModelForSequenceClassification, Trainer, TrainingArguments

from interlayer import (
    BRIDGE_PRESETS,
    BertBridgeConfig,
    BertBridgeForSequenceClassification,
    RobertaBridgeConfig,
    RobertaBridgeForSequenceClassification,
    bridge_preset,
)
from interlayer.callbacks import EarlyStopBelowCallback, MechanismStatsCallback
from interlayer.models import modeling_bridge
from interlayer.models.modeling_bridge import HDIMMessage


@pytest.fixture
def roberta_dir(tmp_path):
    build_stock_roberta(str(tmp_path / "roberta"))
    return str(tmp_path / "roberta")


@pytest.fixture
def bert_dir(tmp_path):
    build_stock_bert(str(tmp_path / "bert"))
    return str(tmp_path / "bert")


def router_grad(folder, **options):
    torch.manual_seed(0)
    model = RobertaBridgeForSequenceClassification.from_pretrained(folder, identity_init=False, **options)
    batch = pair_batch("roberta")
    model(**batch, labels=labels_for(batch)).loss.backward()
    grads = [p.grad for p in model.base_model.encoder.bridge_router.parameters()]
    return sum(0.0 if g is None else g.abs().sum().item() for g in grads)


def route_recorder(router):
    """A hook that keeps the router's latest top-1 choice per example in the returned dict."""
    seen = {}
    router.register_forward_hook(lambda module, args, out: seen.update(index=out[0][:, 0].clone()))
    return seen


@pytest.mark.parametrize("mode", ["hybrid", "hdim"])
def test_router_learns_to_route_at_top1(roberta_dir, mode):
    """Only one source layer carries what the loss needs: the target is the model's own output when every example
    reads layer `good`, a layer the router initially (almost) never picks. Training only the router, the loss can
    fall only by changing routing decisions; they must move to `good` and the loss must fall."""
    torch.manual_seed(0)
    model = RobertaBridgeForSequenceClassification.from_pretrained(
        roberta_dir, identity_init=False, bridge_mode=mode, route_last_n=1
    ).eval()
    base, router = model.base_model, model.base_model.encoder.bridge_router
    with torch.no_grad():
        base.encoder.layer[-1].bridge.proj.weight.normal_(std=0.3)  # an injection that matters
    batch = pair_batch("roberta", lengths=[(3 + i % 5, 2 + i % 4) for i in range(16)], seed=1)
    seen = route_recorder(router)
    with torch.no_grad():
        base(**batch)
    start = seen["index"]
    good = int(torch.bincount(start, minlength=3).argmin())
    force = router.register_forward_hook(lambda module, args, out: (torch.full_like(out[0], good), out[1]))
    with torch.no_grad():
        target = base(**batch).last_hidden_state
    force.remove()
    model.requires_grad_(False)
    router.requires_grad_(True)
    optimizer = torch.optim.Adam(router.parameters(), lr=0.05, eps=1e-6)  # eps: no step on rounding noise
    losses = []
    for _ in range(20):
        loss = (base(**batch).last_hidden_state - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        final = (base(**batch).last_hidden_state - target).pow(2).mean().item()
    assert (start == good).sum() <= 2
    assert (seen["index"] == good).float().mean() >= 0.9, seen["index"].tolist()
    assert final < 0.1 * losses[0], (losses[0], final)


def test_route_placements_agree_at_top1_and_differ_at_top2(roberta_dir):
    """Moving the route weight after the normalisation keeps the seed's forward at top-1 (the weight is 1)."""
    outs = {}
    for topk in (1, 2):
        for placement in ("post_norm", "pre_norm"):
            torch.manual_seed(0)
            model = RobertaBridgeForSequenceClassification.from_pretrained(
                roberta_dir,
                identity_init=False,
                route_topk=topk,
                route_placement=placement,
                route_estimator="topk_softmax",
            ).eval()
            with torch.no_grad():
                outs[topk, placement] = model.base_model(**pair_batch("roberta")).last_hidden_state
    torch.testing.assert_close(outs[1, "post_norm"], outs[1, "pre_norm"], rtol=0, atol=0)
    assert (outs[2, "post_norm"] - outs[2, "pre_norm"]).abs().max() > 1e-6


def test_seed_router_gets_no_gradient_at_top1(roberta_dir):
    """The seed's defect, kept available as `route_estimator="topk_softmax"`."""
    assert router_grad(roberta_dir, route_topk=1, route_estimator="topk_softmax") == 0


def test_straight_through_keeps_the_seed_forward(roberta_dir):
    outs = []
    for estimator in ("straight_through", "topk_softmax"):
        torch.manual_seed(0)
        model = RobertaBridgeForSequenceClassification.from_pretrained(
            roberta_dir, identity_init=False, route_topk=2, route_estimator=estimator
        ).eval()
        with torch.no_grad():
            outs.append(model(**pair_batch("roberta")).logits)
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


def test_hdim_chunking_gives_identical_outputs_and_gradients(roberta_dir):
    batch = pair_batch("roberta", lengths=((20, 17), (9, 4)))
    labels = labels_for(batch)
    results = []
    for chunk in (512, 7):
        torch.manual_seed(0)
        model = RobertaBridgeForSequenceClassification.from_pretrained(
            roberta_dir,
            identity_init=False,
            bridge_mode="hdim",
            hdim_chunk_size=chunk,
            bridge_dropout=0.0,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        ).train()
        out = model(**batch, labels=labels)
        out.loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        results.append((out.logits.detach(), grads))
    torch.testing.assert_close(results[1][0], results[0][0])
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, msg=name)


def plain_4term_logits(hdim, z_tgt, z_src):
    """The readable equation: the scorer on the concatenated pair features phi_st = [z_s, z_t, z_s * z_t,
    |z_s - z_t|] of every (target s, source t) pair, all at once."""
    z_s = z_tgt.unsqueeze(2).expand(-1, -1, z_src.shape[1], -1)
    z_t = z_src.unsqueeze(1).expand(-1, z_tgt.shape[1], -1, -1)
    return hdim.scorer(torch.cat([z_s, z_t, z_s * z_t, (z_s - z_t).abs()], dim=-1)).squeeze(-1)


@pytest.mark.parametrize("recompute", [True, False])
@pytest.mark.parametrize("fused", [True, False])
def test_hdim_scorer_equals_the_pair_feature_equation(monkeypatch, fused, recompute):
    """The 4-term alignment logits, scored in chunks of 4 target tokens (4, 4 and a short 3), and their gradients
    (both token projections', every scorer parameter's) equal the scorer applied to the full pair features, fused
    (`hdim_fused`, compiled) or eager, with and without recomputation in backward; the fused path runs the compiled
    function once per chunk (twice with recomputation)."""
    calls = counting_fused(monkeypatch, modeling_bridge, "fused_hdim_pair_logits")
    config = RobertaBridgeConfig(
        **TINY_ENCODER, bridge_mode="hdim", hdim_chunk_size=4, hdim_recompute=recompute, hdim_fused=fused
    )
    torch.manual_seed(0)
    hdim = HDIMMessage(config).train()
    z_tgt = torch.randn(3, 11, config.hdim_dim, requires_grad=True)
    z_src = torch.randn(3, 9, config.hdim_dim, requires_grad=True)
    inputs = [z_tgt, z_src, *hdim.scorer.parameters()]
    weight = torch.randn(3, 11, 9)
    logits = hdim.alignment_logits(z_tgt, z_src)
    grads = torch.autograd.grad((logits * weight).sum(), inputs)
    expected = plain_4term_logits(hdim, z_tgt, z_src)
    expected_grads = torch.autograd.grad((expected * weight).sum(), inputs)
    torch.testing.assert_close(logits, expected)
    for index, (grad, expected_grad) in enumerate(zip(grads, expected_grads)):
        torch.testing.assert_close(grad, expected_grad, msg=lambda m: f"input {index}: {m}")
    assert calls == (["hdim_pair_logits"] * 3 * (2 if recompute else 1) if fused else [])


def hdim_bridge(folder, **options):
    """An HDIM bridge that acts, scoring 7 target tokens at a time, without dropout, in training mode."""
    torch.manual_seed(0)
    return RobertaBridgeForSequenceClassification.from_pretrained(
        folder,
        identity_init=False,
        bridge_mode="hdim",
        hdim_chunk_size=7,
        bridge_dropout=0.0,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **options,
    ).train()


def training_step(model, batch):
    """Outputs and every gradient of one training step."""
    out = model(**batch, labels=labels_for(batch))
    out.loss.backward()
    return out, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def test_fused_hdim_scorer_is_the_default_and_trains_as_the_eager_one(roberta_dir, monkeypatch):
    """By default (`hdim_fused=True`) the 4-term scorer runs compiled, once per chunk of target tokens and target
    layer and again when backward recomputes it; on a padded batch its training step (loss, logits, every gradient)
    equals the eager scorer's (`hdim_fused=False`)."""
    calls = counting_fused(monkeypatch, modeling_bridge, "fused_hdim_pair_logits")
    batch = pair_batch("roberta", lengths=((20, 17), (9, 4)))
    eager, eager_grads = training_step(hdim_bridge(roberta_dir, hdim_fused=False), batch)
    assert calls == []
    model = hdim_bridge(roberta_dir)
    fused, fused_grads = training_step(model, batch)
    assert model.config.hdim_fused and model.config.hdim_recompute
    targets = sum(isinstance(m, HDIMMessage) for m in model.modules())
    chunks = math.ceil(batch["input_ids"].shape[1] / 7)
    assert targets > 1 and batch["input_ids"].shape[1] % 7 != 0
    assert calls == ["hdim_pair_logits"] * 2 * targets * chunks
    torch.testing.assert_close(fused.loss, eager.loss)
    torch.testing.assert_close(fused.logits, eager.logits)
    assert fused_grads.keys() == eager_grads.keys()
    for name, grad in eager_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, msg=name)


def test_fused_hdim_scorer_counts_the_eager_flops(roberta_dir, monkeypatch):
    """Under torch's FlopCounterMode (a dispatch mode, which torch.compile refuses) the fused scorer runs eagerly:
    a training step counts the same FLOPs with `hdim_fused` as without."""
    from torch.utils.flop_counter import FlopCounterMode

    calls = counting_fused(monkeypatch, modeling_bridge, "fused_hdim_pair_logits")
    batch = pair_batch("roberta", lengths=((20, 17), (9, 4)))
    flops = []
    for fused in (False, True):
        model = hdim_bridge(roberta_dir, hdim_fused=fused)
        with FlopCounterMode(display=False) as counter:
            training_step(model, batch)
        flops.append(counter.get_total_flops())
    assert calls == [] and flops[0] == flops[1] > 0


def test_fused_hdim_scorer_compiles_once_per_kind_of_call(roberta_dir, monkeypatch):
    """Batches of 1 to 3 examples of several lengths (chunks of one target token among them), with and without grad:
    the compiled scorer compiles once for each kind of call (grad mode, a batch of 1 or more, a chunk of 1 token or
    more) and runs every call compiled, and nothing is warned, neither by torch nor by the zoo (before: these made
    torch specialise the one compiled function more often than its recompile limit, 8, allows, chunks of the target
    tokens being contiguous or not, and torch warned at every later call of a new kind); the logits and gradients
    equal the eager scorer's."""
    from torch._dynamo.testing import CompileCounter

    from interlayer.testing.case import _nothing_warned

    torch._dynamo.reset()
    counter = CompileCounter()  # dynamo's graph capture alone: what torch specialises and limits, without inductor
    calls = counting_fused(monkeypatch, modeling_bridge, "fused_hdim_pair_logits", backend=counter)
    eager, fused = hdim_bridge(roberta_dir, hdim_fused=False), hdim_bridge(roberta_dir)
    # (sentence lengths) of each example: 9, 7, 13, 22 (chunks of 7, 7, 7 and 1), 11, 14 and 22 tokens
    shapes = [((3, 2),), ((2, 1), (1, 1)), ((5, 4), (3, 2), (2, 2)), ((9, 9), (1, 1)), ((4, 3),), ((6, 3), (5, 5))]
    shapes.append(((9, 9),))
    with _nothing_warned():
        for lengths in shapes:
            batch = pair_batch("roberta", lengths=lengths)
            with torch.no_grad():
                torch.testing.assert_close(fused(**batch).logits, eager(**batch).logits)
            expected, expected_grads = training_step(eager, batch)
            got, grads = training_step(fused, batch)
            torch.testing.assert_close(got.logits, expected.logits)
            for name, grad in expected_grads.items():
                torch.testing.assert_close(grads[name], grad, msg=name)
    graphs = modeling_bridge.fused_hdim_pair_logits.graphs
    assert len(graphs) == 8 and None not in graphs.values()  # 2 grad modes x batch of 1 or not x chunk of 1 or not
    assert counter.frame_count == len(graphs)  # one graph per kind
    assert len(calls) > counter.frame_count  # and calls of a kind met before ran its graph


def test_fused_hdim_scorer_runs_a_kind_eagerly_past_the_recompile_limit(roberta_dir, monkeypatch):
    """Where torch refuses to compile a kind of call again (its recompile limit, here set to 0; with a graph per kind,
    only a change the kind does not cover, such as the device, could reach it) the scorer runs that kind eagerly from
    then on, with one warning for the process, and never calls torch for it again (which would warn again at every
    call), instead of failing: each step, before and after the limit is restored, equals the eager scorer's."""
    from interlayer.models import zoo_common

    torch._dynamo.reset()
    warnings = []
    monkeypatch.setattr(zoo_common.logger, "warning", warnings.append)
    calls = counting_fused(monkeypatch, modeling_bridge, "fused_hdim_pair_logits")
    batch = pair_batch("roberta", lengths=((20, 17), (9, 4)))
    eager, eager_grads = training_step(hdim_bridge(roberta_dir, hdim_fused=False), batch)
    for limit in (0, torch._dynamo.config.recompile_limit):
        with torch._dynamo.config.patch(recompile_limit=limit):
            fused, fused_grads = training_step(hdim_bridge(roberta_dir), batch)
        torch.testing.assert_close(fused.logits, eager.logits)
        for name, grad in eager_grads.items():
            torch.testing.assert_close(fused_grads[name], grad, msg=name)
    graphs = modeling_bridge.fused_hdim_pair_logits.graphs
    assert graphs and set(graphs.values()) == {None} and len(calls) == len(graphs)  # one try per kind
    assert [w for w in warnings if "recompile limit" in w] == [
        "hdim_pair_logits runs eagerly for a kind of input: torch's recompile limit is hit"
    ]


def injection(folder, scale, placement):
    torch.manual_seed(0)
    model = RobertaBridgeForSequenceClassification.from_pretrained(
        folder, identity_init=False, gate_placement=placement
    ).eval()
    with torch.no_grad():
        for layer in model.base_model.encoder.layer:
            if layer.bridge is not None:
                layer.bridge.alpha_attn.mul_(scale)
                layer.bridge.alpha_hdim.mul_(scale)
        return model.base_model(**pair_batch("roberta")).last_hidden_state


def test_pre_norm_gates_cancel_in_the_layernorm(roberta_dir):
    """Seed placement: a common scale on both gates is divided out by the LayerNorm (only their ratio matters)."""
    torch.testing.assert_close(injection(roberta_dir, 4.0, "pre_norm"), injection(roberta_dir, 1.0, "pre_norm"))


def test_post_norm_gates_set_the_message_scale(roberta_dir):
    diff = injection(roberta_dir, 4.0, "post_norm") - injection(roberta_dir, 1.0, "post_norm")
    assert diff.abs().max() > 1e-4


def test_separator_and_token_type_segments(roberta_dir, bert_dir):
    roberta = RobertaBridgeForSequenceClassification.from_pretrained(roberta_dir).base_model
    ids = torch.tensor([[0, 7, 8, 2, 2, 9, 2, 1]])
    assert roberta._segments(ids, None).tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]]
    bert = BertBridgeForSequenceClassification.from_pretrained(bert_dir).base_model
    ids = torch.tensor([[101, 7, 102, 9, 9, 102, 0]])
    assert bert._segments(ids, None).tolist() == [[0, 0, 0, 1, 1, 1, 1]]
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 0]])
    assert bert._segments(ids, types).tolist() == types.tolist()


def test_cross_segment_pairs_and_special_tokens(bert_dir):
    model = BertBridgeForSequenceClassification.from_pretrained(
        bert_dir, hdim_pair_mask="cross_segment", hdim_mask_special_tokens=True
    ).base_model
    batch = pair_batch("bert", lengths=((2, 2),))
    allowed = model._allowed_pairs(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"].bool())[0]
    # [CLS] a a [SEP] b b [SEP]: segment A = 0..3, B = 4..6; sources never CLS/SEP
    expected = torch.zeros(7, 7, dtype=torch.bool)
    expected[:4, 4:6] = True
    expected[4:, 1:3] = True
    assert torch.equal(allowed, expected)


def test_separator_segments_need_input_ids(roberta_dir):
    model = RobertaBridgeForSequenceClassification.from_pretrained(roberta_dir, hdim_pair_mask="cross_segment")
    embeds = torch.randn(1, 5, TINY_ENCODER["hidden_size"])
    with pytest.raises(ValueError, match="need `input_ids`"):
        model(inputs_embeds=embeds)


@pytest.mark.parametrize("name", sorted(BRIDGE_PRESETS))
def test_every_preset_builds_and_runs(name, roberta_dir):
    layers = RobertaBridgeConfig.from_pretrained(roberta_dir).num_hidden_layers
    if bridge_preset(name).get("route_last_n", 0) > layers:  # a preset for a deeper model: refused, naming the field
        with pytest.raises(ValueError, match=rf"`route_last_n` must be >= 1 and <= {layers}"):
            RobertaBridgeConfig.from_pretrained(roberta_dir, **bridge_preset(name))
        return
    config = RobertaBridgeConfig.from_pretrained(roberta_dir, **bridge_preset(name))
    for field, value in BRIDGE_PRESETS[name].items():
        assert getattr(config, field) == value
    model = RobertaBridgeForSequenceClassification.from_pretrained(roberta_dir, config=config).eval()
    assert torch.isfinite(model(**pair_batch("roberta")).logits).all()


def test_from_preset_with_overrides_and_unknown_preset():
    config = BertBridgeConfig.from_preset("H9", route_topk=2, **TINY_ENCODER)
    assert (config.bridge_mode, config.hdim_value_fusion, config.route_topk) == ("hdim", "concat_only", 2)
    with pytest.raises(ValueError, match=r"`preset` must be one of .*'H9'.*got 'H99'"):
        BertBridgeConfig.from_preset("H99")
    with pytest.raises(ValueError, match="preset"):
        bridge_preset("nope")


def test_presets_are_documented():
    import pathlib

    doc = (pathlib.Path(__file__).parents[2] / "docs" / "bridges.md").read_text()
    for name in BRIDGE_PRESETS:
        assert f"| `{name}` |" in doc, f"preset {name} missing from docs/bridges.md"


def test_options_fail_at_config_creation_not_at_forward(roberta_dir):
    with pytest.raises(Exception, match="route_topk"):
        RobertaBridgeForSequenceClassification.from_pretrained(roberta_dir, route_topk=0)


def test_auto_classes_resolve_in_process(roberta_dir, tmp_path):
    model = RobertaBridgeForSequenceClassification.from_pretrained(roberta_dir)
    model.save_pretrained(tmp_path / "saved")
    assert type(AutoConfig.from_pretrained(tmp_path / "saved")) is RobertaBridgeConfig
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved")
    assert type(loaded) is RobertaBridgeForSequenceClassification


def test_usage_statistics_after_a_forward(roberta_dir):
    model = RobertaBridgeForSequenceClassification.from_pretrained(roberta_dir, route_topk=2).eval()
    with torch.no_grad():
        model(**pair_batch("roberta"))
    stats = model.mechanism_stats(split="eval")
    for j in model.config.bridge_target_layers:
        assert stats[f"bridge/L{j}/alpha_attn"] == pytest.approx(0.15)
        assert stats[f"bridge/L{j}/alpha_hdim"] == pytest.approx(0.05)
        assert stats[f"bridge/L{j}/qkv_norm"] > 0 and stats[f"bridge/L{j}/hdim_norm"] > 0
        assert stats[f"bridge/L{j}/inject_norm"] == 0.0  # identity init: nothing injected yet
        hist = [stats[f"bridge/L{j}/source_{i}"] for i in range(j)]
        assert sum(hist) == pytest.approx(min(2, j))  # each example picks min(k, j) distinct sources
    assert model.mechanism_stats(split="eval") == {}  # reading resets


def test_stats_callback_puts_bridge_usage_into_trainer_logs(roberta_dir, tmp_path):
    torch.manual_seed(0)
    model = RobertaBridgeForSequenceClassification.from_pretrained(roberta_dir, identity_init=False)
    batch = pair_batch("roberta")
    batch["labels"] = labels_for(batch)
    rows = [{k: v[i] for k, v in batch.items()} for i in range(3)]
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=3,
        max_steps=2,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows, eval_dataset=rows)
    MechanismStatsCallback.attach(trainer)
    trainer.train()
    train_logs = [r for r in trainer.state.log_history if "loss" in r]
    eval_logs = [r for r in trainer.state.log_history if "eval_loss" in r]
    assert train_logs and all("bridge/L3/alpha_attn" in r for r in train_logs)
    assert eval_logs and "eval_bridge/L3/source_0" in eval_logs[0]
    assert not any(k.startswith("bridge/") for k in eval_logs[0])


def test_early_stop_rule(roberta_dir, tmp_path):
    from transformers import TrainerControl, TrainerState

    callback = EarlyStopBelowCallback(threshold=0.70)
    state, control = TrainerState(), TrainerControl()
    state.epoch = 1.0
    callback.on_evaluate(None, state, control, metrics={"eval_accuracy": 0.69})
    assert control.should_training_stop
    control = TrainerControl()
    callback2 = EarlyStopBelowCallback(threshold=0.70)
    callback2.on_evaluate(None, state, control, metrics={"eval_accuracy": 0.71})
    state.epoch = 2.0
    callback2.on_evaluate(None, state, control, metrics={"eval_accuracy": 0.10})
    assert not control.should_training_stop


def test_loss_adds_entropy_regulariser_and_label_smoothing(roberta_dir):
    torch.manual_seed(0)
    model = RobertaBridgeForSequenceClassification.from_pretrained(
        roberta_dir, identity_init=False, hdim_entropy_reg=0.5
    ).eval()
    batch = pair_batch("roberta")
    labels = labels_for(batch)
    out = model(**batch, labels=labels)
    assert out.bridge_aux_loss > 0
    torch.testing.assert_close(out.loss, out.task_loss + out.bridge_aux_loss)
    torch.testing.assert_close(out.task_loss, torch.nn.functional.cross_entropy(out.logits, labels))
    model.label_smoothing = 0.05
    smoothed = model(**batch, labels=labels)
    torch.testing.assert_close(
        smoothed.task_loss, torch.nn.functional.cross_entropy(out.logits, labels, label_smoothing=0.05)
    )


def test_seed_head(roberta_dir):
    model, info = RobertaBridgeForSequenceClassification.from_pretrained(
        roberta_dir, identity_init=False, classifier_head="seed", output_loading_info=True
    )
    assert {"classifier.norm.weight", "classifier.fc1.weight", "classifier.fc2.weight"} <= set(info["missing_keys"])
    assert model(**pair_batch("roberta")).logits.shape == (3, TINY_ENCODER["num_labels"])


def test_output_attentions_is_refused(roberta_dir):
    model = RobertaBridgeForSequenceClassification.from_pretrained(roberta_dir)
    with pytest.raises(ValueError, match="output_attentions"):
        model(**pair_batch("roberta"), output_attentions=True)


def test_hidden_states_are_returned_per_layer(roberta_dir):
    from transformers import RobertaForSequenceClassification

    stock = RobertaForSequenceClassification.from_pretrained(roberta_dir).eval()
    model = RobertaBridgeForSequenceClassification.from_pretrained(roberta_dir).eval()
    batch = pair_batch("roberta")
    with torch.no_grad():
        got = model(**batch, output_hidden_states=True).hidden_states
        expected = stock(**batch, output_hidden_states=True).hidden_states
    assert len(got) == len(expected) == TINY_ENCODER["num_hidden_layers"] + 1
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_gradient_accumulation_matches_a_larger_batch(roberta_dir, tmp_path):
    """Two accumulated half-batches move the weights as one full batch does (the Trainer scales the loss)."""
    batch = pair_batch("roberta", lengths=((3, 3), (3, 3), (3, 3), (3, 3)))
    batch["labels"] = labels_for(batch)
    rows = [{k: v[i] for k, v in batch.items()} for i in range(4)]
    weights = []
    for per_device, accumulation in ((4, 1), (2, 2)):
        torch.manual_seed(0)
        model = RobertaBridgeForSequenceClassification.from_pretrained(
            roberta_dir,
            identity_init=False,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            bridge_dropout=0.0,
        )
        args = TrainingArguments(
            output_dir=str(tmp_path / f"acc{accumulation}"),
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            learning_rate=0.1,
            optim="sgd",
            lr_scheduler_type="constant",
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            max_grad_norm=0.0,
        )
        Trainer(model=model, args=args, train_dataset=rows).train()
        weights.append(model.classifier.out_proj.weight.detach().clone())
    torch.testing.assert_close(weights[1], weights[0])


def padded(batch, width, side):
    """The batch padded with RoBERTa's pad token (1) to `width`, on the right or the left."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    extra = width - ids.shape[1]
    pad_ids = torch.ones(ids.shape[0], extra, dtype=ids.dtype)
    pad_mask = torch.zeros(ids.shape[0], extra, dtype=mask.dtype)
    if side == "right":
        return {"input_ids": torch.cat([ids, pad_ids], 1), "attention_mask": torch.cat([mask, pad_mask], 1)}
    return {"input_ids": torch.cat([pad_ids, ids], 1), "attention_mask": torch.cat([pad_mask, mask], 1)}


@pytest.mark.parametrize("options", [dict(bridge_mode="hdim"), dict(route_topk=2, hdim_pair_mask="cross_segment")])
def test_entropy_regulariser_ignores_padding(roberta_dir, options):
    """An example's alignment entropy is the same alone, right-padded and left-padded; in a batch, the mean."""
    torch.manual_seed(0)
    model = RobertaBridgeForSequenceClassification.from_pretrained(
        roberta_dir, identity_init=False, hdim_entropy_reg=1.0, **options
    ).eval()
    short = pair_batch("roberta", lengths=((3, 2),))
    long = pair_batch("roberta", lengths=((9, 8),), seed=1)
    with torch.no_grad():
        alone = model(**short).bridge_aux_loss
        for side in ("right", "left"):
            score = model(**padded(short, 20, side)).bridge_aux_loss
            torch.testing.assert_close(score, alone, msg=lambda m: f"{side} padding: {m}")
        long_alone = model(**long).bridge_aux_loss
        both = {k: torch.cat([padded(short, long["input_ids"].shape[1], "right")[k], long[k]]) for k in short}
        torch.testing.assert_close(model(**both).bridge_aux_loss, (alone + long_alone) / 2)


# each preset's own knob, reset to the default: the preset and its twin differ only in that knob
PRESET_KNOBS = {
    "H3": dict(gate_init_hdim=0.05),
    "H14": dict(gate_init_hdim=0.05),
    "H27": dict(gate_activation="identity"),
    "H7": dict(route_temp=0.7),
}


def trained_logits(folder, options, steps=4):
    """Logits after a few SGD steps on all parameters, with dropout off (so H14's dropout plays no part)."""
    torch.manual_seed(0)
    model = RobertaBridgeForSequenceClassification.from_pretrained(folder, identity_init=False, **options).eval()
    with torch.no_grad():
        for layer in model.base_model.encoder.layer:
            if layer.bridge is not None:
                layer.bridge.proj.weight.normal_(std=0.3)
    batch = pair_batch("roberta")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(steps):
        loss = model(**batch, labels=labels_for(batch)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize("name", sorted(PRESET_KNOBS))
def test_preset_knobs_act(roberta_dir, name):
    """H3, H14 (its gate) and H27 change the HDIM gate, which the seed's placement cancels in HDIM-only mode; H7
    changes the router temperature, which at top-1 acts only through what the router learns. Each preset must
    train to a different model than its twin with that knob at the default."""
    logits = trained_logits(roberta_dir, bridge_preset(name))
    twin = trained_logits(roberta_dir, {**bridge_preset(name), **PRESET_KNOBS[name]})
    assert (logits - twin).abs().max() > 1e-4


def _stock_layer_with_injection(family, base, layer, h, inject):
    """The target layer's output from its stock modules with `inject` added where the docs say (the input of the
    FFN sublayer), for an unpadded batch; written per family from the stock layer code, not through the roles."""
    if family == "modernbert":
        from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask

        sliding = layer.attention_type == "sliding_attention"
        make_mask = create_bidirectional_sliding_window_mask if sliding else create_bidirectional_mask
        mask = make_mask(config=base.config, inputs_embeds=h, attention_mask=None)
        rotary = base.rotary_emb(h, torch.arange(h.shape[1])[None], layer.attention_type)
        residual = h + layer.attn(layer.attn_norm(h), position_embeddings=rotary, attention_mask=mask)[0] + inject
        return residual + layer.mlp(layer.mlp_norm(residual))
    if family == "deberta-v2":
        encoder = base.encoder
        mask = encoder.get_attention_mask(torch.ones(h.shape[:2], dtype=torch.long))
        attention = layer.attention(
            h, mask, relative_pos=encoder.get_rel_pos(h), rel_embeddings=encoder.get_rel_embedding()
        )[0]
    else:
        attention = layer.attention(h, None)[0]
    return layer.output(layer.intermediate(attention + inject), attention + inject)


@pytest.mark.parametrize("family", ["bert", "electra", "deberta-v2", "modernbert"])
def test_injection_point_and_what_the_bridge_reads(tmp_path, family):
    """docs/bridges.md, Families: the injection enters the FFN sublayer's input (post-norm: the attention output;
    ModernBERT, pre-norm: the residual stream before `mlp_norm`), and the bridge reads the target's input and each
    source layer i's output the way the next layer's attention reads them (ModernBERT: through its `attn_norm`)."""
    import interlayer

    encoder_builder(family, "base")(str(tmp_path / "stock"))
    model, _ = interlayer.convert(str(tmp_path / "stock"), "bridge", identity_init=False)
    base = model.eval()
    layers = base.layers if family == "modernbert" else base.encoder.layer
    target = layers[-1]
    inject = torch.randn(1, 9, TINY_ENCODER["hidden_size"])
    seen = {}

    def fake_bridge(projections, hidden, sources, route_weight, route_index, *rest):
        seen.update(hidden=hidden, sources=sources, route_index=route_index)
        return inject, hidden.new_zeros(())

    target.bridge.forward = fake_bridge
    batch = {k: v[:1, :9] for k, v in pair_batch(family).items() if k != "attention_mask"}
    with torch.no_grad():
        out = base(**batch, output_hidden_states=True)
        h = out.hidden_states[-2]  # the target's input
        read = target.attn_norm if family == "modernbert" else (lambda x: x)
        torch.testing.assert_close(seen["hidden"], read(h))
        source = int(seen["route_index"][0, 0])
        source_read = layers[source + 1].attn_norm if family == "modernbert" else (lambda x: x)
        torch.testing.assert_close(seen["sources"][0, 0], source_read(out.hidden_states[source + 1])[0])
        expected = _stock_layer_with_injection(family, base, target, h, inject)
        if family == "modernbert":
            expected = base.final_norm(expected)
        torch.testing.assert_close(out.last_hidden_state, expected)
        assert not torch.allclose(
            out.last_hidden_state, _stock_layer_with_injection(family, base, target, h, 0 * inject)
        )
