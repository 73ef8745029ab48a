"""The cross-layer bridges on every (encoder family, task) cell, beyond the conformance suite (which runs each family on
its most demanding task, `tests/contract/test_conformance.py`): conversion, identity, training, the loss and remote
code of every cell, the seed's head refused on tokens, and shallow stock checkpoints."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from batches import labels_for, pair_batch, token_labels_for
from stock_checkpoints import FAMILY_CONFIG, STOCK_AUTO, TINY_ENCODER, encoder_builder
from transformers import AutoConfig, AutoModelForSequenceClassification

import interlayer
from interlayer.mechanisms import MECHANISMS
from interlayer.models.modeling_bridge import FAMILIES

TASK_INDEX = {"base": 1, "sequence-classification": 2, "token-classification": 3}
CELLS = [(family, task) for family in FAMILY_CONFIG for task in STOCK_AUTO]
BRIDGE = MECHANISMS["bridge"]
# the options with which the bridge acts on each family: its record's example of the family
FAMILY_ACTIVE = {example.family: example.options for example in BRIDGE.examples}
STATIONARY = BRIDGE.stationary


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
