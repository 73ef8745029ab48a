"""The conformance suite's peft part (`PeftTests`)."""

from __future__ import annotations

import pytest
import torch

from .case import (
    _output,
    _without_dropout,
)


class PeftTests:
    """PEFT: LoRA on the family's stock projections."""

    def test_lora_trains_saves_reloads_and_merges(self, tmp_path):
        """LoRA on the family's stock projections (`lora_targets`): PEFT wraps the model, the stock `Trainer`
        trains it, the adapter saves and reloads onto a fresh conversion with the same outputs, and
        `merge_and_unload()` gives the unmerged outputs."""
        peft = pytest.importorskip("peft", reason="peft is a test extra: pip install interlayer[test]")
        from transformers import Trainer, TrainingArguments

        assert self.case.lora_targets, "the case names the stock modules LoRA wraps"
        folder, _ = self._stock(tmp_path)

        def fresh():
            torch.manual_seed(0)
            return _without_dropout(self._zoo(folder, **self.case.active_options))

        lora = peft.LoraConfig(target_modules=self.case.lora_targets, r=4, lora_alpha=8, init_lora_weights=False)
        model = peft.get_peft_model(fresh(), lora)
        batch = self.case.make_batch()
        batch["labels"] = self.case.labels(batch)
        examples = [{k: v[i] for k, v in batch.items()} for i in range(len(batch["labels"]))]
        args = TrainingArguments(
            output_dir=str(tmp_path / "trainer"),
            per_device_train_batch_size=len(examples),
            max_steps=2,
            learning_rate=1e-2,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
        )
        lora_b = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
        Trainer(model=model, args=args, train_dataset=examples).train()
        assert any(not torch.equal(p, lora_b[n]) for n, p in model.named_parameters() if n in lora_b)
        model.eval()
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        with torch.no_grad():
            unmerged = _output(model, inputs, self.case.output_name)
        model.save_pretrained(tmp_path / "adapter")
        reloaded = peft.PeftModel.from_pretrained(fresh(), str(tmp_path / "adapter")).eval()
        with torch.no_grad():
            torch.testing.assert_close(_output(reloaded, inputs, self.case.output_name), unmerged)
            merged = model.merge_and_unload()
            torch.testing.assert_close(_output(merged, inputs, self.case.output_name), unmerged)
