"""`examples/run_clm.py` on a tiny stock Llama with a byte-level BPE tokenizer: hyper-connections and latent
back-projection train (only their parameters under `--freeze_base`), their statistics reach the Trainer logs, and the
folder loads as remote code; the stock baseline trains only its last layers when asked."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from batches import write_qa_pairs
from stock_checkpoints import save_tiny_llama_with_tokenizer

ROOT = Path(__file__).resolve().parents[2]


MECHANISMS = {
    "hyper-connections": dict(
        options=["--set", "hc_mode=static", "--set", "hc_streams=2"],
        config=dict(hc_mode="static", hc_streams=2, freeze_base=True),
        logged=("hc/amax_gain_row", "hc/L1/mlp/res_1_0"),
        file="modeling_hyper_connections.py",
        model="LlamaMHCForCausalLM",
    ),
    "latent": dict(
        options=["--set", "latent_source=same_position", "--set", "latent_dim=8"],
        config=dict(latent_source="same_position", latent_dim=8, freeze_base=True),
        logged=("latent/L0/gate", "latent/L0/adjustment_ratio"),
        file="modeling_latent.py",
        model="LlamaLatentForCausalLM",
    ),
}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_run_clm_trains_a_mechanism_and_saves_a_shareable_model(tmp_path, mechanism):
    expected = MECHANISMS[mechanism]
    text = write_qa_pairs(tmp_path / "qa.jsonl", 120)
    stock = tmp_path / "stock"
    save_tiny_llama_with_tokenizer(stock, text)
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "run_clm.py"),
        "--model_name_or_path",
        str(stock),
        "--mechanism",
        mechanism,
        *expected["options"],
        "--freeze_base",
        "true",
        "--train_file",
        str(tmp_path / "qa.jsonl"),
        "--prompt_column",
        "question",
        "--response_column",
        "answer",
        "--validation_split_percentage",
        "20",
        "--block_size",
        "32",
        "--learning_rate",
        "3e-2",
        "--num_train_epochs",
        "3",
        "--logging_steps",
        "2",
        "--evaluate_before_training",
        "true",
        "--output_dir",
        str(out),
        "--disable_tqdm",
        "true",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # DeepSpeed's notice where it is installed (its import, by saving, logs it); the script does not run DeepSpeed
    assert "Setting accelerator to CPU" not in result.stderr + result.stdout
    summary = json.loads((out / "results.json").read_text())
    assert summary["eval_loss"] < summary["eval_loss_before"], summary
    params = summary["parameters"]
    assert 0 < params["trainable"] < params["total"] / 10
    logs = json.loads((out / "trainer_state.json").read_text())["log_history"]
    trained = [row for row in logs if "loss" in row]
    evaluations = [row for row in logs if "eval_loss" in row]  # at each epoch's end, the last one not repeated
    assert [row["epoch"] for row in evaluations] == [1, 2, 3], evaluations
    assert evaluations[-1]["eval_loss"] == summary["eval_loss"]
    assert trained and all(all(name in row for name in expected["logged"]) for row in trained)
    assert any(f"eval_{expected['logged'][1]}" in row for row in logs)
    assert {expected["file"], "README.md", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    assert {k: config[k] for k in expected["config"]} == expected["config"]  # every --set reached the saved model
    load = (
        "import sys, torch; from transformers import AutoModelForCausalLM as A; "
        f"sys.path = [p for p in sys.path if p not in ('', {str(ROOT)!r})]; "
        "m = A.from_pretrained(sys.argv[1], trust_remote_code=True); "
        f"assert type(m).__name__ == {expected['model']!r} and 'interlayer' not in sys.modules; print('ok')"
    )
    loaded = subprocess.run([sys.executable, "-c", load, str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert loaded.stdout.strip() == "ok", loaded.stderr[-2000:]


def test_run_clm_refuses_bad_data_arguments_early():
    spec = importlib.util.spec_from_file_location("run_clm", ROOT / "examples" / "run_clm.py")
    run_clm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_clm)
    with pytest.raises(ValueError, match=r"--train_file must be .txt, .json or .jsonl, got 'data.csv'"):
        run_clm.load_splits(run_clm.DataArguments(train_file="data.csv"))
    with pytest.raises(ValueError, match="Give --dataset_name or --train_file"):
        run_clm.load_splits(run_clm.DataArguments())
    with pytest.raises(ValueError, match="--prompt_column and --response_column go together"):
        run_clm.to_text(None, run_clm.DataArguments(prompt_column="question"))


def test_run_clm_stock_baseline_trains_only_its_last_layers(tmp_path):
    spec = importlib.util.spec_from_file_location("run_clm", ROOT / "examples" / "run_clm.py")
    run_clm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_clm)
    save_tiny_llama_with_tokenizer(tmp_path / "stock", write_qa_pairs(tmp_path / "qa.jsonl", 10), layers=3)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "stock")
    run_clm.train_last_layers(model, 1)
    trainable = {n.split(".")[2] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"2"}
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == sum(
        p.numel() for p in model.model.layers[2].parameters()
    )
    with pytest.raises(ValueError, match=r"--stock_train_last_layers must be in \[1, 3\], got 4"):
        run_clm.train_last_layers(model, 4)
    with pytest.raises(ValueError, match="--stock_train_last_layers is for --mechanism stock.*'latent'"):
        run_clm.mechanism_options(
            run_clm.ModelArguments(model_name_or_path="x", mechanism="latent", stock_train_last_layers=1)
        )


def test_run_clm_interrupted_final_save_keeps_the_previous_model(tmp_path, monkeypatch):
    """The final model is saved with `save_atomically`: a save that dies half-way (here: after writing part of the
    weights) leaves the model already in `--output_dir` untouched and no staging folder behind; an uninterrupted
    save replaces it and keeps the Trainer's own files (`trainer_state.json`, a `checkpoint-*` folder)."""
    import transformers

    spec = importlib.util.spec_from_file_location("run_clm", ROOT / "examples" / "run_clm.py")
    run_clm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_clm)
    stock = tmp_path / "stock"
    save_tiny_llama_with_tokenizer(stock, write_qa_pairs(tmp_path / "qa.jsonl", 60), layers=2)
    out = tmp_path / "run"
    out.mkdir()
    previous = {name: (stock / name).read_bytes() for name in ("config.json", "model.safetensors")}
    for name, data in previous.items():
        (out / name).write_bytes(data)
    (out / "checkpoint-7").mkdir()
    args = ["run_clm.py", "--model_name_or_path", str(stock), "--mechanism", "latent", "--train_file"]
    args += [str(tmp_path / "qa.jsonl"), "--prompt_column", "question", "--response_column", "answer"]
    args += ["--block_size", "32", "--max_steps", "1", "--output_dir", str(out)]
    args += ["--disable_tqdm", "true", "--validation_split_percentage", "20", "--overwrite_output_dir", "true"]
    monkeypatch.setattr(sys, "argv", args)
    stock_save = transformers.PreTrainedModel.save_pretrained

    def dies_half_way(self, folder, *a, **k):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt("killed while saving")

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        run_clm.main()
    assert {name: (out / name).read_bytes() for name in previous} == previous
    assert (out / "checkpoint-7").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", stock_save)
    assert run_clm.main() == 0
    assert (out / "model.safetensors").read_bytes() != previous["model.safetensors"]
    assert {"modeling_latent.py", "trainer_state.json", "results.json", "checkpoint-7"} <= {
        p.name for p in out.iterdir()
    }
