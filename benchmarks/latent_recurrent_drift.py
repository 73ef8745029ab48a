#!/usr/bin/env python
"""How far `latent_source="recurrent"` generation drifts from what training computed, on real text.

    python benchmarks/latent_recurrent_drift.py --model runs/gsm8k/latent --texts 8

A latent model trained with `previous_position` latents (recurrent mode trains that way) is loaded twice: as trained
(`previous_position`) and in `recurrent` mode. Each held-out GSM8K text (question and answer, the last 10%
of `../shared/data/gsm8k/train.jsonl`, the split `run_clm.py --validation_split_percentage 10` holds out) is scored
token by token with the KV cache after a one-token prompt: `previous_position` reproduces the training-time logits
(up to float rounding); `recurrent` takes each token's latents from the previous token's latent-applied pass, as
the seed's inference does. Reported: the largest and mean absolute logit difference to the training-time forward,
the mean KL divergence (training-time || decoded) per token, how often the top-1 token differs, and the perplexity
each gives the text.
"""

import argparse
import json
import math
import os

import torch

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "gsm8k", "train.jsonl")


def held_out_texts(n: int) -> list[str]:
    with open(DATA) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    held_out = rows[len(rows) - len(rows) // 10 :]
    return [r["question"] + "\n" + r["answer"] for r in held_out[:n]]


def decoded_logits(model, input_ids):
    with torch.no_grad():
        out = model(input_ids[:, :1], use_cache=True)
        steps = [out.logits]
        for t in range(1, input_ids.shape[1]):
            out = model(input_ids[:, t : t + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits)
    return torch.cat(steps, dim=1)


def compare(reference, logits, input_ids) -> dict:
    ref_logp, logp = reference.log_softmax(-1)[0, :-1], logits.log_softmax(-1)[0, :-1]
    targets = input_ids[0, 1:]
    return {
        "max_abs": (reference - logits).abs().max().item(),
        "mean_abs": (reference - logits).abs().mean().item(),
        "kl": (ref_logp.exp() * (ref_logp - logp)).sum(-1).mean().item(),
        "top1_changed": (ref_logp.argmax(-1) != logp.argmax(-1)).float().mean().item(),
        "nll": -logp.gather(-1, targets[:, None]).mean().item(),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="a latent model folder (trained, e.g. by run_clm.py)")
    parser.add_argument("--texts", type=int, default=8)
    parser.add_argument("--max_tokens", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(2)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import interlayer  # noqa: F401  (registers the zoo's classes)

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    models = {
        source: AutoModelForCausalLM.from_pretrained(args.model, latent_source=source).eval()
        for source in ("previous_position", "recurrent")
    }
    totals = {source: [] for source in models}
    reference_nll = []
    for text in held_out_texts(args.texts):
        input_ids = tokenizer(text, return_tensors="pt").input_ids[:, : args.max_tokens]
        with torch.no_grad():
            reference = models["previous_position"](input_ids).logits
        reference_nll.append(compare(reference, reference, input_ids)["nll"])
        for source, model in models.items():
            totals[source].append(compare(reference, decoded_logits(model, input_ids), input_ids))
    print(f"held-out GSM8K texts: {args.texts} (up to {args.max_tokens} tokens each)\n")
    print("| decoding | max abs logit diff | mean abs logit diff | mean KL | top-1 changed | perplexity |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    ref_ppl = math.exp(sum(reference_nll) / len(reference_nll))
    print(f"| training-time forward (reference) | 0 | 0 | 0 | 0% | {ref_ppl:.3f} |")
    for source, rows in totals.items():
        mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
        biggest = max(r["max_abs"] for r in rows)
        print(
            f"| {source}, cached one token at a time | {biggest:.2e} | {mean['mean_abs']:.2e} | {mean['kl']:.2e} | "
            f"{100 * mean['top1_changed']:.1f}% | {math.exp(mean['nll']):.3f} |"
        )


if __name__ == "__main__":
    main()
