#!/usr/bin/env python
"""Train an attention-bridge translation model with one decoder per target language, in the style of transformers'
`run_translation.py`: Hub datasets or local json lines, the stock `Seq2SeqTrainer`, held-out loss, BLEU, chrF and
exact match per target language.

    # a stock checkpoint converted on the way (a Marian, BART, mBART, M2M100/NLLB or T5 seq2seq LM), one decoder per
    # target language of the data: rows {"source": ..., "target": ..., "tgt_lang": ...}
    python examples/run_translation.py --model_name_or_path Helsinki-NLP/opus-mt-en-de --set bridge_layers='["lin"]' \
        --train_file train.jsonl --validation_split_percentage 10 --output_dir out/opus-bridge

    # rows {"translation": {"en": ..., "de": ..., "fr": ...}} (the Hub's WMT sets): every language of a row but
    # --source_lang is a target (or those of --target_langs)
    python examples/run_translation.py --model_name_or_path Helsinki-NLP/opus-mt-en-de --dataset_name wmt16 \
        --dataset_config_name de-en --source_lang en --target_langs de --output_dir out/wmt-bridge

`--model_name_or_path` is a stock seq2seq checkpoint, converted with `--set key=value` bridge options (JSON
values) and `decoder_languages` = the target languages (`--target_langs`, default those of the data, sorted;
the first gets the stock decoder, the others start as copies of it), or an attention-bridge folder saved
before, trained further (its `decoder_languages` must cover the data's). The model runs one decoder per batch, so
the training batches are grouped by target language (`interlayer.training.TargetLanguageSampler`: shuffled within
and across languages, each batch one language) and each language is evaluated on its own (`eval_<lang>_loss`,
`eval_<lang>_bleu`, `eval_<lang>_chrf` with sacrebleu installed, `eval_<lang>_exact_match`; greedy decoding, or
`--generation_num_beams`). The output folder holds the model (with its remote code and card), the tokenizer,
`trainer_state.json` and `results.json`.
"""

import json
import logging
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import torch
from datasets import Dataset, load_dataset
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    HfArgumentParser,
    Seq2SeqTrainingArguments,
    set_seed,
)

from interlayer.command_options import (
    OutputArguments,
    flattened,
    parse_options,
    parse_script_arguments,
    repeatable_field,
)
from interlayer.models.zoo_common import ConfigError
from interlayer.training import split_by_language, target_language_trainer, translation_metrics
from interlayer.zoo import convert, is_trainer_output, save_atomically

logger = logging.getLogger(__name__)
COLUMNS = ("source", "target", "tgt_lang")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        metadata={"help": "stock seq2seq checkpoint (folder or Hub id), or an attention-bridge folder to train further"}
    )
    set: list[str] = repeatable_field("bridge options key=value (JSON values)")
    evaluate_before_training: bool = field(default=False, metadata={"help": "also report held-out metrics at step 0"})


@dataclass
class DataArguments:
    dataset_name: str | None = None
    dataset_config_name: str | None = None
    train_file: str | None = field(default=None, metadata={"help": ".json or .jsonl: source/target/tgt_lang rows"})
    validation_file: str | None = None
    validation_split_percentage: int = field(default=10, metadata={"help": "held out from the end of the train split"})
    source_lang: str | None = field(default=None, metadata={"help": "the source language of `translation` rows"})
    target_langs: list[str] = repeatable_field(
        "target languages, in the order of the decoders (default: the data's, sorted)"
    )
    max_source_length: int = 128
    max_target_length: int = 128
    max_train_samples: int | None = field(default=None, metadata={"help": "examples kept (after the split)"})
    max_eval_samples: int | None = None


def load_splits(args: DataArguments):
    if args.dataset_name:
        raw = load_dataset(args.dataset_name, args.dataset_config_name)
        train = raw["train"]
        if "validation" in raw:
            return train, raw["validation"]
    elif args.train_file:
        if args.train_file.rsplit(".", 1)[-1] not in ("json", "jsonl"):
            raise ValueError(f"--train_file must be .json or .jsonl, got {args.train_file!r}")
        files = {"train": args.train_file, **({"validation": args.validation_file} if args.validation_file else {})}
        raw = load_dataset("json", data_files=files)
        train = raw["train"]
        if "validation" in raw:
            return train, raw["validation"]
    else:
        raise ValueError("Give --dataset_name or --train_file.")
    cut = len(train) - len(train) * args.validation_split_percentage // 100
    return train.select(range(cut)), train.select(range(cut, len(train)))


def to_pairs(split, args: DataArguments) -> Dataset:
    """The split as rows `source`, `target`, `tgt_lang`: as they are, or one row per target language of each
    `translation` row ({language: text}, the source language `--source_lang`)."""
    columns = split.column_names
    if "translation" in columns:
        if args.source_lang is None:
            raise ValueError("rows with a `translation` column need --source_lang (the language to translate from)")
        rows = {name: [] for name in COLUMNS}
        for translation in split["translation"]:
            if args.source_lang not in translation:
                raise ValueError(f"a `translation` row has no --source_lang {args.source_lang!r}: {translation}")
            for language, text in translation.items():  # a language a row lacks is None (the column's struct)
                wanted = not args.target_langs or language in args.target_langs
                if language != args.source_lang and wanted and text is not None:
                    rows["source"].append(translation[args.source_lang])
                    rows["target"].append(text)
                    rows["tgt_lang"].append(language)
        return Dataset.from_dict(rows)
    missing = [name for name in COLUMNS if name not in columns]
    if missing:
        raise ValueError(
            f"the data needs the fields {list(COLUMNS)} (or a `translation` field with --source_lang); "
            f"missing {missing}, found {columns}"
        )
    if args.source_lang is not None:
        raise ValueError("--source_lang is for `translation` rows; source/target/tgt_lang rows name no source language")
    if args.target_langs:
        split = split.filter(lambda row: row["tgt_lang"] in args.target_langs)
    return split.select_columns(list(COLUMNS))


def load_model(args: ModelArguments, languages: list[str], options: dict):
    """The stock checkpoint converted with `options` (every `--set`, `parse_options`) and one decoder per language, or
    an attention-bridge folder as it is (no options)."""
    if AutoConfig.from_pretrained(args.model_name_or_path).model_type.endswith("_attention_bridge"):
        if options:
            raise ValueError(f"--set is for converting a stock checkpoint; {args.model_name_or_path} is converted")
        model = AutoModelForSeq2SeqLM.from_pretrained(args.model_name_or_path)
        unknown = sorted(set(languages) - set(model.config.decoder_languages or []))
        if unknown:
            raise ValueError(
                f"the data's target languages {unknown} have no decoder in {args.model_name_or_path} "
                f"(decoder_languages {model.config.decoder_languages})"
            )
        return model
    if "decoder_languages" in options:
        raise ValueError("the decoders are the target languages: give --target_langs, not --set decoder_languages")
    model, _ = convert(
        args.model_name_or_path, "attention-bridge", task="translation", decoder_languages=languages, **options
    )
    return model


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser((ModelArguments, DataArguments, OutputArguments, Seq2SeqTrainingArguments))
    parser.set_defaults(
        learning_rate=5e-4,
        lr_scheduler_type="linear",
        warmup_steps=0.05,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        num_train_epochs=3,
        predict_with_generate=True,
        eval_strategy="no",
        save_strategy="no",
        logging_steps=10,
        report_to="none",
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
    )
    return parser


def parse_arguments(parser: HfArgumentParser, argv: list[str] | None = None) -> tuple:
    """`(model_args, data_args, training_args, options)` from the command line (`build_parser()`): every
    `--target_langs` (repeatable) as one list and the bridge options of every `--set` (`parse_options`). A malformed
    or repeated option is an argument error (exit 2), before any work."""
    model_args, data_args, training_args = parse_script_arguments(parser, argv)
    data_args.target_langs = flattened(data_args.target_langs)
    try:
        options = parse_options(model_args.set)
    except ValueError as err:
        parser.error(str(err))
    return model_args, data_args, training_args, options


def main(argv: list[str] | None = None):
    parser = build_parser()
    model_args, data_args, training_args, options = parse_arguments(parser, argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    set_seed(training_args.seed)

    train, evaluation = (to_pairs(split, data_args) for split in load_splits(data_args))
    if data_args.max_train_samples:
        train = train.select(range(min(data_args.max_train_samples, len(train))))
    if data_args.max_eval_samples:
        evaluation = evaluation.select(range(min(data_args.max_eval_samples, len(evaluation))))
    languages = list(data_args.target_langs) or sorted(set(train["tgt_lang"]) | set(evaluation["tgt_lang"]))
    unseen = sorted(set(evaluation["tgt_lang"]) - set(train["tgt_lang"]))
    if unseen:
        logger.warning("target languages %s are evaluated but never trained (their decoders stay as built)", unseen)
    try:
        model = load_model(model_args, languages, options)
    except ConfigError as err:  # an option the bridge does not have, or a bad value
        parser.error(str(err))
    decoders = list(model.config.decoder_languages)
    if training_args.generation_max_length is None:  # no longer than the decoder has positions for
        positions = getattr(model.config, "max_position_embeddings", None) or data_args.max_target_length
        training_args.generation_max_length = min(data_args.max_target_length, positions)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)

    def tokenize(batch):
        encoded = tokenizer(batch["source"], max_length=data_args.max_source_length, truncation=True)
        labels = tokenizer(text_target=batch["target"], max_length=data_args.max_target_length, truncation=True)
        encoded["labels"] = labels["input_ids"]
        encoded["tgt_lang"] = [decoders.index(language) for language in batch["tgt_lang"]]  # the decoder's index
        return encoded

    train = train.map(tokenize, batched=True, remove_columns=list(COLUMNS))
    evaluation = evaluation.map(tokenize, batched=True, remove_columns=list(COLUMNS))
    evaluation = split_by_language(evaluation, names=decoders)
    trainer = target_language_trainer(
        model, training_args, train, evaluation, tokenizer, compute_metrics=translation_metrics(tokenizer)
    )

    def by_language(metrics: dict) -> dict:
        return {
            language: {k.removeprefix(f"eval_{language}_"): v for k, v in metrics.items() if f"eval_{language}_" in k}
            for language in evaluation
        }

    before = by_language(trainer.evaluate()) if model_args.evaluate_before_training else None
    trainer.train()
    per_language = by_language(trainer.evaluate())
    summary = {
        "seed": training_args.seed,
        "steps": trainer.state.global_step,
        "decoder_languages": decoders,
        "train_examples": len(train),
        "eval_examples": {language: len(split) for language, split in evaluation.items()},
        "eval_before": before,
        "eval": per_language,
        "eval_loss": float(np.mean([m["loss"] for m in per_language.values()])),  # the mean over the languages
    }
    model.card_data = {"metrics": {"eval_loss": summary["eval_loss"]}}
    if trainer.is_world_process_zero():  # an interrupted save keeps the model already in the folder
        save_atomically(model, training_args.output_dir, overwrite=True, tokenizer=tokenizer, keep=is_trainer_output)
    trainer.accelerator.wait_for_everyone()  # no rank writes into the folder while rank 0 swaps it
    trainer.save_state()
    with open(os.path.join(training_args.output_dir, "results.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
