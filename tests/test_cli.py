"""`interlayer convert` and `interlayer list`, run as a user runs them."""

import json
import os
import subprocess
import sys

import torch
from bridge_fixtures import build_gpt2, build_stock_roberta, pair_batch
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
    from interlayer import RobertaBridgeConfig

    build_stock_roberta(str(tmp_path / "stock"))
    config = RobertaBridgeConfig.from_pretrained(tmp_path / "stock")
    assert config.base_model_name_or_path == str(tmp_path / "stock")
    config.save_pretrained(tmp_path / "saved")
    assert RobertaBridgeConfig.from_pretrained(tmp_path / "saved").base_model_name_or_path == str(tmp_path / "stock")


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
