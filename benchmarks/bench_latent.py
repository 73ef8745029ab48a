#!/usr/bin/env python
"""Speed and memory of latent back-projection as ratios to the stock Llama model, measured in the same run.

    python benchmarks/bench_latent.py              # SmolLM2-135M shape, batch 4 x 256 training, batch 1 generation
    python benchmarks/bench_latent.py --quick      # fewer steps

Training step (forward + backward + AdamW, fp32, 2 threads): the stock model trains every parameter; the latent
model trains its projections and gates on a frozen base (its default) or everything (`freeze_base=False`). Median
step time and peak resident memory above what the process held before the steps (weights, gradients and optimizer
state excluded), each configuration in its own subprocess (see `interlayer.bench`).

Generation: greedy tokens/s with the KV cache (prompt 64, 32 new tokens, batch 1), best of 3, for each
`latent_source`, and for `previous_position` also with its two passes run one after the other instead of as one
batch of 2B rows (the same arithmetic, checked equal); "stock, 2 sequences" is the stock model decoding two
sequences at once (decoding steps per second), the cost of a step of two rows on this machine. Random weights of
the SmolLM2-135M shape with the seed's initialisation (the cost does not depend on the values). Prints markdown
tables; docs/latent.md records them.
"""

import argparse

import torch

from interlayer.bench import (
    SMOLLM2_SHAPE,
    against_stock,
    emit,
    generation_speed,
    measure_training,
    print_step_table,
    run_worker,
)

TRAINING = {
    "stock": None,
    "latent (frozen base)": dict(),
    "latent (all parameters)": dict(freeze_base=False),
}
GENERATION = {
    "stock": None,
    "stock, 2 sequences (steps/s)": None,
    "previous_position": dict(latent_source="previous_position"),
    "previous_position, passes one after the other": dict(latent_source="previous_position"),
    "same_position": dict(latent_source="same_position"),
    "recurrent": dict(latent_source="recurrent"),
}


def build(options):
    from transformers import LlamaConfig, LlamaForCausalLM

    from interlayer import LlamaLatentConfig, LlamaLatentForCausalLM

    torch.manual_seed(0)
    if options is None:
        return LlamaForCausalLM(LlamaConfig(**SMOLLM2_SHAPE))
    return LlamaLatentForCausalLM(LlamaLatentConfig(**SMOLLM2_SHAPE, identity_init=False, **options))


def sequential_passes(model) -> None:
    """Make `model`'s `previous_position` decoding run the stock pass, then the latent pass (as a prompt does)."""
    model.model.passes.forward = model.model.passes.one_after_the_other


def worker(name: str, batch: int, seq: int, steps: int, generation: bool) -> dict:
    torch.set_num_threads(2)
    if generation:
        model = build(GENERATION[name]).eval()
        prompt = torch.randint(100, 40000, (2 if "2 sequences" in name else 1, 64))
        if name.endswith("one after the other"):
            kwargs = dict(max_new_tokens=32, do_sample=False, pad_token_id=0)
            batched = model.generate(prompt, **kwargs)
            sequential_passes(model)
            assert torch.equal(model.generate(prompt, **kwargs), batched)
        return {"tokens_per_s": generation_speed(model, prompt)}
    model = build(TRAINING[name])
    ids = torch.randint(100, 40000, (batch, seq))
    return measure_training(model, steps, input_ids=ids, labels=ids)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--generation", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--generation-only", action="store_true", help="only the generation table")
    args = parser.parse_args()
    common = ["--batch", str(args.batch), "--seq", str(args.seq)]
    if args.worker:
        emit(worker(args.worker, args.batch, args.seq, args.steps, args.generation))
        return
    steps = 3 if args.quick else args.steps

    def run(name, generation=False):
        extra = ["--generation"] if generation else ["--steps", str(steps)]
        return run_worker(__file__, ["--worker", name, *common, *extra], memory=not generation)

    if not args.generation_only:
        training_table(run, args.batch, args.seq)
    generation_table(run)


def training_table(run, batch: int, seq: int):
    print(f"## Training step, Llama 30 x 576 (SmolLM2-135M shape), batch {batch} x {seq}\n")
    stock, first, last, rows = against_stock(
        lambda: run("stock"), lambda: [(n, run(n)) for n in TRAINING if n != "stock"]
    )
    print(f"stock step time, first and last run: {first['step_s']:.2f} s, {last['step_s']:.2f} s\n")
    print_step_table(stock, rows, name="stock (all parameters)")


def generation_table(run):
    print("\n## Greedy generation with the KV cache (prompt 64, 32 new tokens, batch 1)\n")
    print("| model | tokens/s | ratio to stock |")
    print("| --- | ---: | ---: |")
    base, _, _, rows = against_stock(
        lambda: run("stock", generation=True),
        lambda: [(n, run(n, generation=True)) for n in GENERATION if n != "stock"],
        key="tokens_per_s",
        lower=False,
    )
    for name, r in [("stock", base), *rows]:
        print(f"| {name} | {r['tokens_per_s']:.1f} | {r['tokens_per_s'] / base['tokens_per_s']:.2f}x |")


if __name__ == "__main__":
    main()
