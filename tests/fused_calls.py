"""Counting the compiled calls of a `zoo_common.Fused` function: which path a model took."""

from interlayer.models.zoo_common import Fused


def counting_fused(monkeypatch, module, name: str, backend=None) -> list:
    """Replace the `Fused` function `module.<name>` by a fresh `Fused` of the same function (compiled anew with
    `backend` when given) whose compiled calls, of every kind, are appended, by the function's name, to the returned
    list."""
    original = getattr(module, name)
    fused = Fused(original.fn, original.dynamic_dims)
    if backend is not None:
        fused.backend = backend
    calls = []
    compile_kind = fused.compile

    def compile_counted(*args):
        compiled = compile_kind(*args)

        def counted(*args):
            calls.append(fused.fn.__name__)
            return compiled(*args)

        return counted

    fused.compile = compile_counted
    monkeypatch.setattr(module, name, fused)
    return calls
