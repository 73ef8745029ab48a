"""The statistics of `interlayer results --report` on made-up numbers with known answers: Student's t, paired
differences by seed, Holm's adjustment, intervals that stay in a metric's range, and verdicts that come from the
paired, adjusted tests and never from whether two intervals overlap. The answers are computed independently here:
by hand from the definitions, and with SciPy where it is installed."""

import csv
import math
import re
import statistics

import pytest

from interlayer.results.core import COLUMNS
from interlayer.results.report import write_report
from interlayer.results.stats import LOG, LOGIT, Interval, holm, interval, paired, t_quantile, t_two_sided_p

# two-sided 95% quantiles of Student's t from printed tables
T_TABLE = {1: 12.706, 2: 4.303, 4: 2.776, 10: 2.228, 30: 2.042}


def test_student_t_matches_the_printed_table_and_scipy():
    for df, quantile in T_TABLE.items():
        assert t_quantile(0.975, df) == pytest.approx(quantile, abs=5e-4)
        assert t_two_sided_p(quantile, df) == pytest.approx(0.05, abs=1e-4)
    assert t_two_sided_p(0.0, 3) == pytest.approx(1.0)
    scipy = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 7, 50):
        for t in (0.3, 1.7, 4.0, 25.0):
            assert t_two_sided_p(t, df) == pytest.approx(2 * scipy.t.sf(t, df), rel=1e-9, abs=1e-15)
        assert t_quantile(0.975, df) == pytest.approx(scipy.t.ppf(0.975, df), rel=1e-9)


def test_a_paired_difference_is_the_t_interval_of_the_differences_by_seed():
    a = {0: 0.43, 1: 0.55, 2: 0.51, 7: 9.0}  # seed 7 has no partner: left out
    b = {0: 0.50, 1: 0.61, 2: 0.58, 3: 0.1}
    result = paired(a, b)
    differences = [-0.07, -0.06, -0.07]
    mean, spread = statistics.fmean(differences), statistics.stdev(differences) / math.sqrt(3)
    assert result.n == 3
    assert result.difference == pytest.approx(mean)
    assert (result.low, result.high) == pytest.approx((mean - 4.303 * spread, mean + 4.303 * spread), abs=1e-4)
    scipy = pytest.importorskip("scipy.stats")
    test = scipy.ttest_rel([0.43, 0.55, 0.51], [0.50, 0.61, 0.58])
    assert result.p == pytest.approx(test.pvalue, rel=1e-9)
    assert (result.low, result.high) == pytest.approx(tuple(test.confidence_interval()), rel=1e-9)


def test_holm_is_the_step_down_adjustment():
    # sorted: 0.005 x4 = 0.02; 0.01 x3 = 0.03; 0.03 x2 = 0.06; 0.04 x1 = 0.04, raised to the running maximum 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    adjusted = holm([0.01, math.nan])
    assert adjusted[0] == pytest.approx(0.01) and math.isnan(adjusted[1])


def test_intervals_stay_in_the_metrics_range():
    # issue 38's examples: perplexities whose plain interval went below zero, accuracies whose went above one
    perplexities = [1370.0, 95000.0, 1970.0]
    plain = statistics.fmean(perplexities) - 4.303 * statistics.stdev(perplexities) / math.sqrt(3)
    assert plain < 0
    logs = [math.log(p) for p in perplexities]
    half = 4.303 * statistics.stdev(logs) / math.sqrt(3)
    result = interval(perplexities, LOG)
    assert result.low > 0
    assert (result.centre, result.low, result.high) == pytest.approx(
        (
            math.exp(statistics.fmean(logs)),
            math.exp(statistics.fmean(logs) - half),
            math.exp(statistics.fmean(logs) + half),
        ),
        rel=1e-3,
    )
    accuracies = [0.9, 1.0, 0.96]  # 1.0 is analysed as 0.999
    logits = [math.log(p / (1 - p)) for p in (0.9, 0.999, 0.96)]
    half = 4.303 * statistics.stdev(logits) / math.sqrt(3)
    result = interval(accuracies, LOGIT)
    assert 0 < result.low < result.high < 1
    expected = [1 / (1 + math.exp(-x)) for x in (statistics.fmean(logits) - half, statistics.fmean(logits) + half)]
    assert (result.low, result.high) == pytest.approx(expected, rel=1e-3)
    assert interval([0.0, 0.0, 0.0], LOGIT) == Interval(0.0, 0.0, 0.0, 3, LOGIT)  # no seed varies: no interval


def write_rows(folder, recipe, mechanism, values, lr_scale=1.0, version=2):
    """A results CSV of `recipe` (its `version`) with `values` = {method: [primary metric by seed]}, each method's
    rate chosen from the sweep (`lr_scale`) or fixed (`lr_scale=""`)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{recipe}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for method, by_seed in values.items():
            for seed, value in enumerate(by_seed):
                writer.writerow(
                    dict(
                        mechanism=mechanism,
                        recipe=recipe,
                        method=method,
                        seed=seed,
                        scale="cpu",
                        trainable_params=1,
                        metric="eval_loss",
                        value=value,
                        train_tokens=1,
                        wall_s=1,
                        peak_rss_mb=1,
                        recipe_version=version,
                        lr_scale=lr_scale,
                        command="made up",
                        revision="abc",
                        machine="none",
                    )  # fmt: skip
                )


def comparison_rows(text, recipe):
    section = text.split(f"## {recipe} ")[1]
    rows = re.findall(r"^\| (\S+) \| (\S+) \| 3 \| [^|]+ \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", section, re.M)
    return {(m, b): (float(p), float(h), verdict.strip()) for m, b, p, h, verdict in rows}


def test_verdicts_come_from_the_paired_adjusted_tests_not_from_overlapping_intervals(tmp_path):
    values = {
        # lin: one seed's data is harder for every method; lin is 0.068 lower on each seed, give or take 0.002.
        # Unpaired, the intervals overlap; paired, lin is clearly lower (p about 2e-4, x4 by Holm).
        "none": [1.000, 1.060, 1.130],
        "lin": [0.932, 0.990, 1.063],
        # perceiver against none-wide: the intervals do not overlap and the paired p is 0.03, but it is the second
        # smallest of the family's 4: x3 by Holm, 0.09, not separated
        "perceiver": [1.000, 1.005, 1.010],
        "none-wide": [1.0635, 1.0535, 1.0435],
    }

    def plain(by_seed):  # the unpaired 95% interval the report used to compare
        half = 4.303 * statistics.stdev(by_seed) / math.sqrt(3)
        return statistics.fmean(by_seed) - half, statistics.fmean(by_seed) + half

    assert plain(values["lin"])[1] > plain(values["none"])[0]  # overlapping
    assert plain(values["perceiver"])[1] < plain(values["none-wide"])[0]  # apart
    write_rows(tmp_path / "out", "attention-bridge-numbers", "attention-bridge", values)
    text = write_report(tmp_path / "out", tmp_path / "report.md")
    found = comparison_rows(text, "attention-bridge-numbers")
    pairs = [("lin", "none"), ("lin", "none-wide"), ("perceiver", "none"), ("perceiver", "none-wide")]
    assert set(found) == set(pairs)
    scipy = pytest.importorskip("scipy.stats")
    raw = [scipy.ttest_rel(values[a], values[b]).pvalue for a, b in pairs]
    order = sorted(range(4), key=lambda i: raw[i])
    adjusted, running = [0.0] * 4, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (4 - rank) * raw[i]))
        adjusted[i] = running
    for (a, b), p, holm_p in zip(pairs, raw, adjusted):
        shown_p, shown_holm, verdict = found[(a, b)]
        assert shown_p == pytest.approx(p, rel=0.05) and shown_holm == pytest.approx(holm_p, rel=0.05)
        lower = statistics.fmean(values[a]) < statistics.fmean(values[b])
        assert verdict == ("not separated" if holm_p >= 0.05 else "better" if lower else "worse"), (a, b)
    assert found[("lin", "none")][2] == "better"
    assert found[("perceiver", "none-wide")][2] == "not separated"
    # methods at fixed rates, not tuned alike: a separated pair is only lower or higher at those rates
    write_rows(tmp_path / "fixed", "attention-bridge-numbers", "attention-bridge", values, lr_scale="")
    fixed = comparison_rows(write_report(tmp_path / "fixed", tmp_path / "fixed.md"), "attention-bridge-numbers")
    assert fixed[("lin", "none")][2] == "lower at these fixed rates"
    assert "better" not in {verdict for _, _, verdict in fixed.values()}


def test_what_is_known_against_old_rows_is_printed_beside_them_only(tmp_path):
    """hc-gsm8k's version-1 rows (fixed rates) are reversed by an outside rerun that tuned LoRA: the report says so
    beside them, in the summary and the recipe's section, and no longer once the rows are of the current version."""
    from interlayer.results import recipes

    known = recipes()["hc-gsm8k"].superseded
    assert "2.284" in known and "2.439" in known
    values = {"seed": [2.43, 2.44, 2.45], "lora": [2.44, 2.45, 2.46]}
    write_rows(tmp_path / "old", "hc-gsm8k", "hyper-connections", values, lr_scale="", version=1)
    old = write_report(tmp_path / "old", tmp_path / "old.md")
    assert old.count(known.rstrip(".")) == 3  # the summary, the version banner and the section's verdict line
    assert "`seed` lower at these fixed rates" in old and "`seed` better" not in old
    write_rows(tmp_path / "new", "hc-gsm8k", "hyper-connections", values)
    assert known.rstrip(".") not in write_report(tmp_path / "new", tmp_path / "new.md")


def test_a_rate_chosen_at_an_end_of_the_sweep_is_said_so():
    """A method whose best validation value is at the largest (or smallest) multiplier of the sweep was compared at
    the best rate tried, not at its best rate: the sweep table says so, naming the method and the end; a method
    chosen inside the sweep is not named."""
    from interlayer.results import recipes
    from interlayer.results.report import tuning_table

    recipe = recipes()["hc-gsm8k"]

    def trials(*losses):  # validation losses at x1, x10, x100, as the CSV keys them
        return {str(x): {"validation_eval_loss": v} for x, v in zip(recipe.lr_grid, losses)}

    made_up = {"lora": trials(2.5, 2.3, 1.9), "full": trials(2.0, 1.8, 2.2), "last-layers": trials(2.1, 2.4, 2.6)}
    text = "\n".join(tuning_table(recipe, made_up))
    ends = re.findall(r"Chosen at an end of the sweep: (.*)\. A rate beyond", text)
    assert ends == ["lora (×100, the largest), last-layers (×1, the smallest)"], text
    assert "Chosen at an end" not in "\n".join(tuning_table(recipe, {"full": made_up["full"]}))
