"""Saving safely, by several processes at once: every save of the interlayer package (a zoo model's
`save_pretrained`, and with it a `Trainer`'s `save_model`, checkpoints and `push_to_hub`;
`interlayer.zoo.save_atomically`; the model card; the results runner's records) writes a folder or a file of its own
beside its target and swaps it into place under a lock that every save into that target takes.

Saved models do not ship this file (as `card.py`): the lock, the staging and the recovery are the package's own,
kept out of zoo_common.py, which every saved checkpoint ships as its remote code, so that the shipped code stays the
model's. `ZooModelMixin.save_pretrained` (in zoo_common.py) calls it when the interlayer package is imported in the
process (`zoo_common.interlayer_library`); a model loaded as remote code in a process without interlayer saves in
place, as transformers does.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import warnings

from .models.zoo_common import is_interlayer_card, logger

try:
    import fcntl
except ImportError:  # not a POSIX system: no locks (`_save_lock`), and folders are saved in place
    fcntl = None

# A save writes a folder (or a file) of its own beside the target and swaps it into place under a lock that every save
# into that target takes (`swap_into_place`, `save_file_atomically`): whatever the number of processes saving into one
# folder, and whenever any of them is killed, the folder holds one save whole (the last to swap), and nothing of the
# others is left beside it once the last one is done (or, after a kill, once the next save has recovered).

_STAGING_JOURNAL = ".interlayer-carried.json"  # in a complete staging folder: the entries carried over from the old one
_STAGING_WRITER = ".interlayer-writer"  # in a staging folder: locked by the process writing it, for as long as it lives
_WEIGHTS_FILE = re.compile(
    r"(model|pytorch_model)(\.[\w-]+)?(-\d{5}-of-\d{5})?\.(safetensors|bin)"
    r"|(model|pytorch_model)\.(safetensors|bin)(\.[\w-]+)?\.index(\.[\w-]+)?\.json"
)


def is_weights_file(name: str) -> bool:
    """Whether `name` is a file of the model weights `save_pretrained` writes (`model.safetensors`, its shards
    `model-00001-of-00004.safetensors` and index, their variants, and the `pytorch_model` forms)."""
    return _WEIGHTS_FILE.fullmatch(name) is not None


def _beside(target, role: str) -> str:
    """`.NAME.interlayer-ROLE` beside `target`: where saves into it stage, park the old content and lock."""
    parent, name = os.path.split(os.path.realpath(os.fspath(target)))
    return os.path.join(parent, f".{name}.interlayer-{role}")


def parked_folder(output_dir) -> str:
    """Where a save parks the previous content of `output_dir` for the instant of its swap: `.NAME.interlayer-old`."""
    return _beside(output_dir, "old")


def staging_folders(output_dir) -> list[str]:
    """The hidden folders beside `output_dir` of saves into it, under way or cut short: each save's own
    `.NAME.interlayer-new-XXXXXXXX` and the previous content parked as `.NAME.interlayer-old`."""
    staged = [entry.path for entry in _scan(os.path.dirname(_beside(output_dir, "")))]
    prefix = _beside(output_dir, "new-")
    return sorted(path for path in staged if path.startswith(prefix) or path == parked_folder(output_dir))


def _scan(folder: str) -> list:
    try:
        with os.scandir(folder) as entries:
            return [entry for entry in entries if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def interrupted_swap(output_dir) -> bool:
    """Whether `output_dir` is missing because a save was killed between the two renames of its swap (the previous
    content parked, or a complete staging folder waiting to go into place)."""
    return not os.path.exists(output_dir) and any(
        path == parked_folder(output_dir) or os.path.isfile(os.path.join(path, _STAGING_JOURNAL))
        for path in staging_folders(output_dir)
    )


def _stat_or_none(path):
    """`os.stat(path)`, or None where the file is gone (asked once: a lock's holder may remove it at any moment)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def _save_lock(target):
    """Held while a save into `target` starts its staging folder, swaps it into place, or recovers what a killed save
    left: the file `.NAME.interlayer-lock` beside it, locked with `flock` (which the system releases when a process
    dies). The holder removes the file before releasing it, so nothing is left beside the target; a process that was
    waiting on the removed file finds it gone and locks a new one. Where there is no `flock` (not a POSIX system),
    no lock: folders are not staged there (`can_stage_beside`), and one file is still replaced whole."""
    if fcntl is None:
        yield
        return
    path = _beside(target, "lock")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            current = _stat_or_none(path)
        except BaseException:
            os.close(fd)
            raise
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)
    try:
        yield
    finally:
        os.remove(path)
        os.close(fd)


def _start_staging(target) -> tuple[str, int]:
    """A staging folder of this save's own beside `target` (`.NAME.interlayer-new-` and 8 random hex digits; made
    with the user's umask, as the folder it becomes) and its writer lock, held by this process until it is closed.
    Call under `_save_lock`, so that no recovery takes the folder between the two for one a dead process left."""
    while True:
        staging = _beside(target, f"new-{secrets.token_hex(4)}")
        try:
            os.mkdir(staging)
            break
        except FileExistsError:
            continue
    writer = os.open(os.path.join(staging, _STAGING_WRITER), os.O_RDWR | os.O_CREAT, 0o600)
    if fcntl is not None:
        fcntl.flock(writer, fcntl.LOCK_EX)
    return staging, writer


def _abandoned(staging: str) -> bool:
    """Whether no living process writes the staging folder `staging` (its writer lock is free, or gone with the
    swap that a kill cut short). Without `flock` (not a POSIX system) none is taken for abandoned: what a killed
    writer staged stays."""
    if fcntl is None:
        return False
    try:
        fd = os.open(os.path.join(staging, _STAGING_WRITER), os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def can_stage_beside(output_dir) -> bool:
    """Whether a save into `output_dir` can be staged beside it: on a POSIX system (where a folder with open files,
    such as a Trainer's TensorBoard logs, can be renamed, a rename replaces an empty folder, and `flock` locks), when
    it is not a mount point (which cannot be renamed), nor the working directory or a folder above it, and its parent
    (or the nearest folder above that exists) can be written."""
    target = os.path.realpath(os.fspath(output_dir))
    parent = os.path.dirname(target)
    while not os.path.isdir(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    cwd = os.path.realpath(os.getcwd())
    holds_cwd = cwd == target or cwd.startswith(target + os.sep)  # renamed away, it would leave the process nowhere
    return os.name == "posix" and not os.path.ismount(target) and not holds_cwd and os.access(parent, os.W_OK)


def warn_saving_in_place(output_dir) -> None:
    logger.warning(
        f"{output_dir} cannot be saved through a folder beside it (a mount point, the working directory or a folder "
        "above it, a parent without write access, or not a POSIX system): saving in place, as transformers does; a "
        "save interrupted there, or several processes saving there at once, can leave a folder that mixes two models."
    )


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def recover_interrupted_save(output_dir) -> None:
    """Finish or undo what saves killed part-way left beside `output_dir`, so that it holds a whole model and nothing
    of theirs is left: a complete staging folder whose swap was cut between its two renames goes into place; a
    complete one whose swap had not started gives back the entries carried into it and is removed; an incomplete one
    is removed; the previous model parked in `.NAME.interlayer-old` goes back if `output_dir` is missing, and is
    removed otherwise. The staging folders of saves under way in other processes are left to them."""
    with _save_lock(output_dir):
        _recover(os.path.realpath(os.fspath(output_dir)))


def _recover(output_dir: str) -> None:
    """`recover_interrupted_save`, under the save lock."""
    old = parked_folder(output_dir)
    for new in staging_folders(output_dir):
        if new == old or not _abandoned(new):
            continue
        journal = os.path.join(new, _STAGING_JOURNAL)
        if os.path.isfile(journal):
            if not os.path.exists(output_dir):
                os.replace(new, output_dir)
            else:
                with open(journal, encoding="utf-8") as f:
                    carried = json.load(f)
                for name in carried:
                    if os.path.lexists(os.path.join(new, name)) and not os.path.lexists(os.path.join(output_dir, name)):
                        os.replace(os.path.join(new, name), os.path.join(output_dir, name))
        _remove(new)
    if os.path.isdir(old):
        if os.path.exists(output_dir):
            _remove(old)
        else:
            os.replace(old, output_dir)
    for leftover in (_STAGING_JOURNAL, _STAGING_WRITER):
        if os.path.isdir(output_dir) and os.path.lexists(os.path.join(output_dir, leftover)):
            os.remove(os.path.join(output_dir, leftover))


def swap_into_place(output_dir, write, keep=None) -> str:
    """Write a folder safely, also while other processes save into it: `write(staging)` fills a hidden folder of this
    save's own beside `output_dir` (`.NAME.interlayer-new-XXXXXXXX`), which then takes its place under a lock that
    every save into the folder takes, so that a process killed at any moment, or any number of processes saving at
    once, leave `output_dir` with one save's content whole (the last to swap; a save that fails leaves the one before
    it), never a mix, and nothing beside it.

    `keep(name) -> bool` names entries of the existing folder to carry into the new one (those the new one does not
    have): under the lock they are listed in a journal in the staging folder, then moved, then the old folder is
    parked as `.NAME.interlayer-old` and the staging folder renamed into place. An exception puts everything back;
    after a kill, `recover_interrupted_save` (which every later save into the folder runs first) finishes the swap or
    undoes it from the journal. Returns the folder's path."""
    output_dir = os.path.realpath(os.fspath(output_dir))
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise FileExistsError(f"{output_dir} exists and is not a folder.")
    with _save_lock(output_dir):
        _recover(output_dir)
        new, writer = _start_staging(output_dir)
    try:
        try:
            write(new)
        except BaseException:
            _remove(new)
            raise
        with _save_lock(output_dir):
            _swap(output_dir, new, keep)
    finally:
        os.close(writer)
    return output_dir


def _swap(output_dir: str, new: str, keep) -> None:
    """The swap of `swap_into_place`, under the save lock: the staging folder `new` takes the place of `output_dir`,
    with the entries `keep` names carried over; put back as it was on an exception."""
    old, carried = parked_folder(output_dir), []
    try:
        if os.path.isdir(output_dir):
            shutil.copymode(output_dir, new)  # the folder keeps its permissions (a group-writable shared folder)
        if keep is not None and os.path.isdir(output_dir):
            present = set(os.listdir(new))
            carried = sorted(n for n in os.listdir(output_dir) if n not in present and keep(n))
        with open(os.path.join(new, _STAGING_JOURNAL + ".tmp"), "w", encoding="utf-8") as f:
            json.dump(carried, f)
        os.replace(os.path.join(new, _STAGING_JOURNAL + ".tmp"), os.path.join(new, _STAGING_JOURNAL))
        for name in carried:
            os.replace(os.path.join(output_dir, name), os.path.join(new, name))
        os.remove(os.path.join(new, _STAGING_WRITER))  # its descriptor keeps the lock until this save is done
        if os.path.exists(output_dir):
            os.replace(output_dir, old)
        os.replace(new, output_dir)
    except BaseException:
        if os.path.isdir(old) and not os.path.exists(output_dir):
            os.replace(old, output_dir)
        if os.path.isdir(new):  # the swap did not happen: what was carried goes back
            for name in carried:
                if os.path.lexists(os.path.join(new, name)):
                    os.replace(os.path.join(new, name), os.path.join(output_dir, name))
            _remove(new)
        raise
    os.remove(os.path.join(output_dir, _STAGING_JOURNAL))
    if os.path.exists(old):
        _remove(old)
        if os.path.exists(old):
            warnings.warn(f"The model is saved in {output_dir}, but the previous one could not be removed from {old}.")


def save_file_atomically(path, write) -> str:
    """Write one file safely by the same rule, also while other processes write it: `write(staged_path)` writes it in
    a staging folder of this save's own beside `path`, from which it replaces `path` under the save lock, so that the
    file is always one writer's whole (the last to replace it), and nothing is left beside it (what a killed writer
    staged, the next save of the file removes). Returns the file's path."""
    path = os.path.realpath(os.fspath(path))
    with _save_lock(path):
        _recover(path)
        new, writer = _start_staging(path)
    try:
        staged = os.path.join(new, os.path.basename(path))
        write(staged)
        with _save_lock(path):
            os.replace(staged, path)
    finally:
        _remove(new)
        os.close(writer)
    return path


def refuse_interrupted_swap(path) -> None:
    """Refuse to load `path` when it is missing because a save into it was cut between the two renames of its swap
    (`interrupted_swap`), saying where the model is and what to do."""
    if interrupted_swap(path):
        raise OSError(
            f"{path} is missing: a save into it was interrupted while swapping it into place (the model is in "
            f"{' or '.join(staging_folders(path))}). Save into it again, or run "
            f"`interlayer.zoo.recover_interrupted_save({path!r})`, which puts the complete model back."
        )


def save_model_staged(model, save_directory: str, *args, **kwargs):
    """A zoo model's `save_pretrained` by the rule of every save: `model.save_unstaged` writes a staging folder of
    its own, which takes the place of `save_directory` (`swap_into_place`). What else the folder holds (a Trainer's
    checkpoints and logs, a tokenizer) is kept; the previous model's weight files and the card interlayer wrote for
    them are not. A folder that cannot be staged beside (`can_stage_beside`) is written in place with a warning."""
    if not can_stage_beside(save_directory):
        warn_saving_in_place(save_directory)
        return model.save_unstaged(save_directory, *args, **kwargs)
    results, folder_name = [], os.path.basename(os.path.realpath(save_directory))
    swap_into_place(
        save_directory,
        lambda staging: results.append(model.save_unstaged(staging, *args, card_name=folder_name, **kwargs)),
        # a card of the previous weights would describe the new ones wrongly: it goes, with or without a new one
        keep=lambda name: not is_weights_file(name) and not is_interlayer_card(os.path.join(save_directory, name)),
    )
    return results[0]
