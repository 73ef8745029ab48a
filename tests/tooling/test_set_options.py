"""Every `key=value` option of a command that converts a model reaches the model or is refused, never dropped:
`interlayer convert --set`, `examples/run_clm.py --set`, `examples/run_translation.py --set` and
`examples/run_classification.py --bridge`, all read by `interlayer.command_options.parse_options`. A repeated flag adds
up (`--set a=1 --set b=2`; the scripts also take `--set a=1 b=2`); a malformed option, a key given twice, an option the
command cannot apply and an unknown option are refused with an error naming it (exit status 2), and nothing is
written. The scripts are run in this process up to the model they build (no training)."""

import importlib.util
import json
import shlex
from pathlib import Path

import pytest
from batches import write_qa_pairs
from snippets import code_blocks
from stock_checkpoints import (
    build_number_words_marian,
    build_stock_llama,
    encoder_builder,
    save_tiny_llama_with_tokenizer,
)

from interlayer.cli import main as interlayer_main
from interlayer.number_words import translation_rows
from interlayer.zoo import convert

ROOT = Path(__file__).resolve().parents[2]


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    save_tiny_llama_with_tokenizer(folder / "stock", write_qa_pairs(folder / "qa.jsonl", 20))
    return folder


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian")
    build_number_words_marian(folder / "stock")
    rows = translation_rows(range(20), "en", ["de", "fr"])
    (folder / "numbers.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def refused(run, argv, capsys) -> str:
    """What `run(argv)` prints to stderr as it exits with status 2."""
    with pytest.raises(SystemExit) as stop:
        run(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err


def test_interlayer_convert_takes_every_set_and_refuses_a_repeated_or_malformed_one(tmp_path, capsys):
    build_stock_llama(str(tmp_path / "stock"))
    command = ["convert", str(tmp_path / "stock"), str(tmp_path / "out"), "--mechanism", "hyper-connections"]
    assert interlayer_main([*command, "--set", "hc_mode=static", "--set", "hc_streams=2"]) == 0
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["hc_mode"], config["hc_streams"]) == ("static", 2)
    refusals = {
        ("--set", "hc_mode=static", "--set", "hc_mode=mhc"): "--set hc_mode is given twice ('static', then 'mhc')",
        ("--set", "hc_mode"): "--set takes key=value (a JSON value or a bare string), got 'hc_mode'",
        ("--set", "=2"): "--set takes key=value (a JSON value or a bare string), got '=2'",
        ("--set", "num_labels=3", "--num-labels", "2"): "num_labels is given by --num-labels and by --set",
    }
    for options, message in refusals.items():
        out = tmp_path / "refused"
        command = ["convert", str(tmp_path / "stock"), str(out), "--mechanism", "hyper-connections", *options]
        assert interlayer_main(command) == 2, options
        assert message in capsys.readouterr().err, options
        assert not out.exists()


def test_run_clm_takes_every_set_and_refuses_what_cannot_reach_the_model(llama, tmp_path, capsys):
    run = script("run_clm")
    base = ["--model_name_or_path", str(llama / "stock"), "--mechanism", "hyper-connections"]
    base += ["--train_file", str(llama / "qa.jsonl"), "--output_dir", str(tmp_path / "out")]
    for sets in (["--set", "hc_mode=static", "--set", "hc_streams=2"], ["--set", "hc_mode=static", "hc_streams=2"]):
        model_args, *_ = run.build_parser().parse_args_into_dataclasses([*base, *sets, "--freeze_base", "false"])
        model = run.load_model(model_args, run.mechanism_options(model_args))
        assert (model.config.hc_mode, model.config.hc_streams, model.config.freeze_base) == ("static", 2, False)
    refusals = {
        ("--set", "hc_mode=static", "--set", "hc_mode=mhc"): "--set hc_mode is given twice ('static', then 'mhc')",
        ("--set", "hc_mode"): "--set takes key=value (a JSON value or a bare string), got 'hc_mode'",
        ("--set", "hc_stream=2"): "no option `hc_stream`; did you mean `hc_streams`",
        ("--set", "freeze_base=true", "--freeze_base", "false"): "freeze_base is given by --freeze_base and by --set",
        ("--mechanism", "stock", "--set", "hc_mode=static"): "mechanism options ['hc_mode'] do not apply",
        ("--mechanism", "stock", "--freeze_base", "true"): "mechanism options ['freeze_base'] do not apply",
    }
    for options, message in refusals.items():
        assert message in refused(run.main, [*base, *options], capsys), options
        assert not (tmp_path / "out").exists()


def test_run_translation_keeps_every_set_of_the_readme_command(marian, tmp_path):
    """The README's Marian command (`--set bridge_layers='["lin"]' --set bridge_fixed_length=16 --set
    bridge_hidden_size=128`), on a tiny Marian: the model it builds has all three."""
    readme = (ROOT / "README.md").read_text()
    line = next(
        line
        for _, _, code in code_blocks(readme, ("bash",))
        for line in code.replace("\\\n", " ").splitlines()
        if "examples/run_translation.py" in line
    )
    words = shlex.split(line)
    argv = words[words.index("examples/run_translation.py") + 1 :]
    replace = {"--model_name_or_path": marian / "stock", "--train_file": marian / "numbers.jsonl"}
    replace["--output_dir"] = tmp_path / "out"
    argv = [str(replace[argv[i - 1]]) if i and argv[i - 1] in replace else word for i, word in enumerate(argv)]
    assert argv.count("--set") == 3, argv
    run = script("run_translation")
    model_args, _, _, options = run.parse_arguments(run.build_parser(), argv)
    model = run.load_model(model_args, ["de", "fr"], options)
    config = model.config
    assert (config.bridge_layers, config.bridge_fixed_length, config.bridge_hidden_size) == (["lin"], 16, 128)


def test_run_translation_refuses_what_cannot_reach_the_model(marian, tmp_path, capsys):
    """Also: repeated `--target_langs` add up, as `--set` does (the decoders are every language given)."""
    run = script("run_translation")
    base = ["--model_name_or_path", str(marian / "stock"), "--train_file", str(marian / "numbers.jsonl")]
    base += ["--output_dir", str(tmp_path / "out")]
    for languages in (["--target_langs", "fr", "--target_langs", "de"], ["--target_langs", "fr", "de"]):
        _, data_args, _, _ = run.parse_arguments(run.build_parser(), [*base, *languages])
        assert data_args.target_langs == ["fr", "de"], languages
    refusals = {
        ("--set", "bridge_fixed_length=8", "--set", "bridge_fixed_length=16"): "bridge_fixed_length is given twice",
        ("--set", "bridge_fixed_length"): "--set takes key=value (a JSON value or a bare string)",
        ("--set", "bridge_fixed_lenght=8"): "did you mean `bridge_fixed_length`",
    }
    for options, message in refusals.items():
        assert message in refused(run.main, [*base, *options], capsys), options
        assert not (tmp_path / "out").exists()


def test_run_classification_takes_every_bridge_option_and_refuses_what_cannot_reach_the_model(tmp_path, capsys):
    run = script("run_classification")
    encoder_builder("bert")(str(tmp_path / "stock"))
    base = ["--model_name_or_path", str(tmp_path / "stock"), "--output_dir", str(tmp_path / "out")]
    argv = [*base, "--bridge", "route_topk=2", "--bridge", "route_pool=cls"]
    model_args, *_ = run.build_parser().parse_args_into_dataclasses(argv)
    options = run.bridge_options(model_args)
    assert options == {"route_topk": 2, "route_pool": "cls"}
    model, _ = convert(str(tmp_path / "stock"), "bridge", task="sequence-classification", **options)
    assert (model.config.route_topk, model.config.route_pool) == (2, "cls")
    refusals = {
        ("--bridge", "route_topk=2", "--bridge", "route_topk=3"): "--bridge route_topk is given twice (2, then 3)",
        ("--bridge", "route_topk"): "--bridge takes key=value (a JSON value or a bare string), got 'route_topk'",
        ("--preset", "stock", "--bridge", "route_topk=2"): "bridge options ['route_topk'] do not apply",
    }
    for options, message in refusals.items():
        assert message in refused(run.main, [*base, *options], capsys), options
        assert not (tmp_path / "out").exists()
