"""The conformance suite's core checks on a device: what `interlayer/testing` proves on CPU tensors, for a few tiny
models (one or more per mechanism), with the models and batches on `device` (CUDA on a GPU machine).

For each example of `tests/conformance_cases.py` named (default `EXAMPLES`: every mechanism, and every form of
hyper-connections and depth routing), each check a row `{example, check, dtype, error, bound, ok, note}`:

- `identity`: every option set that claims identity, converted from the stock checkpoint, against the stock model
  on the same device, padded batch: `torch.testing.assert_close` at its fp32 defaults (`error`: the largest absolute
  difference); in bf16 (both models bf16) the suite's `LOW_PRECISION_TOLERANCE` of the output's largest magnitude.
- `device parity`: the active mechanism with perturbed parameters, in fp32: logits, loss and every gradient of a
  training step on `device` against the same on the CPU, relative errors `max|a - b| / max|b|` (a gradient's over
  `max|b|` plus a tenth of the largest gradient) at most `PARITY`.
- `training`: the active model (as the suite seeds it) in bf16 on `device`, the case's steps of AdamW at its learning
  rate on its batch: the loss on that batch falls, and every mechanism parameter moved except those whose gradient
  stayed below `ROUNDING_GRADIENT` of the largest (rounding alone, as the first mHC `H_res`'s where every stream is
  the embedding: in bf16 Adam's step on such a gradient rounds away).
- `cached decoding`: greedy `generate()` of 5 tokens (fp32, unpadded prompt) with the cache and without it give the
  same tokens.
- `sdpa`: `attn_implementation="sdpa"` against `"eager"`, fp32, relative error at most `PARITY`; `flash`:
  `"flash_attention_2"` against `"sdpa"` in bf16 within the bf16 tolerance, where the flash-attn package is installed
  (else a row that says so, `ok` None).

A check that raises is a row with `ok` False and the error's text. Run by benchmarks/gpu_check.py.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]  # interlayer (where it is not installed) and the suite's cases

from conformance_cases import conformance_case, examples  # noqa: E402

from interlayer.testing.case import LOW_PRECISION_TOLERANCE, _example, _generation_inputs, _output  # noqa: E402

EXAMPLES = (
    "RobertaBridge",
    "LlamaSentinel",
    "Qwen3DeepSeekMHC",
    "MistralStaticHC",
    "Qwen3IndependentHC",
    "Qwen3GatedResidual",
    "LlamaSamePosition",
    "LinBridge",
    "LlamaDWA",
    "Qwen3MUDD",
    "Qwen2AttentionResidual",
    "Phi3ValueResidual",
    "MistralNormedLowRankLaurel",
)
PARITY = 1e-4
# a mechanism parameter whose gradient stays below this share of the largest one has a gradient of rounding alone (the
# first mHC `H_res`, where every stream is the embedding): a bf16 step need not move it
ROUNDING_GRADIENT = 1e-3


def relative_error(a: torch.Tensor, b: torch.Tensor, largest: float = 0.0) -> float:
    """`max|a - b|` over `max|b|` plus a tenth of `largest` (for a gradient, the model's largest gradient: a gradient
    of rounding alone, as the first mHC `H_res`'s where every stream is the embedding, is measured against it), on
    the CPU in fp32."""
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    scale = b.abs().max().item() + 0.1 * largest
    return (a - b).abs().max().item() / max(scale, 1e-12)


def worst_gradient(grads: dict, reference: dict) -> tuple[str, float]:
    """The parameter whose gradient in `grads` is furthest from `reference`'s (the same names), and its
    `relative_error` against the largest reference gradient."""
    assert grads.keys() == reference.keys(), sorted(set(grads) ^ set(reference))
    largest = max(g.abs().max().item() for g in reference.values())
    errors = {name: relative_error(grads[name], g, largest) for name, g in reference.items()}
    name = max(errors, key=errors.get)
    return name, errors[name]


def _to(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def _perturbed(model, seed: int = 0):
    """The model with every mechanism parameter moved by 0.01 N(0, 1) (fixed seed), as the suite's trained copy."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if model.is_mechanism_parameter(name):
                p.add_(0.01 * torch.randn(p.shape, generator=g).to(p))
    return model


def _step(model, batch, labels):
    """Output, loss and gradients of one forward and backward (eval mode: no dropout)."""
    model.eval().zero_grad(set_to_none=True)
    out = model(**batch, labels=labels)
    out.loss.backward()
    grads = {n: p.grad.detach() for n, p in model.named_parameters() if p.grad is not None}
    return out, grads


class Checker:
    """The rows of one example on one device."""

    def __init__(self, label: str, device: str):
        tiny = examples()[label]
        self.label, self.device = label, device
        self.case = conformance_case(tiny.record, tiny.example)
        self.rows: list[dict] = []

    def row(self, check: str, dtype, run) -> None:
        start = time.perf_counter()
        try:
            error, bound, ok, note = run()
        except Exception as err:  # a failed check is a row, and the others still run
            error, bound, ok, note = None, None, False, f"{type(err).__name__}: {err}"[:400]
        self.rows.append(
            {
                "example": self.label,
                "check": check,
                "dtype": str(dtype).removeprefix("torch."),
                "error": error,
                "bound": bound,
                "ok": ok,
                "note": note,
                "seconds": round(time.perf_counter() - start, 2),
            }
        )

    def zoo(self, folder, dtype=torch.float32, **options):
        torch.manual_seed(0)  # the active options initialise the mechanism at random, as the suite's tests seed it
        model = self.case.model_class.from_pretrained(folder, **options)
        return model.to(device=self.device, dtype=dtype).eval()

    def run(self) -> list[dict]:
        with tempfile.TemporaryDirectory() as folder:
            stock = self.case.build_stock(folder).eval()
            batch = self.case.make_batch()
            for dtype in (torch.float32, torch.bfloat16):
                self.row("identity", dtype, lambda dtype=dtype: self.identity(folder, stock, batch, dtype))
            self.row("device parity", torch.float32, lambda: self.parity(folder, batch))
            self.row("training", torch.bfloat16, lambda: self.training(folder, batch))
            self.row("cached decoding", torch.float32, lambda: self.decoding(folder, batch))
            self.row("sdpa", torch.float32, lambda: self.sdpa(folder, batch))
            self.row("flash", torch.bfloat16, lambda: self.flash(folder, batch))
        return self.rows

    def identity(self, folder, stock, batch, dtype):
        stock = copy.deepcopy(stock).to(device=self.device, dtype=dtype)
        inputs = _to(batch, self.device)
        worst = 0.0
        sets = [self.case.identity_options, *self.case.more_identity_options]
        with torch.no_grad():
            expected = _output(stock, inputs, self.case.output_name)
            for options in sets:
                got = _output(self.zoo(folder, dtype, **options, identity_init=True), inputs, self.case.output_name)
                if dtype == torch.float32:
                    torch.testing.assert_close(got, expected, msg=lambda m: f"{options}: {m}")
                    worst = max(worst, (got - expected).abs().max().item())
                else:
                    worst = max(worst, relative_error(got, expected))
        if dtype == torch.float32:
            return worst, "assert_close (fp32 defaults)", True, f"{len(sets)} option set(s)"
        bound = LOW_PRECISION_TOLERANCE[dtype]
        return worst, bound, worst <= bound, f"{len(sets)} option set(s), relative to the output's largest magnitude"

    def parity(self, folder, batch):
        labels = self.case.labels(batch)
        cpu = _perturbed(self.zoo(folder, **self.case.active_options).cpu())
        there = copy.deepcopy(cpu).to(self.device)
        ref, ref_grads = _step(cpu, batch, labels)
        got, grads = _step(there, _to(batch, self.device), labels.to(self.device))
        worst_name, worst_error = worst_gradient(grads, ref_grads)
        errors = {
            "output": relative_error(getattr(got, self.case.output_name), getattr(ref, self.case.output_name)),
            "loss": relative_error(got.loss, ref.loss),
            "worst gradient": worst_error,
        }
        worst = max(errors.values())
        note = ", ".join(f"{k} {v:.1e}" for k, v in errors.items()) + f" ({worst_name}; {len(grads)} gradients)"
        return worst, PARITY, worst <= PARITY, note

    def training(self, folder, batch):
        model = self.zoo(folder, torch.bfloat16, **self.case.active_options).train()
        inputs, labels = _to(batch, self.device), self.case.labels(batch).to(self.device)
        before = {n: p.detach().clone() for n, p in model.named_parameters() if model.is_mechanism_parameter(n)}
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=self.case.learning_rate)
        with torch.no_grad():
            loss_before = model.eval()(**inputs, labels=labels).loss.item()
        model.train()
        largest = dict.fromkeys(before, 0.0)
        for _ in range(self.case.train_steps):
            model(**inputs, labels=labels).loss.backward()
            for n, p in model.named_parameters():
                if n in before and p.grad is not None:
                    largest[n] = max(largest[n], p.grad.abs().max().item())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            loss_after = model.eval()(**inputs, labels=labels).loss.item()
        top = max(largest.values(), default=0.0)
        unmoved = [n for n, p in model.named_parameters() if n in before and torch.equal(p.detach(), before[n])]
        rounding = [n for n in unmoved if largest[n] <= ROUNDING_GRADIENT * top]
        still = [n for n in unmoved if n not in rounding]
        ok = loss_after < loss_before and not still
        note = f"loss {loss_before:.4f} -> {loss_after:.4f}" + (f"; did not move: {still[:4]}" if still else "")
        note += f"; did not move, a gradient of rounding alone: {rounding[:4]}" if rounding else ""
        return loss_after - loss_before, "the loss falls, every mechanism parameter with a gradient moves", ok, note

    def decoding(self, folder, batch):
        model = _perturbed(self.zoo(folder, **self.case.active_options))
        if not model.can_generate():
            return None, None, None, "not a generative model"
        inputs = _to(_generation_inputs(_example(batch, 0)), self.device)
        kwargs = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False)
        with torch.no_grad():
            cached = model.generate(**inputs, use_cache=True, **kwargs)
            full = model.generate(**inputs, use_cache=False, **kwargs)
        same = torch.equal(cached, full)
        return None, "the same tokens", same, f"{cached.shape[-1]} tokens" + ("" if same else f": {cached} vs {full}")

    def attention(self, folder, batch, implementation, dtype):
        model = _perturbed(self.zoo(folder, dtype, attn_implementation=implementation, **self.case.active_options))
        with torch.no_grad():
            return _output(model, _to(batch, self.device), self.case.output_name)

    def sdpa(self, folder, batch):
        if not self.case.model_class._supports_sdpa:
            return None, None, None, f"{self.case.model_class.__name__} does not support sdpa"
        error = relative_error(
            self.attention(folder, batch, "sdpa", torch.float32), self.attention(folder, batch, "eager", torch.float32)
        )
        return error, PARITY, error <= PARITY, ""

    def flash(self, folder, batch):
        from transformers.utils import is_flash_attn_2_available

        if not self.device.startswith("cuda"):
            return None, None, None, "flash attention runs on CUDA only"
        if not is_flash_attn_2_available():
            return None, None, None, "flash-attn is not installed"
        if not self.case.model_class._supports_flash_attn:
            return None, None, None, f"{self.case.model_class.__name__} does not support flash attention"
        # padded rows: flash attention takes the padding as the other kernels do, so compare the padded batch as is
        got = self.attention(folder, batch, "flash_attention_2", torch.bfloat16)
        expected = self.attention(folder, batch, "sdpa", torch.bfloat16)
        bound = LOW_PRECISION_TOLERANCE[torch.bfloat16]
        error = relative_error(got, expected)
        return error, bound, error <= bound, "against sdpa in bf16"


def contract_rows(device: str, labels=EXAMPLES, progress=print) -> list[dict]:
    rows = []
    for label in labels:
        try:
            checked = Checker(label, device).run()
        except Exception as err:  # an example that cannot be built is a row, and the others still run
            checked = [
                {
                    "example": label,
                    "check": "build",
                    "dtype": "-",
                    "error": None,
                    "bound": None,
                    "ok": False,
                    "note": f"{type(err).__name__}: {err}"[:400],
                    "seconds": 0,
                }
            ]
        for row in checked:
            progress(row)
            rows.append(row)
    return rows
