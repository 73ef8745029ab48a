"""The conformance suite's dtypes part (`DtypeTests`)."""

from __future__ import annotations

import copy

import pytest
import torch

from .case import (
    LOW_PRECISION_TOLERANCE,
    _assert_close_scaled,
    _generation_inputs,
    _output,
)


class DtypeTests:
    """Precision: bf16 and fp16 weights, and bf16 autocast over fp32 weights."""

    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
    def test_low_precision_weights_run_and_agree_with_fp32(self, tmp_path, dtype):
        """bf16 / fp16 weights, as `from_pretrained(dtype=...)`, `.to(dtype)` and `.half()` give them: forward,
        backward and `generate()` run, and the outputs agree with the fp32 model within the dtype's tolerance."""
        _, model = self._trained_copy(tmp_path)
        out_dir = str(tmp_path / "saved")
        model.save_pretrained(out_dir)
        batch = self.case.make_batch()
        with torch.no_grad():
            expected = _output(model, batch, self.case.output_name)
        ways = {
            "from_pretrained": lambda: self.case.model_class.from_pretrained(out_dir, dtype=dtype),
            ".to": lambda: copy.deepcopy(model).to(dtype),
        }
        if dtype == torch.float16:
            ways[".half"] = lambda: copy.deepcopy(model).half()
        for how, load in ways.items():
            low = load().eval()
            assert next(low.parameters()).dtype == dtype, how
            with torch.no_grad():
                got = _output(low, batch, self.case.output_name)
            _assert_close_scaled(got, expected, LOW_PRECISION_TOLERANCE[dtype], lambda m: f"{how} {dtype}: {m}")
            low.train()
            loss = low(**batch, labels=self.case.labels(batch)).loss
            loss.backward()
            grads = [p.grad for p in low.parameters() if p.grad is not None]
            assert grads and all(torch.isfinite(g).all() for g in grads), f"{how} {dtype}: gradients"
            if low.can_generate():
                low.eval()
                generated = low.generate(**_generation_inputs(batch), max_new_tokens=3, do_sample=False)
                assert generated.shape[0] == batch["input_ids"].shape[0], how

    def test_bf16_autocast_over_fp32_weights(self, tmp_path):
        """bf16 autocast over fp32 weights: the outputs agree with fp32 within bf16's tolerance, and a training
        step's gradients are finite."""
        _, model = self._trained_copy(tmp_path)
        batch = self.case.make_batch()
        with torch.no_grad():
            expected = _output(model, batch, self.case.output_name)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = _output(model, batch, self.case.output_name)
        _assert_close_scaled(got, expected, LOW_PRECISION_TOLERANCE[torch.bfloat16], None)
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(**batch, labels=self.case.labels(batch)).loss
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads)
