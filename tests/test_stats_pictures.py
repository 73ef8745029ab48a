"""`MechanismStatsCallback` sends the mechanism's pictures (those of `interlayer inspect`) to the Trainer's
TensorBoard writer at every evaluation, and nothing when there is none. tensorboard is not installed here: a writer
that records its calls stands in for `SummaryWriter` (the callback finds it as transformers' `TensorBoardCallback`
keeps it, in `tb_writer`)."""

import numpy as np
import pytest
import torch
from gpt2_fixtures import lm_batch, lm_labels
from hc_fixtures import build_stock_llama
from transformers import Trainer, TrainerCallback, TrainingArguments

import interlayer
from interlayer.callbacks import MechanismStatsCallback

pytest.importorskip("matplotlib")


class RecordingWriter:
    def __init__(self):
        self.images = []

    def add_image(self, tag, image, step, dataformats="CHW"):
        self.images.append((tag, np.asarray(image), step, dataformats))

    def flush(self):
        pass


class FakeTensorBoard(TrainerCallback):
    def __init__(self):
        self.tb_writer = RecordingWriter()


class Rows(torch.utils.data.Dataset):
    def __init__(self):
        self.batch = lm_batch((12, 9, 5, 12))
        self.batch["labels"] = lm_labels(self.batch)

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.batch.items()}


def train(tmp_path, callbacks):
    build_stock_llama(str(tmp_path / "stock"))
    model = interlayer.LlamaLatentForCausalLM.from_pretrained(str(tmp_path / "stock"), identity_init=False)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        eval_strategy="steps",
        eval_steps=1,
        logging_steps=1,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
    )
    trainer = Trainer(model=model, args=args, train_dataset=Rows(), eval_dataset=Rows(), callbacks=callbacks)
    stats = MechanismStatsCallback.attach(trainer)
    trainer.train()
    return stats


def test_pictures_reach_the_tensorboard_writer_at_each_evaluation(tmp_path):
    board = FakeTensorBoard()
    train(tmp_path, [board])
    images = board.tb_writer.images
    assert [(tag, step) for tag, _, step, _ in images] == [("interlayer/latent", 1), ("interlayer/latent", 2)]
    for _, image, _, layout in images:
        assert layout == "HWC" and image.ndim == 3 and image.shape[2] == 3 and image.shape[0] > 50
        assert image.std() > 0  # a drawing, not a blank canvas


def test_no_writer_no_pictures(tmp_path):
    stats = train(tmp_path, [])
    assert stats.tensorboard_writer() is None
