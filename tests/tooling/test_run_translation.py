"""`examples/run_translation.py` on a tiny Marian with the number words' character vocabulary and two target
languages: a shuffled file mixing the languages trains (each batch one language, by `TargetLanguageSampler`), each
language is evaluated, and the saved folder reloads and translates with each `tgt_lang`."""

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from stock_checkpoints import build_number_words_marian

from interlayer.number_words import translation_rows
from interlayer.training import TargetLanguageSampler

ROOT = Path(__file__).resolve().parents[2]


def run_translation_module():
    spec = importlib.util.spec_from_file_location("run_translation", ROOT / "examples" / "run_translation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_mixed_rows(path: Path, numbers=range(200)) -> list[dict]:
    rows = translation_rows(numbers, "en", ["de", "fr"])
    random.Random(0).shuffle(rows)  # languages mixed: a plain shuffled batch holds both
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    return rows


def test_the_sampler_gives_batches_of_one_language_covering_every_example():
    rng = random.Random(1)
    languages = [rng.choice("abc") for _ in range(50)]
    sampler = TargetLanguageSampler(languages, batch_size=4, seed=3)
    order = list(sampler)
    assert len(order) == len(sampler) == sum(-(-languages.count(x) // 4) * 4 for x in "abc")
    batches = [order[i : i + 4] for i in range(0, len(order), 4)]
    assert all(len({languages[i] for i in batch}) == 1 for batch in batches)
    assert set(order) == set(range(50))  # every example; a short last batch repeats its language's first examples
    assert len({languages[b[0]] for b in batches[:6]}) > 1  # the languages' batches are shuffled together
    assert list(TargetLanguageSampler(languages, 4, seed=3)) == order
    sampler.set_epoch(1)
    assert list(sampler) != order and sorted(set(sampler)) == sorted(set(order))
    assert list(TargetLanguageSampler(["a", "b", "a"], 2, shuffle=False)) == [0, 2, 1, 1]
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    loader = Accelerator(cpu=True).prepare(DataLoader(range(50), batch_size=4, sampler=sampler))
    loader.set_epoch(2)  # what the Trainer calls at each epoch, through accelerate's loader
    assert sampler.epoch == 2 and [x for batch in loader for x in batch.tolist()] == list(sampler)
    with pytest.raises(ValueError, match="`batch_size` must be >= 1, got 0"):
        TargetLanguageSampler(languages, 0)


def test_a_shuffled_mixed_language_dataset_raises_with_the_stock_sampler_and_trains_with_the_language_one(tmp_path):
    """The case that raised: the stock `Seq2SeqTrainer`'s random batches mix target languages, and a model with one
    decoder per language cannot run such a batch; `target_language_trainer` groups them."""
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    from interlayer.training import target_language_trainer
    from interlayer.zoo import convert

    tokenizer = build_number_words_marian(tmp_path / "stock")
    options = dict(bridge_layers=["lin"], decoder_languages=["de", "fr"])
    model, _ = convert(str(tmp_path / "stock"), "attention-bridge", **options)
    rows = write_mixed_rows(tmp_path / "rows.jsonl", range(40))
    encoded = tokenizer([r["source"] for r in rows])
    encoded["labels"] = tokenizer(text_target=[r["target"] for r in rows])["input_ids"]
    encoded["tgt_lang"] = [["de", "fr"].index(r["tgt_lang"]) for r in rows]
    train = Dataset.from_dict(dict(encoded))
    args = Seq2SeqTrainingArguments(
        str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=8, report_to="none", use_cpu=True
    )
    stock = Seq2SeqTrainer(model=model, args=args, train_dataset=train, data_collator=DataCollatorForSeq2Seq(tokenizer))
    with pytest.raises(ValueError, match="one language index in \\[0, 1\\] for the whole batch"):
        stock.train()
    trainer = target_language_trainer(model, args, train, {}, tokenizer)
    assert trainer.train().global_step == 4


def test_run_translation_trains_two_languages_and_saves_a_model_that_translates_with_each(tmp_path):
    build_number_words_marian(tmp_path / "stock")
    write_mixed_rows(tmp_path / "numbers.jsonl")
    out = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "examples" / "run_translation.py")]
    cmd += ["--model_name_or_path", str(tmp_path / "stock")]
    cmd += ["--set", 'bridge_layers=["lin"]', "--set", "bridge_fixed_length=8", "--set", "bridge_hidden_size=32"]
    cmd += ["--train_file", str(tmp_path / "numbers.jsonl"), "--validation_split_percentage", "10"]
    cmd += ["--max_steps", "12", "--per_device_train_batch_size", "8", "--learning_rate", "3e-3"]
    cmd += ["--max_eval_samples", "16", "--generation_max_length", "24", "--logging_steps", "4"]
    cmd += ["--evaluate_before_training", "true", "--output_dir", str(out), "--disable_tqdm", "true"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "results.json").read_text())
    assert summary["decoder_languages"] == ["de", "fr"] and summary["steps"] == 12
    assert summary["train_examples"] == 360 and sum(summary["eval_examples"].values()) == 16
    for language in ("de", "fr"):
        before, after = summary["eval_before"][language], summary["eval"][language]
        assert after["loss"] < before["loss"], (language, before, after)
        assert {"exact_match", "bleu", "chrf"} <= after.keys()
    logs = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any("attention_bridge/L0/lin/coverage" in row and "loss" in row for row in logs)
    assert {"modeling_attention_bridge.py", "README.md", "tokenizer.json", "model.safetensors"} <= {
        p.name for p in out.iterdir()
    }
    config = json.loads((out / "config.json").read_text())  # every --set reached the saved model
    assert (config["bridge_layers"], config["bridge_fixed_length"], config["bridge_hidden_size"]) == (["lin"], 8, 32)

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    inputs = tokenizer(["twenty-one", "three hundred"], return_tensors="pt", padding=True)
    translations = {}
    for language in ("de", "fr"):
        generated = model.generate(**inputs, tgt_lang=language, max_new_tokens=12, do_sample=False)
        translations[language] = generated
        assert generated.shape[0] == 2
        assert isinstance(tokenizer.batch_decode(generated, skip_special_tokens=True)[0], str)
    trained = model.model.attention_bridge_decoders["fr"].layers[0].fc1.weight
    assert not torch.equal(trained, model.model.decoder.layers[0].fc1.weight)  # each decoder trained on its language
    with torch.no_grad():
        de, fr = (model(**inputs, decoder_input_ids=translations["de"], tgt_lang=lang).logits for lang in ("de", "fr"))
    assert not torch.allclose(de, fr)
    with pytest.raises(ValueError, match=r"\['de', 'fr'\]: pass `tgt_lang=`"):
        model.generate(**inputs, max_new_tokens=2)


def test_run_translation_reads_translation_rows_and_refuses_bad_data_early(tmp_path):
    run = run_translation_module()
    args = run.DataArguments(source_lang="en")
    rows = Dataset.from_dict({"translation": [{"en": "one", "de": "eins", "fr": "un"}, {"en": "two", "de": "zwei"}]})
    pairs = run.to_pairs(rows, args)
    assert pairs.to_list() == [
        {"source": "one", "target": "eins", "tgt_lang": "de"},
        {"source": "one", "target": "un", "tgt_lang": "fr"},
        {"source": "two", "target": "zwei", "tgt_lang": "de"},
    ]
    assert run.to_pairs(rows, run.DataArguments(source_lang="en", target_langs=["fr"])).to_list() == [pairs[1]]
    with pytest.raises(ValueError, match="`translation` column need --source_lang"):
        run.to_pairs(rows, run.DataArguments())
    flat = Dataset.from_dict({"source": ["one"], "target": ["eins"]})
    with pytest.raises(ValueError, match=r"fields \['source', 'target', 'tgt_lang'\].*missing \['tgt_lang'\]"):
        run.to_pairs(flat, run.DataArguments())
    with pytest.raises(ValueError, match="--train_file must be .json or .jsonl, got 'data.csv'"):
        run.load_splits(run.DataArguments(train_file="data.csv"))
    with pytest.raises(ValueError, match="Give --dataset_name or --train_file"):
        run.load_splits(run.DataArguments())
    build_number_words_marian(tmp_path / "stock")
    model_args = run.ModelArguments(model_name_or_path=str(tmp_path / "stock"))
    with pytest.raises(ValueError, match="give --target_langs, not --set decoder_languages"):
        run.load_model(model_args, ["de"], {"decoder_languages": ["de"]})
    model = run.load_model(model_args, ["de", "fr"], {})
    model.save_pretrained(tmp_path / "bridged")
    with pytest.raises(ValueError, match=r"target languages \['es'\] have no decoder.*\['de', 'fr'\]"):
        run.load_model(run.ModelArguments(model_name_or_path=str(tmp_path / "bridged")), ["de", "es"], {})


def test_translation_metrics_decode_padding_and_score_whole_strings():
    import numpy as np

    from interlayer.number_words import CharVocabulary
    from interlayer.training import translation_metrics

    tokenizer = CharVocabulary().tokenizer()
    references = ["trois cent soixante et onze", "vingt et un"]
    labels = tokenizer(text_target=references, padding=True)["input_ids"]
    labels = np.where(np.array(labels) == tokenizer.pad_token_id, -100, labels)  # the collator's label padding
    predictions = np.array(tokenizer(["trois cent soixante et onze", "vingt et deux"], padding=True)["input_ids"])
    metrics = translation_metrics(tokenizer)((predictions, labels))
    assert metrics["exact_match"] == 0.5
    assert 0 < metrics["bleu"] < 100 and 0 < metrics["chrf"] < 100
    perfect = translation_metrics(tokenizer)((np.where(labels == -100, tokenizer.pad_token_id, labels), labels))
    assert perfect == pytest.approx({"exact_match": 1.0, "bleu": 100.0, "chrf": 100.0})
