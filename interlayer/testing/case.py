"""What the conformance suite runs on (`ConformanceCase`), the fixtures every part of it shares (`ConformanceBase`) and
the helpers of its checks."""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch


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


@contextlib.contextmanager
def _nothing_warned(loggers=("torch", "transformers.interlayer")):
    """Inside, every Python warning and every log record of WARNING or above from `loggers` (torch's, the zoo's) is
    kept (the loggers' levels set to WARNING meanwhile: an earlier test may have silenced them); on leaving, asserts
    that there was none."""
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    saved = [(logging.getLogger(name), logging.getLogger(name).level) for name in loggers]
    for logger, _ in saved:
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
    said = [str(w.message) for w in caught] + [r.getMessage() for r in records]
    assert not said, f"warned: {said}"


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


class ConformanceBase:
    """The fixtures every part of the suite shares: the case (`make_case`, which a test class implements), the tiny
    stock checkpoint, the zoo model converted from it, and the comparisons several parts make."""

    def make_case(self) -> ConformanceCase:
        raise NotImplementedError

    def setup_method(self, method):
        self.case = self.make_case()

    def _stock(self, tmp_path):
        folder = str(tmp_path / "stock")
        stock = self.case.build_stock(folder).eval()
        return folder, stock

    def _zoo(self, folder, **options):
        return self.case.model_class.from_pretrained(folder, **options).eval()

    def _trained_copy(self, tmp_path):
        folder, _ = self._stock(tmp_path)
        torch.manual_seed(0)
        model = self._zoo(folder, **self.case.active_options)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if model.is_mechanism_parameter(name):
                    p.add_(0.01 * torch.randn_like(p))
        return folder, model

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

    def _task_and_base_pairs(self, folder, stock_class):
        """`(zoo class, stock model)` for the case's class and for its base model class, each stock model loaded
        from the stock checkpoint (the base model by `AutoModel`, as a user loads it)."""
        from transformers import AutoModel

        from ..zoo import ZOO

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
