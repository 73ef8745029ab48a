"""Counting the compiled calls of a `zoo_common.Fused` function: which path a model took."""

import torch

from interlayer.models.zoo_common import Fused


def counting_fused(monkeypatch, module, name: str, backend=None) -> list:
    """Replace the `Fused` function `module.<name>` by a fresh `Fused` of the same function (compiled anew with
    `backend` when given) whose compiled calls are appended, by the function's name, to the returned list."""
    fused = Fused(getattr(module, name).fn)
    if backend is not None:
        fused.backend = backend
    calls = []
    compiled = torch.compile(fused.fn, fullgraph=True, backend=fused.backend)

    def counted(*args):
        calls.append(fused.fn.__name__)
        return compiled(*args)

    fused.compiled = counted
    monkeypatch.setattr(module, name, fused)
    return calls
