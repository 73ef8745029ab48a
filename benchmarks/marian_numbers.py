#!/usr/bin/env python
"""A small real-task demonstration of attention bridges on CPU: translating numbers written out in words between
English, German, French and Spanish, with one shared encoder, one shared bridge and a decoder per target language,
trained from scratch, against the same model without a bridge; plus zero-shot translation between language pairs
never seen in training.

    python benchmarks/marian_numbers.py --out runs/marian_numbers              # every model, then the table
    python benchmarks/marian_numbers.py --out runs/marian_numbers --report_only

The task, the model and the training are the results recipe `attention-bridge-numbers`'s
(`interlayer/results/translation.py`) at its `cpu` size, trained longer (`--steps`, default 3,000 of `--batch` 64):
the numbers 0..999 in the four languages, characters as tokens, 100 numbers drawn at random (seed 1234) held out of
training in every language (every word still occurs in training: holding out every number ending in 3 or 8 instead
left the models at 4% exact match on the trained pairs). Training is English-centric: en->de, en->fr, en->es, de->en,
fr->en, es->en; the zero-shot pairs de<->fr, de<->es, fr<->es are never trained. Each step trains one pair (in turn)
on a batch of numbers; the target language picks the decoder (`tgt_lang`). Evaluation: greedy `generate()` on the
held-out numbers, exact match of the whole string.

Model: a tiny Marian (d_model 128, 2 encoder and 2 decoder layers, 4 heads, FFN 512, dropout 0.1), four decoders;
bridges `none` (`bridge_layers=[]`), `lin` and `perceiver` by default, `none-wide` (no bridge, a wider encoder FFN)
and `transformer` on request (fixed length 16, hidden 256). AdamW lr 1e-3, 5% warm-up then linear decay, seed
`--seed`, 2 threads. Finished models in `--out` are reused. Prints the markdown table recorded in
docs/attention_bridges.md.
"""

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from interlayer.results.translation import BRIDGES, HELD_OUT, SIZES, ZERO_SHOT, train_and_evaluate  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bridges", nargs="+", default=["none", "lin", "perceiver"], choices=list(BRIDGES))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/marian_numbers")
    parser.add_argument("--report_only", action="store_true", help="tabulate finished models, train no new one")
    args = parser.parse_args()
    torch.set_num_threads(2)
    size = dataclasses.replace(SIZES["cpu"], steps=args.steps, batch=args.batch)
    results = {}
    for bridge in args.bridges:
        path = Path(args.out) / f"{bridge}-seed{args.seed}.json"
        if not path.exists() and not args.report_only:
            start = time.perf_counter()
            run = train_and_evaluate(bridge, args.seed, size)
            accuracy = run.details["exact_match"]
            result = {
                "bridge": bridge,
                "steps": args.steps,
                "minutes": (time.perf_counter() - start) / 60,
                "parameters": run.trainable_params,
                "metrics": run.metrics,
                "trained": {p: a for p, a in accuracy.items() if tuple(p.split("->")) not in ZERO_SHOT},
                "zero_shot": {p: a for p, a in accuracy.items() if tuple(p.split("->")) in ZERO_SHOT},
            }
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result, indent=2))
        if path.exists():
            results[bridge] = json.loads(path.read_text())
            r = results[bridge]
            print(f"{bridge}: trained {mean(r['trained']):.3f} zero-shot {mean(r['zero_shot']):.3f}", flush=True)
    if not results:
        return
    print(f"\nHeld-out numbers ({len(HELD_OUT)}), exact match, {args.steps} steps of {args.batch}, seed {args.seed}\n")
    pairs = [f"{s}->{t}" for s, t in ZERO_SHOT]
    print("| bridge | parameters | trained pairs (mean) | zero-shot (mean) | " + " | ".join(pairs) + " | minutes |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in pairs) + " | ---: |")
    for bridge, r in results.items():
        zero = " | ".join(f"{r['zero_shot'][p]:.3f}" for p in pairs)
        print(
            f"| {bridge} | {r['parameters']:,} | {mean(r['trained']):.3f} | {mean(r['zero_shot']):.3f} | {zero} | "
            f"{r['minutes']:.1f} |"
        )


def mean(scores: dict) -> float:
    return sum(scores.values()) / len(scores)


if __name__ == "__main__":
    main()
