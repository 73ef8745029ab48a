"""The results runner: named recipes, each a set of (method, seed) runs at a scale, run once each, resumable, every
run recorded with what made it; tables in `results/*.csv`.

A run is one method of one recipe with one seed. It writes `OUT/runs/<recipe>/<method>/seed<S>.json` atomically
when it finishes, so an interrupted sweep resumes where it stopped and a finished run is never repeated. The CSV of
a recipe is rebuilt from those files: one row per (mechanism, method, seed, metric).
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SCALES = ("quick", "cpu", "seed")
"""`quick`: tiny stock checkpoints built on the spot, a few steps: the mechanics end to end in minutes (CI runs it).
`cpu`: the real offline checkpoints (MiniLM-L6, SmolLM2-135M) and data, sized for about two hours on 2 cores.
`seed`: the seed's own model, data and recipe (Hub ids, a GPU, bf16): documented and runnable, not run here."""

COLUMNS = (
    "mechanism",
    "recipe",
    "method",
    "seed",
    "scale",
    "trainable_params",
    "budget",
    "budget_used",
    "metric",
    "value",
    "train_tokens",
    "wall_s",
    "peak_rss_mb",
    "recipe_version",
    "lr_scale",
    "command",
    "revision",
    "machine",
)


@dataclass(frozen=True)
class RunResult:
    """What a recipe's run returns: its held-out metrics, the parameters that trained, the training tokens seen, and
    details a reader may want (the data order's fingerprint, the LoRA layout chosen for the budget...)."""

    metrics: dict[str, float]
    trainable_params: int
    train_tokens: int
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Estimate:
    """What a run is expected to cost: seconds on the scale's machine (2 CPU cores for `quick` and `cpu`, one GPU
    for `seed`), and for the seed scale its peak GPU memory and the disk it writes (GB)."""

    seconds: float
    gpu_memory_gb: float = 0.0
    disk_gb: float = 0.0


GPU_TFLOPS = 100.0
"""The effective bf16 throughput the seed scale's estimates assume on one H100-class GPU: about a tenth of its dense
peak, for models of 0.1-0.6B parameters with short sequences. An assumption, not a measurement: no GPU run has been
timed here."""


def gpu_estimate(
    params: float,
    trainable: float,
    train_tokens: float,
    eval_tokens: float,
    layers: int,
    hidden: int,
    micro_tokens: int,
    vocab: int,
    passes: int = 1,
    streams: int = 1,
    extra_seconds: float = 0.0,
    saved_params: float = 0.0,
) -> Estimate:
    """A seed-scale run's cost from its sizes: time from 6 FLOPs per parameter per training token and 2 per evaluated
    token at `GPU_TFLOPS` (times the forward `passes`: the latent mechanism's two), plus `extra_seconds` (lm-eval);
    memory from float32 weights, AdamW's float32 gradient and moments of the `trainable` parameters, bf16 activations
    of one micro-batch (34 bytes per token, hidden unit and layer, after Korthikanti et al. 2022; times `passes` and
    the residual `streams`) and its logits (bf16, and a float32 chunk as large); disk: the model saved in bf16."""
    flops = passes * (6 * params * train_tokens + 2 * params * eval_tokens)
    activations = passes * streams * 34 * micro_tokens * hidden * layers
    memory = 4 * params + 12 * trainable + activations + micro_tokens * vocab * (2 + 4)
    return Estimate(
        seconds=flops / (GPU_TFLOPS * 1e12) + extra_seconds, gpu_memory_gb=memory / 1e9, disk_gb=2 * saved_params / 1e9
    )


@dataclass(frozen=True)
class Recipe:
    """A named experiment: one checkpoint and data set, several methods (the mechanism's recipes and the baselines),
    each run with every seed of the scale. `run(method, seed, scale, workdir)` trains and evaluates one run."""

    name: str
    mechanism: str
    summary: str
    methods: tuple[str, ...]
    run: Callable[[str, int, str, Path], RunResult]
    seeds: dict[str, tuple[int, ...]] = field(
        default_factory=lambda: {"quick": (0, 1), "cpu": (0, 1, 2), "seed": (0, 1, 2)}
    )
    scale_notes: dict[str, str] = field(default_factory=dict)
    shares: dict[str, str] = field(default_factory=dict)
    """Methods whose runs are identical to another recipe's method of the same name (same checkpoint, data and
    training): `{"full": "hc-gsm8k"}` reuses that recipe's run rather than training it twice."""
    primary: str = "eval_loss"
    """The metric the report compares methods on (`higher_is_better` says its direction)."""
    higher_is_better: bool = False
    baselines: tuple[str, ...] = ("lora", "last-layers", "full")
    """The methods that are not the mechanism (drawn grey in the report's plot)."""
    comparisons: tuple[tuple[str, str], ...] = ()
    """The comparisons the report makes, declared before any run: `(method, against)` pairs on the primary metric,
    paired by seed and Holm-adjusted over their family. No other pair of methods is compared."""
    lr_grid: tuple[float, ...] = ()
    """Multipliers of every method's learning rates: each method runs each once with `TUNING_SEED`, scored on the
    recipe's validation split, and the reported seeds run at the best (empty: every method at its fixed rates)."""
    version: int = 1
    """Raised whenever what the recipe runs changes, so that the report can tell rows recorded before."""
    changes: str = ""
    """What the current version changed, in a sentence (printed beside rows of earlier versions)."""
    superseded: str = ""
    """What is known against the rows of earlier versions (an outside rerun that reverses a verdict), in a sentence
    printed beside those rows only, so that it leaves the report with them."""
    abouts: dict[str, str] = field(default_factory=dict)
    """One line per method: what trains, at what learning rate (printed in the report's tables)."""
    notes: str = ""
    """What the recipe does not measure and why, or anything else a reader of its table needs (in the report)."""
    scale_methods: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The methods a scale runs when none are named (default: every method); `--methods` runs any."""
    estimate: Callable[[str, str, bool], Estimate] | None = None
    """`estimate(method, scale, tuning)`: what one run costs (`--plan`)."""
    saves_models: bool = False
    """Whether its runs can keep their trained model (`run(..., keep_model=True)`, `--keep-models`)."""
    setup_seconds: dict[str, float] = field(default_factory=dict)
    """What a scale costs once before its first run (a checkpoint the recipe trains), in the estimate's units."""

    def runs_at(self, scale: str) -> tuple[str, ...]:
        return self.scale_methods.get(scale, self.methods)


TUNING_SEED = 1000
"""The seed of the learning-rate sweep's runs: none of the seeds a scale reports, so the rate is not chosen on the data
order of a reported run."""


def lr(value: float) -> str:
    """A learning rate as the seeds write them: 2e-5, 1e-3."""
    return f"{value:.0e}".replace("e-0", "e-")


def revision() -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if rev.returncode != 0:
        return "unknown"
    return rev.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"{torch.get_num_threads()} threads"
    return f"{cpu}, {os.cpu_count()} cores, {device}, torch {torch.__version__}"


def checkpoints(workdir: Path) -> Path:
    """The folder where a run (working in `workdir` = WORK/<recipe>/<method>/seed<S>) finds or writes the stock
    checkpoints its recipe builds, shared by every run with the same WORK folder."""
    return Path(workdir).parents[2] / "checkpoints"


def run_name(seed: int, lr_scale: float | None) -> str:
    """`seed0`, or `seed1000-x10` for a run at 10 times the method's learning rates."""
    return f"seed{seed}" + ("" if lr_scale is None else f"-x{lr_scale:g}")


def run_path(out: Path, recipe: Recipe, method: str, seed: int, lr_scale: float | None = None) -> Path:
    return out / "runs" / recipe.shares.get(method, recipe.name) / method / f"{run_name(seed, lr_scale)}.json"


def write_json_atomically(path: Path, payload: dict) -> None:
    """Write a record whole, by the rule of every save (`save_file_atomically`): several runs may write it at once."""
    from ..saving import save_file_atomically

    def write(staged):
        with open(staged, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file_atomically(path, write)


def measured_run(
    recipe: Recipe,
    method: str,
    seed: int,
    scale: str,
    work: Path,
    command: str,
    rev: str,
    lr_scale: float | None = None,
    keep_model: bool = False,
) -> dict:
    """Run one (method, seed) of `recipe`, at `lr_scale` times the method's learning rates where the recipe sweeps
    them, and record it with its wall time, peak memory, revision and machine. A tuning run whose training loss
    diverges is recorded as diverged (metric `diverged`); a reported run that diverges raises."""
    from ..bench import proc_status_bytes, reset_peak_rss

    workdir = work / recipe.name / method / run_name(seed, lr_scale)
    workdir.mkdir(parents=True, exist_ok=True)
    base = proc_status_bytes("VmRSS")
    reset_peak_rss()
    start = time.perf_counter()
    try:
        extra = ({} if lr_scale is None else {"lr_scale": lr_scale}) | ({"keep_model": True} if keep_model else {})
        result = recipe.run(method, seed, scale, workdir, **extra)
    except FloatingPointError as err:
        if seed != TUNING_SEED:
            raise
        result = RunResult(
            metrics={"diverged": 1.0}, trainable_params=0, train_tokens=0, details={"diverged": str(err)}
        )
    wall = time.perf_counter() - start
    return {
        "mechanism": recipe.mechanism,
        "recipe": recipe.name,
        "method": method,
        "seed": seed,
        "scale": scale,
        "trainable_params": result.trainable_params,
        "train_tokens": result.train_tokens,
        "metrics": result.metrics,
        "details": result.details,
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(max(0, proc_status_bytes("VmHWM") - base) / 2**20, 1),
        "recipe_version": recipe.version,
        "lr_scale": "" if lr_scale is None else lr_scale,
        "command": command,
        "revision": rev,
        "machine": machine(),
    }


def choose_lr_scale(recipe: Recipe, trials: dict) -> float | None:
    """The learning-rate multiplier a method's tuning runs choose, from `{multiplier: metrics}`: the best validation
    value of the recipe's primary metric, ties broken by the lower validation loss, then the smaller multiplier;
    trials that diverged (no validation metric) never win. None where every trial diverged."""
    sign = 1 if recipe.higher_is_better else -1
    key = f"validation_{recipe.primary}"
    finished = {scale: m for scale, m in trials.items() if math.isfinite(m.get(key, math.nan))}
    if not finished:
        return None
    return max(
        finished, key=lambda s: (sign * finished[s][key], -finished[s].get("validation_eval_loss", 0.0), -float(s))
    )


def planned_runs(recipes: list[Recipe], scale: str, methods: list[str] | None, seeds: list[int] | None):
    """The tuning runs `(recipe, method, TUNING_SEED, multiplier)` and the methods with the seeds they report
    `(recipe, method, seed)`, after checking the names."""
    if scale not in SCALES:
        raise ValueError(f"`scale` must be one of {list(SCALES)}, got {scale!r}.")
    if methods:
        unknown = sorted(set(methods) - {m for recipe in recipes for m in recipe.methods})
        if unknown:
            raise ValueError(f"no recipe of {[r.name for r in recipes]} has the methods {unknown}.")
    tuning, final = [], []
    for recipe in recipes:
        chosen = [m for m in recipe.methods if (m in methods if methods else m in recipe.runs_at(scale))]
        for method in chosen:
            tuning += [(recipe, method, TUNING_SEED, m) for m in recipe.lr_grid]
        for seed in seeds or recipe.seeds[scale]:
            final += [(recipe, method, seed) for method in chosen]
    final.sort(key=lambda item: (item[2], recipes.index(item[0])))
    return tuning, final


def plan(recipes: list[Recipe], scale: str, methods: list[str] | None = None, seeds: list[int] | None = None) -> str:
    """What `run_recipes` would run, recipe by recipe: methods, seeds, the learning-rate sweep, the number of runs
    and their estimated cost (a run another chosen recipe shares is counted once, under that recipe)."""
    tuning, final = planned_runs(recipes, scale, methods, seeds)
    names = {r.name for r in recipes}

    def counted(recipe, method):
        return recipe.shares.get(method, recipe.name) == recipe.name or recipe.shares[method] not in names

    machine = "one GPU" if scale == "seed" else "2 CPU cores"
    lines, all_runs, all_seconds = [], 0, 0.0
    for recipe in recipes:
        mine_tuning = [(m, s) for r, m, s, _ in tuning if r is recipe and counted(r, m)]
        mine_final = [(m, s) for r, m, s in final if r is recipe and counted(r, m)]
        chosen = list(dict.fromkeys(m for r, m, _ in final if r is recipe))
        lines += [
            f"{recipe.name} ({recipe.mechanism}): {recipe.summary}",
            f"  {scale}: {recipe.scale_notes.get(scale, '')}",
        ]
        sweep = (
            f"; learning rates x{', x'.join(f'{m:g}' for m in recipe.lr_grid)} (seed {TUNING_SEED})"
            if recipe.lr_grid
            else ""
        )
        seed_list = sorted({s for r, _, s in final if r is recipe})
        lines.append(f"  methods {', '.join(chosen)}; seeds {seed_list}{sweep}")
        runs = len(mine_tuning) + len(mine_final)
        text = f"  runs: {len(mine_tuning)} tuning + {len(mine_final)} reported = {runs}"
        if recipe.estimate is not None:
            costs = [recipe.estimate(m, scale, True) for m, _ in mine_tuning]
            costs += [recipe.estimate(m, scale, False) for m, _ in mine_final]
            seconds = sum(c.seconds for c in costs) + recipe.setup_seconds.get(scale, 0.0)
            all_seconds += seconds
            text += f"; estimated {seconds / 60:.0f} min on {machine}"
            if scale == "seed" and costs:
                disk = max(c.disk_gb for c in costs)
                text += f", peak GPU memory {max(c.gpu_memory_gb for c in costs):.0f} GB, " + (
                    f"disk {disk:.1f} GB per run (its model, saved while lm-eval scores it)"
                    if disk
                    else "disk: no model saved unless --keep-models"
                )
        all_runs += runs
        lines.append(text)
    lines.append(f"all: {all_runs} runs; estimated {all_seconds / 3600:.1f} h on {machine}")
    return "\n".join(lines)


def run_recipes(
    recipes: list[Recipe],
    scale: str,
    out: Path,
    methods: list[str] | None = None,
    seeds: list[int] | None = None,
    command: str | None = None,
    progress: bool = True,
    work: Path | None = None,
    keep_models: bool = False,
) -> list[dict]:
    """Run every (recipe, method, seed) not finished in `out` yet, then write `out/<recipe>.csv` for each recipe.
    Returns the records of every run. Where a recipe sweeps learning rates, every method first runs each multiplier
    of `lr_grid` with `TUNING_SEED`, and its reported seeds then run at the multiplier `choose_lr_scale` picks. The
    reported runs go seed-major (an interrupted sweep has every method at the first seeds). Each run's record is
    `out/runs/<recipe>/<method>/seed<S>[-x<multiplier>].json`; checkpoints and scratch files go to `work` (default
    `out/work`: keep it out of version control); with `keep_models`, the recipes that can (`saves_models`) keep each
    reported run's trained model there, in bf16."""
    from tqdm.auto import tqdm

    command = command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
    rev = revision()  # the code this process imported, even if the checkout changes while it runs
    tuning, final = planned_runs(recipes, scale, methods, seeds)
    work = Path(work or out / "work")
    total = len({run_path(out, r, m, s, x) for r, m, s, x in tuning}) + len(
        {run_path(out, r, m, s) for r, m, s in final}
    )
    bar = tqdm(total=total, desc="results", unit="run", disable=not progress)
    done: dict[Path, dict] = {}

    def record_of(recipe, method, seed, lr_scale=None) -> dict:
        path = run_path(out, recipe, method, seed, lr_scale)
        if path not in done:
            if not path.exists():
                bar.set_postfix_str(f"{recipe.name} {method} {run_name(seed, lr_scale)}")
                keep = keep_models and recipe.saves_models and seed != TUNING_SEED
                record = measured_run(recipe, method, seed, scale, work, command, rev, lr_scale, keep)
                write_json_atomically(path, record)
            done[path] = json.loads(path.read_text())
            bar.update()
        return {**done[path], "recipe": recipe.name, "mechanism": recipe.mechanism}

    records = [record_of(*run) for run in tuning]
    chosen: dict[tuple[str, str], float | None] = {}
    for recipe, method, _ in final:
        if recipe.lr_grid and (recipe.name, method) not in chosen:
            trials = {x: record_of(recipe, method, TUNING_SEED, x)["metrics"] for x in recipe.lr_grid}
            best = choose_lr_scale(recipe, trials)
            if best is None:
                raise FloatingPointError(
                    f"{recipe.name}: every learning-rate multiplier of {method!r} ({list(recipe.lr_grid)}) diverged."
                )
            chosen[(recipe.name, method)] = best
    records += [record_of(r, m, s, chosen.get((r.name, m))) for r, m, s in final]
    bar.close()
    for recipe in recipes:
        write_csv(out / f"{recipe.name}.csv", [r for r in records if r["recipe"] == recipe.name])
    return records


def csv_rows(record: dict) -> list[dict]:
    """A record's rows, one per metric; `budget` and `budget_used` (a baseline's budget and the parameters it trains
    against it, the task head not counted) come from its details, empty for the other methods."""
    details = record.get("details", {})
    budget = {k: details.get(k, "") for k in ("budget", "budget_used")}
    return [
        {**{k: record[k] for k in COLUMNS if k in record}, **budget, "metric": metric, "value": value}
        for metric, value in sorted(record["metrics"].items())
    ]


def write_csv(path: Path, records: list[dict]) -> None:
    from ..saving import save_file_atomically

    rows = [row for record in records for row in csv_rows(record)]

    def write(staged):
        with open(staged, "w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file_atomically(path, write)


def read_csvs(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(Path(folder).glob("*.csv")):
        with open(path, newline="") as f:
            rows += list(csv.DictReader(f))
    return rows
