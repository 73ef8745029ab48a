"""The zoo's conformance suite: the contract every mechanism meets, written once.

A model's test module subclasses `ConformanceSuite` (pytest collects it as `Test...`) and implements `make_case()`
returning a `ConformanceCase`: how to build a tiny stock checkpoint, the zoo class, options that make the mechanism
active, a padded batch and the config errors the mechanism documents. Each test compares against the stock model
or against the zoo model itself with `torch.testing.assert_close`, so each can fail.
"""

from __future__ import annotations

import copy
import functools
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
        stationary: name endings of mechanism parameters whose gradient is zero by construction (a bias added to
            every logit of a softmax), which training moves only by float rounding; the training test does not
            require them to move.
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
    stationary: list[str] = field(default_factory=list)


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


def _left_padded(batch: dict, rows: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """The input ids and attention mask of the first `rows` examples of a right-padded batch, padded on the left
    instead (as prompts are for `generate()`), with padding id 0."""
    ids, mask = batch["input_ids"][:rows], batch["attention_mask"][:rows]
    shifts = (mask == 0).sum(-1)
    index = (torch.arange(ids.shape[-1]) - shifts[:, None]) % ids.shape[-1]
    return ids.gather(-1, index).masked_fill(mask.gather(-1, index) == 0, 0), mask.gather(-1, index)


def _module_classes(root: type = torch.nn.Module) -> list[type]:
    """Every subclass of `root` (itself included) defined so far."""
    found, todo = [], [root]
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.append(cls)
            todo.extend(cls.__subclasses__())
    return found


def _parameters_zero3_init_would_miss(build: Callable[[], torch.nn.Module]) -> list[str]:
    """The parameters of `build()` that DeepSpeed's `zero.Init` (0.19) would leave whole: it wraps the `__init__` of
    every `nn.Module` class that defines one in its own `__dict__` and partitions a module's own parameters when the
    outermost wrapped call on that module returns; whatever is added to the module after that is missed. The same
    wrapping is done here, without DeepSpeed, and restored after."""
    made = set()

    def wrap(init):
        @functools.wraps(init)
        def wrapper(module, *args, **kwargs):
            outermost = "_zero3_check_entered" not in module.__dict__
            if outermost:
                module.__dict__["_zero3_check_entered"] = True
            init(module, *args, **kwargs)
            if outermost:
                del module.__dict__["_zero3_check_entered"]
                made.update(id(p) for p in module.parameters(recurse=False))

        return wrapper

    originals = {c: c.__dict__["__init__"] for c in _module_classes() if "__init__" in c.__dict__}
    try:
        for cls, init in originals.items():
            cls.__init__ = wrap(init)
        model = build()
    finally:
        for cls, init in originals.items():
            cls.__init__ = init
    return [name for name, p in model.named_parameters() if id(p) not in made]


def _engine_attention(module, query, key, value, scaling=None, sliding_window=None, softcap=None, **kwargs):
    """Attention as a serving engine computes it for one row of tokens without a cache: causal, within the layer's
    sliding window, logits soft-capped, built from the keyword arguments alone (the engine's kernels take no mask
    from the model), returned in the engine's layout `(tokens, heads * head_dim)`."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scaling = scaling if scaling is not None else getattr(module, "scaling", query.shape[-1] ** -0.5)
    scores = query @ key.transpose(-1, -2) * scaling
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    distance = torch.arange(query.shape[2])[:, None] - torch.arange(key.shape[2])[None]
    allowed = (distance >= 0) & (distance < (sliding_window or distance.numel() + 1))
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1).to(value.dtype)
    return (weights @ value).transpose(1, 2).reshape(query.shape[2], -1)


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
        base_missing = [k for k in info["missing_keys"] if not model.is_mechanism_parameter(k)]
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
        """`return_dict=False`, in the call or in the config, gives a tuple, for the task class and its base model
        alike: with the mechanism active, the output field first; at identity init, the stock class's tuple (the
        zoo's tuple starts with the stock tuple's entries; a mechanism's own outputs, such as an auxiliary loss, come
        after them)."""
        folder, stock = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        with torch.no_grad():
            as_dict = model(**batch)
            as_tuple = model(**batch, return_dict=False)
        assert isinstance(as_tuple, tuple)
        torch.testing.assert_close(as_tuple[0], getattr(as_dict, self.case.output_name))
        options = self._identity_option_sets()[0]
        for zoo_class, stock in self._task_and_base_pairs(folder, type(stock)):
            with torch.no_grad():
                expected = stock(**batch, return_dict=False)
                for how in ("call", "config"):
                    if how == "call":
                        got = self._zoo_like_stock(zoo_class, folder, stock, **options)(**batch, return_dict=False)
                    else:
                        got = self._zoo_like_stock(zoo_class, folder, stock, return_dict=False, **options)(**batch)
                    where = f"{zoo_class.__name__}, return_dict=False from the {how}"
                    assert isinstance(got, tuple), f"{where}: {type(got).__name__}"
                    self._assert_same_outputs(got[: len(expected)], expected, where)

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
                if model.is_mechanism_parameter(name):
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
        parameter is 0-d (`fully_shard` refuses them). tests/tooling/test_fsdp.py trains one class of each mechanism
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

    # -- generate() with every input the stock class takes (issue 20) ---------------------------------------------

    def test_generate_with_each_stock_input_gives_the_stock_tokens(self, tmp_path):
        """Greedy `generate()` at identity, on a left-padded prompt, with each input the stock class's `generate()`
        accepts (the attention mask alone, and with token type ids, position ids or input embeddings) gives the
        stock tokens, or raises the ValueError the mechanism documents for that input, naming it; never
        `generate()`'s own "not used by the model" (a name missing from the zoo's forward signature)."""
        folder, stock = self._stock(tmp_path)
        if not stock.can_generate() or stock.config.is_encoder_decoder:
            pytest.skip("generate() inputs of decoder-only language models")
        model = self._zoo(folder, **self._identity_option_sets()[0])
        ids, mask = _left_padded(self.case.make_batch())
        positions = (mask.cumsum(-1) - 1).clamp(min=0) + 3  # shifted, so that the positions matter
        optional = {
            "token_type_ids": mask.flip(-1),  # not all zero, so that the token types matter
            "position_ids": positions,
            "inputs_embeds": stock.get_input_embeddings()(ids).detach(),
        }
        greedy = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
        for name in (None, *optional):
            inputs = {"input_ids": ids, "attention_mask": mask}
            if name == "inputs_embeds":
                inputs = {"inputs_embeds": optional[name], "attention_mask": mask}
            elif name is not None:
                inputs[name] = optional[name]
            with torch.no_grad():
                try:
                    expected = stock.generate(**inputs, **greedy)
                except ValueError as err:
                    assert "not used by the model" in str(err), f"stock generate() with {name}: {err}"
                    continue  # the stock class does not take this input either
                try:
                    got = model.generate(**inputs, **greedy)
                except ValueError as err:
                    assert "not used by the model" not in str(err), f"generate() refuses {name}: {err}"
                    assert f"`{name}`" in str(err), f"a refusal of {name} names it: {err}"
                    continue
            torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=lambda m: f"generate() with {name}: {m}")

    # -- construction without weight initialisation (issue 20) ---------------------------------------------------

    def test_built_without_weight_init_then_loaded_equals_the_loaded_model(self, tmp_path):
        """A model built under `transformers.initialization.no_init_weights` (as `from_pretrained` builds it under
        DeepSpeed ZeRO-3, on a real device and with no init run) and given a saved model's state dict has that
        model's buffers and computes its outputs: whatever the config determines is right at construction, not only
        once `_init_weights` has run."""
        from transformers.initialization import no_init_weights

        _, model = self._trained_copy(tmp_path)
        out_dir = str(tmp_path / "saved")
        model.save_pretrained(out_dir)
        loaded = self.case.model_class.from_pretrained(out_dir).eval()
        with no_init_weights():
            bare = self.case.model_class(self.case.model_class.config_class.from_pretrained(out_dir))
        result = bare.load_state_dict(loaded.state_dict(), strict=False)
        assert not result.missing_keys and not result.unexpected_keys, result
        bare_buffers = dict(bare.named_buffers())
        for name, buffer in loaded.named_buffers():
            torch.testing.assert_close(bare_buffers[name], buffer, rtol=0, atol=0, msg=lambda m: f"buffer {name}: {m}")
        batch = self.case.make_batch()
        with torch.no_grad():
            torch.testing.assert_close(
                _output(bare.eval(), batch, self.case.output_name), _output(loaded, batch, self.case.output_name)
            )

    # -- init-only options when a saved model is loaded (issue 20) -------------------------------------------------

    def test_reload_with_a_changed_init_option_is_refused(self, tmp_path):
        """Each init-only option of the mechanism (`init_options`: `identity_init` and the initial values), given with
        a value other than the saved one when a saved (trained) zoo model is loaded, is refused with a `ConfigError`
        naming the option, both values and that it only applies at conversion; given with the saved value it
        changes neither the config nor the outputs."""
        from .models.zoo_common import ConfigError, mechanism_field_names

        _, model = self._trained_copy(tmp_path)
        out_dir = str(tmp_path / "saved")
        model.save_pretrained(out_dir)
        config_class = self.case.model_class.config_class
        names = sorted(config_class.init_options & set(mechanism_field_names(config_class)))
        assert "identity_init" in names, names
        batch = self.case.make_batch()
        with torch.no_grad():
            expected = _output(model, batch, self.case.output_name)
        for name in names:
            saved = getattr(model.config, name)
            changed = (not saved) if isinstance(saved, bool) else 0.5 if saved is None else saved + 1
            with pytest.raises(ConfigError) as refusal:
                self.case.model_class.from_pretrained(out_dir, **{name: changed})
            message = str(refusal.value)
            assert f"`{name}={changed!r}` only applies when a stock checkpoint is converted" in message, message
            assert f"saved with {name}={saved!r}" in message, message
            same = self.case.model_class.from_pretrained(out_dir, **{name: saved}).eval()
            assert getattr(same.config, name) == saved, name
            with torch.no_grad():
                torch.testing.assert_close(_output(same, batch, self.case.output_name), expected, msg=name)

    # -- losses: labels ignored --------------------------------------------------------------------------------------

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

    # -- sharing: nothing of the saving machine in a saved folder ---------------------------------------------------

    def test_saved_folder_holds_no_local_path_and_keeps_a_hub_id(self, tmp_path):
        """A model converted from a local folder and saved holds no absolute local path in any JSON file of the folder
        (`config.json` records no source); one converted from a stock model named by a Hub id, or from a Hub cache
        snapshot folder, records that id."""
        import shutil

        from .zoo import ZOO, convert

        entry = next(e for e in ZOO if e.model_class is self.case.model_class)
        folder, stock = self._stock(tmp_path)

        def saved_config(model, name):
            out = tmp_path / name
            model.save_pretrained(out)
            return out, json.loads((out / "config.json").read_text())

        def strings(value):
            if isinstance(value, dict):
                return [s for v in value.values() for s in strings(v)]
            if isinstance(value, list):
                return [s for v in value for s in strings(v)]
            return [value] if isinstance(value, str) else []

        out, config = saved_config(convert(folder, entry.mechanism, entry.task)[0], "local")
        assert config.get("base_model_name_or_path") is None
        for name in sorted(os.listdir(out)):
            if name.endswith(".json"):
                local = [s for s in strings(json.loads((out / name).read_text())) if os.path.isabs(s) or folder in s]
                assert not local, f"{name} holds local paths: {local}"
        stock.name_or_path = "hf-org/tiny-stock"
        _, config = saved_config(convert(stock, entry.mechanism, entry.task)[0], "from-hub-model")
        assert config["base_model_name_or_path"] == "hf-org/tiny-stock"
        snapshot = tmp_path / "hub" / "models--hf-org--tiny-stock" / "snapshots" / "0123abcd"
        shutil.copytree(folder, snapshot)
        _, config = saved_config(convert(str(snapshot), entry.mechanism, entry.task)[0], "from-hub-cache")
        assert config["base_model_name_or_path"] == "hf-org/tiny-stock"

    # -- the transformers contract: output flags in the config as in the call ----------------------------------------

    def _task_and_base_pairs(self, folder, stock_class):
        """`(zoo class, stock model)` for the case's class and for its base model class, each stock model loaded
        from the stock checkpoint (the base model by `AutoModel`, as a user loads it)."""
        from transformers import AutoModel

        from .zoo import ZOO

        config_class = self.case.model_class.config_class
        base_class = next(e.model_class for e in ZOO if e.config_class is config_class and e.task == "base")
        return [
            (self.case.model_class, stock_class.from_pretrained(folder).eval()),
            (base_class, AutoModel.from_pretrained(folder).eval()),
        ]

    def _zoo_like_stock(self, zoo_class, folder, stock, **options):
        """`zoo_class` converted from the stock checkpoint, given every weight of `stock` (also those the checkpoint
        lacks, such as the pooler of a base model loaded from a classifier's checkpoint)."""
        zoo = zoo_class.from_pretrained(folder, **options).eval()
        result = zoo.load_state_dict(stock.state_dict(), strict=False)
        assert not result.unexpected_keys, f"{zoo_class.__name__} lacks stock weights {result.unexpected_keys}"
        return zoo

    def _assert_same_outputs(self, got, expected, where):
        """`got` holds what `expected` holds: equal tensors, tuples of them (None where stock has None), and a cache
        wherever stock returns one."""
        from transformers.cache_utils import Cache

        if isinstance(expected, torch.Tensor):
            assert isinstance(got, torch.Tensor), f"{where}: {type(got).__name__} where stock has a tensor"
            torch.testing.assert_close(got, expected, msg=lambda m: f"{where}: {m}")
        elif isinstance(expected, (tuple, list)):
            assert isinstance(got, type(expected)), f"{where}: {type(got).__name__} where stock has a {type(expected)}"
            assert len(got) == len(expected), f"{where}: {len(got)} entries where stock has {len(expected)}"
            for i, (one, stock_one) in enumerate(zip(got, expected)):
                self._assert_same_outputs(one, stock_one, f"{where}[{i}]")
        elif isinstance(expected, Cache):
            assert isinstance(got, Cache), f"{where}: {type(got).__name__} where stock returns a cache"
        elif expected is None:
            assert got is None, f"{where}: a {type(got).__name__} where stock has None"
        else:
            assert got == expected, f"{where}: {got!r} where stock has {expected!r}"

    @staticmethod
    def _returned_or_refused(run):
        """`run()`'s output, or the ValueError it raised (which must name `output_attentions`)."""
        try:
            with torch.no_grad():
                return run()
        except ValueError as err:
            assert "output_attentions" in str(err), err
            return err

    def test_output_attentions_from_the_config_as_from_the_call(self, tmp_path):
        """`output_attentions=True` in the config does what it does in the call: refused both ways (a ValueError
        naming `output_attentions`, from the config, the model's construction or the forward pass; the flag set on
        the config of a built model is refused when it runs, never ignored), or both ways returning the attention
        weights, at identity init those of the stock model."""
        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        options = {**self._identity_option_sets()[0], "attn_implementation": "eager"}
        for zoo_class, stock in self._task_and_base_pairs(folder, type(stock)):
            stock.set_attn_implementation("eager")
            model = self._zoo_like_stock(zoo_class, folder, stock, **options)
            results = {
                "call": self._returned_or_refused(lambda: model(**batch, output_attentions=True)),
                "config": self._returned_or_refused(
                    lambda: self._zoo_like_stock(zoo_class, folder, stock, output_attentions=True, **options)(**batch)
                ),
            }
            refused = {how for how, result in results.items() if isinstance(result, ValueError)}
            assert refused in (set(), set(results)), f"{zoo_class.__name__}: refused only from the {sorted(refused)}"
            if refused:
                model.config.output_attentions = True
                set_later = self._returned_or_refused(lambda: model(**batch))
                assert isinstance(set_later, ValueError), f"{zoo_class.__name__}: the config's flag set later ignored"
                continue
            with torch.no_grad():
                expected = stock(**batch, output_attentions=True)
            names = ("attentions", "encoder_attentions", "decoder_attentions", "cross_attentions")
            for name in [n for n in names if getattr(expected, n, None)]:  # not GPT-2's empty cross-attentions
                for how, result in results.items():
                    where = f"{zoo_class.__name__} {name} from the {how}"
                    self._assert_same_outputs(getattr(result, name, None), getattr(expected, name), where)

    @pytest.mark.parametrize("selection", [True, [0, 2], -1], ids=["all", "list", "negative_index"])
    def test_hidden_state_selection_as_stock(self, tmp_path, selection):
        """`output_hidden_states` (True, or transformers 5's selection by index: an index or a list, negative from
        the end), in the call or in the config, returns what the stock class returns: at identity init, the stock
        hidden states at the selected positions and None at the others. (A stock class that ignores the selection
        and returns every hidden state, as DeBERTa-v2's does, is the reference only at the selected positions.)"""
        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        options = self._identity_option_sets()[0]
        for zoo_class, stock in self._task_and_base_pairs(folder, type(stock)):
            with torch.no_grad():
                expected = stock(**batch, output_hidden_states=selection)
                model = self._zoo_like_stock(zoo_class, folder, stock, **options)
                results = {
                    "call": model(**batch, output_hidden_states=selection),
                    "config": self._zoo_like_stock(zoo_class, folder, stock, output_hidden_states=selection, **options)(
                        **batch
                    ),
                }
            names = ("hidden_states", "encoder_hidden_states", "decoder_hidden_states")
            compared = [n for n in names if getattr(expected, n, None) is not None]
            assert compared, f"the stock {type(stock).__name__} returned no hidden states"
            for name in compared:
                stock_states = getattr(expected, name)
                count = len(stock_states)
                if selection is True:
                    selected = set(range(count))
                else:
                    selected = {i % count for i in ([selection] if isinstance(selection, int) else selection)}
                stock_states = tuple(h if i in selected else None for i, h in enumerate(stock_states))
                for how, result in results.items():
                    where = f"{zoo_class.__name__} {name}, output_hidden_states={selection!r} from the {how}"
                    self._assert_same_outputs(getattr(result, name, None), stock_states, where)

    # -- the model card: what it claims, and its usage snippet (issue 25) -------------------------------------------

    def _card(self, folder) -> str:
        return open(os.path.join(folder, "README.md"), encoding="utf-8").read()

    def test_card_claims_the_stock_function_only_until_a_trainer_step(self, tmp_path):
        """The card of an untrained conversion says what it computes (`stock_function_statement`); after one
        `Trainer` step that changes weights, `Trainer.save_model` writes a card that claims nothing of the kind."""
        from transformers import Trainer, TrainingArguments

        from .card import stock_function_statement

        folder, _ = self._stock(tmp_path)
        model = self.case.model_class.from_pretrained(folder, **self._identity_option_sets()[0])
        model.save_pretrained(str(tmp_path / "untrained"))
        assert f"untrained conversion: {stock_function_statement(model)}" in self._card(tmp_path / "untrained")
        batch = self.case.make_batch()
        batch["labels"] = self.case.labels(batch)
        examples = [{k: v[i] for k, v in batch.items()} for i in range(len(batch["labels"]))]
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        args = TrainingArguments(
            output_dir=str(tmp_path / "trained"),
            per_device_train_batch_size=len(examples),
            max_steps=1,
            learning_rate=1e-2,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
        )
        trainer = Trainer(model=model.train(), args=args, train_dataset=examples)
        trainer.train()
        assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters()), "the step changed nothing"
        trainer.save_model()
        card = self._card(tmp_path / "trained")
        assert "untrained conversion" not in card and "computes the stock model's function" not in card

    def test_untrained_conversion_agrees_with_stock_as_the_card_says(self, tmp_path):
        """What the card says an untrained conversion computes (`stock_function_words`: exactly, or to float rounding
        within the mechanism's stated tolerance) is what it computes, on a padded batch."""
        from .models.zoo_common import agrees_with_stock, stock_function_words

        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        for options in self._identity_option_sets():
            model = self._zoo(folder, **options)
            with torch.no_grad():
                ours = _output(model, batch, self.case.output_name)
                theirs = _output(stock, batch, self.case.output_name)
            agrees, diff = agrees_with_stock(model, ours, theirs)
            assert agrees, f"{options}: the card says {stock_function_words(model)!r}, max |diff| {diff:.3g}"

    def test_card_snippet_loads_the_model_with_its_task_class(self, tmp_path, monkeypatch):
        """The card's python snippet, run beside the saved folder, loads the model in its task class (with its head)
        from the folder's final name."""
        import re

        folder, _ = self._stock(tmp_path)
        out = tmp_path / "shared-model"
        self._zoo(folder, **self.case.active_options).save_pretrained(str(out))
        snippets = re.findall(r"```python\n(.*?)```", self._card(out), flags=re.S)
        assert len(snippets) == 1 and '"shared-model"' in snippets[0], snippets
        monkeypatch.chdir(tmp_path)
        namespace: dict = {}
        exec(snippets[0], namespace)
        assert type(namespace["model"]).__name__ == self.case.model_class.__name__

    # -- serving engines: the transformers backend's contract (issue 23) -------------------------------------------

    def _served_base_class(self):
        """The class a serving engine's transformers backend builds from `auto_map["AutoModel"]`: the base model of
        a decoder. Encoder bridges, encoder sentinels and seq2seq attention bridges are outside the contract."""
        from .zoo import ZOO

        config_class = self.case.model_class.config_class
        entries = [e for e in ZOO if e.config_class is config_class]
        if not any(e.task == "causal-lm" for e in entries):
            pytest.skip(
                f"{self.case.model_class.__name__} is not a decoder: the engines' transformers backend serves "
                "decoders here (docs/serving.md says what else it could serve and why it is not checked)"
            )
        return next(e.model_class for e in entries if e.task == "base")

    def _engine_forward(self, model_class, folder, input_ids):
        """A forward as vLLM's and SGLang's transformers backend run it: the model built with the engine's attention
        implementation (here `interlayer_recording`, which records each call and attends as the engine does), one
        row of flattened tokens with position ids and no attention mask, `use_cache=False`, the engine's own keyword
        (`attention_instances`, a dict of one attention object per layer index) in the call, and the attention
        output returned in the engine's layout, `(tokens, heads * head_dim)`. Returns the last hidden state, the
        calls `(module, query shape, key shape, keyword arguments)` and the `attention_instances` passed."""
        from transformers import AttentionInterface

        calls = []

        def recording_attention(module, query, key, value, attention_mask, **kwargs):
            calls.append((module, tuple(query.shape), tuple(key.shape), kwargs))
            return _engine_attention(module, query, key, value, **kwargs), None

        AttentionInterface.register("interlayer_recording", recording_attention)
        model = model_class.from_pretrained(folder, attn_implementation="interlayer_recording").eval()
        instances = {i: object() for i in range(model.config.num_hidden_layers)}
        positions = torch.arange(input_ids.shape[-1])[None]
        with torch.no_grad():
            out = model(
                input_ids=input_ids,
                position_ids=positions,
                use_cache=False,
                attention_instances=instances,
                return_dict=False,
            )
        return out[0], calls, instances

    def test_serving_engine_attention_contract(self, tmp_path):
        """What vLLM's and SGLang's transformers backend need of a custom decoder (docs/serving.md): the saved
        `auto_map` names an `AutoModel` class, which declares `_supports_attention_backend`; every layer's attention
        goes through the attention interface once per forward, with the engine's keyword arguments passed down, the
        layer's `layer_idx` and the config's head counts (the engine builds one attention object per layer from
        them); the outputs equal those of eager attention; the config's `base_model_tp_plan` is the stock config's
        and names modules of the model. A mechanism whose layers attend more than once per forward (latent's two
        passes) must say why it cannot be served in `serving_exclusion` and declare `_supports_attention_backend =
        False`, so that the engines do not choose their transformers backend for it. Wherever the stock model does
        not take the engine's layout (GPT-2's attention reshapes its output as 4-D), the zoo class need not either."""
        import re

        from transformers import AutoModel

        base_class = self._served_base_class()
        folder, stock = self._stock(tmp_path)
        saved = tmp_path / "saved"
        self._zoo(folder, **self.case.active_options).save_pretrained(str(saved))
        auto_map = json.load(open(saved / "config.json"))["auto_map"]
        assert auto_map.get("AutoModel", "").endswith(f".{base_class.__name__}"), auto_map
        exclusion = getattr(base_class, "serving_exclusion", None)
        for model_class in (base_class, self.case.model_class):
            assert model_class.is_backend_compatible() == (not exclusion), (model_class.__name__, exclusion)

        input_ids = self.case.make_batch()["input_ids"][:1]
        try:
            self._engine_forward(AutoModel, folder, input_ids)
        except Exception as err:  # the stock class itself does not take the engine's layout
            pytest.skip(f"the stock {type(stock).__name__} does not take the engine's attention layout either: {err}")

        hidden, calls, instances = self._engine_forward(base_class, str(saved), input_ids)
        config = calls[0][0].config if calls else base_class.config_class.from_pretrained(str(saved))
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        for module, query, key, kwargs in calls:
            assert kwargs.get("attention_instances") is instances, f"{type(module).__name__}: {sorted(kwargs)}"
            assert query[1:2] + query[3:] == (config.num_attention_heads, head_dim), (type(module).__name__, query)
            assert key[1:2] + key[3:] == (kv_heads, head_dim), (type(module).__name__, key)
        layers = [module.layer_idx for module, *_ in calls]
        assert sorted(set(layers)) == list(range(config.num_hidden_layers)), layers
        if len(layers) != config.num_hidden_layers:
            assert exclusion, f"layers attend more than once a forward without a `serving_exclusion`: {layers}"
        else:
            assert not exclusion, f"every layer attends once, yet the class says {exclusion!r}"

        eager = base_class.from_pretrained(str(saved), attn_implementation="eager").eval()
        with torch.no_grad():
            expected = eager(input_ids=input_ids, use_cache=False).last_hidden_state
        torch.testing.assert_close(hidden, expected)

        assert config.base_model_tp_plan == stock.config.base_model_tp_plan
        names = [name for name, _ in eager.named_modules()]
        for pattern in config.base_model_tp_plan or {}:
            regex = re.compile(pattern.replace(".", r"\.").replace("*", r"\d+"))
            assert any(regex.fullmatch(name) for name in names), f"tp plan entry {pattern!r} names no module"

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

    # -- DeepSpeed ZeRO-3: every parameter partitioned by `zero.Init` (issue 23) -----------------------------------

    def test_zero3_init_partitions_every_parameter(self, tmp_path):
        """`from_pretrained` under DeepSpeed ZeRO-3 builds the model in `deepspeed.zero.Init`, which partitions a
        module's parameters when the outermost `__init__` that an `nn.Module` class defines in its own `__dict__`
        returns: a parameter a mixin adds after the stock `__init__` (gates, read-outs) would stay whole on every rank
        unless the composed class has an `__init__` of its own (`generate_classes.py`). Checked by doing
        DeepSpeed's wrapping without DeepSpeed; tests/tooling/test_deepspeed.py loads three classes under the real
        one."""
        folder, _ = self._stock(tmp_path)
        config = self._zoo(folder, **self.case.active_options).config
        missed = _parameters_zero3_init_would_miss(lambda: self.case.model_class(config))
        assert not missed, f"zero.Init would leave these parameters whole: {missed}"

    # -- one parameter prefix per mechanism ------------------------------------------------------------------------

    def test_the_mechanism_parameters_are_named_under_its_prefix(self, tmp_path):
        """Every tensor the mechanism adds to the stock checkpoint (with the case's options) has a name component
        starting with the prefix of its record in `interlayer.mechanisms` (the class's `mechanism_param_prefix`), and
        no stock weight does: freezing the base, the parameter report and a conversion's report tell the
        mechanism's tensors by that one test (`has_parameter_prefix`)."""
        from .mechanisms import mechanism_of
        from .models.zoo_common import has_parameter_prefix

        folder, stock = self._stock(tmp_path)
        model, info = self.case.model_class.from_pretrained(
            folder, output_loading_info=True, **self.case.active_options
        )
        prefix = mechanism_of(self.case.model_class).parameter_prefix
        assert prefix == model.mechanism_param_prefix, (prefix, model.mechanism_param_prefix)
        added = set(model.state_dict()) - set(stock.state_dict())
        outside = sorted(k for k in added if not has_parameter_prefix(k, prefix))
        assert added and not outside, f"mechanism tensors not under `{prefix}`: {outside}"
        claimed = sorted(k for k in stock.state_dict() if has_parameter_prefix(k, prefix))
        assert not claimed, f"stock weights named under the mechanism's prefix `{prefix}`: {claimed}"
        assert set(info["missing_keys"]) <= added, "a stock weight did not load"
