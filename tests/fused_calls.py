"""Counting the compiled calls of a `zoo_common.Fused` function: which path a model took."""

from interlayer.models.zoo_common import Fused


def counting_fused(monkeypatch, module, name: str, backend=None) -> list:
    """Replace the `Fused` function `module.<name>` by a fresh `Fused` of the same function (compiled anew with
    `backend` when given) whose compiled calls are appended, by the function's name, to the returned list."""
    original = getattr(module, name)
    fused = Fused(original.fn, original.dynamic_dims)
    if backend is not None:
        fused.backend = backend
    calls = []
    compiled = fused.compile()

    def counted(*args):
        calls.append(fused.fn.__name__)
        return compiled(*args)

    fused.compiled = counted
    monkeypatch.setattr(module, name, fused)
    return calls
