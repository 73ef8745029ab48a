"""The conformance suite's training part (`TrainingTests`)."""

from __future__ import annotations

import pytest
import torch

from .case import _without_dropout


class TrainingTests:
    """Training: the stock Trainer trains the mechanism, deterministically, with gradient checkpointing, and the losses
    are the stock ones."""

    def test_trainer_step_lowers_loss_and_moves_mechanism(self, tmp_path):
        """a few stock `Trainer` steps lower the loss on a fixed batch and change every mechanism parameter"""
        from transformers import Trainer, TrainingArguments

        folder, _ = self._stock(tmp_path)
        torch.manual_seed(0)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        batch["labels"] = self.case.labels(batch)
        before = {
            n: p.detach().clone()
            for n, p in model.named_parameters()
            if model.is_mechanism_parameter(n) and not n.endswith(tuple(self.case.stationary))
        }
        with torch.no_grad():
            loss_before = model(**batch).loss.item()
        examples = [{k: v[i] for k, v in batch.items()} for i in range(len(batch["labels"]))]
        args = TrainingArguments(
            output_dir=str(tmp_path / "trainer"),
            per_device_train_batch_size=len(examples),
            max_steps=self.case.train_steps,
            learning_rate=self.case.learning_rate,
            lr_scheduler_type="constant",
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            seed=0,
        )
        model.train()
        Trainer(model=model, args=args, train_dataset=examples).train()
        model.eval()
        with torch.no_grad():
            loss_after = model(**batch).loss.item()
        assert loss_after < loss_before, (loss_before, loss_after)
        unchanged = [n for n, p in model.named_parameters() if n in before and torch.equal(p, before[n])]
        assert not unchanged, f"mechanism parameters not trained: {unchanged}"

    def test_same_seed_is_bit_identical(self, tmp_path):
        """same seed, same outputs and gradients, bit for bit, in training mode"""
        folder, _ = self._stock(tmp_path)
        batch = self.case.make_batch()
        batch["labels"] = self.case.labels(batch)
        runs = []
        for _ in range(2):
            torch.manual_seed(1234)
            model = self.case.model_class.from_pretrained(folder, **self.case.active_options).train()
            out = model(**batch)
            out.loss.backward()
            grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            runs.append((getattr(out, self.case.output_name).detach(), grad))
        assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])

    def test_gradient_checkpointing_same_gradients(self, tmp_path):
        """Activation checkpointing, reentrant or not, with the stock weights frozen or training, gives the
        gradients of the run without it to every parameter that trains (a parameter's gradient does not depend on
        which others train, so one run without checkpointing, everything training, is the reference for all four)."""
        folder, _ = self._stock(tmp_path)
        batch = self.case.make_batch()
        batch["labels"] = self.case.labels(batch)

        def gradients(checkpointing: dict | None, base: str) -> tuple[dict, set]:
            torch.manual_seed(0)
            model = _without_dropout(self._zoo(folder, **self.case.active_options).train())
            mechanism = set(model.mechanism_parameter_names())
            for name, p in model.named_parameters():
                p.requires_grad_(base == "trainable" or name in mechanism)
            if checkpointing is not None:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
            model(**batch).loss.backward()
            trainable = {n for n, p in model.named_parameters() if p.requires_grad}
            return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, trainable & mechanism

        reference, _ = gradients(None, "trainable")
        for base in ("frozen", "trainable"):
            for reentrant in (False, True):
                where = f"{base} base, use_reentrant={reentrant}"
                got, trainable_mechanism = gradients({"use_reentrant": reentrant}, base)
                assert trainable_mechanism <= got.keys(), (
                    f"{where}: no gradient for {sorted(trainable_mechanism - got.keys())}"
                )
                expected = {n: g for n, g in reference.items() if base == "trainable" or n in trainable_mechanism}
                assert got.keys() == expected.keys(), (
                    f"{where}: gradients differ in {sorted(got.keys() ^ expected.keys())}"
                )
                for name in expected:
                    torch.testing.assert_close(
                        got[name], expected[name], msg=lambda m: f"{where}, gradient of {name}: {m}"
                    )

    def test_gradient_checkpointing_config_flag(self, tmp_path):
        """The legacy `gradient_checkpointing=True` attribute of a config does what it does for the stock class."""
        folder, stock = self._stock(tmp_path)
        stock_config = type(stock).config_class.from_pretrained(folder)
        stock_config.gradient_checkpointing = True
        stock_flag = type(stock)(stock_config).is_gradient_checkpointing
        config = self.case.model_class.config_class.from_pretrained(folder, **self.case.active_options)
        config.gradient_checkpointing = True
        assert self.case.model_class(config).is_gradient_checkpointing == stock_flag

    def test_shift_labels_give_the_loss_of_the_labels(self, tmp_path):
        """Pre-shifted labels (`shift_labels`, which context- and sequence-parallel training pass) give the loss of
        the unshifted labels, as in the stock causal LM."""
        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        if not model.can_generate() or model.config.is_encoder_decoder:
            pytest.skip("shift_labels belong to causal LMs")
        batch = self.case.make_batch()
        labels = self.case.labels(batch)
        shifted = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
        with torch.no_grad():
            expected = model(**batch, labels=labels).loss
            got = model(**batch, labels=torch.full_like(labels, -100), shift_labels=shifted).loss
        torch.testing.assert_close(got, expected)

    def test_loss_with_every_label_ignored_is_the_stock_loss(self, tmp_path):
        """The task loss (without a mechanism's own terms: `task_loss` or `lm_loss` where the output has one) of the
        model as converted (`identity_init=True`) is the stock model's, for real labels and for a batch whose labels
        are all ignored (-100): the same value, finite wherever the stock loss is (DeBERTa-v2's classifier gives 0.0;
        a stock mean over no label is NaN, and so is the zoo model's)."""
        import inspect

        folder, stock = self._stock(tmp_path)
        if "labels" not in inspect.signature(stock.forward).parameters:
            pytest.skip(f"the stock {type(stock).__name__} has no loss")
        model = self._zoo(folder, **self._identity_option_sets()[0])
        batch = self.case.make_batch()
        labels = self.case.labels(batch)
        for name, given in (("real labels", labels), ("every label ignored", torch.full_like(labels, -100))):
            with torch.no_grad():
                expected = stock(**batch, labels=given.clone()).loss
                out = model(**batch, labels=given.clone())
            losses = (getattr(out, "task_loss", None), getattr(out, "lm_loss", None), out.loss)
            got = next(loss for loss in losses if loss is not None)
            torch.testing.assert_close(got.float(), expected.float(), equal_nan=True, msg=lambda m: f"{name}: {m}")

    def test_a_retained_graph_takes_a_second_backward(self, tmp_path):
        """A forward whose graph is kept (`backward(retain_graph=True)`) takes a second backward, which adds the same
        gradients again: every gradient is then twice the first's. (The compiled defaults, `zoo_common.Fused`, compile
        with torch's donated buffers off: with them, a compiled backward frees what it saved as it runs.)"""
        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        loss = model(**batch, labels=self.case.labels(batch)).loss
        loss.backward(retain_graph=True)
        first = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        loss.backward()
        assert first, "no gradient"
        for name, p in model.named_parameters():
            if name in first:
                torch.testing.assert_close(p.grad, 2 * first[name], msg=lambda m: f"{name}: {m}")

    def test_gradient_of_a_gradient_penalty(self, tmp_path):
        """With eager attention (torch's SDPA kernels on CPU have no second derivative, in the stock layers as in a
        mechanism's own attention), the gradient of a gradient penalty (`torch.autograd.grad(loss, params,
        create_graph=True)`, then the gradient of the penalty's sum of squares) is computed, and equals the one
        computed with compiling switched off: a compiled default (`zoo_common.Fused`), whose compiled backward torch
        cannot differentiate, differentiates its eager function there instead."""
        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, attn_implementation="eager", **self.case.active_options)
        batch = self.case.make_batch()
        labels = self.case.labels(batch)
        params = [p for p in model.parameters() if p.requires_grad]

        def penalty_gradients():
            loss = model(**batch, labels=labels).loss
            grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
            penalty = sum(grad.pow(2).sum() for grad in grads if grad is not None)
            return torch.autograd.grad(penalty, params, allow_unused=True)

        got = penalty_gradients()
        with torch._dynamo.config.patch(disable=True):
            expected = penalty_gradients()
        assert any(grad is not None for grad in got), "no gradient"
        torch.testing.assert_close(got, expected)
