"""One rule for the folder a command writes a model into: one that exists and is not empty is refused before any work,
naming the flag that replaces it (`--overwrite` for `interlayer convert`, `prune` and `demo`;
`--overwrite_output_dir` for the example scripts), and replaced when that flag is given."""

import importlib.util
from pathlib import Path

import pytest

from interlayer import training
from interlayer.cli import main as interlayer_main

ROOT = Path(__file__).resolve().parents[2]
# each script's required arguments, naming a checkpoint that does not exist: the refusal must come first
SCRIPTS = {
    "run_clm": ["--model_name_or_path", "missing", "--mechanism", "latent", "--train_file", "missing.jsonl"],
    "run_translation": ["--model_name_or_path", "missing", "--train_file", "missing.jsonl", "--target_langs", "de"],
    "run_classification": ["--model_name_or_path", "missing", "--train_file", "missing.tsv"],
}


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def occupied(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "results.json").write_text("{}")
    return folder


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_example_script_refuses_a_folder_in_use_before_any_work(name, occupied, capsys):
    with pytest.raises(SystemExit) as exit_:
        script(name).main([*SCRIPTS[name], "--output_dir", str(occupied)])
    assert exit_.value.code == 2
    assert f"{occupied} exists and is not empty; pass --overwrite_output_dir" in capsys.readouterr().err
    assert [p.name for p in occupied.iterdir()] == ["results.json"]


def test_demo_refuses_a_folder_in_use_unless_told_to_replace_it(occupied, capsys, monkeypatch):
    def work_started():
        raise RuntimeError("the demo started its work")

    monkeypatch.setattr(training, "minilm_path", work_started)
    assert interlayer_main(["demo", "--output", str(occupied)]) == 2
    assert f"{occupied} exists and is not empty; pass --overwrite" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="started its work"):
        interlayer_main(["demo", "--output", str(occupied), "--overwrite"])
