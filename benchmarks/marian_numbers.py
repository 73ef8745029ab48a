#!/usr/bin/env python
"""A small real-task demonstration of attention bridges on CPU: translating numbers written out in words between
English, German, French and Spanish, with one shared encoder, one shared bridge and a decoder per target language,
trained from scratch, against the same model without a bridge; plus zero-shot translation between language pairs
never seen in training.

    python benchmarks/marian_numbers.py --out runs/marian_numbers              # every model, then the table
    python benchmarks/marian_numbers.py --out runs/marian_numbers --report_only

Data (`interlayer.number_words`): the numbers 0..999 in the four languages, characters as tokens. 100 numbers drawn at
random (seed 1234) are held out of training in every language (every word still occurs in training: holding out
every number ending in 3 or 8 instead left the models at 4% exact match on the trained pairs). Training is
English-centric: en->de, en->fr, en->es, de->en, fr->en, es->en; the zero-shot pairs de<->fr, de<->es, fr<->es are
never trained. Each step trains one pair (in turn) on a batch of numbers; the target language picks the decoder
(`tgt_lang`). Evaluation: greedy `generate()` on the held-out numbers, exact match of the whole string.

Model: a tiny Marian (d_model 128, 2 encoder and 2 decoder layers, 4 heads, FFN 512, dropout 0.1), four decoders;
bridges `none` (`bridge_layers=[]`), `lin` and `perceiver` by default, `transformer` on request (fixed length 16,
hidden 256). AdamW lr 1e-3, 5% warm-up then linear decay, `--steps` steps of `--batch` examples, seed `--seed`,
2 threads. Finished models in `--out` are reused. Prints the markdown table recorded in docs/attention_bridges.md.
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from interlayer import MarianAttentionBridgeConfig, MarianAttentionBridgeForConditionalGeneration  # noqa: E402
from interlayer.number_words import LANGUAGES, CharVocabulary, number_words  # noqa: E402

BRIDGES = {
    "none": [],
    "lin": ["lin"],
    "perceiver": ["perceiver"],
    "transformer": ["transformer"],
}
TRAINED = [("en", "de"), ("en", "fr"), ("en", "es"), ("de", "en"), ("fr", "en"), ("es", "en")]
ZERO_SHOT = [("de", "fr"), ("fr", "de"), ("de", "es"), ("es", "de"), ("fr", "es"), ("es", "fr")]
HELD_OUT = sorted(random.Random(1234).sample(range(1000), 100))
TRAIN_NUMBERS = [n for n in range(1000) if n not in set(HELD_OUT)]


def make_model(vocab: CharVocabulary, bridge: str, seed: int) -> MarianAttentionBridgeForConditionalGeneration:
    torch.manual_seed(seed)
    config = MarianAttentionBridgeConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=128,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=512,
        decoder_ffn_dim=512,
        max_position_embeddings=64,
        dropout=0.1,
        scale_embedding=True,
        pad_token_id=vocab.PAD,
        decoder_start_token_id=vocab.PAD,
        eos_token_id=vocab.EOS,
        forced_eos_token_id=None,
        bridge_layers=BRIDGES[bridge],
        bridge_fixed_length=16,
        bridge_hidden_size=256,
        bridge_heads=4,
        decoder_languages=list(LANGUAGES),
    )
    return MarianAttentionBridgeForConditionalGeneration(config)


def encode(vocab, texts, pad_value):
    ids = [vocab.encode(t) for t in texts]
    width = max(map(len, ids))
    out = torch.full((len(ids), width), pad_value, dtype=torch.long)
    for i, row in enumerate(ids):
        out[i, : len(row)] = torch.tensor(row)
    return out


def batch_for(vocab, numbers, source, target):
    input_ids = encode(vocab, [number_words(n, source) for n in numbers], vocab.PAD)
    labels = encode(vocab, [number_words(n, target) for n in numbers], -100)
    return {"input_ids": input_ids, "attention_mask": (input_ids != vocab.PAD).long(), "labels": labels}


def train(model, vocab, steps: int, batch_size: int, seed: int) -> float:
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    warmup = max(1, steps // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup)))
    )
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        source, target = TRAINED[step % len(TRAINED)]
        batch = batch_for(vocab, rng.sample(TRAIN_NUMBERS, batch_size), source, target)
        loss = model(**batch, tgt_lang=target).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
    return (time.perf_counter() - start) / 60


@torch.no_grad()
def accuracy(model, vocab, source, target, numbers=HELD_OUT) -> float:
    model.eval()
    batch = batch_for(vocab, numbers, source, target)
    generated = model.generate(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        tgt_lang=target,
        max_new_tokens=48,
        do_sample=False,
    )
    hits = sum(vocab.decode(row.tolist()) == number_words(n, target) for row, n in zip(generated, numbers))
    return hits / len(numbers)


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
    vocab = CharVocabulary()
    results = {}
    for bridge in args.bridges:
        path = Path(args.out) / f"{bridge}-seed{args.seed}.json"
        if not path.exists() and not args.report_only:
            model = make_model(vocab, bridge, args.seed)
            minutes = train(model, vocab, args.steps, args.batch, args.seed)
            result = {
                "bridge": bridge,
                "steps": args.steps,
                "minutes": minutes,
                "parameters": sum(p.numel() for p in model.parameters()),
                "trained": {f"{s}->{t}": accuracy(model, vocab, s, t) for s, t in TRAINED},
                "zero_shot": {f"{s}->{t}": accuracy(model, vocab, s, t) for s, t in ZERO_SHOT},
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
