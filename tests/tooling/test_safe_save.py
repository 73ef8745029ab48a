"""A save killed at any moment never leaves a folder that silently mixes two models: `save_pretrained` (sharded, as
the README documents it) and the `Trainer`'s `save_model` stage the folder beside it and swap it into place, and keep
what else the folder holds (a Trainer's checkpoints)."""

import json
import logging
import multiprocessing
import os
import random
import signal
import time

import pytest
import torch
from stock_checkpoints import build_stock_llama
from transformers import Trainer, TrainingArguments

from interlayer import LlamaLatentForCausalLM
from interlayer.saving import is_weights_file, recover_interrupted_save, staging_folders
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

    def staged(path):  # in, or is, the staging folder of the save (`.model.interlayer-new-XXXXXXXX`)
        return os.path.relpath(path, tmp_path).startswith(".model.interlayer-new-")

    if moment == "between the two renames":
        _save_killed_at(model, out, lambda src, dst: staged(src) and dst == out)
        with pytest.raises(OSError, match="interrupted while swapping it into place.*recover_interrupted_save"):
            LlamaLatentForCausalLM.from_pretrained(out)
    else:
        _save_killed_at(model, out, lambda src, dst: staged(dst) and dst.endswith("tokenizer.json"))
        [new] = [path for path in staging_folders(out) if staged(path)]
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


# -- several processes saving into one folder at once ---------------------------------------------------------------

# one process each, all into the same folder. Not a Trainer's `save_model`: its model save is `save_pretrained`, then it
# writes `training_args.bin` into the folder outside the save lock, which fails while another process swaps the folder
# (seen once in about 10 runs of this test); docs/quickstart.md says so
WRITERS = ("sharded save_pretrained", "save_atomically", "save_pretrained")
TRIALS = 4


def _writer(model, base, out, k, how, fail, start, log):
    """A writer process: once every writer is ready (`start`, a barrier), saves version `k` of the model into `out`
    (`how`: a sharded `save_pretrained`, `save_atomically` or a one-file `save_pretrained`); with `fail`, its save fails
    once its weights are written. Every rename that puts a staged folder into place appends its version to `log`: the
    renames happen under the save lock, so the log's last line is the save the folder must hold."""
    from interlayer.models.zoo_common import ZooModelMixin

    _in_child()
    _set_version(model, base, k)
    real_replace, write = os.replace, ZooModelMixin.save_unstaged

    def replace(src, dst):
        real_replace(src, dst)
        if dst == out:  # a staged folder put into place
            with open(log, "a") as f:
                f.write(f"{k}\n")

    def failing_write(self, *args, **kwargs):
        write(self, *args, **kwargs)
        raise OSError("No space left on device")

    os.replace = replace
    if fail:
        ZooModelMixin.save_unstaged = failing_write
    saves = {
        "sharded save_pretrained": lambda: model.save_pretrained(out, max_shard_size=SHARD),
        "save_atomically": lambda: save_atomically(model, out, overwrite=True),
        "save_pretrained": lambda: model.save_pretrained(out),
    }
    start.wait()
    saves[how]()


def _weights_of_one_save(out):
    """The folder's weight files are those of one save: the shards its index names and no other, or one file."""
    names = {n for n in os.listdir(out) if is_weights_file(n)}
    index = os.path.join(out, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = set(json.load(f)["weight_map"].values())
        assert names == shards | {"model.safetensors.index.json"}, names
    else:
        assert names == {"model.safetensors"}, names


def test_processes_saving_into_one_folder_at_once_leave_one_model_whole(tmp_path):
    """Three processes save three versions of the model into one folder at the same moment, each with another of the
    zoo's writers (a sharded `save_pretrained`, `save_atomically`, a one-file `save_pretrained`), in repeated trials,
    one of the writers failing part-way in every other trial: every save that does not fail succeeds (before: the shared
    staging folder failed one of them with an I/O error), the folder then holds one version whole, the one whose swap
    came last, its weight files those of that one save (before: a sharded folder could hold tensors of two versions and
    load without a word), and nothing is left in it or beside it (before: `.tmp` files, staging folders)."""
    model, base = _versions(tmp_path)
    out = str(tmp_path / "model")
    model.save_pretrained(out, max_shard_size=SHARD)
    context = multiprocessing.get_context("fork")  # the children inherit the model: they save at once
    for trial in range(TRIALS):
        start, log = context.Barrier(len(WRITERS)), tmp_path / f"swaps-{trial}.log"
        log.write_text("")
        fails = [trial % 2 == 1 and i == 1 for i in range(len(WRITERS))]  # in odd trials the second writer fails
        versions = [10 * trial + i + 1 for i in range(len(WRITERS))]
        children = [
            context.Process(target=_writer, args=(model, base, out, k, how, fail, start, log))
            for k, how, fail in zip(versions, WRITERS, fails)
        ]
        for child in children:
            child.start()
        for child in children:
            child.join(timeout=120)
        codes = [child.exitcode for child in children]
        assert codes == [int(fail) for fail in fails], f"trial {trial}: exit codes {codes}"
        swaps = [int(line) for line in log.read_text().split()]
        assert sorted(swaps) == sorted(k for k, code in zip(versions, codes) if code == 0), swaps
        assert _saved_version(out, base) == swaps[-1]
        _weights_of_one_save(out)
        assert not [n for n in os.listdir(out) if n.startswith(".") or "tmp" in n], os.listdir(out)
        assert not [n for n in os.listdir(tmp_path) if n.startswith(".model.")], os.listdir(tmp_path)


def _writes_records(path, k, start, rounds):
    _in_child()
    from interlayer.results.core import write_json_atomically

    start.wait()
    for r in range(rounds):
        write_json_atomically(path, {"writer": k, "round": r, "padding": "x" * 20000})


def _write_record_killed_at_the_replace(path):
    """Write a record in a child process that is SIGKILLed when its staged file is about to replace the record."""

    def child():
        _in_child()
        from interlayer.results.core import write_json_atomically

        def replace(src, dst):
            os.kill(os.getpid(), signal.SIGKILL)

        os.replace = replace
        write_json_atomically(path, {"writer": "killed"})

    process = multiprocessing.get_context("fork").Process(target=child, daemon=True)
    process.start()
    process.join(timeout=120)
    assert process.exitcode == -signal.SIGKILL


def test_processes_writing_one_record_at_once_leave_one_record_whole(tmp_path):
    """The results runner's records follow the same rule: three processes writing one JSON record 30 times each, at
    once, leave it one writer's whole record, and nothing beside it; a writer killed before its replace leaves the
    record as it was, and what it staged is gone once the record is written again (before: a `.tmp-*.json` file
    stayed beside the records)."""
    from interlayer.results.core import write_json_atomically

    path = tmp_path / "runs" / "seed0.json"
    context = multiprocessing.get_context("fork")
    start = context.Event()
    children = [context.Process(target=_writes_records, args=(path, k, start, 30)) for k in range(3)]
    for child in children:
        child.start()
    start.set()
    for child in children:
        child.join(timeout=120)
    assert [child.exitcode for child in children] == [0, 0, 0]
    record = json.loads(path.read_text())
    assert record["round"] == 29 and record["padding"] == "x" * 20000
    assert os.listdir(path.parent) == ["seed0.json"]
    _write_record_killed_at_the_replace(path)
    assert json.loads(path.read_text()) == record
    write_json_atomically(path, {"writer": "last"})
    assert json.loads(path.read_text()) == {"writer": "last"}
    assert os.listdir(path.parent) == ["seed0.json"]


def test_a_record_is_written_whole_where_the_system_has_no_flock(tmp_path, monkeypatch):
    """Without `fcntl` (not a POSIX system) one file is still written through its staging folder and replaced whole,
    with nothing left beside it; only the lock between processes is missing."""
    import sys

    from interlayer import saving

    monkeypatch.setitem(sys.modules, "fcntl", None)
    monkeypatch.setattr(saving, "fcntl", None)
    record = tmp_path / "record.json"
    for value in range(2):
        saving.save_file_atomically(record, lambda path, value=value: open(path, "w").write(json.dumps(value)))
    assert json.loads(record.read_text()) == 1
    assert sorted(os.listdir(tmp_path)) == ["record.json"]


def test_the_save_lock_is_taken_when_its_file_vanishes_as_it_is_locked(tmp_path, monkeypatch):
    """A process that locks the lock file just as its holder removes it finds it gone and locks a new one (before:
    `os.path.exists` saw the file, the holder removed it, and `os.stat` raised FileNotFoundError out of the save, which
    failed one of three processes writing one record at once in CI). Here the holder removes the file right after
    this process's first look at it, whichever call that look is."""
    from interlayer import saving

    record = tmp_path / "record.json"
    real_exists, real_stat, vanished = os.path.exists, os.stat, []

    def first_look(path):
        looked = str(path).endswith("interlayer-lock") and not vanished
        if looked:
            vanished.append(path)
        return looked

    def exists(path):
        looked = first_look(path)
        answer = real_exists(path)
        if looked:
            os.remove(path)
        return answer

    def stat(path, *args, **kwargs):
        if first_look(path):
            os.remove(path)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(saving.os.path, "exists", exists)
    monkeypatch.setattr(saving.os, "stat", stat)
    saving.save_file_atomically(record, lambda path: open(path, "w").write(json.dumps("whole")))
    assert vanished and json.loads(record.read_text()) == "whole"
    assert sorted(os.listdir(tmp_path)) == ["record.json"]
