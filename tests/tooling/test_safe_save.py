"""A save killed at any moment never leaves a folder that silently mixes two models: `save_pretrained` (sharded, as
the README documents it) and the `Trainer`'s `save_model` stage the folder beside it and swap it into place, and keep
what else the folder holds (a Trainer's checkpoints)."""

import logging
import multiprocessing
import os
import random
import signal
import time

import pytest
import torch
from stock_checkpoints import build_stock_llama

from interlayer import LlamaLatentForCausalLM
from interlayer.models.zoo_common import is_weights_file, recover_interrupted_save, staging_folders
from interlayer.zoo import save_atomically

SHARD = "40KB"  # the tiny model's weights (~170 KB) in several shards
KILLS = 10


def _versions(tmp_path):
    """The stock-converted model and its parameters; version k of the model is every parameter plus k."""
    build_stock_llama(str(tmp_path / "stock"))
    model = LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock")
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    return model, base


def _set_version(model, base, k):
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(base[name] + k)


def _in_child():
    """A forked child that will be SIGKILLed must not touch tqdm: its lock is a semaphore shared with the parent, and
    a child killed while holding it (drawing "Writing model shards") would leave the parent's next progress bar
    waiting for ever."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _saves_forever(model, base, out, save):
    """The child process: save versions 1, 2, 3... into `out` until killed."""
    _in_child()
    k = 0
    while True:
        k += 1
        _set_version(model, base, k)
        save(model, out)


def _saved_version(out, base) -> int:
    """The version the folder holds, checking that every tensor is of that one version (never a mix)."""
    loaded = LlamaLatentForCausalLM.from_pretrained(out)
    params = dict(loaded.named_parameters())
    first = next(iter(base))
    k = round((params[first] - base[first]).flatten()[0].item())
    for name, tensor in base.items():
        torch.testing.assert_close(params[name], tensor + k, rtol=0, atol=0, msg=f"{name} is not of version {k}")
    return k


def _kill_at_random_moments(model, base, out, save, seed):
    """Start a process that saves repeatedly into `out` (a first version already there), kill it with SIGKILL at a
    random moment, check the folder; `KILLS` times. Returns the versions found."""
    rng = random.Random(seed)
    context = multiprocessing.get_context("fork")  # the child inherits the imported modules: it saves at once
    found = []
    for _ in range(KILLS):
        child = context.Process(target=_saves_forever, args=(model, base, out, save), daemon=True)
        child.start()
        time.sleep(rng.uniform(0.02, 0.4))
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=120)
        if not os.path.exists(out):  # killed between the swap's two renames: refused, and the next save finishes it
            with pytest.raises(OSError, match="interrupted"):
                LlamaLatentForCausalLM.from_pretrained(out)
            recover_interrupted_save(out)
        found.append(_saved_version(out, base))
    return found


@pytest.fixture
def sharded_save():
    def save(model, out):
        model.save_pretrained(out, max_shard_size=SHARD)

    return save


def test_killed_sharded_saves_leave_the_old_or_the_new_model(tmp_path, sharded_save):
    model, base = _versions(tmp_path)
    out = str(tmp_path / "model")
    sharded_save(model, out)
    assert sum(is_weights_file(n) and n.endswith(".safetensors") for n in os.listdir(out)) > 2  # sharded
    (tmp_path / "model" / "notes.txt").write_text("mine")  # a file of the user's in the folder
    found = _kill_at_random_moments(model, base, out, sharded_save, seed=0)
    assert max(found) > 0, "no save finished between the kills: the test proves nothing"
    assert (tmp_path / "model" / "notes.txt").read_text() == "mine"
    recover_interrupted_save(out)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".model.")]  # staging folders cleaned up
    assert _saved_version(out, base) == found[-1]
    card = (tmp_path / "model" / "README.md").read_text()
    assert 'from_pretrained("model"' in card and "interlayer-new" not in card


def test_killed_trainer_saves_keep_the_checkpoints_and_a_whole_model(tmp_path):
    from transformers import Trainer, TrainingArguments

    model, base = _versions(tmp_path)
    out = tmp_path / "trainer"
    args = TrainingArguments(output_dir=str(out), report_to="none", use_cpu=True, save_strategy="no")
    trainer = Trainer(model=model, args=args)
    trainer.save_model()
    (out / "checkpoint-5").mkdir()
    (out / "checkpoint-5" / "optimizer.pt").write_bytes(b"state")

    def save(model, folder):
        trainer.save_model(folder)

    found = _kill_at_random_moments(model, base, str(out), save, seed=1)
    assert max(found) > 0, "no save finished between the kills: the test proves nothing"
    recover_interrupted_save(str(out))
    assert (out / "checkpoint-5" / "optimizer.pt").read_bytes() == b"state"
    assert (out / "training_args.bin").exists()


def _save_killed_at(model, out, when):
    """Save `model` into `out` in a child process that is SIGKILLed at the rename `when(src, dst)` picks."""

    def child():
        _in_child()
        real_replace = os.replace

        def replace(src, dst):
            if when(str(src), str(dst)):
                os.kill(os.getpid(), signal.SIGKILL)
            real_replace(src, dst)

        os.replace = replace
        model.save_pretrained(out, max_shard_size=SHARD)

    process = multiprocessing.get_context("fork").Process(target=child, daemon=True)
    process.start()
    process.join(timeout=120)
    assert process.exitcode == -signal.SIGKILL


@pytest.mark.parametrize(
    "moment, expected",
    [("while carrying the folder's other files", 1), ("between the two renames", 2)],
)
def test_a_save_killed_during_the_swap_is_undone_or_finished(tmp_path, moment, expected):
    """The swap's own steps: killed while the user's files are being carried into the new folder, recovery gives
    them back to the previous model; killed between the renames (the folder is missing), it puts the new, complete
    model in place. The user's files survive both."""
    model, base = _versions(tmp_path)
    out = str(tmp_path / "model")
    _set_version(model, base, 1)
    model.save_pretrained(out, max_shard_size=SHARD)
    (tmp_path / "model" / "notes.txt").write_text("mine")
    (tmp_path / "model" / "tokenizer.json").write_text("{}")
    _set_version(model, base, 2)
    new, _ = staging_folders(out)
    if moment == "between the two renames":
        _save_killed_at(model, out, lambda src, dst: src == new)
        with pytest.raises(OSError, match="interrupted while swapping it into place.*recover_interrupted_save"):
            LlamaLatentForCausalLM.from_pretrained(out)
    else:
        _save_killed_at(model, out, lambda src, dst: dst == os.path.join(new, "tokenizer.json"))
        assert os.path.exists(os.path.join(new, "notes.txt")) and not os.path.exists(os.path.join(out, "notes.txt"))
    recover_interrupted_save(out)
    assert _saved_version(out, base) == expected
    assert (tmp_path / "model" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "model" / "tokenizer.json").read_text() == "{}"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".model.")]


def test_a_folder_that_cannot_be_staged_is_saved_in_place_with_a_warning(tmp_path, monkeypatch, caplog):
    """Saving into the working directory (which a swap would rename away from under the process) writes in place, as
    transformers does, and says that such a save is not safe against interruption."""
    model, _ = _versions(tmp_path)
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path / "here")
    # transformers' loggers reach the root logger (and caplog) only under CI=true, and an earlier test in the same
    # process may have raised their level: listen on the zoo's logger itself
    # (`setLevel`, not the attribute: it also clears the logging module's cache of `isEnabledFor` answers, which
    # still said no after `transformers.logging.set_verbosity_error()` in an earlier test)
    zoo_logger = logging.getLogger("transformers.interlayer")
    zoo_logger.addHandler(caplog.handler)
    level = zoo_logger.level
    zoo_logger.setLevel(logging.WARNING)
    try:
        model.save_pretrained(".")
    finally:
        zoo_logger.removeHandler(caplog.handler)
        zoo_logger.setLevel(level)
    assert os.path.samefile(os.getcwd(), tmp_path / "here") and (tmp_path / "here" / "config.json").exists()
    assert (tmp_path / "here" / "notes.txt").read_text() == "mine"
    assert "saving in place" in caplog.text
    save_atomically(model, ".", overwrite=True)  # the converter's save (interlayer convert SRC .) alike
    assert os.path.samefile(os.getcwd(), tmp_path / "here") and (tmp_path / "here" / "notes.txt").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".here.")]
