"""`interlayer convert` and `interlayer list`, run as a user runs them."""

import json
import os
import subprocess
import sys

import pytest
import torch
from batches import pair_batch
from stock_checkpoints import build_gpt2, build_stock_roberta
from transformers import RobertaForSequenceClassification

from interlayer.cli import build_parser, main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "interlayer.cli", *args], capture_output=True, text=True, timeout=300)


def test_convert_writes_a_complete_folder(tmp_path):
    build_stock_roberta(str(tmp_path / "stock"))
    out = tmp_path / "converted"
    result = run_cli(
        "convert",
        str(tmp_path / "stock"),
        str(out),
        "--mechanism",
        "bridge",
        "--preset",
        "H9",
        "--set",
        "route_topk=2",
        "--set",
        "identity_init=true",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "stock weights: all loaded" in result.stdout
    files = set(os.listdir(out))
    assert {
        "config.json",
        "model.safetensors",
        "README.md",
        "modeling_bridge.py",
        "configuration_bridge.py",
        "zoo_common.py",
    } <= files
    config = json.load(open(out / "config.json"))
    assert config["model_type"] == "roberta_bridge" and config["bridge_mode"] == "hdim" and config["route_topk"] == 2
    assert (
        config["auto_map"]["AutoModelForSequenceClassification"]
        == "modeling_bridge.RobertaBridgeForSequenceClassification"
    )
    card = open(out / "README.md").read()
    assert "base_model" not in card.split("---")[1]  # a local folder is not a Hub id
    assert "`bridge_mode` | `'hdim'`" in card
    from interlayer import RobertaBridgeForSequenceClassification

    stock = RobertaForSequenceClassification.from_pretrained(tmp_path / "stock").eval()
    converted = RobertaBridgeForSequenceClassification.from_pretrained(out).eval()
    batch = pair_batch("roberta")
    with torch.no_grad():
        torch.testing.assert_close(converted(**batch).logits, stock(**batch).logits)


def test_convert_refuses_wrong_architecture_and_existing_folder(tmp_path, capsys):
    build_gpt2(str(tmp_path / "gpt2"))
    assert main(["convert", str(tmp_path / "gpt2"), str(tmp_path / "x"), "--mechanism", "bridge"]) == 2
    assert "model_type='gpt2'" in capsys.readouterr().err
    build_stock_roberta(str(tmp_path / "stock"))
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("precious")
    assert main(["convert", str(tmp_path / "stock"), str(existing), "--mechanism", "bridge"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (existing / "keep.txt").read_text() == "precious"


def test_convert_bad_option_fails_before_writing(tmp_path, capsys):
    build_stock_roberta(str(tmp_path / "stock"))
    out = tmp_path / "never"
    assert main(["convert", str(tmp_path / "stock"), str(out), "--mechanism", "bridge", "--set", "route_topk=0"]) == 2
    assert "`route_topk` must be >= 1, got 0" in capsys.readouterr().err
    assert not out.exists()
    assert main(["convert", str(tmp_path / "stock"), str(out), "--mechanism", "bridge", "--preset", "Z1"]) == 2
    assert "preset" in capsys.readouterr().err


def test_list_names_classes_and_presets(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    assert "RobertaBridgeForSequenceClassification" in text and "H9" in text


def test_converted_config_records_its_stock_source(tmp_path):
    """In memory, the source as given; saved, only a Hub id (a local folder's path stays on the machine)."""
    from interlayer import RobertaBridgeConfig

    build_stock_roberta(str(tmp_path / "stock"))
    config = RobertaBridgeConfig.from_pretrained(tmp_path / "stock")
    assert config.base_model_name_or_path == str(tmp_path / "stock")
    config.save_pretrained(tmp_path / "saved")
    assert RobertaBridgeConfig.from_pretrained(tmp_path / "saved").base_model_name_or_path is None
    config.base_model_name_or_path = "FacebookAI/roberta-base"
    config.save_pretrained(tmp_path / "saved")
    saved = RobertaBridgeConfig.from_pretrained(tmp_path / "saved")
    assert saved.base_model_name_or_path == "FacebookAI/roberta-base"


def test_list_counts_and_lists_each_class_once(capsys):
    """A class kept under an older name as well (`MarianBridgeModel` is `MarianAttentionBridgeModel`) is one class:
    one registry entry per stock model type, counted once and listed once."""
    from interlayer.models.modeling_attention_bridge import MarianAttentionBridgeModel, MarianBridgeModel
    from interlayer.zoo import ZOO

    assert MarianBridgeModel is MarianAttentionBridgeModel
    cells = [(e.model_class, e.stock_model_type) for e in ZOO]
    assert len(cells) == len(set(cells))
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    assert f"{len({e.model_class for e in ZOO})} model classes" in text.splitlines()[0]
    listed = text.split("\nclasses:\n")[1].splitlines()
    assert len(listed) == len(set(listed)) == len(ZOO)


def test_python_dash_m_runs_the_command():
    result = subprocess.run(
        [sys.executable, "-m", "interlayer", "list", "--options", "latent"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| `latent_dim` |" in result.stdout


def _convert_error(capsys, *args):
    """`interlayer convert ARGS`: the exit code 2 and the one line it prints as an error (no traceback)."""
    assert main(["convert", *args]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("interlayer convert: error: "), errors
    return errors[0]


def test_convert_reports_config_errors_and_a_head_of_another_size_in_one_line(tmp_path, capsys):
    from stock_checkpoints import build_stock_gpt2, build_stock_marian

    build_stock_marian(str(tmp_path / "marian"))
    languages = 'decoder_languages=["de", "to"]'
    args = ["--mechanism", "attention-bridge", "--set", languages]
    error = _convert_error(capsys, str(tmp_path / "marian"), str(tmp_path / "o1"), *args)
    assert "'to' cannot name a further decoder" in error
    build_stock_gpt2(str(tmp_path / "gpt2"))
    args = ["--mechanism", "sentinel", "--set", 'pruned_heads={"0": [1]}']
    error = _convert_error(capsys, str(tmp_path / "gpt2"), str(tmp_path / "o2"), *args)
    assert "cannot be given when converting a stock checkpoint" in error
    build_stock_roberta(str(tmp_path / "roberta"))  # a 3-label classifier
    error = _convert_error(
        capsys, str(tmp_path / "roberta"), str(tmp_path / "o3"), "--mechanism", "bridge", "--num-labels", "5"
    )
    assert "classifier.out_proj.weight (3, 32) -> (5, 32)" in error and "`num_labels=5`" in error
    assert "checkpoint's 3-label head" in error
    assert not any((tmp_path / o).exists() for o in ("o1", "o2", "o3"))


def test_convert_says_no_such_folder_for_a_missing_local_path(tmp_path, capsys, monkeypatch):
    from interlayer.zoo import convert

    monkeypatch.chdir(tmp_path)
    for source in (str(tmp_path / "absent"), "./absent", "../absent", "not a hub id"):
        with pytest.raises(FileNotFoundError, match=f"no such folder: {source}"):
            convert(source, "bridge")
        error = _convert_error(capsys, source, str(tmp_path / "out"), "--mechanism", "bridge")
        assert f"no such folder: {source}" in error


def test_convert_names_the_missing_config_of_a_folder(tmp_path, capsys):
    """A folder without `config.json` (weights only, or the wrong folder) is refused naming the file, not as an
    unsupported `model_type=None`."""
    from interlayer.zoo import convert

    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"")
    source = str(tmp_path / "weights")
    with pytest.raises(FileNotFoundError, match=f"{source} has no config.json"):
        convert(source, "hyper-connections")
    error = _convert_error(capsys, source, str(tmp_path / "out"), "--mechanism", "hyper-connections")
    assert f"{source} has no config.json" in error and "model_type=None" not in error
    assert not (tmp_path / "out").exists()


def test_prune_on_text_refuses_a_checkpoint_without_a_tokenizer(tmp_path, capsys):
    """A GPT-2 saved without a tokenizer (transformers 5 then builds one of special tokens only, which gives no token
    of the text): a strategy that reads `--text-file` is refused naming the missing tokenizer, before any scoring."""
    build_gpt2(str(tmp_path / "gpt2"))
    (tmp_path / "text.txt").write_text("the cat sat on the mat. " * 50)
    command = ["prune", str(tmp_path / "gpt2"), str(tmp_path / "out"), "--strategy", "entropy", "--fraction", "0.25"]
    assert main([*command, "--text-file", str(tmp_path / "text.txt")]) == 2
    error = capsys.readouterr().err
    assert f"{tmp_path / 'gpt2'} has none (no tokenizer files with a vocabulary)" in error, error
    assert not (tmp_path / "out").exists()


def test_a_command_does_not_print_deepspeeds_accelerator_notice(tmp_path):
    """Where DeepSpeed is installed, saving a model imports it (through accelerate), and its import logs that it found
    no accelerator and uses the CPU; no command runs DeepSpeed, so none prints that notice."""
    pytest.importorskip("deepspeed")
    build_gpt2(str(tmp_path / "gpt2"))
    result = run_cli("convert", str(tmp_path / "gpt2"), str(tmp_path / "out"), "--mechanism", "sentinel")
    assert result.returncode == 0, result.stderr
    assert "Setting accelerator to CPU" not in result.stderr + result.stdout


def test_demo_and_bench_explain_every_option(capsys):
    """`interlayer demo --help` and `interlayer bench --help` say what each option means; `--quick` says that its
    ratios are a smoke test."""
    commands = build_parser()._subparsers._group_actions[0].choices
    for command in ("demo", "bench"):
        for action in commands[command]._actions:
            assert action.help, f"interlayer {command} {'/'.join(action.option_strings)}: no help text"
        try:
            main([command, "--help"])
        except SystemExit as exit:
            assert exit.code == 0
        assert "default: " in capsys.readouterr().out
    quick = next(a for a in commands["bench"]._actions if "--quick" in a.option_strings)
    assert "smoke test" in quick.help and "not figures" in quick.help
