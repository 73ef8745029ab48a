"""`MechanismStatsCallback` prints a grouped summary of the per-layer statistics to the console while the logs keep
them all; and it sends the mechanism's pictures (those of `interlayer inspect`) to the Trainer's
TensorBoard writer at every evaluation, and nothing when there is none: through the real integration
(`report_to=["tensorboard"]`, read back from the event file) when tensorboard is installed, and always through a
writer that records its calls, kept where transformers' `TensorBoardCallback` keeps its `SummaryWriter`."""

import numpy as np
import pytest
from conformance_cases import examples
from multiprocess_train import CASES, Rows
from transformers import Trainer, TrainerCallback, TrainingArguments

from interlayer.callbacks import MechanismStatsCallback, group_statistics

pytest.importorskip("matplotlib")


class RecordingWriter:
    def __init__(self):
        self.images = []

    def add_image(self, tag, image, step, dataformats="CHW"):
        self.images.append((tag, np.asarray(image), step, dataformats))

    def flush(self):
        pass


LATENT = next(name for name, tiny in examples(distributed=True).items() if tiny.record.name == "latent")


class FakeTensorBoard(TrainerCallback):
    def __init__(self):
        self.tb_writer = RecordingWriter()


def train(tmp_path, callbacks, report_to=(), group_console=True, case=LATENT):
    """Two steps of the stock Trainer on a case of `multiprocess_train` (8 examples, mechanism active), evaluating
    after each."""
    build, model_class, options, rows, _ = CASES[case]
    build(str(tmp_path / "stock"))
    model = model_class.from_pretrained(str(tmp_path / "stock"), **options)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        eval_strategy="steps",
        eval_steps=1,
        logging_steps=1,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        report_to=list(report_to),
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
    )
    data = Rows(rows())
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data, callbacks=callbacks)
    stats = MechanismStatsCallback.attach(trainer, group_console=group_console)
    trainer.train()
    return stats, trainer


# every mechanism's pictures but those drawn from a source sentence (`interlayer inspect` draws them), on its record's
# distributed example
PICTURES = {
    name: [picture.file.removesuffix(".png") for picture in tiny.record.pictures if not picture.reads_inputs]
    for name, tiny in examples(distributed=True).items()
}


@pytest.mark.parametrize("case", PICTURES)
def test_pictures_reach_the_tensorboard_writer_at_each_evaluation(tmp_path, case):
    board = FakeTensorBoard()
    train(tmp_path, [board], case=case)
    images = board.tb_writer.images
    expected = [(f"interlayer/{name}", step) for step in (1, 2) for name in PICTURES[case]]
    assert [(tag, step) for tag, _, step, _ in images] == expected
    for _, image, _, layout in images:
        assert layout == "HWC" and image.ndim == 3 and image.shape[2] == 3 and image.shape[0] > 50
        assert image.std() > 0  # a drawing, not a blank canvas


def test_no_writer_no_pictures(tmp_path):
    stats, _ = train(tmp_path, [])
    assert stats.tensorboard_writer() is None


def test_pictures_reach_a_real_tensorboard_event_file(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    train(tmp_path, [], report_to=["tensorboard"])
    runs = [p for p in (tmp_path / "out").rglob("events.out.tfevents.*")]
    assert runs, "no event file"
    events = EventAccumulator(str(runs[0].parent), size_guidance={IMAGES: 0})
    events.Reload()
    assert "interlayer/latent" in events.Tags()["images"]
    images = events.Images("interlayer/latent")
    assert [i.step for i in images] == [1, 2] and all(i.width > 50 and i.height > 50 for i in images)
    assert "eval/latent/L0/adjustment_ratio" in events.Tags()["scalars"]  # the numbers beside the pictures


def test_group_statistics_summarises_layers_and_elements_and_keeps_the_rest():
    logs = {
        "loss": 2.5,
        "latent/L0/gate": 0.25,
        "latent/L2/gate": 0.75,
        "eval_hc/L1/mlp/res_0_1": 1.0,
        "eval_hc/L1/mlp/res_1_0": 3.0,
        "sentinel/heads_active": 12.0,
        "epoch": 1.0,
    }
    assert group_statistics(logs) == {
        "loss": 2.5,
        "latent/L*/gate": "mean 0.5 [0.25, 0.75] x2",
        "eval_hc/L*/mlp/res_*": "mean 2 [1, 3] x2",
        "sentinel/heads_active": 12.0,
        "epoch": 1.0,
    }


@pytest.mark.parametrize("group_console", [True, False])
def test_console_prints_groups_while_the_logs_keep_every_statistic(tmp_path, capsys, group_console):
    """A 3-layer latent model with sources at layers 1 and 2 (targets 0 and 1): the printer (`disable_tqdm`:
    `PrinterCallback`) shows `latent/L*/...` groups, `trainer_state`'s log history every per-layer value; without
    grouping, every value is printed."""
    _, trainer = train(tmp_path, [], group_console=group_console)
    printed = capsys.readouterr().out
    rows = [row for row in trainer.state.log_history if "loss" in row]
    assert rows and all({"latent/L0/gate", "latent/L1/gate"} <= row.keys() for row in rows)
    assert ("'latent/L*/gate': 'mean " in printed) == group_console
    assert ("'latent/L0/gate'" in printed) != group_console
