"""`docs/results.md` from the CSVs: per recipe, each method's mean and 95% interval over seeds beside its trainable
parameters, wall time and peak memory; a plot per recipe; perplexity against heads pruned for pruning sweeps; and
which mechanism helps where, worded from the intervals alone (no number in the report is typed by hand)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from .core import read_csvs

# two-sided 95% quantiles of Student's t by degrees of freedom (beyond 30: the normal's 1.96)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        15: 2.131, 20: 2.086, 30: 2.042}  # fmt: skip


def interval(values: list[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% interval (Student's t; NaN with one value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    df = len(values) - 1
    t = T975.get(df) or next((T975[k] for k in sorted(T975) if k >= df), 1.96)
    return mean, t * statistics.stdev(values) / math.sqrt(len(values))


def fmt(mean: float, half: float, digits: int = 4) -> str:
    if math.isnan(half):
        return f"{mean:.{digits}g} (one seed)"
    return f"{mean:.{digits}g} ± {half:.2g}"


def summaries(rows: list[dict]) -> dict:
    """{recipe: {method: {"metrics": {metric: [values by seed]}, "trainable": n, "wall": [...], "peak": [...]}}}"""
    out: dict = {}
    for row in rows:
        entry = out.setdefault(row["recipe"], {}).setdefault(
            row["method"], {"metrics": {}, "trainable": set(), "wall": {}, "peak": {}, "seeds": set(), "meta": row}
        )
        entry["metrics"].setdefault(row["metric"], []).append(float(row["value"]))
        entry["trainable"].add(int(row["trainable_params"]))
        entry["wall"][row["seed"]] = float(row["wall_s"])
        entry["peak"][row["seed"]] = float(row["peak_rss_mb"])
        entry["seeds"].add(row["seed"])
    return out


def compare(a: tuple[float, float], b: tuple[float, float], higher_is_better: bool) -> str:
    """'better', 'worse' or 'not separated': whether a's 95% interval lies wholly on the good side of b's."""
    (ma, ha), (mb, hb) = a, b
    if math.isnan(ha) or math.isnan(hb):
        return "not separated (one seed)"
    low_a, high_a, low_b, high_b = ma - ha, ma + ha, mb - hb, mb + hb
    if high_a < low_b:
        return "worse" if higher_is_better else "better"
    if low_a > high_b:
        return "better" if higher_is_better else "worse"
    return "not separated"


PHRASES = {
    "better": "better than",
    "worse": "worse than",
    "not separated": "not separated from",
    "not separated (one seed)": "not separated (one seed) from",
}


def is_sweep(methods) -> bool:
    return all("@" in m or m == "controller" for m in methods)


def plot_methods(recipe, methods: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    names = [m for m in recipe.methods if m in methods and recipe.primary in methods[m]["metrics"]]
    stats = [interval(methods[m]["metrics"][recipe.primary]) for m in names]
    fig = Figure(figsize=(6.4, 0.45 * len(names) + 1.2))
    ax = fig.add_subplot()
    colours = ["tab:grey" if m in recipe.baselines else "tab:blue" for m in names]
    for y, ((mean, half), colour) in enumerate(zip(stats, colours)):
        ax.errorbar(mean, y, xerr=0 if math.isnan(half) else half, fmt="o", color=colour, capsize=4)
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
        metrics = entry["metrics"]
        if recipe.primary not in metrics or "heads_pruned" not in metrics:
            continue
        strategy = name.split("@")[0]
        by_strategy.setdefault(strategy, []).append(
            (statistics.fmean(metrics["heads_pruned"]), *interval(metrics[recipe.primary]))
        )
    for strategy, points in sorted(by_strategy.items()):
        points.sort()
        xs, means, halves = zip(*points)
        errors = [0 if math.isnan(h) else h for h in halves]
        ax.errorbar(xs, means, yerr=errors, marker="o", capsize=3, label=strategy)
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
    if recipe.notes:
        lines += [recipe.notes, ""]
    return lines


def results_table(recipe, methods: dict) -> list[str]:
    first = next(iter(methods.values()))["meta"]
    lines = [f"Results at the `{first['scale']}` scale:", ""]
    metrics = sorted({m for entry in methods.values() for m in entry["metrics"]} - {"steps"})
    metrics = [recipe.primary] + [m for m in metrics if m != recipe.primary]
    lines.append("| method | trainable params | seeds | " + " | ".join(metrics) + " | wall s | peak MB |")
    lines.append("| --- | ---: | ---: | " + " | ".join("---:" for _ in metrics) + " | ---: | ---: |")
    order = [m for m in recipe.methods if m in methods] + sorted(set(methods) - set(recipe.methods))
    for name in order:
        entry = methods[name]
        cells = [fmt(*interval(entry["metrics"][m])) if m in entry["metrics"] else "" for m in metrics]
        trainable = "/".join(f"{n:,}" for n in sorted(entry["trainable"]))
        wall = statistics.fmean(entry["wall"].values())
        peak = statistics.fmean(entry["peak"].values())
        lines.append(
            f"| {name} | {trainable} | {len(entry['seeds'])} | " + " | ".join(cells) + f" | {wall:.0f} | {peak:.0f} |"
        )
    return lines + [""]


def verdict_line(recipe, methods: dict) -> str:
    mechanism = [m for m in recipe.methods if m in methods and m not in recipe.baselines]
    stats = {m: interval(e["metrics"][recipe.primary]) for m, e in methods.items() if recipe.primary in e["metrics"]}
    if not any(m in stats for m in mechanism):
        return f"**{recipe.name}**: no finished run of the mechanism yet."
    sign = 1 if recipe.higher_is_better else -1

    def described(name):
        trainable = "/".join(f"{n:,}" for n in sorted(methods[name]["trainable"]))
        return f"`{name}` ({fmt(*stats[name])}, {trainable} trained)"

    def against(method, baselines):
        parts = [
            f"{PHRASES[compare(stats[method], stats[base], recipe.higher_is_better)]} {described(base)}"
            for base in baselines
            if base in stats
        ]
        return f"{described(method)} is " + "; ".join(parts)

    direction = "higher" if recipe.higher_is_better else "lower"
    head = f"**{recipe.name}** ({recipe.mechanism}, {recipe.primary}, {direction} is better)"
    if recipe.matched:
        pairs = [against(m, bases) for m, bases in recipe.matched.items() if m in stats]
        return f"{head}: " + ". ".join(pairs) + "."
    best = max((m for m in mechanism if m in stats), key=lambda m: sign * stats[m][0])
    return f"{head}: the mechanism's best method, " + against(best, recipe.baselines) + "."


def sweep_line(recipe, methods: dict) -> str:
    """For a pruning sweep: at each share of heads, the strategy with the best mean, against the unpruned model."""
    sign = 1 if recipe.higher_is_better else -1
    shares: dict[str, list[str]] = {}
    for name in methods:
        if "@" in name and name not in recipe.baselines and not name.endswith("+ft"):
            shares.setdefault(name.split("@")[1], []).append(name)
    base = next((b for b in recipe.baselines if b in methods), None)
    parts = []
    for share, names in sorted(shares.items(), key=lambda item: float(item[0])):
        best = max(names, key=lambda m: sign * statistics.fmean(methods[m]["metrics"][recipe.primary]))
        runner = sorted(names, key=lambda m: -sign * statistics.fmean(methods[m]["metrics"][recipe.primary]))[1:2]
        speed = methods[best]["metrics"].get("forward_time_ratio")
        text = f"{share}%: `{best}` {fmt(*interval(methods[best]['metrics'][recipe.primary]))}"
        if runner:
            text += f" (next `{runner[0]}` {fmt(*interval(methods[runner[0]]['metrics'][recipe.primary]))})"
        if speed:
            text += f", forward time {statistics.fmean(speed):.2f}x"
        parts.append(text)
    start = f" against {fmt(*interval(methods[base]['metrics'][recipe.primary]))} unpruned" if base else ""
    return (
        f"**{recipe.name}** ({recipe.mechanism}, {recipe.primary}, "
        f"{'higher' if recipe.higher_is_better else 'lower'} is better){start}; the best strategy at each share of "
        "heads pruned: " + "; ".join(parts) + " (by mean: where the intervals overlap, the order is not established)."
    )


def write_report(out: Path, path: Path) -> str:
    """Write the report to `path` (markdown): every recipe, with the results `out`'s CSVs hold for it and their plots
    (in `img/` beside `path`); returns the markdown."""
    from . import recipes

    rows = read_csvs(out)
    known = recipes()
    grouped = summaries(rows)
    unknown = sorted(set(grouped) - set(known))
    if unknown:
        raise ValueError(f"{out} holds rows of unknown recipes {unknown}; the recipes: {', '.join(known)}")
    images = path.parent / "img"
    body, verdicts = [], []
    for name, recipe in known.items():
        body += recipe_head(recipe)
        methods = grouped.get(name)
        if not methods:
            body += ["No run of this recipe is recorded yet.", ""]
            continue
        images.mkdir(parents=True, exist_ok=True)
        image = f"results-{name}.png"
        (plot_sweep if is_sweep(methods) else plot_methods)(recipe, methods, images / image)
        body += results_table(recipe, methods) + [f"![{name}](img/{image})", ""]
        verdict = (sweep_line if is_sweep(methods) else verdict_line)(recipe, methods)
        body += [verdict, ""]
        verdicts.append(f"- {verdict}")
    records = {(r["recipe"], r["method"], r["seed"]): r for r in rows}.values()
    head = [
        "# Results",
        "",
        f"Generated by `interlayer results --report` from the CSVs in `{out}/`; do not edit by hand. "
        "Every method of a recipe starts from the same stock checkpoint and trains on the same batches in the same "
        "order for the same steps with the same seeds; LoRA and the top tensors train as many parameters as the "
        "mechanism adds (a task head, where there is one, trains in every method and is counted). Values are means "
        "over seeds ± the half-width of the 95% interval (Student's t). A verdict says 'better' or 'worse' only where "
        "the two intervals do not overlap, and picks the mechanism's best method after the fact (with a few seeds, a "
        "small advantage of the best of several methods is partly selection). `wall s` is each run's time including "
        "its conversion and evaluation; `peak MB` is how far the process's resident memory rose above what it held "
        "when the run started: the runs of one command share a process, so memory an earlier run freed and the "
        "allocator kept hides part of a later run's peak (compare memory with `interlayer bench` and docs/costs.md "
        "instead).",
        "",
    ]
    if rows:
        wall = sum(float(r["wall_s"]) for r in records)
        head += [
            f"Commands: {'; '.join(sorted({'`' + r['command'] + '`' for r in rows}))}. "
            f"Revisions: {', '.join(sorted({r['revision'] for r in rows}))}. "
            f"Machine: {'; '.join(sorted({r['machine'] for r in rows}))}. "
            f"Wall time of all runs: {wall / 60:.0f} min.",
            "",
        ]
    head += [
        "## Running it",
        "",
        "```",
        "interlayer results --quick --out /tmp/results      # every recipe on tiny models in minutes (CI runs this)",
        "interlayer results --out results --work runs/results-work --report docs/results.md   # the cpu scale",
        "interlayer results --scale seed --recipes hc-gsm8k --out results-seed   # a seed's own setting, on a GPU",
        "interlayer results --plan --scale seed             # what each recipe runs at a scale",
        "```",
        "",
        "A finished run is never repeated (`OUT/runs/<recipe>/<method>/seed<S>.json`), so an interrupted run resumes "
        "by running the same command again. The seed scale downloads the seeds' models and data from the Hub and "
        "saves every trained model under `--work`; it has not been run for this report (no GPU here).",
        "",
        "## Which mechanism for what",
        "",
        *(verdicts or ["No recipe has a recorded run yet: nothing can be said about what any mechanism buys."]),
        "",
    ]
    text = "\n".join(head + body).rstrip() + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text
