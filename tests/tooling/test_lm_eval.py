"""lm-eval, as the seed evaluates: `lm_eval --model hf --model_args pretrained=DIR,trust_remote_code=True` on a
converted hyper-connection model gives the stock model's log-likelihoods (identity init), and the local GSM8K task
shipped in examples/lm_eval_tasks runs."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from batches import write_qa_pairs
from stock_checkpoints import save_tiny_llama_with_tokenizer

pytest.importorskip("lm_eval", reason="lm-eval: pip install lm-eval")
ROOT = Path(__file__).resolve().parents[2]
MC_TASK = """task: tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
"""


def lm_eval(model_dir, tasks, include, out, *extra):
    cmd = [
        sys.executable,
        "-m",
        "lm_eval",
        "--model",
        "hf",
        "--model_args",
        f"pretrained={model_dir},trust_remote_code=True",
        "--tasks",
        tasks,
        "--include_path",
        str(include),
        "--device",
        "cpu",
        "--batch_size",
        "1",
        "--log_samples",
        "--output_path",
        str(out),
        *extra,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=include)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    samples = [json.loads(line) for f in sorted(out.rglob("samples_*.jsonl")) for line in f.read_text().splitlines()]
    return results, samples


def test_lm_eval_scores_a_converted_model_like_the_stock_model(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    text = write_qa_pairs(tasks / "gsm8k_heldout.jsonl", 40)
    stock = tmp_path / "stock"
    save_tiny_llama_with_tokenizer(stock, text)
    converted = tmp_path / "mhc"
    cli = [sys.executable, "-m", "interlayer.cli", "convert", str(stock), str(converted), "--mechanism"]
    done = subprocess.run([*cli, "hyper-connections", "--set", "hc_mode=mhc"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    docs = [
        {"question": f"{a} plus {b} is", "choices": [f" {a + b}", f" {a * b + 1}"], "label": 0}
        for a, b in [(1, 2), (3, 4), (2, 2), (5, 1), (6, 3), (4, 4)]
    ]
    (tasks / "mc.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    (tasks / "tiny_mc.yaml").write_text(MC_TASK.format(data=tasks / "mc.jsonl"))
    shutil.copy(ROOT / "examples" / "lm_eval_tasks" / "gsm8k_local.yaml", tasks)

    ours, our_samples = lm_eval(
        converted, "tiny_mc,gsm8k_local", tasks, tmp_path / "out-mhc", "--limit", "3", "--gen_kwargs", "max_gen_toks=8"
    )
    theirs, their_samples = lm_eval(stock, "tiny_mc", tasks, tmp_path / "out-stock", "--limit", "3")
    assert ours["tiny_mc"]["acc,none"] == theirs["tiny_mc"]["acc,none"]
    ours_ll = [float(r[0][0]) for s in our_samples if s["doc"].get("choices") for r in s["resps"]]
    theirs_ll = [float(r[0][0]) for s in their_samples for r in s["resps"]]
    assert len(ours_ll) == len(theirs_ll) == 6
    assert ours_ll == pytest.approx(theirs_ll, abs=1e-4)
    assert len(set(ours_ll)) > 1  # real log-likelihoods, not a constant
    assert "exact_match,strict-match" in ours["gsm8k_local"]
