"""The training loop every method of a recipe shares, and held-out evaluation.

One short loop rather than the `Trainer`, so that the comparison is visible in a few lines: every method gets the
same batches in the same order (their fingerprint is recorded), the same schedule shape and clipping, and differs
only in which parameters train and at what learning rate.
"""

from __future__ import annotations

import contextlib
import hashlib
import math

import torch
from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup


def fingerprint(batches: list[dict]) -> str:
    """A short hash of the batches' token ids and labels, in order: equal for every method of a recipe and seed."""
    digest = hashlib.sha1()
    for batch in batches:
        for key in ("input_ids", "labels"):
            if key in batch:
                digest.update(batch[key].cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def mixed_precision(device: str, dtype: str | None):
    """Autocast to `dtype` ("bfloat16", "float16") on `device`, or nothing: weights and optimiser states stay
    float32, as in the seeds' mixed-precision runs (updates of 2e-5 relative vanish in bf16 weights). Autocast's
    weight cache is off: it keeps the low-precision copy of every trainable weight for as long as the context is
    open, so training and evaluating in one context would run every step, and the evaluation, on the weights the
    first step cast."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=getattr(torch, dtype), cache_enabled=False)


def param_groups(model, lrs: dict[str, float], classify, weight_decay: float) -> list[dict]:
    """AdamW groups of the parameters that train: `classify(name)` names each one's learning-rate group (a key of
    `lrs`); matrices decay, vectors and partly trained tensors (see `budget.train_top_tensors`) do not."""
    groups: dict[tuple[str, bool], list] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = p.ndim >= 2 and not hasattr(p, "_interlayer_partial")
        groups.setdefault((classify(name), decay), []).append(p)
    unknown = {key for key, _ in groups} - set(lrs)
    if unknown:
        raise ValueError(f"no learning rate for the parameter groups {sorted(unknown)}; have {sorted(lrs)}.")
    return [
        {"params": params, "lr": lrs[key], "weight_decay": weight_decay if decay else 0.0}
        for (key, decay), params in sorted(groups.items())
    ]


def trainable_count(model) -> int:
    total = 0
    for p in model.parameters():
        if p.requires_grad:
            total += getattr(p, "_interlayer_partial", p.numel())
    return total


def train(
    model,
    groups: list[dict],
    batches: list[dict],
    warmup: float = 0.1,
    schedule: str = "linear",
    clip: float = 1.0,
    device="cpu",
    accumulation: int = 1,
    warmup_steps: int | None = None,
    label_smoothing: float = 0.0,
) -> dict:
    """AdamW over `batches` once, in order (a step per batch, computed in `accumulation` equal chunks), with
    warm-up (`warmup_steps`, or the share `warmup` of the steps) then `schedule` decay and gradient clipping; with
    `label_smoothing`, a classifier's loss is the cross-entropy of its logits with that smoothing (the model's own
    loss otherwise). Returns the mean training loss of the last quarter of the steps and the steps taken."""
    if schedule not in ("linear", "cosine"):
        raise ValueError(f"`schedule` must be 'linear' or 'cosine', got {schedule!r}.")
    optimizer = torch.optim.AdamW(groups)
    make = get_cosine_schedule_with_warmup if schedule == "cosine" else get_linear_schedule_with_warmup
    warm = warmup_steps if warmup_steps is not None else math.ceil(warmup * len(batches))
    scheduler = make(optimizer, num_warmup_steps=warm, num_training_steps=len(batches))
    params = [p for group in groups for p in group["params"]]
    model.train()
    losses = []
    for batch in batches:
        loss = 0.0
        for chunk in zip(*(v.to(device).chunk(accumulation) for v in batch.values())):
            inputs = dict(zip(batch, chunk))
            outputs = model(**inputs)
            if label_smoothing:
                logits = outputs.logits.float()
                part = torch.nn.functional.cross_entropy(logits, inputs["labels"], label_smoothing=label_smoothing)
            else:
                part = outputs.loss
            part = part / accumulation
            part.backward()
            loss += part.detach()
        torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"the training loss became {losses[-1]} at step {len(losses)}")
    tail = losses[-max(1, len(losses) // 4) :]
    return {"train_loss": sum(tail) / len(tail), "steps": len(losses)}


LOGITS_BUDGET = 2**30
"""Bytes of float32 logits the evaluation holds at once (1 GiB)."""


@torch.no_grad()
def lm_eval_loss(model, batches: list[dict], device="cpu", logits_budget: int = LOGITS_BUDGET) -> dict[str, float]:
    """Held-out causal-LM loss (mean over the predicted tokens), perplexity and next-token top-1 accuracy, without
    ever holding a whole batch's logits: a batch's rows run in groups whose float32 logits fit `logits_budget` bytes
    (a row at least), and the float32 cross-entropy runs over chunks of their positions of a quarter of that. (A
    batch of 32 x 1,024 tokens at Qwen3's vocabulary of 151,936 held its bf16 logits, a float32 copy and the
    cross-entropy's workspace at once: about 56 GiB.)"""
    model.eval()
    vocab = model.config.vocab_size
    total, right, tokens = 0.0, 0, 0
    for batch in batches:
        ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        length = ids.shape[1]
        rows = max(1, logits_budget // (length * vocab * 4))
        for start in range(0, len(ids), rows):
            part = slice(start, start + rows)
            logits = model(input_ids=ids[part].to(device), attention_mask=mask[part].to(device)).logits
            target = labels[part, 1:].to(device)
            width = max(1, logits_budget // 4 // (logits.shape[0] * vocab * 4))
            for at in range(0, length - 1, width):
                piece, goal = logits[:, at : min(at + width, length - 1)].float(), target[:, at : at + width]
                total += torch.nn.functional.cross_entropy(
                    piece.reshape(-1, piece.shape[-1]), goal.reshape(-1), ignore_index=-100, reduction="sum"
                ).item()
                right += ((piece.argmax(-1) == goal) & (goal != -100)).sum().item()
            tokens += (target != -100).sum().item()
            del logits
    loss = total / tokens
    return {"eval_loss": loss, "perplexity": math.exp(loss), "token_accuracy": right / tokens}


@torch.no_grad()
def classification_eval(model, batches: list[dict], device="cpu") -> dict[str, float]:
    """Held-out cross-entropy and accuracy of a sequence classifier."""
    model.eval()
    total, right, count = 0.0, 0, 0
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        labels = batch.pop("labels")
        logits = model(**batch).logits.float()
        total += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
        right += (logits.argmax(-1) == labels).sum().item()
        count += len(labels)
    return {"eval_loss": total / count, "accuracy": right / count}
