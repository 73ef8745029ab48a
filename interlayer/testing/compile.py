"""The conformance suite's compile part (`AttentionAndCompileTests`)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from .case import (
    _STOCK_FULLGRAPH,
    _nothing_warned,
    _output,
)


class AttentionAndCompileTests:
    """Attention implementations and torch.compile."""

    def test_eager_and_sdpa_attention_agree(self, tmp_path):
        """`attn_implementation="eager"` and `"sdpa"` give the same outputs"""
        if not self.case.model_class._supports_sdpa:
            pytest.skip(f"{self.case.model_class.__name__} has no SDPA attention, as the stock class it converts")
        folder, _ = self._stock(tmp_path)
        batch = self.case.make_batch()
        outputs = {}
        for implementation in ("eager", "sdpa"):
            torch.manual_seed(0)
            model = self._zoo(folder, attn_implementation=implementation, **self.case.active_options)
            with torch.no_grad():
                outputs[implementation] = _output(model, batch, self.case.output_name)
        torch.testing.assert_close(outputs["sdpa"], outputs["eager"])

    def _stock_compiles_whole(self, stock, batch) -> bool:
        """Whether the stock class compiles with `fullgraph=True` (found once a session per class): where it does, the
        zoo class must too; a graph break in the stock class need not be bettered."""
        stock_class = type(stock)
        if stock_class not in _STOCK_FULLGRAPH:
            torch._dynamo.reset()
            try:
                with torch.no_grad():
                    torch.compile(stock, backend="eager", fullgraph=True)(**batch)
                _STOCK_FULLGRAPH[stock_class] = True
            except Exception:  # a graph break in the stock class
                _STOCK_FULLGRAPH[stock_class] = False
        return _STOCK_FULLGRAPH[stock_class]

    def test_compiled_forward_agrees_with_eager(self, tmp_path):
        """`torch.compile` traces the forward pass (dynamo, `backend="eager"`: the graph capture, without code
        generation) and gives the eager outputs; with `fullgraph=True` wherever the stock class compiles with it."""
        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        fullgraph = self._stock_compiles_whole(stock, batch)
        model = self._zoo(folder, **self.case.active_options)
        torch._dynamo.reset()
        with torch.no_grad():
            expected = _output(model, batch, self.case.output_name)
            got = _output(torch.compile(model, backend="eager", fullgraph=fullgraph), batch, self.case.output_name)
        torch.testing.assert_close(got, expected)

    def test_compiled_training_does_not_recompile(self, tmp_path):
        """A compiled model trains as one graph and stops compiling after its second training step (forward,
        backward, an optimizer step): `fullgraph=True` wherever the stock class compiles with it, so no graph break
        (an autograd Function whose backward calls `autograd.grad`, say, breaks the graph at every layer); and a
        module attribute that changes every step, such as a Python counter of recorded statistics, would recompile
        each step until dynamo gives up and runs eagerly. (The second step may compile once more, as in the stock
        models: BERT sets `config.problem_type` in its first forward, M2M100's positions make shapes dynamic.)"""
        from torch._dynamo.testing import CompileCounter

        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        fullgraph = self._stock_compiles_whole(stock, batch)
        batch["labels"] = self.case.labels(batch)
        model = self._zoo(folder, **self.case.active_options).train()
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        counter = CompileCounter()
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=counter, fullgraph=fullgraph)
        frames = []
        for _ in range(3):
            compiled(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            frames.append(counter.frame_count)
        assert frames[0] > 0 and frames[2] == frames[1], f"graphs compiled after each step: {frames}"

    def test_torch_compile_switches_give_the_eager_path(self, tmp_path, monkeypatch):
        """Each of torch's switches that turn compiling off (`TORCH_COMPILE_DISABLE=1`, which torch reads at import
        into `torch._dynamo.config.disable`; `TORCHDYNAMO_DISABLE=1`; a caller wrapped by `torch.compiler.disable`;
        the stance `force_eager`) makes a model whose defaults compile a function (`zoo_common.Fused`: the mHC
        coefficients, the HDIM scorer) compute it eagerly, silently: a no-grad forward, and the loss and every
        gradient of a forward with grad, equal those of the compiled default to float rounding, no compiled graph
        runs and nothing is warned or logged. (tests/tooling/test_compile_switches.py sets the variables before torch
        is imported, in a fresh process.)"""
        from ..models.zoo_common import Fused

        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        labels = self.case.labels(batch)
        params = [p for p in model.parameters() if p.requires_grad]

        def run():
            with torch.no_grad():
                output = _output(model, batch, self.case.output_name)
            loss = model(**batch, labels=labels).loss
            return output, loss, torch.autograd.grad(loss, params, allow_unused=True)

        compiled_before = Fused.compiled_calls
        expected = run()
        if Fused.compiled_calls == compiled_before:
            pytest.skip(f"{type(model).__name__} compiles nothing with these options (no `zoo_common.Fused` call ran)")

        @contextlib.contextmanager
        def environment(**variables):
            with monkeypatch.context() as patch:
                for name, value in variables.items():
                    patch.setenv(name, value)
                yield

        switches = {
            "TORCH_COMPILE_DISABLE=1": lambda: torch._dynamo.config.patch(disable=True),
            "TORCHDYNAMO_DISABLE=1": lambda: environment(TORCHDYNAMO_DISABLE="1"),
            "torch.compiler.disable": contextlib.nullcontext,
            "torch.compiler.set_stance('force_eager')": lambda: torch.compiler.set_stance("force_eager"),
        }
        for switch, context in switches.items():
            compiled_before = Fused.compiled_calls
            with context(), _nothing_warned():
                got = torch.compiler.disable(run)() if switch == "torch.compiler.disable" else run()
            assert Fused.compiled_calls == compiled_before, f"{switch}: a compiled graph ran"
            torch.testing.assert_close(got, expected, msg=lambda m: f"{switch}: {m}")
