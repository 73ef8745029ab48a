"""`TrainerCallback`s shared by every mechanism of the zoo."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
from collections import defaultdict

import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import ExportableState, PrinterCallback, ProgressCallback
from transformers.utils import logging

logger = logging.get_logger(__name__)


def _unwrap(model):
    while hasattr(model, "module"):
        model = model.module
    return model


def world_size() -> int:
    """The number of data-parallel processes (1 without `torch.distributed`)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1


def mean_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """The mean over every data-parallel rank of each value (a name missing on some rank is averaged over the ranks
    that have it). Every rank must call it at the same point; without `torch.distributed` it returns `values`."""
    if world_size() == 1:
        return values
    gathered: list[dict[str, float]] = [{} for _ in range(world_size())]
    torch.distributed.all_gather_object(gathered, values)
    names = dict.fromkeys(name for rank_values in gathered for name in rank_values)
    return {name: sum(v[name] for v in gathered if name in v) / sum(name in v for v in gathered) for name in names}


def mean_tensor_over_ranks(tensor: torch.Tensor, weight: float | torch.Tensor | None = None) -> torch.Tensor:
    """`tensor` averaged over every data-parallel rank, each rank's tensor weighted by its `weight` (for example
    the number of tokens it was measured on; equal weights by default). A new tensor; every rank must call it with
    the same shape. Without `torch.distributed` it returns `tensor`."""
    if world_size() == 1:
        return tensor
    w = torch.as_tensor(1.0 if weight is None else weight, dtype=torch.float64).reshape(1)
    packed = torch.cat([tensor.detach().double().flatten() * w, w])
    torch.distributed.all_reduce(packed)
    return (packed[:-1] / packed[-1]).to(tensor.dtype).view_as(tensor)


class ResumableCallback(TrainerCallback, ExportableState):
    """A callback whose constructor arguments and the attributes named in `resumable_attributes` are saved in
    Trainer checkpoints and restored on resume: by the Trainer with `restore_callback_states_from_checkpoint=True`,
    and otherwise (transformers' default) by the callback itself when training begins from a checkpoint, so that a
    resumed run never starts the mechanism's state afresh. Constructor arguments must be stored under their own
    names; a subclass that overrides `on_train_begin` calls this one first."""

    resumable_attributes: tuple[str, ...] = ()

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0 or args.restore_callback_states_from_checkpoint:
            return
        saved = (state.stateful_callbacks or {}).get(type(self).__name__)
        if isinstance(saved, list):
            raise ValueError(
                f"The checkpoint holds the states of several {type(self).__name__} callbacks; resume with "
                "`restore_callback_states_from_checkpoint=True`, which restores each in order."
            )
        if not saved:
            raise ValueError(
                f"Resuming at step {state.global_step}, but the checkpoint holds no state of {type(self).__name__}; "
                "resume with the callbacks the run was saved with."
            )
        for name, value in saved.get("attributes", {}).items():
            setattr(self, name, value)

    def state(self) -> dict:
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {
            "args": {name: getattr(self, name) for name in names},
            "attributes": {name: getattr(self, name) for name in self.resumable_attributes},
        }


def add_to_logs(state, logs: dict, values: dict) -> None:
    """Add values to a Trainer log being dispatched (`on_log`) and to its row in `state.log_history`, which the
    Trainer has already written, so they reach every later callback, the console and `trainer_state.json`."""
    logs.update(values)
    if state.log_history and state.log_history[-1].get("step") == state.global_step:
        state.log_history[-1].update(values)


class MechanismStatsCallback(TrainerCallback):
    """Adds the model's `mechanism_stats()` (averaged since the previous log) to every Trainer log, so they reach
    the console, `trainer_state.json` and every `report_to` integration (TensorBoard, W&B, ...) like any metric.

    Integrations read the log dict in callback order, so attach it with `MechanismStatsCallback.attach(trainer)`,
    which puts it first. Evaluation metrics get the statistics of the evaluation forwards, prefixed `eval_`.

    In data-parallel training every rank sees its own share of the batch; the statistics are averaged over the ranks
    (every rank logs at the same steps), so every rank logs the same values, those of the whole batch when the
    ranks' shares are equal.
    """

    def __init__(self):
        self.handler = None  # the Trainer's callback handler, to find its TensorBoard writer

    @classmethod
    def attach(cls, trainer: Trainer, group_console: bool = True) -> "MechanismStatsCallback":
        """Put the callback first; with `group_console`, the Trainer's console printer (`ProgressCallback`, or
        `PrinterCallback` under `disable_tqdm`) becomes its grouped variant, which prints one summary per statistic
        across layers (`group_statistics`); every other callback and `trainer_state.json` keep the full set."""
        callback = cls()
        callback.handler = trainer.callback_handler
        trainer.callback_handler.callbacks.insert(0, callback)
        if group_console:
            callbacks = trainer.callback_handler.callbacks
            for i, printer in enumerate(callbacks):
                grouped = {ProgressCallback: GroupedProgressCallback, PrinterCallback: GroupedPrinterCallback}
                if type(printer) in grouped:
                    callbacks[i] = grouped[type(printer)]()
        return callback

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if logs is None or model is None or not hasattr(_unwrap(model), "mechanism_stats"):
            return
        evaluation = any(k.startswith("eval_") for k in logs)
        stats = mean_over_ranks(_unwrap(model).mechanism_stats(reset=True, split="eval" if evaluation else "train"))
        add_to_logs(state, logs, {f"eval_{k}": v for k, v in stats.items()} if evaluation else stats)
        if evaluation and state.is_world_process_zero:
            self.log_pictures(_unwrap(model), stats, state.global_step)

    def tensorboard_writer(self):
        """The writer of the Trainer's TensorBoard integration (`report_to` includes "tensorboard", tensorboard
        installed, training started), or None."""
        for callback in self.handler.callbacks if self.handler is not None else ():
            if getattr(callback, "tb_writer", None) is not None:
                return callback.tb_writer
        return None

    def log_pictures(self, model, stats: dict, step: int) -> list[str]:
        """The mechanism's pictures of `interlayer inspect` (its record's, `interlayer.mechanisms`) drawn from the
        evaluation statistics, as TensorBoard images `interlayer/NAME` at `step`; nothing without a TensorBoard
        writer or without matplotlib. A picture drawn from a source sentence (the attention bridges' slot
        attention) is not drawn here."""
        writer = self.tensorboard_writer()
        if writer is None or importlib.util.find_spec("matplotlib") is None:
            return []
        import tempfile

        from matplotlib.image import imread

        from .inspection import draw_model, zoo_entry

        entry = zoo_entry(model.config)
        tags, stats = [], {**model.mechanism_state(), **stats}  # the evaluation's statistics and the gates now
        with tempfile.TemporaryDirectory() as folder:
            try:
                paths, _ = draw_model(model, entry, stats, None, None, folder)
            except ValueError as err:  # a statistic the picture needs is missing: say so, never stop training
                logger.warning(f"MechanismStatsCallback: no TensorBoard pictures at step {step}: {err}")
                return []
            for path in paths:
                tag = f"interlayer/{os.path.splitext(os.path.basename(path))[0]}"
                writer.add_image(tag, imread(path)[..., :3], step, dataformats="HWC")
                tags.append(tag)
        writer.flush()
        return tags


_LAYER = re.compile(r"/L\d+(?=/)")  # the layer component: "bridge/L3/alpha_attn"
_INDEX = re.compile(r"(_\d+)+$")  # the element of a vector or matrix statistic: "hc/L1/mlp/res_1_0"


def group_statistics(logs: dict) -> dict:
    """`logs` for the console: the mechanism statistics (names with a `/`) that differ only by layer (`/L<i>/`) or
    by element (`_i`, `_i_j`) become one entry, `"latent/L*/gate": "mean 0.52 [0.41, 0.63] x3"` (mean, min, max over
    its N members); a statistic alone in its group and every other entry (loss, learning rate) stay as they are."""
    group_of = {
        k: _INDEX.sub("_*", _LAYER.sub("/L*", k))
        for k, v in logs.items()
        if "/" in k and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    members = defaultdict(list)
    for key, group in group_of.items():
        members[group].append(key)
    out = {}
    for key, value in logs.items():
        group = group_of.get(key)
        if group is None or len(members[group]) == 1:
            out[key] = value
        elif key == members[group][0]:
            values = [float(logs[m]) for m in members[group]]
            out[group] = f"mean {sum(values) / len(values):.4g} [{min(values):.4g}, {max(values):.4g}] x{len(values)}"
    return out


class _GroupedConsole:
    """Prints `group_statistics(logs)` instead of `logs`; the dict the other callbacks see is untouched."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        return super().on_log(args, state, control, logs=group_statistics(logs) if logs else logs, **kwargs)


class GroupedProgressCallback(_GroupedConsole, ProgressCallback):
    """transformers' `ProgressCallback` (progress bars, logs written under them), logs grouped."""


class GroupedPrinterCallback(_GroupedConsole, PrinterCallback):
    """transformers' `PrinterCallback` (the printer when `disable_tqdm`), logs grouped."""


class EarlyStopBelowCallback(TrainerCallback):
    """The seed's early-stop rule: stop training when the evaluation metric after epoch `epoch` (default 1) is
    below `threshold` (the seed: epoch-1 RTE accuracy < 0.70)."""

    def __init__(self, threshold: float, metric: str = "eval_accuracy", epoch: int = 1):
        self.threshold = threshold
        self.metric = metric
        self.epoch = epoch
        self.triggered = False

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics is None or self.metric not in metrics or state.epoch is None:
            return
        if abs(state.epoch - self.epoch) < 1e-3 and metrics[self.metric] < self.threshold:
            self.triggered = True
            control.should_training_stop = True
