"""Greedy generation without a cache: the reference a cached `generate` is compared with."""

import torch


def greedy_without_cache(model, prompt, steps):
    """`steps` greedy tokens after `prompt`, each from a full forward pass without a cache."""
    ids = prompt
    for _ in range(steps):
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits
        ids = torch.cat([ids, logits[:, -1:].argmax(-1)], dim=1)
    return ids
