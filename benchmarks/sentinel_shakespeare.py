#!/usr/bin/env python
"""Sentinel-gated GPT-2 on tinyshakespeare: pruning strategies, the controller, and the speed of pruned models.

    python benchmarks/sentinel_shakespeare.py --out runs/sentinel              # the figures in docs/sentinel.md
    python benchmarks/sentinel_shakespeare.py --out /tmp/s --steps 50 --quick  # a smoke run
    python benchmarks/sentinel_shakespeare.py --out runs/sentinel-ctl --parts controller --steps 300 \
        --controller_steps 150 --batch 8 --block 64 --threads 1                # the controller figure only

No real GPT-2 weights are available offline, so the "stock checkpoint" is a GPT-2-architecture model trained here
from scratch on `../shared/data/tinyshakespeare/input.txt` (first 90% of the text; the last 10% is validation),
with a byte-level BPE tokenizer trained on the same 90%. It is cached in `--out/stock`.

Then, all on the same validation blocks:
1. pruning: for each strategy (entropy, magnitude, random, importance) and fraction (30/50/70% of heads), convert,
   prune structurally (entropy and importance are scored on training batches), measure perplexity, fine-tune
   briefly, measure again;
2. controller: fine-tune the converted model with the plain Trainer, and with L1 gate pressure plus
   `SentinelControllerCallback`; compare perplexity and how many heads the controller masked, then remove the
   masked heads with `prune_masked_heads()` and measure again;
3. speed: forward and greedy-generation time of pruned models as ratios to the unpruned gated model, next to the
   fraction of attention FLOPs removed, and the gated unpruned model against stock GPT-2.
Prints markdown tables and writes `results.json` and a gate heat-map of the controller run into `--out`.
"""

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, Trainer, TrainingArguments  # noqa: E402

from interlayer import GPT2SentinelLMHeadModel  # noqa: E402
from interlayer.pictures import draw_sentinel_gates  # noqa: E402
from interlayer.sentinel import STRATEGIES, SentinelControllerCallback, prune_by_strategy  # noqa: E402
from interlayer.training import lm_batches, lm_blocks, train_byte_bpe  # noqa: E402


def rows(blocks):
    return [{"input_ids": b, "attention_mask": torch.ones_like(b), "labels": b.clone()} for b in blocks]


def train(model, blocks, steps, lr, out, callbacks=(), seed=0, batch=16):
    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=batch,
        max_steps=steps,
        learning_rate=lr,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        weight_decay=0.01,
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=seed,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows(blocks), callbacks=list(callbacks))
    trainer.train()
    return trainer


@torch.no_grad()
def perplexity(model, batches):
    model.eval()
    losses = [
        model(**b).loss.item() if not hasattr(model, "gated_attentions") else model(**b).lm_loss.item() for b in batches
    ]
    return math.exp(statistics.mean(losses))


@torch.no_grad()
def timed(fn, repeats=5):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="runs/sentinel")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"))
    parser.add_argument("--steps", type=int, default=2000, help="training steps of the stock model")
    parser.add_argument("--finetune_steps", type=int, default=100)
    parser.add_argument("--controller_steps", type=int, default=600)
    parser.add_argument(
        "--controller_lr",
        type=float,
        default=5.0,
        help="the controller's lr (seed: 0.01, which moves a logit by at most 0.0015 per update)",
    )
    parser.add_argument("--eval_batches", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="one fraction, fewer timings")
    parser.add_argument(
        "--parts",
        default="pruning,controller,speed",
        help="comma-separated subset of pruning, controller, speed (the stock checkpoint is built when missing)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16, help="training batch size (stock model and fine-tunes)")
    parser.add_argument("--block", type=int, default=128, help="tokens per training and validation block")
    args = parser.parse_args()
    parts = set(args.parts.split(",")) - {""}
    unknown = parts - {"stock", "pruning", "controller", "speed"}
    if unknown:
        sys.exit(f"--parts: unknown {sorted(unknown)}")
    if not Path(args.data).exists():
        sys.exit(f"tinyshakespeare not found at {args.data} (it comes from the project's ../shared/data folder)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    out = Path(args.out)
    text = Path(args.data).read_text()
    cut = int(0.9 * len(text))
    stock_dir = out / "stock"
    if not (stock_dir / "config.json").exists():
        tokenizer = train_byte_bpe(text[:cut], vocab_size=1024)
        config = GPT2Config(
            n_layer=6,
            n_embd=256,
            n_head=8,
            n_positions=128,
            vocab_size=len(tokenizer),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        model = GPT2LMHeadModel(config)
        train_blocks = lm_blocks(tokenizer(text[:cut])["input_ids"], args.block)
        start = time.perf_counter()
        train(model, train_blocks, args.steps, 1e-3, out / "stock-trainer", batch=args.batch)
        print(f"trained the stock model: {args.steps} steps in {(time.perf_counter() - start) / 60:.1f} min")
        model.save_pretrained(stock_dir)
        tokenizer.save_pretrained(stock_dir)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(stock_dir)
    train_blocks = lm_blocks(tokenizer(text[:cut])["input_ids"], args.block)
    val = lm_batches(lm_blocks(tokenizer(text[cut:])["input_ids"], args.block), 8, limit=args.eval_batches)
    score = lm_batches(train_blocks[torch.randperm(len(train_blocks))[:64]], 8)
    stock = GPT2LMHeadModel.from_pretrained(stock_dir)
    results = {"stock_ppl": perplexity(stock, val)}
    print(f"stock validation perplexity: {results['stock_ppl']:.2f}")

    fractions = (0.5,) if args.quick else (0.3, 0.5, 0.7)
    if "pruning" in parts:
        print("\n| strategy | heads pruned | ppl after pruning | ppl after fine-tune |")
        print("| --- | ---: | ---: | ---: |")
        results["pruning"] = []
        for fraction in fractions:
            for strategy in STRATEGIES:
                torch.manual_seed(0)
                model = GPT2SentinelLMHeadModel.from_pretrained(stock_dir)
                prune_by_strategy(model, fraction, strategy, score, seed=0)
                pruned_ppl = perplexity(model, val)
                train(model, train_blocks, args.finetune_steps, 3e-4, out / "ft", batch=args.batch)
                tuned_ppl = perplexity(model, val)
                results["pruning"].append(dict(strategy=strategy, fraction=fraction, ppl=pruned_ppl, ppl_ft=tuned_ppl))
                print(f"| {strategy} | {fraction:.0%} | {pruned_ppl:.2f} | {tuned_ppl:.2f} |", flush=True)

    if "controller" in parts:
        print(
            "\n| run | steps | minutes | validation ppl | heads masked | ppl after pruning them | heads left | "
            "mean gate of the rest |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        results["controller"] = []
        for name in ("plain", "controller + L1"):
            torch.manual_seed(0)
            l1 = 1e-4 if name != "plain" else 0.0
            model = GPT2SentinelLMHeadModel.from_pretrained(stock_dir, gate_l1=l1)
            callbacks = []
            if name != "plain":
                callbacks.append(
                    SentinelControllerCallback(
                        warmup_steps=args.controller_steps // 6,
                        update_frequency=max(1, args.controller_steps // 30),
                        learning_rate=args.controller_lr,
                        lr_floor=args.controller_lr / 10,
                    )
                )
            start = time.perf_counter()
            train(model, train_blocks, args.controller_steps, 3e-4, out / "ctl", callbacks, batch=args.batch)
            minutes = (time.perf_counter() - start) / 60
            ppl = perplexity(model, val)
            masked = sum(int((a.sentinel_head_mask == 0).sum()) for a in model.gated_attentions)
            if name != "plain":
                draw_sentinel_gates(model, str(out / "controller_gates.png"))
            else:
                # baseline for the controller's choice: as many heads as its budget, chosen at random
                random_model = GPT2SentinelLMHeadModel.from_pretrained(stock_dir)
                random_model.load_state_dict(model.state_dict())
                prune_by_strategy(random_model, 0.3, "random", seed=0)
                results["controller_random_baseline_ppl"] = perplexity(random_model, val)
                print(
                    f"(plain, then 30% of heads pruned at random: ppl {results['controller_random_baseline_ppl']:.2f})"
                )
            model.prune_masked_heads()
            pruned_ppl = perplexity(model, val)
            heads = sum(a.num_heads for a in model.gated_attentions)
            mean_gate = torch.cat(model.gate_values()).mean().item()
            results["controller"].append(
                dict(run=name, ppl=ppl, masked=masked, pruned_ppl=pruned_ppl, heads=heads, mean_gate=mean_gate)
            )
            print(
                f"| {name} | {args.controller_steps} | {minutes:.1f} | {ppl:.2f} | {masked} | {pruned_ppl:.2f} | "
                f"{heads} | {mean_gate:.3f} |",
                flush=True,
            )

    if "speed" in parts:
        print("\n| model | heads | attention FLOPs removed | forward ratio | generation ratio |")
        print("| --- | ---: | ---: | ---: | ---: |")
        prompt = val[0]["input_ids"][:1, :16]
        batch = {"input_ids": val[0]["input_ids"], "attention_mask": val[0]["attention_mask"]}
        repeats = 3 if args.quick else 7

        def speed(model):
            model.eval()
            fwd = timed(lambda: model(**batch), repeats)
            gen = timed(
                lambda: model.generate(prompt, max_new_tokens=48, min_new_tokens=48, do_sample=False, pad_token_id=0),
                repeats,
            )
            return fwd, gen

        stock_fwd, stock_gen = speed(stock)
        gated = GPT2SentinelLMHeadModel.from_pretrained(stock_dir)
        base_fwd, base_gen = speed(gated)
        print(f"| stock GPT-2 | 48 | - | {stock_fwd / base_fwd:.2f}x | {stock_gen / base_gen:.2f}x |")
        print("| gated, unpruned (reference) | 48 | 0% | 1.00x | 1.00x |")
        results["speed"] = [dict(model="stock", fwd_ratio=stock_fwd / base_fwd, gen_ratio=stock_gen / base_gen)]
        for fraction in fractions:
            model = GPT2SentinelLMHeadModel.from_pretrained(stock_dir)
            prune_by_strategy(model, fraction, "importance", score)
            fwd, gen = speed(model)
            heads = sum(a.num_heads for a in model.gated_attentions)
            results["speed"].append(
                dict(model=f"pruned {fraction:.0%}", fwd_ratio=fwd / base_fwd, gen_ratio=gen / base_gen)
            )
            print(
                f"| pruned {fraction:.0%} (importance) | {heads} | {1 - heads / 48:.0%} | {fwd / base_fwd:.2f}x | "
                f"{gen / base_gen:.2f}x |",
                flush=True,
            )
    name = "results.json" if parts >= {"pruning", "controller", "speed"} else f"results_{'_'.join(sorted(parts))}.json"
    (out / name).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
