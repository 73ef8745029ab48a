"""Checkpoints saved by another version of interlayer load into this one bit-exactly: every zoo class of every
conformance case's config, converted and saved by that version (`earlier_version_save.py`), loads through its Auto
class (the `auto_map` and `architectures` it saved name classes this version has), with every saved tensor and
nothing else, and computes the saved outputs (to float rounding: a computation this version reorders for speed, such
as the bridges' compiled HDIM scorer, `hdim_fused`, rounds differently).

The earlier version is `EARLIER_REVISION` (the last `main` before the families and records redesign), taken from
the repository's history with `git archive`, or the checkout `INTERLAYER_EARLIER_CHECKOUT` names
(`INTERLAYER_EARLIER_CHECKOUT=/path/to/checkout pytest tests/contract/test_earlier_checkpoints.py`). Skipped, with the
reason, where neither is at hand (a copy of the files without their git history); a checkpoint committed to the
repository instead would pin one version's bytes."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch
import transformers
from safetensors.torch import load_file

import interlayer  # noqa: F401  (registers the zoo's Auto classes)
from interlayer.zoo import ZOO

EARLIER_REVISION = "9ad8688"
TESTS = pathlib.Path(__file__).parent
# Modules a class moved to since the earlier version, named in its saved `auto_map`. A saved folder loads with its own
# code files under `trust_remote_code` and through the registered Auto classes otherwise, so a move breaks no saved
# model; listing it here keeps an accidental move (a class that vanished or changed module unnoticed) an error.
MOVED = {
    "configuration_sentinel": "configuration_sentinel_encoders",  # the encoder families split from the decoders
    "modeling_sentinel": "modeling_sentinel_encoders",
}


def earlier_checkout(folder: pathlib.Path) -> pathlib.Path:
    """The earlier version's files: `INTERLAYER_EARLIER_CHECKOUT`, else `EARLIER_REVISION` archived into `folder`."""
    if os.environ.get("INTERLAYER_EARLIER_CHECKOUT"):
        return pathlib.Path(os.environ["INTERLAYER_EARLIER_CHECKOUT"])
    git = ["git", "-C", str(TESTS.parents[1])]
    if subprocess.run([*git, "cat-file", "-e", f"{EARLIER_REVISION}^{{commit}}"], capture_output=True).returncode:
        pytest.skip(
            f"revision {EARLIER_REVISION} is not in this checkout's git history; set INTERLAYER_EARLIER_CHECKOUT"
        )
    archive = subprocess.run([*git, "archive", EARLIER_REVISION], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("earlier")
    earlier = earlier_checkout(tmp_path_factory.mktemp("checkout"))
    env = {**os.environ, "PYTHONPATH": f"{earlier}{os.pathsep}{earlier / 'tests'}", "HF_HUB_OFFLINE": "1"}
    script = TESTS / "earlier_version_save.py"
    subprocess.run([sys.executable, str(script), str(out), str(earlier / "tests")], env=env, check=True)
    return out


def renamed(key: str, renames: dict[str, str]) -> str:
    """A saved tensor's name in this version: the class's `renamed_parameters` applied as its loading applies them."""
    for pattern, new in renames.items():
        key = re.sub(pattern, new, key)
    return key


def test_every_class_saved_by_the_earlier_version_loads_bit_exactly(saved):
    names = {e.model_class.__name__: e for e in ZOO}
    classes = {cls.__name__: cls for e in ZOO for cls in (e.config_class, e.model_class)}
    folders = sorted(p for p in saved.iterdir() if (p / "reference.pt").exists())
    assert folders, "the earlier version saved nothing"
    for folder in folders:
        config = json.loads((folder / "config.json").read_text())
        assert config["architectures"] == [folder.name]
        for auto_class, target in config["auto_map"].items():
            module, _, name = target.partition(".")
            assert name in classes, f"{folder.name}: {target} names a class this version lacks"
            here = classes[name].__module__.rpartition(".")[2]
            assert here in (module, MOVED.get(module)), f"{folder.name}: {target} is now in {here}"
        entry = names[folder.name]
        model = getattr(transformers, entry.auto_class.__name__).from_pretrained(str(folder)).eval()
        assert type(model) is entry.model_class
        renames = {rf"(?<!\w){re.escape(old)}(?!\w)": new for old, new in type(model).renamed_parameters.items()}
        saved_state = {renamed(key, renames): t for key, t in load_file(str(folder / "model.safetensors")).items()}
        state = model.state_dict()
        assert set(state) >= set(saved_state), f"{folder.name}: not loaded {set(saved_state) - set(state)}"
        unsaved = set(model._keys_to_ignore_on_save or ())  # the stock class's (Marian's sinusoidal positions)
        for key in set(state) - set(saved_state) - unsaved:  # otherwise only tied weights (the LM head) are not saved
            tied = [k for k in saved_state if state[k].data_ptr() == state[key].data_ptr()]
            assert tied, f"{folder.name}: {key} is neither saved nor tied to a saved tensor"
        for key, tensor in saved_state.items():
            torch.testing.assert_close(state[key], tensor, rtol=0, atol=0, msg=f"{folder.name}: {key}")
        reference = torch.load(folder / "reference.pt")
        with torch.no_grad():
            output = model(**reference["batch"])[0]
        torch.testing.assert_close(output, reference["output"], msg=f"{folder.name}: output")
