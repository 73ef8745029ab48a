"""`examples/run_clm.py` on a tiny stock Llama with a byte-level BPE tokenizer: hyper-connections train (only their
parameters under `--freeze_base`), their statistics reach the Trainer logs, and the folder loads as remote code."""

import json
import subprocess
import sys
from pathlib import Path

from hc_fixtures import save_tiny_llama_with_tokenizer, write_qa_pairs

ROOT = Path(__file__).resolve().parents[1]


def test_run_clm_trains_hyper_connections_and_saves_a_shareable_model(tmp_path):
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
        "hyper-connections",
        "--set",
        "hc_mode=mhc",
        "--set",
        "hc_streams=2",
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
    summary = json.loads((out / "results.json").read_text())
    assert summary["eval_loss"] < summary["eval_loss_before"], summary
    params = summary["parameters"]
    assert 0 < params["trainable"] < params["total"] / 10
    logs = json.loads((out / "trainer_state.json").read_text())["log_history"]
    trained = [row for row in logs if "loss" in row]
    assert trained and all("hc/amax_gain_row" in row and "hc/L1/mlp/res_1_0" in row for row in trained)
    assert any("eval_hc/amax_gain_row" in row for row in logs)
    assert {"modeling_hyper_connections.py", "README.md", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    load = (
        "import sys, torch; from transformers import AutoModelForCausalLM as A; "
        f"sys.path = [p for p in sys.path if p not in ('', {str(ROOT)!r})]; "
        "m = A.from_pretrained(sys.argv[1], trust_remote_code=True); "
        "assert type(m).__name__ == 'LlamaMHCForCausalLM' and 'interlayer' not in sys.modules; print('ok')"
    )
    loaded = subprocess.run([sys.executable, "-c", load, str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert loaded.stdout.strip() == "ok", loaded.stderr[-2000:]
