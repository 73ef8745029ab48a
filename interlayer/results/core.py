"""The results runner: named recipes, each a set of (method, seed) runs at a scale, run once each, resumable, every
run recorded with what made it; tables in `results/*.csv`.

A run is one method of one recipe with one seed. It writes `OUT/runs/<recipe>/<method>/seed<S>.json` atomically
when it finishes, so an interrupted sweep resumes where it stopped and a finished run is never repeated. The CSV of
a recipe is rebuilt from those files: one row per (mechanism, method, seed, metric).
"""

from __future__ import annotations

import csv
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
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
    abouts: dict[str, str] = field(default_factory=dict)
    """One line per method: what trains, at what learning rate (printed in the report's tables)."""
    notes: str = ""
    """What the recipe does not measure and why, or anything else a reader of its table needs (in the report)."""


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


def run_path(out: Path, recipe: Recipe, method: str, seed: int) -> Path:
    return out / "runs" / recipe.shares.get(method, recipe.name) / method / f"seed{seed}.json"


def write_json_atomically(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".tmp-", suffix=".json", delete=False) as f:
        json.dump(payload, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, path)


def measured_run(recipe: Recipe, method: str, seed: int, scale: str, work: Path, command: str, rev: str) -> dict:
    """Run one (method, seed) of `recipe` and record it with its wall time, peak memory, revision and machine."""
    from ..bench import proc_status_bytes, reset_peak_rss

    workdir = work / recipe.name / method / f"seed{seed}"
    workdir.mkdir(parents=True, exist_ok=True)
    base = proc_status_bytes("VmRSS")
    reset_peak_rss()
    start = time.perf_counter()
    result = recipe.run(method, seed, scale, workdir)
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
        "command": command,
        "revision": rev,
        "machine": machine(),
    }


def run_recipes(
    recipes: list[Recipe],
    scale: str,
    out: Path,
    methods: list[str] | None = None,
    seeds: list[int] | None = None,
    command: str | None = None,
    progress: bool = True,
    work: Path | None = None,
) -> list[dict]:
    """Run every (recipe, method, seed) not finished in `out` yet, seed-major (an interrupted sweep has every method
    at the first seeds), then write `out/<recipe>.csv` for each recipe. Returns the records of every run. Each run's
    record is `out/runs/<recipe>/<method>/seed<S>.json`; checkpoints and scratch files go to `work` (default
    `out/work`: keep it out of version control)."""
    from tqdm.auto import tqdm

    if scale not in SCALES:
        raise ValueError(f"`scale` must be one of {list(SCALES)}, got {scale!r}.")
    command = command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
    rev = revision()  # the code this process imported, even if the checkout changes while it runs
    plan = []
    for recipe in recipes:
        chosen = methods or list(recipe.methods)
        unknown = [m for m in chosen if m not in recipe.methods]
        if methods is None and unknown:
            raise ValueError(f"recipe {recipe.name!r} has no method {unknown}; it has {list(recipe.methods)}.")
        for seed in seeds or recipe.seeds[scale]:
            plan += [(recipe, method, seed) for method in chosen if method in recipe.methods]
    plan.sort(key=lambda item: (item[2], recipes.index(item[0])))
    todo, seen = [], set()
    for recipe, method, seed in plan:
        path = run_path(out, recipe, method, seed)
        if not path.exists() and path not in seen:
            todo.append((recipe, method, seed))
            seen.add(path)
    runs = len({run_path(out, recipe, method, seed) for recipe, method, seed in plan})
    bar = tqdm(total=runs, initial=runs - len(todo), desc="results", unit="run", disable=not progress)
    for recipe, method, seed in todo:
        bar.set_postfix_str(f"{recipe.name} {method} seed {seed}")
        record = measured_run(recipe, method, seed, scale, Path(work or out / "work"), command, rev)
        write_json_atomically(run_path(out, recipe, method, seed), record)
        bar.update()
    bar.close()
    records = [
        {**json.loads(run_path(out, r, m, s).read_text()), "recipe": r.name, "mechanism": r.mechanism}
        for r, m, s in plan
    ]
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
    rows = [row for record in records for row in csv_rows(record)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=".tmp-", suffix=".csv", delete=False, newline=""
    ) as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(f.name, path)


def read_csvs(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(Path(folder).glob("*.csv")):
        with open(path, newline="") as f:
            rows += list(csv.DictReader(f))
    return rows
