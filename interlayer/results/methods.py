"""The methods a recipe compares, and how each one's model is built from the same stock checkpoint.

A method is the mechanism (with the seed's recipe, the retrofit recipe, or trained alone) or a stock baseline:
LoRA and plain fine-tuning of the top tensors at the mechanism's trainable budget, and full fine-tuning. Learning
rates are per group: `base` (the stock weights), `new` (the mechanism's), `lora` (the adapters), `head` (a task
head every method trains).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .budget import (
    apply_lora,
    head_parameters,
    lora_layout,
    mechanism_parameters,
    train_top_tensors,
    warn_off_budget,
)

TRAINS = ("mechanism", "mechanism+base", "lora", "top", "all")


@dataclass(frozen=True)
class Method:
    """`mechanism`: None for the stock model; `options`: its conversion options; `trains`: which parameters train
    (one of `TRAINS`; a task head always trains); `lrs`: the learning rate of each group that trains."""

    mechanism: str | None
    options: dict
    trains: str
    lrs: dict
    schedule: str = "linear"
    about: str = ""
    label_smoothing: float = 0.0
    convert_kwargs: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.trains not in TRAINS:
            raise ValueError(f"`trains` must be one of {list(TRAINS)}, got {self.trains!r}.")


def budget_of(checkpoint: str, method: Method) -> int:
    """The number of parameters `method`'s mechanism adds to the checkpoint."""
    from ..zoo import convert

    model, _ = convert(checkpoint, method.mechanism, **method.convert_kwargs, **method.options)
    return sum(p.numel() for p in mechanism_parameters(model).values())


def build(method: Method, checkpoint: str, budget_method: Method, seed: int, auto_class, lora_sets, **kw):
    """The model of `method` in float32 (the optimiser's weights; lower precision comes from autocast), with
    `requires_grad` set, a function naming each trainable parameter's learning-rate group, and details of the layout
    (LoRA's, or the top tensors trained: chosen so that as many parameters train as `budget_method`'s mechanism
    adds). `seed` seeds every new parameter's initialisation."""
    from ..zoo import convert

    torch.manual_seed(seed)
    details: dict = {}
    if method.mechanism is not None:
        model, _ = convert(checkpoint, method.mechanism, **method.convert_kwargs, **method.options)
        head = set(head_parameters(model))
        for name, p in model.named_parameters():
            mine = model.is_mechanism_parameter(name)
            p.requires_grad_(mine or name in head or method.trains == "mechanism+base")
        classify = lambda name: "new" if model.is_mechanism_parameter(name) else "head" if name in head else "base"  # noqa: E731
        return model.float(), classify, details
    model = auto_class.from_pretrained(checkpoint, dtype=torch.float32, **kw)
    head = set(head_parameters(model))
    classify = lambda name: "head" if name in head or "modules_to_save" in name else "base"  # noqa: E731
    if method.trains == "all":
        return model, classify, details
    budget = budget_of(checkpoint, budget_method)
    details["budget"] = budget
    if method.trains == "lora":
        layout = lora_layout(model, budget, lora_sets)
        details["lora"] = layout.describe()
        details["budget_used"] = layout.params
        warn_off_budget(f"LoRA ({layout.describe()})", layout.params, budget)
        head_modules = sorted({name.split(".")[0] for name in head})
        model = apply_lora(model, layout, modules_to_save=head_modules or None)
        return model, (lambda name: "head" if "modules_to_save" in name else "lora"), details
    details["budget_used"], details["top_tensors"] = train_top_tensors(model, budget)
    warn_off_budget("plain fine-tuning of the top tensors", details["budget_used"], budget)
    for name, p in model.named_parameters():
        if name in head:
            p.requires_grad_(True)
    return model, classify, details


def save_model(model, checkpoint: str, folder) -> tuple[int, object]:
    """Save a trained model as anyone (lm-eval too) loads it: LoRA merged into the weights, in bf16, with the
    checkpoint's tokenizer beside it. Returns the bytes of its weight files, and the model saved (the merged one for
    LoRA; in bf16)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model = model.to(torch.bfloat16)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(checkpoint).save_pretrained(folder)
    return sum(f.stat().st_size for f in Path(folder).glob("*.safetensors")), model
