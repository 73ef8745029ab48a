"""`docs/results.md` from the CSVs: per recipe, each method's mean and 95% interval over seeds (on a scale where the
interval stays in the metric's range) beside its trainable parameters, its share of the budget, wall time and peak
memory; the learning-rate sweep each method was tuned with; a plot; and the comparisons the recipe declares in
advance, as paired differences by seed with Holm-adjusted p-values, worded from those alone (no number in the report
is typed by hand)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from .budget import BUDGET_TOLERANCE, budget_gap
from .core import TUNING_SEED, choose_lr_scale, read_csvs
from .stats import LEVEL, Interval, Paired, holm, interval, paired, scale_of

ALPHA = 0.05


def number(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}g}"


def fmt(stats: Interval) -> str:
    """A cell: `mean ± half-width` on the identity scale; `centre [low, high]` where the interval was computed on
    the log or logit scale and transformed back (it is not symmetric there)."""
    if stats.n < 2:
        return f"{number(stats.centre)} (one seed)"
    if stats.scale.kind == "identity":
        return f"{number(stats.centre)} ± {(stats.high - stats.low) / 2:.2g}"
    return f"{number(stats.centre)} [{number(stats.low)}, {number(stats.high)}]"


def fmt_difference(result: Paired) -> str:
    """A paired difference in the metric's terms: a difference (identity scale), a ratio (log scale) or an odds
    ratio (logit scale), with its 95% interval."""
    if result.n == 0:
        return "no common seed"
    kind = result.scale.kind
    if kind == "identity":
        text, interval_text = f"{result.difference:+.3g}", f"[{result.low:+.3g}, {result.high:+.3g}]"
    else:
        prefix = "odds ×" if kind == "logit" else "×"
        text = f"{prefix}{math.exp(result.difference):.3g}"
        interval_text = f"[{math.exp(result.low):.3g}, {math.exp(result.high):.3g}]"
    return text if result.n < 2 else f"{text} {interval_text}"


@dataclass
class Entry:
    """One method's final runs: every metric by seed, and what each run was."""

    metrics: dict
    trainable: set
    budgets: set
    wall: dict
    peak: dict
    lr_scales: set
    versions: set
    meta: dict


def row_version(row: dict) -> int:
    return int(row.get("recipe_version") or 1)


def summaries(rows: list[dict]) -> dict:
    """{recipe: {method: Entry}} over the final runs (the tuning runs, at `TUNING_SEED`, are left out)."""
    out: dict = {}
    for row in rows:
        if int(row["seed"]) == TUNING_SEED:
            continue
        entry = out.setdefault(row["recipe"], {}).setdefault(
            row["method"], Entry({}, set(), set(), {}, {}, set(), set(), row)
        )
        entry.metrics.setdefault(row["metric"], {})[int(row["seed"])] = float(row["value"])
        entry.trainable.add(int(row["trainable_params"]))
        if row.get("budget"):
            entry.budgets.add((int(row["budget"]), int(row["budget_used"])))
        entry.wall[row["seed"]] = float(row["wall_s"])
        entry.peak[row["seed"]] = float(row["peak_rss_mb"])
        entry.lr_scales.add(row.get("lr_scale") or "")
        entry.versions.add(row_version(row))
    return out


def tuning_runs(rows: list[dict]) -> dict:
    """{recipe: {method: {lr_scale: {metric: value}}}} of the tuning runs."""
    out: dict = {}
    for row in rows:
        if int(row["seed"]) == TUNING_SEED:
            trial = out.setdefault(row["recipe"], {}).setdefault(row["method"], {}).setdefault(row["lr_scale"], {})
            trial[row["metric"]] = float(row["value"])
    return out


def lr_text(entry: Entry) -> str:
    scales = sorted(s for s in entry.lr_scales if s)
    if not scales:
        return "fixed"
    return "/".join(f"×{float(s):g}" for s in scales)


def budget_text(entry: Entry) -> str:
    """The share of its budget a baseline trains, flagged where it is off by more than the tolerance."""
    parts = []
    for budget, used in sorted(entry.budgets):
        flag = (
            " (short)" if budget_gap(used, budget) and used < budget else " (over)" if budget_gap(used, budget) else ""
        )
        parts.append(f"{used / budget:.1%}{flag}")
    return "/".join(parts)


def is_sweep(methods) -> bool:
    return all("@" in m or m == "controller" for m in methods)


def plot_methods(recipe, methods: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    names = [m for m in recipe.methods if m in methods and recipe.primary in methods[m].metrics]
    stats = [interval(list(methods[m].metrics[recipe.primary].values()), scale_of(recipe.primary)) for m in names]
    fig = Figure(figsize=(6.4, 0.45 * len(names) + 1.2))
    ax = fig.add_subplot()
    colours = ["tab:grey" if m in recipe.baselines else "tab:blue" for m in names]
    for y, (s, colour) in enumerate(zip(stats, colours)):
        error = [[0], [0]] if s.n < 2 else [[s.centre - s.low], [s.high - s.centre]]
        ax.errorbar(s.centre, y, xerr=error, fmt="o", color=colour, capsize=4)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel(
        f"{recipe.primary} ({'higher' if recipe.higher_is_better else 'lower'} is better; mean, 95% interval)"
    )
    ax.set_title(f"{recipe.name}: mechanism (blue) against baselines (grey)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_sweep(recipe, methods: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    by_strategy: dict[str, list] = {}
    for name, entry in methods.items():
        metrics = entry.metrics
        if recipe.primary not in metrics or "heads_pruned" not in metrics:
            continue
        strategy = name.split("@")[0] + ("+ft" if name.endswith("+ft") else "")
        stats = interval(list(metrics[recipe.primary].values()), scale_of(recipe.primary))
        by_strategy.setdefault(strategy, []).append((statistics.fmean(metrics["heads_pruned"].values()), stats))
    for strategy, points in sorted(by_strategy.items()):
        points.sort(key=lambda p: p[0])
        xs = [x for x, _ in points]
        centres = [s.centre for _, s in points]
        errors = [
            [0 if s.n < 2 else s.centre - s.low for _, s in points],
            [0 if s.n < 2 else s.high - s.centre for _, s in points],
        ]
        ax.errorbar(xs, centres, yerr=errors, marker="o", capsize=3, label=strategy)
    ax.set_xlabel("share of heads pruned")
    ax.set_ylabel(f"{recipe.primary} (mean, 95% interval)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title(recipe.name, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def recipe_head(recipe) -> list[str]:
    """What the recipe is: its methods and what each trains, its three scales, what it does not measure."""
    lines = [f"## {recipe.name} ({recipe.mechanism})", "", recipe.summary.rstrip(".") + ".", ""]
    lines += [f"- `{scale}` scale: {note.rstrip('.')}." for scale, note in recipe.scale_notes.items()]
    lines += ["", "| method | what trains |", "| --- | --- |"]
    lines += [f"| {name} | {recipe.abouts.get(name, '')} |" for name in recipe.methods]
    lines.append("")
    if recipe.lr_grid:
        grid = ", ".join(f"×{m:g}" for m in recipe.lr_grid)
        lines += [
            f"Learning rates: every method runs the same sweep of its learning rates ({grid} the rates above) once, "
            f"with seed {TUNING_SEED}, and keeps the one with the best validation {recipe.primary} (a validation "
            "split apart from the held-out set the table reports); the reported seeds then run at that rate.",
            "",
        ]
    elif not is_sweep(recipe.methods):
        lines += [
            "Learning rates: fixed per method, as above; the methods were not tuned alike, so a comparison says which "
            "did better at these rates, not which method is better.",
            "",
        ]
    if recipe.notes:
        lines += [recipe.notes, ""]
    return lines


def version_banner(recipe, methods: dict) -> list[str]:
    """Where rows were recorded with an earlier version of the recipe: which, and what has changed since."""
    old = sorted({v for entry in methods.values() for v in entry.versions if v < recipe.version})
    if not old:
        return []
    versions = ", ".join(str(v) for v in old)
    return [
        f"**These rows were recorded with version {versions} of this recipe; the code above is version "
        f"{recipe.version}.** What changed: {recipe.changes.rstrip('.')}. They are shown as recorded, and compared "
        "as recorded: rerun the recipe to replace them." + (f" {recipe.superseded}" if recipe.superseded else ""),
        "",
    ]


def mean_cell(entry: Entry, metric: str) -> str:
    """A method's `metric` over its seeds, as a table cell (`fmt` of its interval on the metric's scale)."""
    return fmt(interval(list(entry.metrics[metric].values()), scale_of(metric)))


def results_table(recipe, methods: dict) -> list[str]:
    first = next(iter(methods.values())).meta
    lines = [f"Results at the `{first['scale']}` scale:", ""]
    metrics = sorted({m for entry in methods.values() for m in entry.metrics} - {"steps"})
    metrics = [recipe.primary] + [m for m in metrics if m != recipe.primary]
    with_budget = any(entry.budgets for entry in methods.values())
    head = "| method | lr | trainable params | " + ("of budget | " if with_budget else "") + "seeds | "
    lines.append(head + " | ".join(metrics) + " | wall s | peak MB |")
    lines.append(
        "| --- | --- | ---: | "
        + ("---: | " if with_budget else "")
        + "---: | "
        + " | ".join("---:" for _ in metrics)
        + " | ---: | ---: |"
    )
    order = [m for m in recipe.methods if m in methods] + sorted(set(methods) - set(recipe.methods))
    for name in order:
        entry = methods[name]
        cells = [mean_cell(entry, m) if m in entry.metrics else "" for m in metrics]
        trainable = "/".join(f"{n:,}" for n in sorted(entry.trainable))
        budget = (budget_text(entry) + " | ") if with_budget else ""
        wall = statistics.fmean(entry.wall.values())
        peak = statistics.fmean(entry.peak.values())
        seeds = len(next(iter(entry.metrics.values())))
        lines.append(
            f"| {name} | {lr_text(entry)} | {trainable} | {budget}{seeds} | "
            + " | ".join(cells)
            + f" | {wall:.0f} | {peak:.0f} |"
        )
    lines.append("")
    if with_budget:
        lines += [
            "`of budget`: the parameters a baseline trains against the mechanism's budget (the task head not "
            f"counted); flagged where it is off by more than {BUDGET_TOLERANCE:.0%}: LoRA moves in whole ranks of "
            "whole modules, and the top tensors run out on a small model.",
            "",
        ]
    return lines


def tuning_table(recipe, trials: dict) -> list[str]:
    """Each method's validation metric at every learning-rate multiplier of the sweep, and the one chosen."""
    if not trials:
        return []
    key = f"validation_{recipe.primary}"
    scales = sorted({s for method in trials.values() for s in method}, key=float)
    lines = [
        f"Learning-rate sweep (seed {TUNING_SEED}, validation {recipe.primary}; the chosen multiplier in bold):",
        "",
        "| method | " + " | ".join(f"×{float(s):g}" for s in scales) + " |",
        "| --- | " + " | ".join("---:" for _ in scales) + " |",
    ]
    at_an_end = []
    for method in [m for m in recipe.methods if m in trials]:
        best = choose_lr_scale(recipe, {float(x): m for x, m in trials[method].items()})
        cells = []
        for s in scales:
            value = trials[method].get(s, {}).get(key)
            text = "diverged" if s in trials[method] and value is None else "" if value is None else number(value)
            cells.append(f"**{text}**" if float(s) == best else text)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
        if len(scales) > 1 and best in (float(scales[0]), float(scales[-1])):
            at_an_end.append(f"{method} (×{best:g}, the {'largest' if best == float(scales[-1]) else 'smallest'})")
    if at_an_end:
        lines += [
            "",
            f"Chosen at an end of the sweep: {', '.join(at_an_end)}. A rate beyond it was not tried, so these "
            "methods are compared at the best rate tried, which may not be their best rate.",
        ]
    return lines + [""]


@dataclass
class Comparison:
    recipe: str
    method: str
    baseline: str
    result: Paired
    family: str
    tuned: bool = True
    """False where the two ran at fixed learning rates that were not tuned alike: a separated pair is then only
    'lower' or 'higher' at those rates, never 'better' or 'worse'."""
    adjusted: float = math.nan

    def verdict(self, higher_is_better: bool) -> str:
        if self.result.n < 2 or math.isnan(self.adjusted):
            return "not separated (fewer than two common seeds)"
        if self.adjusted >= ALPHA:
            return "not separated"
        if not self.tuned:
            return f"{'higher' if self.result.difference > 0 else 'lower'} at these fixed rates"
        ahead = (self.result.difference > 0) == higher_is_better
        return "better" if ahead else "worse"


def comparisons(known: dict, grouped: dict) -> list[Comparison]:
    """Every comparison the recipes declare, paired by seed on the primary metric's scale, with Holm's adjustment
    over its family: the training recipes' comparisons together (the report's headline claims), and each pruning
    sweep's own."""
    out = []
    for name, recipe in known.items():
        methods = grouped.get(name, {})
        family = name if is_sweep(recipe.methods) else "headline"
        for method, baseline in recipe.comparisons:
            if method in methods and baseline in methods and recipe.primary in methods[method].metrics:
                scale = scale_of(recipe.primary)
                a, b = methods[method].metrics[recipe.primary], methods[baseline].metrics.get(recipe.primary, {})
                tuned = is_sweep(recipe.methods) or all(
                    s for m in (method, baseline) for s in methods[m].lr_scales
                )  # a pruning sweep trains nothing to tune
                out.append(Comparison(name, method, baseline, paired(a, b, scale), family, tuned))
    for family in {c.family for c in out}:
        members = [c for c in out if c.family == family]
        for c, adjusted in zip(members, holm([c.result.p for c in members])):
            c.adjusted = adjusted
    return out


def p_text(p: float) -> str:
    return "" if math.isnan(p) else f"{p:.2g}" if p >= 1e-4 else "<1e-4"


def comparison_table(recipe, found: list[Comparison]) -> list[str]:
    if not found:
        return []
    lines = [
        f"Declared comparisons ({recipe.primary}; paired by seed; the difference is the first method's minus the "
        "second's, a ratio on the log scale, an odds ratio on the logit scale; Holm-adjusted over "
        f"{'this sweep' if is_sweep(recipe.methods) else 'the headline comparisons of every training recipe'}):",
        "",
        "| method | against | seeds | difference (95% interval) | p | Holm p | verdict |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for c in found:
        lines.append(
            f"| {c.method} | {c.baseline} | {c.result.n} | {fmt_difference(c.result)} | {p_text(c.result.p)} | "
            f"{p_text(c.adjusted)} | {c.verdict(recipe.higher_is_better)} |"
        )
    return lines + [""]


def verdict_line(recipe, methods: dict, found: list[Comparison]) -> str:
    """The recipe's declared comparisons in one paragraph, grouped by the method compared against."""
    direction = "higher" if recipe.higher_is_better else "lower"
    head = f"**{recipe.name}** ({recipe.mechanism}; {recipe.primary}, {direction} is better)"
    if any(v < recipe.version for entry in methods.values() for v in entry.versions):
        changed = recipe.changes.rstrip(".")
        head += f" [rows recorded before version {recipe.version} of the recipe, which changed: {changed}]"
        if recipe.superseded:
            head += f" [{recipe.superseded.rstrip('.')}]"
    if not is_sweep(recipe.methods) and all(not s for entry in methods.values() for s in entry.lr_scales):
        head += " [at fixed learning rates, not tuned alike]"
    if not found:
        return f"{head}: no declared comparison has runs yet."
    groups: dict[str, list[str]] = {}
    for c in found:
        text = f"`{c.method}` {c.verdict(recipe.higher_is_better)} ({fmt_difference(c.result)}"
        text += f", Holm p {p_text(c.adjusted)})" if not math.isnan(c.adjusted) else ")"
        groups.setdefault(c.baseline, []).append(text)
    parts = []
    for baseline, texts in groups.items():
        entry = methods[baseline]
        flags = [budget_gap(used, budget) for budget, used in entry.budgets]
        note = f" (trains {'; '.join(f for f in flags if f)})" if any(flags) else ""
        parts.append(f"against `{baseline}`{note}: " + "; ".join(texts))
    return f"{head}: " + ". ".join(parts) + "."


def count(n: int) -> str:
    """A parameter count in a summary cell: 930, 69,180, 1.11M, 135M."""
    return f"{n:,}" if n < 100_000 else f"{n / 1e6:.3g}M"


def summary_table(known: dict, grouped: dict, found: list[Comparison]) -> list[str]:
    """The training recipes' declared comparisons (`found`'s headline family) in one table: the method's and its
    baseline's means over seeds, the paired difference with its interval, the Holm-adjusted p and the verdict."""
    lines = [
        "| recipe | metric | method | trainable | mean | against | its mean | difference (95% interval) | Holm p | "
        "verdict |",
        "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    shown = None
    for c in found:
        if c.family != "headline":
            continue
        recipe, methods = known[c.recipe], grouped[c.recipe]
        name = metric = ""
        if c.recipe != shown:
            shown = c.recipe
            name = c.recipe + ("" if c.tuned else " (fixed rates)")
            metric = f"{recipe.primary}, {'higher' if recipe.higher_is_better else 'lower'} is better"
        trainable = "/".join(count(n) for n in sorted(methods[c.method].trainable))
        lines.append(
            f"| {name} | {metric} | {c.method} | {trainable} | {mean_cell(methods[c.method], recipe.primary)} | "
            f"{c.baseline} | {mean_cell(methods[c.baseline], recipe.primary)} | "
            f"{fmt_difference(c.result)} | {p_text(c.adjusted)} | {c.verdict(recipe.higher_is_better)} |"
        )
    return lines


def load(out: Path) -> tuple[list[dict], dict, dict, dict]:
    """`out`'s CSV rows, the recipes, their reported runs (`summaries`) and tuning runs (`tuning_runs`); rows of a
    recipe that no longer exists are an error, not left out of a table."""
    from . import recipes

    rows = read_csvs(out)
    known = recipes()
    grouped = summaries(rows)
    trials = tuning_runs(rows)
    unknown = sorted((set(grouped) | set(trials)) - set(known))
    if unknown:
        raise ValueError(f"{out} holds rows of unknown recipes {unknown}; the recipes: {', '.join(known)}")
    return rows, known, grouped, trials


def summary_markdown(out: Path) -> str:
    """`summary_table` of `out`'s CSVs, as the README carries it (`interlayer results --summary`)."""
    _, known, grouped, _ = load(out)
    return "\n".join(summary_table(known, grouped, comparisons(known, grouped))) + "\n"


def write_report(out: Path, path: Path) -> str:
    """Write the report to `path` (markdown): every recipe, with the results `out`'s CSVs hold for it and their plots
    (in `img/` beside `path`); returns the markdown."""
    rows, known, grouped, trials = load(out)
    found = comparisons(known, grouped)
    images = path.parent / "img"
    body, verdicts = [], []
    for name, recipe in known.items():
        body += recipe_head(recipe)
        methods = grouped.get(name)
        if not methods:
            body += ["No run of this recipe is recorded yet.", ""]
            continue
        mine = [c for c in found if c.recipe == name]
        images.mkdir(parents=True, exist_ok=True)
        image = f"results-{name}.png"
        (plot_sweep if is_sweep(methods) else plot_methods)(recipe, methods, images / image)
        body += version_banner(recipe, methods)
        body += results_table(recipe, methods) + tuning_table(recipe, trials.get(name, {}))
        body += [f"![{name}](img/{image})", ""] + comparison_table(recipe, mine)
        verdict = verdict_line(recipe, methods, mine)
        body += [verdict, ""]
        verdicts.append(f"- {verdict}")
    records = {(r["recipe"], r["method"], r["seed"], r.get("lr_scale", "")): r for r in rows}.values()
    head = [
        "# Results",
        "",
        f"Generated by `interlayer results --report` from the CSVs in `{out}/`; do not edit by hand. "
        "Every method of a recipe starts from the same stock checkpoint and trains on the same batches in the same "
        "order for the same steps with the same seeds; LoRA and the top tensors train as many parameters as the "
        "mechanism adds, or as near as they can (the `of budget` column; a task head, where there is one, trains in "
        f"every method and is counted in `trainable params`). Values are means over seeds with their {LEVEL:.0%} "
        "interval (Student's t), computed where the interval stays in the metric's range: losses as they are "
        "(`mean ± half-width`); perplexity and time ratios on the log scale, shares (accuracy, exact match) on the "
        "logit scale (`centre [low, high]`, transformed back; the centre is the geometric mean, or the share of the "
        "mean logit). Methods are compared only where a recipe declares the comparison in advance (listed under "
        "each recipe): the mechanism's methods against LoRA, the top tensors and full fine-tuning, or a pruning "
        "strategy against random pruning. Each comparison is paired by seed (every method of a seed sees the same "
        "data): the mean difference on the metric's scale, its 95% t interval and the paired t test's p-value, "
        "Holm-adjusted over its family (every training recipe's comparisons together; each pruning sweep's own). A "
        f"verdict says 'better' or 'worse' only where the adjusted p is below {ALPHA} and both methods' learning "
        "rates came from the same sweep; rows recorded at fixed rates that were not tuned alike say only 'lower' or "
        "'higher at these fixed rates'. Whether two methods' own intervals overlap decides nothing. `wall s` is "
        "each run's time including its conversion and evaluation; "
        "`peak MB` is how far the process's resident memory rose above what it held when the run started: the runs "
        "of one command share a process, so memory an earlier run freed and the allocator kept hides part of a "
        "later run's peak (compare memory with `interlayer bench` and docs/costs.md instead).",
        "",
    ]
    if rows:
        wall = sum(float(r["wall_s"]) for r in records)
        revisions = sorted({r["revision"] for r in rows})
        dirty = [r for r in revisions if r.endswith("+changes")]
        head += [
            f"Commands: {'; '.join(sorted({'`' + r['command'] + '`' for r in rows}))}. "
            f"Revisions: {', '.join(revisions)}"
            + (
                f" ({', '.join(dirty)}: recorded from a checkout with uncommitted changes, so their code is not "
                "exactly any commit)"
                if dirty
                else ""
            )
            + f". Machine: {'; '.join(sorted({r['machine'] for r in rows}))}. "
            f"Wall time of all runs: {wall / 60:.0f} min.",
            "",
        ]
    head += [
        "## Running it",
        "",
        "```",
        "interlayer results --quick --out /tmp/results      # every recipe on tiny models in minutes (in CI too)",
        "interlayer results --out results --work runs/results-work --report docs/results.md   # the cpu scale",
        "interlayer results --scale seed --recipes hc-gsm8k --out results-seed   # a seed's own setting, on a GPU",
        "interlayer results --plan --scale seed             # what each recipe runs at a scale, and its cost",
        "interlayer results --summary                       # the README's table of the declared comparisons",
        "```",
        "",
        "A finished run is never repeated (`OUT/runs/<recipe>/<method>/...json`), so an interrupted run resumes "
        "by running the same command again. The seed scale downloads the seeds' models and data from the Hub; it "
        "has not been run for this report (no GPU here).",
        "",
        "## Which mechanism for what",
        "",
    ]
    if any(c.family == "headline" for c in found):
        head += [
            "The training recipes' declared comparisons (the README's table; `fixed rates`: rows recorded before the "
            "recipe's learning-rate sweep, so its methods were not tuned alike):",
            "",
            *summary_table(known, grouped, found),
            "",
        ]
    head += [
        *(verdicts or ["No recipe has a recorded run yet: nothing can be said about what any mechanism buys."]),
        "",
    ]
    text = "\n".join(head + body).rstrip() + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text
