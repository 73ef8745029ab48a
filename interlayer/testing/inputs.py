"""The conformance suite's inputs part (`InputTests`)."""

from __future__ import annotations

import pytest
import torch

from .case import (
    _example,
    _output,
)


class InputTests:
    """Inputs: padded and packed batches give each sequence's outputs alone; ids beyond the vocabulary are refused as
    the stock class refuses them."""

    def test_padding_gives_per_example_outputs(self, tmp_path):
        """a padded batch gives each example's unpadded outputs (the mechanism never reads padding)"""
        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        with torch.no_grad():
            padded = _output(model, batch, self.case.output_name)
            for i in range(batch["input_ids"].shape[0]):
                alone = _output(model, _example(batch, i), self.case.output_name)
                got = padded[i : i + 1]
                if got.dim() == 3:
                    got = got[:, : alone.shape[1]]
                torch.testing.assert_close(got, alone, msg=f"example {i}")

    def test_packed_sequences_match_each_sequence_alone(self, tmp_path):
        """Padding-free packed batches (`DataCollatorWithFlattening`: one row, position ids restarting at every
        sequence) give each sequence its outputs alone, wherever the stock class keeps packed sequences apart."""
        from transformers import DataCollatorWithFlattening

        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        if set(batch) != {"input_ids", "attention_mask"}:
            pytest.skip("packed batches are for single-sequence inputs")
        examples = [{"input_ids": _example(batch, i)["input_ids"][0].tolist()} for i in range(len(batch["input_ids"]))]
        packed = DataCollatorWithFlattening(return_tensors="pt")(examples)
        packed_inputs = {"input_ids": packed["input_ids"], "position_ids": packed["position_ids"]}

        def per_sequence(model):
            with torch.no_grad():
                out = _output(model, {**packed_inputs, "use_cache": False}, self.case.output_name)
                alone = [
                    _output(model, {"input_ids": torch.tensor([e["input_ids"]])}, self.case.output_name)
                    for e in examples
                ]
            starts = torch.cumsum(torch.tensor([0] + [len(e["input_ids"]) for e in examples]), 0)
            return [(out[:, starts[i] : starts[i + 1]], a) for i, a in enumerate(alone)]

        try:
            stock_pairs = per_sequence(stock)
        except (TypeError, ValueError) as err:
            pytest.skip(f"the stock {type(stock).__name__} takes no packed batch: {err}")
        if any(not torch.allclose(p, a, atol=1e-5) for p, a in stock_pairs):
            pytest.skip(f"the stock {type(stock).__name__} does not keep packed sequences apart")
        model = self._zoo(folder, **self.case.active_options)
        for i, (got, alone) in enumerate(per_sequence(model)):
            torch.testing.assert_close(got, alone, msg=lambda m: f"packed sequence {i}: {m}")

    def test_token_ids_beyond_the_vocabulary_are_refused_as_by_stock(self, tmp_path):
        """An input id >= the vocabulary size raises in the stock class (the embedding's IndexError); the zoo class
        raises the same error type, or a ValueError naming `input_ids`, never computes an output."""
        folder, stock = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        batch["input_ids"] = batch["input_ids"].clone()
        batch["input_ids"][0, 0] = stock.config.vocab_size
        with torch.no_grad():
            with pytest.raises(Exception) as stock_error:
                stock(**batch)
            try:
                model(**batch)
            except ValueError as err:
                if not isinstance(err, stock_error.type):
                    assert "input_ids" in str(err), err
            except stock_error.type:
                pass
            else:
                raise AssertionError(f"input id {stock.config.vocab_size} (vocabulary size) was accepted")
