#!/usr/bin/env python
"""RTE: stock MiniLM-L6 against the bridge presets, several seeds each, on CPU.

    python benchmarks/rte_comparison.py --out runs/rte            # stock, H9, A8, A3 x seeds 0 1 2
    python benchmarks/rte_comparison.py --presets stock H9 --seeds 0 --epochs 1

Data: `../shared/data/rte/train.tsv`; the last 10% is held out for validation (the real RTE dev split is not
used). Every run uses `examples/run_classification.py` with the seed's recipe (encoder lr 1.5e-5, head and bridge
lr 3e-4, weight decay 0.01, 10% warm-up, label smoothing 0.05, batch 8, max length 128, clipping 1.0) and the same
number of epochs (2 by default: the seed ran 3 to 5 on a GPU; 2 keeps the sweep within a CPU session). Runs
already finished in `--out` are reused, so an interrupted sweep resumes. Prints the
markdown table recorded in docs/benchmarks.md.
"""

import argparse
import statistics
import sys
from pathlib import Path

from interlayer.bench import run_once

ROOT = Path(__file__).resolve().parents[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--presets", nargs="+", default=["stock", "H9", "A8", "A3"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=float, default=2)
    parser.add_argument("--out", default="runs/rte")
    parser.add_argument("--train_file", default=str(ROOT.parent / "shared" / "data" / "rte" / "train.tsv"))
    parser.add_argument("--report_only", action="store_true", help="tabulate finished runs, start no new one")
    args = parser.parse_args()
    if not Path(args.train_file).exists():
        sys.exit(f"RTE data not found at {args.train_file} (it comes from the project's ../shared/data folder)")
    sys.path.insert(0, str(ROOT))
    from interlayer.training import minilm_path

    results = {preset: [] for preset in args.presets}
    model = None if args.report_only else minilm_path()
    for seed in args.seeds:  # seed-major: an interrupted sweep has every model at the first seeds
        for preset in args.presets:
            out = Path(args.out) / f"{preset}-seed{seed}"
            cmd = [
                sys.executable,
                str(ROOT / "examples" / "run_classification.py"),
                "--model_name_or_path",
                model,
                "--preset",
                preset,
                "--seed",
                str(seed),
                "--train_file",
                args.train_file,
                "--validation_split_percentage",
                "10",
                "--num_train_epochs",
                str(args.epochs),
                "--output_dir",
                str(out),
                "--disable_tqdm",
                "true",
                "--logging_steps",
                "100",
            ]
            summary = run_once(cmd, out, args.report_only)
            if summary is None:
                continue
            results[preset].append(summary)
            r = results[preset][-1]
            print(
                f"{preset} seed {seed}: final {r['final_eval_accuracy']:.4f} best {r['best_eval_accuracy']:.4f} "
                f"({r.get('minutes', 0):.1f} min)",
                flush=True,
            )

    def fmt(values):
        mean = statistics.mean(values)
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{mean:.4f} ± {spread:.4f}"

    header = ["model", "seeds", "final accuracy (mean ± sd)", "best-epoch accuracy (mean ± sd)", "per-seed final"]
    print("\n| " + " | ".join(header + ["minutes per run"]) + " |")
    print("| --- | ---: | ---: | ---: | --- | ---: |")
    for preset, runs in results.items():
        if not runs:
            continue
        finals = [r["final_eval_accuracy"] for r in runs]
        bests = [r["best_eval_accuracy"] for r in runs]
        minutes = statistics.mean(r.get("minutes", 0) for r in runs)
        name = "stock MiniLM-L6" if preset == "stock" else f"MiniLM-L6 + {preset}"
        print(
            f"| {name} | {len(runs)} | {fmt(finals)} | {fmt(bests)} | {', '.join(f'{v:.3f}' for v in finals)} "
            f"| {minutes:.1f} |"
        )


if __name__ == "__main__":
    main()
