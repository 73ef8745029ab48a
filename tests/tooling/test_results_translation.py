"""The attention-bridge results recipe (`attention-bridge-numbers`) at its quick scale: it runs through the results
runner, every method of a seed sees the same batches, a rerun reproduces the metrics, and the capacity control adds
about as many parameters as the lin bridge. Metric quality is not asserted (a dozen steps on a tiny model)."""

import csv

import pytest

from interlayer.results import COLUMNS, recipes, run_recipes
from interlayer.results.translation import RECIPE, run


@pytest.fixture(scope="module")
def quick_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    records = run_recipes([RECIPE], scale="quick", out=out, seeds=[0], command="test", progress=False)
    return out, [r for r in records if r["seed"] == 0]  # the reported runs (the tuning runs have seed 1000)


def test_the_recipe_is_registered():
    assert recipes()["attention-bridge-numbers"] is RECIPE
    assert RECIPE.methods == ("none", "none-wide", "lin", "perceiver") and RECIPE.seeds["cpu"] == (0, 1, 2)


def test_quick_runs_write_one_csv_row_per_method_seed_and_metric(quick_records):
    out, records = quick_records
    with open(out / "attention-bridge-numbers.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == COLUMNS
    metrics = {"eval_loss", "zero_shot_loss", "exact_match_trained", "exact_match_zero_shot", "validation_eval_loss"}
    reported = [r for r in rows if r["seed"] == "0"]
    assert {(r["method"], r["metric"]) for r in reported} == {(m, k) for m in RECIPE.methods for k in metrics}
    assert len(reported) == len(RECIPE.methods) * len(metrics)
    tuning = [r for r in rows if r["seed"] != "0"]
    assert {(r["seed"], r["metric"]) for r in tuning} == {("1000", "validation_eval_loss")}
    assert len(tuning) == len(RECIPE.methods) * len(RECIPE.lr_grid)
    assert {r["mechanism"] for r in rows} == {"attention-bridge"}


def test_every_method_of_a_seed_sees_the_same_batches(quick_records):
    _, records = quick_records
    assert len({r["details"]["fingerprint"] for r in records}) == 1
    assert len({r["train_tokens"] for r in records}) == 1


def test_the_capacity_control_trains_as_many_parameters_as_the_lin_bridge(quick_records):
    _, records = quick_records
    by_method = {r["method"]: r for r in records}
    lin, wide, none = by_method["lin"], by_method["none-wide"], by_method["none"]
    assert wide["details"]["params_over_none"] > 0 and wide["details"]["bridge_layers"] == []
    added, lin_added = wide["details"]["params_over_none"], lin["details"]["params_over_none"]
    assert abs(added - lin_added) <= 0.1 * lin_added
    assert abs(wide["trainable_params"] - lin["trainable_params"]) <= 0.1 * lin["trainable_params"]
    assert lin["trainable_params"] - none["trainable_params"] == lin["details"]["params_over_none"]


def test_a_rerun_with_the_same_seed_reproduces_the_metrics(quick_records, tmp_path):
    _, records = quick_records
    first = next(r for r in records if r["method"] == "lin")
    again = run("lin", 0, "quick", tmp_path, lr_scale=first["lr_scale"])
    assert again.metrics == first["metrics"] and again.details["fingerprint"] == first["details"]["fingerprint"]
    assert run("lin", 1, "quick", tmp_path).details["fingerprint"] != first["details"]["fingerprint"]


def test_the_seed_size_runs_where_the_machine_is_in_bf16_autocast():
    """The seed scale names no device (it used to hard-code cuda) and trains in bf16 autocast over float32 weights,
    as the other recipes' seed scales do: a shrunken seed size runs here on the CPU."""
    import dataclasses

    from interlayer.results.translation import SIZES, train_and_evaluate

    assert SIZES["seed"].autocast == "bfloat16"
    tiny = dataclasses.replace(SIZES["seed"], d_model=32, layers=1, heads=2, ffn=64, steps=2, batch=4,
                               bridge_fixed_length=4, bridge_hidden_size=32, bridge_heads=2)  # fmt: skip
    result = train_and_evaluate("lin", 0, tiny, test=False)
    assert result.details["device"] == "cpu" and result.details["steps"] == 2
    assert set(result.metrics) == {"validation_eval_loss"}
