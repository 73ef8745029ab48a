"""The zoo's conformance suite on the cross-layer bridge models: every family, on its most demanding task (one
suite each), and a lighter check of every (family, task) cell: conversion, identity, training and remote code."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from batches import labels_for, pair_batch, token_labels_for
from conformance_cases import BERT_ACTIVE, FAMILY_ACTIVE, LORA_TARGETS, ROBERTA_ACTIVE
from stock_checkpoints import (
    FAMILY_CONFIG,
    STOCK_AUTO,
    TINY_ENCODER,
    build_gpt2,
    build_stock_bert,
    build_stock_roberta,
    encoder_builder,
)
from transformers import AutoConfig, AutoModelForSequenceClassification

import interlayer
from interlayer import BertBridgeForSequenceClassification, RobertaBridgeForSequenceClassification
from interlayer.models.modeling_bridge import FAMILIES
from interlayer.testing import ConformanceCase, ConformanceSuite

BRIDGE_CONFIG_ERRORS = [
    (dict(route_topk=0), r"route_topk.*>= 1.*got 0"),
    (dict(route_last_n=0), r"route_last_n"),
    (dict(route_temp=0.0), r"route_temp.*> 0"),
    (dict(route_pool="max"), r"route_pool.*mean.*cls"),
    (dict(bridge_mode="both"), r"bridge_mode"),
    (dict(route_estimator="gumbel"), r"route_estimator"),
    (dict(route_placement="before"), r"route_placement"),
    (dict(route_placement="pre_norm"), r"straight_through.*cannot train the router.*pre_norm.*route_topk=1"),
    (dict(hdim_scorer="mlp"), r"hdim_scorer"),
    (dict(hdim_value_fusion="sum"), r"hdim_value_fusion"),
    (dict(hdim_dim=0), r"hdim_dim"),
    (dict(hdim_chunk_size=0), r"hdim_chunk_size"),
    (dict(hdim_token_temp=0.0), r"hdim_token_temp"),
    (dict(bridge_dropout=1.5), r"bridge_dropout.*<= 1"),
    (dict(gate_activation="softplus", gate_init_attn=0.0), r"gate_init_attn.*> 0"),
    (dict(classifier_head="seed"), r"identity_init=True.*classifier_head='seed'"),
    (dict(num_hidden_layers=1), r"num_hidden_layers.*>= 2"),
]
ENCODER_ONLY_ERROR = (dict(is_decoder=True), r"encoder-only")
FAMILY_CONFIG_ERRORS = {"deberta-v2": [(dict(attention_head_size=4), r"attention_head_size.*DeBERTa-v2.*got 4")]}
TASK_INDEX = {"base": 1, "sequence-classification": 2, "token-classification": 3}
CELLS = [(family, task) for family in FAMILY_CONFIG for task in STOCK_AUTO]
# the HDIM scorer's last bias is added to every alignment logit of a softmax: its gradient is zero by construction
STATIONARY = ["hdim.scorer.2.bias"]


class TestRobertaBridgeConformance(ConformanceSuite):
    def make_case(self):
        return ConformanceCase(
            build_stock=build_stock_roberta,
            model_class=RobertaBridgeForSequenceClassification,
            auto_class_name="AutoModelForSequenceClassification",
            active_options=ROBERTA_ACTIVE,
            make_batch=lambda: pair_batch("roberta"),
            labels=labels_for,
            wrong_architecture=build_gpt2,
            config_errors=[({**TINY_ENCODER, **o}, p) for o, p in BRIDGE_CONFIG_ERRORS + [ENCODER_ONLY_ERROR]],
            lora_targets=["query", "value"],
            stationary=STATIONARY,
        )


class TestBertBridgeConformance(ConformanceSuite):
    def make_case(self):
        return ConformanceCase(
            build_stock=build_stock_bert,
            model_class=BertBridgeForSequenceClassification,
            auto_class_name="AutoModelForSequenceClassification",
            active_options=BERT_ACTIVE,
            make_batch=lambda: pair_batch("bert"),
            labels=labels_for,
            wrong_architecture=build_gpt2,
            config_errors=[({**TINY_ENCODER, **o}, p) for o, p in BRIDGE_CONFIG_ERRORS + [ENCODER_ONLY_ERROR]],
            lora_targets=["query", "value"],
            stationary=STATIONARY,
        )


def token_classification_case(family: str) -> ConformanceCase:
    """The suite's case for a family's token-classification cell (every token's logits are compared)."""
    errors = (
        BRIDGE_CONFIG_ERRORS
        + FAMILY_CONFIG_ERRORS.get(family, [])
        + ([ENCODER_ONLY_ERROR] if "is_decoder" in FAMILIES[family][0].__dataclass_fields__ else [])
    )
    stock_options = {k: v for k, v in FAMILY_CONFIG[family].items() if k != "model_type"}
    return ConformanceCase(
        build_stock=encoder_builder(family, "token-classification"),
        model_class=FAMILIES[family][TASK_INDEX["token-classification"]],
        auto_class_name="AutoModelForTokenClassification",
        # the compiled HDIM scorer (the default) is a function of tensors alone, the same in every family: the two
        # sequence-classification classes run it through the suite, these four the eager scorer, which spares the
        # suite a compilation per input kind and family
        active_options={**FAMILY_ACTIVE[family], "hdim_fused": False},
        make_batch=lambda: pair_batch(family),
        labels=token_labels_for,
        wrong_architecture=build_gpt2,
        config_errors=[({**TINY_ENCODER, **stock_options, **o}, p) for o, p in errors],
        lora_targets=LORA_TARGETS.get(family, ["query", "value"]),
        stationary=STATIONARY,
    )


class TestXLMRobertaBridgeConformance(ConformanceSuite):
    def make_case(self):
        return token_classification_case("xlm-roberta")


class TestElectraBridgeConformance(ConformanceSuite):
    def make_case(self):
        return token_classification_case("electra")


class TestDebertaV2BridgeConformance(ConformanceSuite):
    def make_case(self):
        return token_classification_case("deberta-v2")


class TestModernBertBridgeConformance(ConformanceSuite):
    def make_case(self):
        return token_classification_case("modernbert")


def _output_name(task):
    return "last_hidden_state" if task == "base" else "logits"


@pytest.mark.parametrize("family,task", CELLS)
def test_cell_converts_equals_stock_and_trains(tmp_path, family, task):
    """Every (family, task) cell: `interlayer.convert` loads every stock weight and leaves none unused, the converted
    model computes the stock outputs (padded and unpadded batch), and one Trainer step with the bridge active moves
    every bridge parameter (but the stationary scorer bias)."""
    from transformers import Trainer, TrainingArguments

    folder = str(tmp_path / "stock")
    stock = encoder_builder(family, task)(folder).eval()
    model, report = interlayer.convert(folder, "bridge")
    assert type(model) is FAMILIES[family][TASK_INDEX[task]]
    assert report.new_mechanism_keys and not report.unexpected_keys and not report.new_head_keys
    assert set(report.missing_keys) == set(report.new_mechanism_keys), report.missing_keys
    batch = pair_batch(family)
    unpadded = {k: v for k, v in batch.items() if k != "attention_mask"}
    model.eval()
    with torch.no_grad():
        for inputs in (batch, unpadded):
            expected = getattr(stock(**inputs), _output_name(task))
            torch.testing.assert_close(getattr(model(**inputs), _output_name(task)), expected)
    if task == "base":
        return  # a base model has no loss; its layers train in the task cells
    torch.manual_seed(0)
    model, _ = interlayer.convert(folder, "bridge", **FAMILY_ACTIVE[family])
    labels = (token_labels_for if task == "token-classification" else labels_for)(batch)
    examples = [{**{k: v[i] for k, v in batch.items()}, "labels": labels[i]} for i in range(len(labels))]
    before = {
        n: p.detach().clone()
        for n, p in model.named_parameters()
        if "bridge" in n and not n.endswith(tuple(STATIONARY))
    }
    args = TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        per_device_train_batch_size=len(examples),
        max_steps=1,
        learning_rate=1e-2,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    Trainer(model=model.train(), args=args, train_dataset=examples).train()
    unchanged = [n for n, p in model.named_parameters() if n in before and torch.equal(p, before[n])]
    assert not unchanged, f"bridge parameters not trained: {unchanged}"


def test_every_cell_reloads_from_remote_code_in_a_fresh_process(tmp_path):
    """Every cell, converted with the bridge active and saved, loads in one fresh interpreter without `interlayer`
    through its Auto class (`trust_remote_code=True`, offline) and reproduces the outputs."""
    jobs = []
    for family, task in CELLS:
        folder = tmp_path / f"{family}-{task}"
        encoder_builder(family, task)(str(folder / "stock"))
        torch.manual_seed(0)
        model, report = interlayer.convert(str(folder / "stock"), "bridge", **FAMILY_ACTIVE[family])
        model.eval().save_pretrained(str(folder / "bridged"))
        batch = pair_batch(family)
        with torch.no_grad():
            torch.save(getattr(model(**batch), _output_name(task)), folder / "expected.pt")
        torch.save(batch, folder / "batch.pt")
        jobs.append((str(folder), report.entry.auto_class.__name__, _output_name(task)))
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["interlayer"] = None  # the package must not be needed
        import torch, transformers
        for folder, auto_class, output in {jobs!r}:
            model = getattr(transformers, auto_class).from_pretrained(folder + "/bridged", trust_remote_code=True)
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            with torch.no_grad():
                got = getattr(model.eval()(**torch.load(folder + "/batch.pt")), output)
            torch.testing.assert_close(got, torch.load(folder + "/expected.pt"), msg=lambda m: f"{{folder}}: {{m}}")
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PYTHONPATH": ""}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIG))
def test_token_classification_refuses_the_seed_head(tmp_path, family):
    """The seed's head classifies the first token, so a token classifier refuses it, naming the field and value."""
    folder = str(tmp_path / "stock")
    encoder_builder(family, "token-classification")(folder)
    with pytest.raises(ValueError, match=r"classifier_head='seed'.*ForTokenClassification takes only"):
        interlayer.convert(folder, "bridge", classifier_head="seed", identity_init=False)


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("family", sorted(FAMILY_CONFIG))
def test_shallow_stock_checkpoints_convert_with_the_default_targets(tmp_path, family, layers):
    """The default `route_last_n` (the seed's 4) never makes a stock checkpoint unconvertible: in a model of fewer
    layers every layer but the first is a target (j > 0). The conversion computes the stock outputs, the bridge acts
    when active, and an explicit `route_last_n` above the number of layers is still refused, naming it."""
    options = dict(FAMILY_CONFIG[family])
    config = AutoConfig.for_model(options.pop("model_type"), **{**TINY_ENCODER, "num_hidden_layers": layers}, **options)
    torch.manual_seed(0)
    stock = AutoModelForSequenceClassification.from_config(config).eval()
    folder = str(tmp_path / "stock")
    stock.save_pretrained(folder)
    model, report = interlayer.convert(folder, "bridge")
    assert model.config.bridge_target_layers == list(range(1, layers))
    batch = pair_batch(family)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(**batch).logits, stock(**batch).logits)
    torch.manual_seed(0)
    active, _ = interlayer.convert(folder, "bridge", **FAMILY_ACTIVE[family])
    with torch.no_grad():
        logits = active.eval()(**batch).logits
    assert torch.isfinite(logits).all() and (logits - stock(**batch).logits).abs().max() > 1e-6
    with pytest.raises(ValueError, match=rf"`route_last_n` must be >= 1 and <= {layers}, got {layers + 1}"):
        interlayer.convert(folder, "bridge", route_last_n=layers + 1)


@pytest.mark.parametrize("family,task", [cell for cell in CELLS if cell[1] != "base"])
def test_cell_loss_is_the_stock_loss_with_every_label_ignored(tmp_path, family, task):
    """Every classifier cell's task loss is the stock class's: for real labels, for a batch whose labels are all
    ignored (-100: 0.0 for DeBERTa-v2's sequence classifier, which leaves negative labels out; NaN for the others,
    a mean over no label) and, where the stock class takes them, for soft labels (DeBERTa-v2)."""
    folder = str(tmp_path / "stock")
    stock = encoder_builder(family, task)(folder).eval()
    model, _ = interlayer.convert(folder, "bridge")
    batch = pair_batch(family)
    labels = (token_labels_for if task == "token-classification" else labels_for)(batch)
    cases = {"real labels": labels, "every label ignored": torch.full_like(labels, -100)}
    if family == "deberta-v2" and task == "sequence-classification":
        cases["soft labels"] = torch.rand(len(labels), TINY_ENCODER["num_labels"]).softmax(-1)
    model.eval()
    for name, given in cases.items():
        with torch.no_grad():
            got = model(**batch, labels=given).task_loss
            expected = stock(**batch, labels=given).loss
        torch.testing.assert_close(got, expected, equal_nan=True, msg=lambda m: f"{name}: {m}")
