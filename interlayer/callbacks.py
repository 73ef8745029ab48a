"""`TrainerCallback`s shared by every mechanism of the zoo."""

from __future__ import annotations

import inspect

from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import ExportableState


def _unwrap(model):
    while hasattr(model, "module"):
        model = model.module
    return model


class ResumableCallback(TrainerCallback, ExportableState):
    """A callback whose constructor arguments and the attributes named in `resumable_attributes` are saved in
    Trainer checkpoints, and restored on resume (`restore_callback_states_from_checkpoint=True`). Constructor
    arguments must be stored under their own names."""

    resumable_attributes: tuple[str, ...] = ()

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
    """

    @classmethod
    def attach(cls, trainer: Trainer) -> "MechanismStatsCallback":
        callback = cls()
        trainer.callback_handler.callbacks.insert(0, callback)
        return callback

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if logs is None or model is None or not hasattr(_unwrap(model), "mechanism_stats"):
            return
        evaluation = any(k.startswith("eval_") for k in logs)
        stats = _unwrap(model).mechanism_stats(reset=True, split="eval" if evaluation else "train")
        add_to_logs(state, logs, {f"eval_{k}": v for k, v in stats.items()} if evaluation else stats)


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
