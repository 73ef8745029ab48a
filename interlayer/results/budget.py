"""Trainable-parameter budgets: which parameters are the mechanism's, and the baselines that train as many.

A comparison at equal budget gives every method the same number of trainable parameters: the mechanism's new
parameters; LoRA (PEFT) with a layout whose adapter size is closest to it; plain fine-tuning of the stock model's
top tensors (the last layers, from the final norm down), the last tensor trained in part (its first elements) so the
count is exact where the model has enough non-embedding tensors. A task head that every method needs (a classifier)
trains in every method and is not counted. Neither baseline always meets the budget: LoRA moves in whole ranks of
whole modules, and a small model can run out of tensors. Each run records its budget and what it trains against it
(`budget`, `budget_used`), a warning says where the two differ by more than `BUDGET_TOLERANCE`, and the report
prints the share beside every baseline.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import torch

LAYER_INDEX = re.compile(r"\.(\d+)\.")
BUDGET_TOLERANCE = 0.05
"""How far a baseline's trained parameters may be from the mechanism's budget (relative) before the run warns and the
report flags it."""


def budget_gap(used: int, budget: int) -> str:
    """'' where `used` is within `BUDGET_TOLERANCE` of `budget`; else what the shortfall or excess is, in words."""
    share = used / budget
    if abs(share - 1) <= BUDGET_TOLERANCE:
        return ""
    side = "short of" if share < 1 else "over"
    return f"{used:,} of a budget of {budget:,} ({share:.1%}: {side} it by more than {BUDGET_TOLERANCE:.0%})"


def warn_off_budget(what: str, used: int, budget: int) -> None:
    gap = budget_gap(used, budget)
    if gap:
        warnings.warn(f"{what} trains {gap}; the record and the report say so.", stacklevel=3)


def mechanism_parameters(model) -> dict[str, torch.nn.Parameter]:
    return {name: p for name, p in model.named_parameters() if model.is_mechanism_parameter(name)}


def head_parameters(model) -> dict[str, torch.nn.Parameter]:
    """The task head's parameters: those outside the base model and not the mechanism's, minus an LM head tied to
    the input embeddings (it is the base model's)."""
    prefix = model.base_model_prefix + "."
    mechanism = mechanism_parameters(model) if hasattr(model, "is_mechanism_parameter") else {}
    tied = {id(p) for name, p in model.named_parameters() if name.startswith(prefix)}
    return {
        name: p
        for name, p in model.named_parameters()
        if not name.startswith(prefix) and name not in mechanism and id(p) not in tied and "lm_head" not in name
    }


def count(params) -> int:
    return sum(p.numel() for p in params)


@dataclass(frozen=True)
class LoraLayout:
    target_modules: tuple[str, ...]
    layers: tuple[int, ...]
    rank: int
    params: int

    def describe(self) -> str:
        layers = f"layers {self.layers[0]}-{self.layers[-1]}" if len(self.layers) > 1 else f"layer {self.layers[0]}"
        return f"r={self.rank} on {', '.join(self.target_modules)} of {layers} ({self.params:,} params)"


def linear_shapes(model, names: tuple[str, ...]) -> dict[int, dict[str, int]]:
    """For each layer index, the LoRA parameters per rank (in + out features) of every linear module whose name ends
    with one of `names` (as PEFT's `target_modules` matches), keyed by the module's full name."""
    shapes: dict[int, dict[str, int]] = {}
    for full, module in model.named_modules():
        found = LAYER_INDEX.search(full)
        if isinstance(module, torch.nn.Linear) and found and any(full.endswith("." + n) for n in names):
            shapes.setdefault(int(found.group(1)), {})[full] = module.in_features + module.out_features
    return shapes


def lora_layout(model, budget: int, module_sets: list[tuple[str, ...]], max_rank: int = 256) -> LoraLayout:
    """The LoRA layout (module set, the last n layers, rank) with the adapter size closest to `budget`; among those
    within 1% of the best, the earlier module set and the most layers (the usual choice: every layer). The closest
    may still be off by more than `BUDGET_TOLERANCE` (a budget below one rank of the smallest module set)."""
    if budget <= 0:
        raise ValueError(f"a LoRA budget must be positive, got {budget}.")
    candidates = []
    for preference, names in enumerate(module_sets):
        shapes = linear_shapes(model, names)
        layers = sorted(shapes)
        if not layers or any(not any(f.endswith("." + n) for f in shapes[i]) for i in layers for n in names):
            continue
        for n in range(len(layers), 0, -1):
            chosen = tuple(layers[-n:])
            per_rank = sum(sum(shapes[i].values()) for i in chosen)
            for rank in {min(max_rank, max(1, budget // per_rank)), min(max_rank, max(1, -(-budget // per_rank)))}:
                params = rank * per_rank
                candidates.append(
                    (abs(params - budget) / budget, preference, -n, LoraLayout(names, chosen, rank, params))
                )
    if not candidates:
        raise ValueError(f"{type(model).__name__} has none of the module sets {module_sets} in every layer.")
    best = min(c[0] for c in candidates)
    return min((c for c in candidates if c[0] <= best + 0.01), key=lambda c: (c[1], c[2], c[0]))[3]


def apply_lora(model, layout: LoraLayout, modules_to_save: list[str] | None = None, dropout: float = 0.0):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=layout.rank,
        lora_alpha=2 * layout.rank,
        lora_dropout=dropout,
        target_modules=list(layout.target_modules),
        layers_to_transform=list(layout.layers),
        modules_to_save=modules_to_save,
    )
    return get_peft_model(model, config)


def first_elements(grad: torch.Tensor, part: int) -> torch.Tensor:
    """`grad` with every element after its first `part` (flattened) zeroed: built from the gradient itself, so it
    follows the parameter to any device and dtype."""
    kept = grad.clone()
    kept.view(-1)[part:] = 0
    return kept


def train_top_tensors(model, budget: int) -> tuple[int, list[str]]:
    """Plain fine-tuning at a budget: freeze the base model, then unfreeze its tensors from the top (the final norm,
    then the last layer's tensors, then the layer below...) until `budget` elements train; the last tensor trains
    only its first elements (a gradient hook zeroes the rest of its gradient, whatever device or dtype the model is
    moved to later). Embeddings never train, so a model with fewer non-embedding elements than `budget` trains them
    all and falls short. Returns the count that trains (at most `budget`) and the names trained (the partial one
    last)."""
    prefix = model.base_model_prefix + "."
    base = [(n, p) for n, p in model.named_parameters() if n.startswith(prefix)]
    for _, p in base:
        p.requires_grad_(False)

    def order(item):
        found = LAYER_INDEX.search(item[0])
        return -(int(found.group(1)) if found else 10**9)

    candidates = [(n, p) for n, p in base if "embed" not in n and "wte" not in n and "wpe" not in n]
    # stable sort: the final norm (no layer index) first, then layers from the last down, each in reverse order
    candidates = sorted(reversed(candidates), key=order)
    total, names = 0, []
    for name, p in candidates:
        if total >= budget:
            break
        p.requires_grad_(True)
        names.append(name)
        if total + p.numel() <= budget:
            total += p.numel()
            continue
        part = budget - total
        p.register_hook(lambda grad, part=part: first_elements(grad, part))
        p._interlayer_partial = part
        total += part
    return total, names
