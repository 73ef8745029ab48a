"""The zoo's conformance suite: the contract every mechanism meets, written once.

A model's test module subclasses `ConformanceSuite` (pytest collects it as `Test...`) and implements `make_case()`
returning a `ConformanceCase`: how to build a tiny stock checkpoint, the zoo class, options that make the mechanism
active, a padded batch and the config errors the mechanism documents. Each test compares against the stock model
or against the zoo model itself with `torch.testing.assert_close`, so each can fail.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch
from transformers.cache_utils import DynamicCache


@dataclass
class ConformanceCase:
    """What the suite needs to know about one zoo model.

    Attributes:
        build_stock: `build_stock(folder) -> stock_model`: build a tiny stock model (fixed seed) and
            `save_pretrained` it into `folder`.
        model_class: the zoo class converting that checkpoint.
        auto_class_name: the `transformers` Auto class that loads the saved zoo model (remote code).
        active_options: options with which the mechanism changes the model's function (`identity_init=False`, ...).
        make_batch: `make_batch() -> dict` of model inputs of a padded batch; example 0 is unpadded, others padded.
        output_name: the output field compared (`"logits"`, `"last_hidden_state"`).
        identity_options: options under which `identity_init=True` can hold (for a mechanism that can start as the
            identity only in some of its forms).
        more_identity_options: further option sets that also claim identity with `identity_init=True` (an optional
            part of the mechanism that starts as a no-op, such as U-Net skips); each is checked like
            `identity_options`, on the model as loaded.
        labels: `labels(batch) -> tensor` for training.
        config_errors: `(options, regex)` pairs: `model_class.config_class(**base, **options)` raises, message
            matching regex.
        wrong_architecture: `wrong_architecture(folder)` saves a checkpoint of another architecture into folder.
        lora_targets: the stock module names a LoRA adapter wraps in this family (PEFT's `target_modules`).
    """

    build_stock: Callable[[str], Any]
    model_class: type
    auto_class_name: str
    active_options: dict
    make_batch: Callable[[], dict]
    labels: Callable[[dict], torch.Tensor]
    wrong_architecture: Callable[[str], None]
    config_errors: list[tuple[dict, str]]
    output_name: str = "logits"
    identity_options: dict = field(default_factory=dict)
    more_identity_options: list[dict] = field(default_factory=list)
    train_steps: int = 3
    learning_rate: float = 1e-2
    lora_targets: list[str] = field(default_factory=list)


def _output(model, batch, name):
    return getattr(model(**batch), name)


LOW_PRECISION_TOLERANCE = {torch.bfloat16: 4e-2, torch.float16: 5e-3}  # of the output's largest magnitude
_STOCK_FULLGRAPH: dict[type, bool] = {}  # stock class -> compiles with fullgraph=True (found once a session)


def _assert_close_scaled(actual, expected, tolerance, msg):
    """`assert_close` with an absolute tolerance relative to the largest magnitude of `expected` (low precision)."""
    expected = expected.float()
    atol = tolerance * expected.abs().max().item()
    torch.testing.assert_close(actual.float(), expected, atol=atol, rtol=tolerance, msg=msg)


def _without_dropout(model):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def _generation_inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask")}


def _example(batch: dict, i: int) -> dict:
    """Example i of a padded batch, with its padding removed (from the inputs shaped like the attention mask; other
    inputs, such as a seq2seq model's decoder inputs, keep their whole row)."""
    mask = batch["attention_mask"]
    length = int(mask[i].sum())
    return {k: v[i : i + 1, :length] if v.shape == mask.shape else v[i : i + 1] for k, v in batch.items()}


class ConformanceSuite:
    """Subclass as `TestXConformance(ConformanceSuite)` and implement `make_case`."""

    def make_case(self) -> ConformanceCase:
        raise NotImplementedError

    # -- fixtures -------------------------------------------------------------------------------------------

    def setup_method(self, method):
        self.case = self.make_case()

    def _stock(self, tmp_path):
        folder = str(tmp_path / "stock")
        stock = self.case.build_stock(folder).eval()
        return folder, stock

    def _zoo(self, folder, **options):
        return self.case.model_class.from_pretrained(folder, **options).eval()

    # -- stock weights and identity --------------------------------------------------------------------------

    def test_stock_weights_load_exactly(self, tmp_path):
        folder, stock = self._stock(tmp_path)
        model, info = self.case.model_class.from_pretrained(folder, output_loading_info=True)
        assert not info["unexpected_keys"], f"stock weights left unused: {sorted(info['unexpected_keys'])}"
        markers = model.mechanism_param_markers
        base_missing = [k for k in info["missing_keys"] if not any(m in k for m in markers)]
        assert not base_missing, f"stock weights missing: {base_missing}"
        assert info["missing_keys"], "the mechanism added no parameter"
        zoo_state = model.state_dict()
        for name, tensor in stock.state_dict().items():
            torch.testing.assert_close(zoo_state[name], tensor, rtol=0, atol=0, msg=f"{name} differs from stock")

    def _identity_option_sets(self) -> list[dict]:
        return [
            {**options, "identity_init": True}
            for options in [self.case.identity_options, *self.case.more_identity_options]
        ]

    def _assert_matches_stock(self, model, stock, options):
        batch = self.case.make_batch()
        unpadded = {k: v for k, v in batch.items() if k != "attention_mask"}
        with torch.no_grad():
            for inputs, kind in ((batch, "padded"), (unpadded, "unpadded")):
                torch.testing.assert_close(
                    _output(model, inputs, self.case.output_name),
                    _output(stock, inputs, self.case.output_name),
                    msg=lambda m: f"{options}, {kind} batch: {m}",
                )

    def test_identity_init_matches_stock(self, tmp_path):
        """Every option set that claims identity: `from_pretrained(stock, **options)` as loaded, nothing overwritten,
        computes the stock model's outputs on a padded and an unpadded batch."""
        folder, stock = self._stock(tmp_path)
        for options in self._identity_option_sets():
            self._assert_matches_stock(self._zoo(folder, **options), stock, options)

    def test_identity_from_config_matches_stock(self, tmp_path):
        """The same from a config (the model built directly, as the Trainer or a script does, then given the stock
        weights): the mechanism's own init must also run outside `from_pretrained`."""
        folder, stock = self._stock(tmp_path)
        for options in self._identity_option_sets():
            config = self.case.model_class.config_class.from_pretrained(folder, **options)
            model = self.case.model_class(config)
            result = model.load_state_dict(stock.state_dict(), strict=False)
            assert not result.unexpected_keys, result.unexpected_keys
            self._assert_matches_stock(model.eval(), stock, options)

    def test_convert_a_loaded_stock_model(self, tmp_path):
        """`interlayer.convert(stock_model, mechanism)` on a model already in memory gives the model that converting
        its saved checkpoint gives: the stock function where identity is claimed; with the mechanism active, every
        stock weight and the config equal, so with the same mechanism weights the same outputs; in the stock
        model's dtype."""
        from .zoo import ZOO, convert

        entry = next(e for e in ZOO if e.model_class is self.case.model_class)
        folder, stock = self._stock(tmp_path)
        for options in self._identity_option_sets():
            model, report = convert(stock, entry.mechanism, entry.task, **options)
            assert type(model) is entry.model_class and not report.unexpected_keys
            self._assert_matches_stock(model.eval(), stock, f"in-memory conversion, {options}")
        from_folder, _ = convert(folder, entry.mechanism, entry.task, **self.case.active_options)
        in_memory, _ = convert(stock, entry.mechanism, entry.task, **self.case.active_options)
        assert in_memory.config.to_diff_dict() | {"base_model_name_or_path": None} == (
            from_folder.config.to_diff_dict() | {"base_model_name_or_path": None}
        )
        for name, tensor in stock.state_dict().items():
            torch.testing.assert_close(in_memory.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
        mechanism = set(from_folder.mechanism_parameter_names())
        in_memory.load_state_dict({k: v for k, v in from_folder.state_dict().items() if k in mechanism}, strict=False)
        batch = self.case.make_batch()
        with torch.no_grad():
            torch.testing.assert_close(
                _output(in_memory.eval(), batch, self.case.output_name),
                _output(from_folder.eval(), batch, self.case.output_name),
            )
        half, _ = convert(copy.deepcopy(stock).to(torch.bfloat16), entry.mechanism, entry.task)
        assert {p.dtype for p in half.parameters()} == {torch.bfloat16}

    def test_active_mechanism_changes_outputs(self, tmp_path):
        """The identity test above can fail: with the mechanism active the outputs move away from stock."""
        folder, stock = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        with torch.no_grad():
            diff = (_output(model, batch, self.case.output_name) - _output(stock, batch, self.case.output_name)).abs()
        assert diff.max() > 1e-6

    # -- training -------------------------------------------------------------------------------------------

    def test_trainer_step_lowers_loss_and_moves_mechanism(self, tmp_path):
        from transformers import Trainer, TrainingArguments

        folder, _ = self._stock(tmp_path)
        torch.manual_seed(0)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        batch["labels"] = self.case.labels(batch)
        markers = model.mechanism_param_markers
        before = {n: p.detach().clone() for n, p in model.named_parameters() if any(m in n for m in markers)}
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

    # -- the transformers contract: dtypes -------------------------------------------------------------------------

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

    # -- the transformers contract: outputs API ------------------------------------------------------------------

    def test_return_dict_false_gives_the_tuple(self, tmp_path):
        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        with torch.no_grad():
            as_dict = model(**batch)
            as_tuple = model(**batch, return_dict=False)
        assert isinstance(as_tuple, tuple)
        torch.testing.assert_close(as_tuple[0], getattr(as_dict, self.case.output_name))

    def test_hidden_states_from_the_config_and_the_call(self, tmp_path):
        """`output_hidden_states` given in the config or in the call returns as many hidden states as the stock
        model does."""
        folder, _ = self._stock(tmp_path)
        batch = self.case.make_batch()
        stock_class = type(self.case.build_stock(str(tmp_path / "again")))
        with torch.no_grad():
            stock = stock_class.from_pretrained(folder, output_hidden_states=True).eval()(**batch)
            from_config = self._zoo(folder, output_hidden_states=True, **self.case.active_options)(**batch)
            from_call = self._zoo(folder, **self.case.active_options)(**batch, output_hidden_states=True)
        for name in ("hidden_states", "encoder_hidden_states", "decoder_hidden_states"):
            expected = getattr(stock, name, None)
            if expected is not None:
                for out, how in ((from_config, "config"), (from_call, "call")):
                    got = getattr(out, name, None)
                    assert got is not None and len(got) == len(expected), f"{name} from the {how}"

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

    def test_output_attentions_returned_or_refused(self, tmp_path):
        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, attn_implementation="eager", **self.case.active_options)
        batch = self.case.make_batch()
        try:
            with torch.no_grad():
                out = model(**batch, output_attentions=True)
        except ValueError as err:
            assert "output_attentions" in str(err)
            return
        attentions = getattr(out, "attentions", None) or getattr(out, "encoder_attentions", None)
        assert attentions is not None and len(attentions) > 0 and all(a is not None for a in attentions)

    # -- the transformers contract: attention, compile, checkpointing --------------------------------------------------

    def test_eager_and_sdpa_attention_agree(self, tmp_path):
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

    def test_compiled_forward_agrees_with_eager(self, tmp_path):
        """`torch.compile` traces the forward pass (dynamo, `backend="eager"`: the graph capture, without code
        generation) and gives the eager outputs; with `fullgraph=True` wherever the stock class compiles with it."""
        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        stock_class = type(stock)
        if stock_class not in _STOCK_FULLGRAPH:
            torch._dynamo.reset()
            try:
                with torch.no_grad():
                    torch.compile(stock, backend="eager", fullgraph=True)(**batch)
                _STOCK_FULLGRAPH[stock_class] = True
            except Exception:  # a graph break in the stock class: the zoo class need not do better
                _STOCK_FULLGRAPH[stock_class] = False
        fullgraph = _STOCK_FULLGRAPH[stock_class]
        model = self._zoo(folder, **self.case.active_options)
        torch._dynamo.reset()
        with torch.no_grad():
            expected = _output(model, batch, self.case.output_name)
            got = _output(torch.compile(model, backend="eager", fullgraph=fullgraph), batch, self.case.output_name)
        torch.testing.assert_close(got, expected)

    def test_compiled_training_does_not_recompile(self, tmp_path):
        """A compiled model stops compiling after its second training step (forward, backward, an optimizer step): a
        module attribute that changes every step, such as a Python counter of recorded statistics, would recompile
        each step until dynamo gives up and runs eagerly. (The second step may compile once more, as in the stock
        models: BERT sets `config.problem_type` in its first forward, M2M100's positions make shapes dynamic.)"""
        from torch._dynamo.testing import CompileCounter

        folder, _ = self._stock(tmp_path)
        batch = self.case.make_batch()
        batch["labels"] = self.case.labels(batch)
        model = self._zoo(folder, **self.case.active_options).train()
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        counter = CompileCounter()
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=counter)
        frames = []
        for _ in range(3):
            compiled(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            frames.append(counter.frame_count)
        assert frames[0] > 0 and frames[2] == frames[1], f"graphs compiled after each step: {frames}"

    @pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
    @pytest.mark.parametrize("base", ["frozen", "trainable"])
    def test_gradient_checkpointing_same_gradients(self, tmp_path, reentrant, base):
        """Activation checkpointing, reentrant or not, with the stock weights frozen or training, gives the
        gradients of the run without it to every parameter that trains."""
        folder, _ = self._stock(tmp_path)
        batch = self.case.make_batch()
        batch["labels"] = self.case.labels(batch)
        grads = []
        for checkpointing in (False, True):
            torch.manual_seed(0)
            model = _without_dropout(self._zoo(folder, **self.case.active_options).train())
            mechanism = set(model.mechanism_parameter_names())
            for name, p in model.named_parameters():
                p.requires_grad_(base == "trainable" or name in mechanism)
            if checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
            model(**batch).loss.backward()
            grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        trainable_mechanism = {n for n, p in model.named_parameters() if p.requires_grad and n in mechanism}
        assert trainable_mechanism <= grads[0].keys(), sorted(trainable_mechanism - grads[0].keys())
        assert grads[1].keys() == grads[0].keys(), f"gradients differ in {sorted(grads[0].keys() ^ grads[1].keys())}"
        for name in grads[0]:
            torch.testing.assert_close(grads[1][name], grads[0][name], msg=f"gradient of {name}")

    def test_gradient_checkpointing_config_flag(self, tmp_path):
        """The legacy `gradient_checkpointing=True` attribute of a config does what it does for the stock class."""
        folder, stock = self._stock(tmp_path)
        stock_config = type(stock).config_class.from_pretrained(folder)
        stock_config.gradient_checkpointing = True
        stock_flag = type(stock)(stock_config).is_gradient_checkpointing
        config = self.case.model_class.config_class.from_pretrained(folder, **self.case.active_options)
        config.gradient_checkpointing = True
        assert self.case.model_class(config).is_gradient_checkpointing == stock_flag

    # -- the transformers contract: packed batches ----------------------------------------------------------------

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

    # -- the transformers contract: PEFT ---------------------------------------------------------------------------

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

    # -- padding and determinism ---------------------------------------------------------------------------------

    def test_padding_gives_per_example_outputs(self, tmp_path):
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

    def test_same_seed_is_bit_identical(self, tmp_path):
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

    # -- saving and sharing ---------------------------------------------------------------------------------------

    def _trained_copy(self, tmp_path):
        folder, _ = self._stock(tmp_path)
        torch.manual_seed(0)
        model = self._zoo(folder, **self.case.active_options)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if any(m in name for m in model.mechanism_param_markers):
                    p.add_(0.01 * torch.randn_like(p))
        return folder, model

    def test_save_load_reproduces_outputs(self, tmp_path):
        _, model = self._trained_copy(tmp_path)
        out_dir = str(tmp_path / "saved")
        model.save_pretrained(out_dir)
        loaded = self.case.model_class.from_pretrained(out_dir).eval()
        batch = self.case.make_batch()
        with torch.no_grad():
            torch.testing.assert_close(
                _output(loaded, batch, self.case.output_name), _output(model, batch, self.case.output_name)
            )
        config = json.load(open(os.path.join(out_dir, "config.json")))
        assert self.case.auto_class_name in config["auto_map"]
        card = open(os.path.join(out_dir, "README.md")).read()
        assert card.startswith("---\n") and "library_name" in card and "interlayer" in card

    def test_fresh_process_loads_remote_code_offline(self, tmp_path):
        """A fresh interpreter where `interlayer` cannot be imported loads the folder through the Auto class with
        `trust_remote_code=True` and `HF_HUB_OFFLINE=1`, and reproduces the outputs."""
        _, model = self._trained_copy(tmp_path)
        out_dir = str(tmp_path / "shared")
        model.save_pretrained(out_dir)
        batch = self.case.make_batch()
        torch.save(batch, tmp_path / "batch.pt")
        with torch.no_grad():
            expected = _output(model, batch, self.case.output_name)
        script = textwrap.dedent(
            f"""
            import sys
            sys.modules["interlayer"] = None  # the package must not be needed
            import torch, transformers
            model = transformers.{self.case.auto_class_name}.from_pretrained({out_dir!r}, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            batch = torch.load({str(tmp_path / "batch.pt")!r})
            with torch.no_grad():
                torch.save(getattr(model(**batch), {self.case.output_name!r}), {str(tmp_path / "out.pt")!r})
            base = transformers.AutoModel.from_pretrained({out_dir!r}, trust_remote_code=True)
            assert type(base).__module__.startswith("transformers_modules"), type(base).__module__
            """
        )
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(tmp_path / "hf_home"),
            "PYTHONPATH": "",
        }
        result = subprocess.run(
            [sys.executable, "-c", script], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr[-3000:]
        torch.testing.assert_close(torch.load(tmp_path / "out.pt"), expected)

    # -- errors ----------------------------------------------------------------------------------------------------

    def test_documented_config_errors(self):
        import re

        assert self.case.config_errors, "a mechanism documents at least one config error"
        for options, pattern in self.case.config_errors:
            try:
                self.case.model_class.config_class(**options)
            except Exception as err:  # strict dataclass errors wrap the ValueError raised by the validator
                assert re.search(pattern, str(err)), f"{options}: {err}"
            else:
                raise AssertionError(f"{options} was accepted")

    def test_wrong_architecture_is_refused(self, tmp_path):
        folder = str(tmp_path / "wrong")
        self.case.wrong_architecture(folder)
        try:
            self.case.model_class.from_pretrained(folder)
        except ValueError as err:
            assert "model_type" in str(err)
        else:
            raise AssertionError("a checkpoint of another architecture was accepted")

    # -- distributed training (FSDP) and bad token ids ---------------------------------------------------------

    def test_fsdp_units_cover_every_layer_and_no_parameter_is_0d(self, tmp_path):
        """What FSDP needs from the model class and from its base model class: every name in `_no_split_modules` is
        a module class of the model (accelerate's FSDP plugin refuses a name it cannot find), every layer
        (`GradientCheckpointingLayer`) lies inside a module so named (each layer becomes its own FSDP unit), and no
        parameter is 0-d (`fully_shard` refuses them). tests/test_fsdp.py trains one class of each mechanism
        sharded."""
        from transformers.modeling_layers import GradientCheckpointingLayer

        from interlayer.zoo import ZOO

        folder, _ = self._stock(tmp_path)
        config_class = self.case.model_class.config_class
        base_class = next(e.model_class for e in ZOO if e.config_class is config_class and e.task == "base")
        for model_class in (self.case.model_class, base_class):
            model = model_class.from_pretrained(folder, **self.case.active_options)
            names = set(model._no_split_modules or ())
            classes = {type(m).__name__ for m in model.modules()}
            assert names and names <= classes, f"_no_split_modules {sorted(names - classes)} not in {model_class}"
            units = [n for n, m in model.named_modules() if type(m).__name__ in names]
            layers = [n for n, m in model.named_modules() if isinstance(m, GradientCheckpointingLayer)]
            assert layers, f"no layer found in {model_class}"
            for layer in layers:
                assert any(layer == u or layer.startswith(u + ".") for u in units), f"{layer}: in no no-split module"
            scalars = [n for n, p in model.named_parameters() if p.ndim == 0]
            assert not scalars, f"{model_class.__name__}: 0-d parameters (FSDP2 refuses them): {scalars}"

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

    # -- the cache under either name (`past_key_values`; `cache` from transformers 5.24) -----------------------------

    def _stepped_outputs(self, model, batch, cache_name, new_tokens=3):
        """A forward over all but the last `new_tokens` (decoder) tokens with `use_cache`, then one forward per
        remaining token, the returned cache passed back as `cache_name`; the outputs concatenated over the sequence."""
        from .models.zoo_common import CACHE_KWARG

        seq2seq = model.config.is_encoder_decoder
        key = "decoder_input_ids" if seq2seq else "input_ids"
        ids = batch[key]
        fixed = {k: v for k, v in batch.items() if k != key} if seq2seq else {}
        outputs = model(**fixed, **{key: ids[:, :-new_tokens]}, use_cache=True)
        steps = [getattr(outputs, self.case.output_name)]
        for t in range(ids.shape[1] - new_tokens, ids.shape[1]):
            cache = getattr(outputs, CACHE_KWARG)
            outputs = model(**fixed, **{key: ids[:, t : t + 1], cache_name: cache}, use_cache=True)
            steps.append(getattr(outputs, self.case.output_name))
        return torch.cat(steps, dim=1)

    def test_cached_decoding_matches_full_forward_under_either_cache_name(self, tmp_path):
        """With the mechanism active, decoding token by token with the cache (passed back under the installed
        transformers' name for it, and under the old name `past_key_values`) gives the full forward's outputs."""
        from .models.zoo_common import CACHE_KWARG

        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        if not model.can_generate():
            pytest.skip("not a generative model: no cache")
        batch = _example(self.case.make_batch(), 0)
        if model.config.is_encoder_decoder:  # decoding starts as `generate()` starts it (M2M100 counts positions from
            # the non-padding tokens, so a padding start token puts cached and full decoding at other positions)
            batch["decoder_input_ids"] = batch["decoder_input_ids"].clone()
            batch["decoder_input_ids"][:, 0] = model.config.decoder_start_token_id
        else:
            batch = {"input_ids": batch["input_ids"]}
        with torch.no_grad():
            full = _output(model, batch, self.case.output_name)
            for cache_name in dict.fromkeys((CACHE_KWARG, "past_key_values")):
                torch.testing.assert_close(
                    self._stepped_outputs(model, batch, cache_name), full, msg=lambda m: f"cache as {cache_name}: {m}"
                )

    def test_identity_generate_is_stock(self, tmp_path):
        """At identity, greedy `generate()` (which keeps the cache under the installed transformers' name for it, in
        the cache class the model makes) gives the stock model's tokens and logits."""
        folder, stock = self._stock(tmp_path)
        if not stock.can_generate():
            pytest.skip("not a generative model")
        model = self._zoo(folder, **self.case.identity_options, identity_init=True)
        inputs = _generation_inputs(self.case.make_batch())
        settings = dict(max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True)
        with torch.no_grad():
            generated, expected = model.generate(**inputs, **settings), stock.generate(**inputs, **settings)
        torch.testing.assert_close(generated.sequences, expected.sequences, rtol=0, atol=0)
        torch.testing.assert_close(torch.stack(generated.logits), torch.stack(expected.logits))

    def test_checkpointed_training_leaves_a_passed_cache_as_stock(self, tmp_path):
        """Training with gradient checkpointing and a cache passed in: the layers drop the cache as the stock layers
        do (their checkpointing clears it under the installed transformers' name for it), so the recomputation in
        backward does not write it a second time."""
        folder, stock = self._stock(tmp_path)
        if not stock.can_generate() or stock.config.is_encoder_decoder:
            pytest.skip("not a decoder-only generative model")
        model = self._zoo(folder, **self.case.active_options)
        ids = _example(self.case.make_batch(), 0)["input_ids"]
        lengths = []
        for m in (stock, model):
            m.train()
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            new_cache = getattr(m.base_model, "new_cache", None)
            cache = new_cache() if new_cache is not None else DynamicCache(config=m.config)
            m(input_ids=ids, past_key_values=cache, use_cache=True, labels=ids).loss.backward()
            lengths.append(cache.get_seq_length())
        assert lengths[1] == lengths[0], f"cache length after the step: {lengths[1]}, stock {lengths[0]}"
