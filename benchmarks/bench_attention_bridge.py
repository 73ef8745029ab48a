#!/usr/bin/env python
"""Speed and memory of each attention-bridge layer type as ratios to the stock Marian model, in the same run, and
the decoder's cross-attention cost with a fixed-length bridge against the full source memory at long sources.

    python benchmarks/bench_attention_bridge.py            # both tables
    python benchmarks/bench_attention_bridge.py --quick    # fewer steps

Shape: opus-mt-like Marian (d_model 512, 6 + 6 layers, 8 heads, FFN 2048) with an 8,000-token vocabulary (the cost
of the vocabulary is the same with or without a bridge), random weights; bridges with the toolkit's defaults (fixed
length 50, hidden 2048, 8 heads, layernorm). Training step: forward + backward + AdamW on every parameter, batch 8,
source and target 64 tokens, fp32, 2 threads, median step time and peak resident memory above what the process held
before the steps, each configuration in its own subprocess (`interlayer.bench`). Decoding: milliseconds per greedy
decoding step with the KV cache after the source is encoded (batch 1; the difference between generating 33 and 1 tokens,
divided by 32), at source lengths 64, 1,024 and 4,096.
"""

import argparse
import time

import torch

from interlayer.bench import against_stock, emit, measure_training, print_step_table, run_worker

SHAPE = dict(
    vocab_size=8000,
    decoder_vocab_size=8000,
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    max_position_embeddings=4200,
    pad_token_id=7999,
    decoder_start_token_id=7999,
    eos_token_id=0,
    forced_eos_token_id=None,
)
LAYERS = ["lin", "simple", "perceiver", "transformer", "feedforward"]


def build(name: str):
    from transformers import MarianConfig, MarianMTModel

    from interlayer import MarianAttentionBridgeConfig, MarianAttentionBridgeForConditionalGeneration

    torch.manual_seed(0)
    if name == "stock":
        return MarianMTModel(MarianConfig(**SHAPE))
    return MarianAttentionBridgeForConditionalGeneration(MarianAttentionBridgeConfig(**SHAPE, bridge_layers=[name]))


def worker(name: str, steps: int, decoding: bool, source: int) -> dict:
    torch.set_num_threads(2)
    model = build(name)
    if decoding:
        model.eval()
        ids = torch.randint(10, 7000, (1, source))

        def generate(n):
            start = time.perf_counter()
            model.generate(input_ids=ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, num_beams=1)
            return time.perf_counter() - start

        with torch.no_grad():
            generate(2)
            short = min(generate(1) for _ in range(3))
            long = min(generate(33) for _ in range(3))
        return {"ms_per_step": 1000 * (long - short) / 32}
    ids, labels = torch.randint(10, 7000, (8, 64)), torch.randint(10, 7000, (8, 64))
    return measure_training(model, steps, input_ids=ids, labels=labels)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--decoding", action="store_true")
    parser.add_argument("--source", type=int, default=64)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.worker:
        emit(worker(args.worker, args.steps, args.decoding, args.source))
        return
    steps = 3 if args.quick else args.steps

    def run(name, decoding=False, source=64):
        extra = ["--decoding", "--source", str(source)] if decoding else ["--steps", str(steps)]
        return run_worker(__file__, ["--worker", name, *extra], memory=not decoding)

    print("## Training step, Marian 6 + 6 x 512, batch 8 x 64 -> 64\n")
    stock, first, last, rows = against_stock(lambda: run("stock"), lambda: [(n, run(n)) for n in LAYERS])
    print(f"stock step time, first and last run: {first['step_s']:.2f} s, {last['step_s']:.2f} s\n")
    print_step_table(stock, rows, label="bridge")
    print("\n## Greedy decoding step after encoding (batch 1), ms per token\n")
    print("| source tokens | stock (memory = source) | lin (memory = 50 slots) | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for source in (64, 1024, 4096):
        base, lin = run("stock", True, source), run("lin", True, source)
        print(
            f"| {source} | {base['ms_per_step']:.1f} | {lin['ms_per_step']:.1f} | "
            f"{lin['ms_per_step'] / base['ms_per_step']:.2f}x |"
        )


if __name__ == "__main__":
    main()
