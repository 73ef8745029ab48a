#!/usr/bin/env python
"""Fine-tune a cross-layer-bridge classifier (or the stock model, for comparison) in the style of transformers'
`run_glue.py`, with the seed's recipe as defaults.

    python examples/run_classification.py --model_name_or_path roberta-large --preset H9 \
        --dataset_name glue --dataset_config_name rte --output_dir out/rte-h9

    python examples/run_classification.py --model_name_or_path PATH --preset A8 \
        --train_file ../shared/data/rte/train.tsv --validation_split_percentage 10 --output_dir out/rte-a8

Seed recipe (defaults here): AdamW, encoder lr 1.5e-5, head and bridge lr 3e-4, weight decay 0.01, 10% linear
warm-up, label smoothing 0.05, batch 8, max length 128, gradient clipping 1.0, mixed precision on a GPU, the
early-stop rule `--early_stop_below 0.70` (stop when epoch-1 accuracy is below it). Accuracy and F1 are computed
locally. `--preset stock` fine-tunes the unmodified stock model with the same recipe.
"""

import json
import logging
import os
import sys
from dataclasses import dataclass, field

import torch
from datasets import ClassLabel, load_dataset
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    HfArgumentParser,
    TrainingArguments,
    set_seed,
)

from interlayer.callbacks import EarlyStopBelowCallback
from interlayer.command_options import (
    OutputArguments,
    parse_options,
    parse_script_arguments,
    repeatable_field,
)
from interlayer.models.zoo_common import ConfigError
from interlayer.training import classification_trainer
from interlayer.zoo import convert, is_trainer_output, save_atomically

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "stock checkpoint (RoBERTa or BERT), folder or Hub id"})
    preset: str | None = field(default=None, metadata={"help": "bridge preset (H9, A8, A3, ...) or 'stock'"})
    bridge: list[str] = repeatable_field("bridge options key=value (JSON values)")
    head_learning_rate: float = field(default=3e-4, metadata={"help": "lr of the head and the bridge"})
    label_smoothing: float = field(default=0.05)
    early_stop_below: float | None = field(default=None, metadata={"help": "stop if epoch-1 accuracy is below"})


@dataclass
class DataArguments:
    dataset_name: str | None = None
    dataset_config_name: str | None = None
    train_file: str | None = None
    validation_file: str | None = None
    validation_split_percentage: int = field(default=10, metadata={"help": "held out from the end of train_file"})
    max_seq_length: int = 128
    max_train_samples: int | None = None
    max_eval_samples: int | None = None


def read_local(path: str):
    ext = path.rsplit(".", 1)[-1]
    if ext in ("tsv", "csv"):
        return load_dataset("csv", data_files=path, delimiter="\t" if ext == "tsv" else ",", quoting=3)["train"]
    if ext in ("json", "jsonl"):
        return load_dataset("json", data_files=path)["train"]
    raise ValueError(f"--train_file/--validation_file must be .tsv, .csv, .json or .jsonl, got {path!r}")


def load_splits(args: DataArguments):
    if args.dataset_name:
        raw = load_dataset(args.dataset_name, args.dataset_config_name)
        return raw["train"], raw["validation"]
    if not args.train_file:
        raise ValueError("Give --dataset_name or --train_file.")
    train = read_local(args.train_file)
    if args.validation_file:
        return train, read_local(args.validation_file)
    cut = len(train) - len(train) * args.validation_split_percentage // 100
    return train.select(range(cut)), train.select(range(cut, len(train)))


def text_columns(columns: list[str]) -> tuple[str, str | None]:
    for pair in (("sentence1", "sentence2"), ("premise", "hypothesis"), ("question", "sentence")):
        if set(pair) <= set(columns):
            return pair
    for single in ("text", "sentence"):
        if single in columns:
            return single, None
    rest = [c for c in columns if c not in ("label", "idx", "index")]
    return rest[0], (rest[1] if len(rest) > 1 else None)


def bridge_options(args: ModelArguments) -> dict:
    """The bridge options of every `--bridge` (`parse_options`); refused (ValueError) with `--preset stock`, which
    fine-tunes the stock model as it is. Unknown options are refused by the conversion."""
    options = parse_options(args.bridge, flag="--bridge")
    if args.preset == "stock" and options:
        raise ValueError(
            f"--preset stock fine-tunes the stock model as it is: bridge options {sorted(options)} do not apply"
        )
    return options


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser((ModelArguments, DataArguments, OutputArguments, TrainingArguments))
    defaults = dict(
        learning_rate=1.5e-5,
        weight_decay=0.01,
        warmup_steps=0.1,
        lr_scheduler_type="linear",
        per_device_train_batch_size=8,
        per_device_eval_batch_size=32,
        num_train_epochs=3,
        max_grad_norm=1.0,
        eval_strategy="epoch",
        save_strategy="no",
        logging_steps=50,
        report_to="none",
        fp16=torch.cuda.is_available() and not torch.cuda.is_bf16_supported(),
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
    )
    parser.set_defaults(**defaults)
    return parser


def main(argv: list[str] | None = None):
    parser = build_parser()
    model_args, data_args, training_args = parse_script_arguments(parser, argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    set_seed(training_args.seed)
    try:  # a malformed, repeated or misplaced option is an argument error (exit 2), before any work
        options = bridge_options(model_args)
    except ValueError as err:
        parser.error(str(err))

    train, evaluation = load_splits(data_args)
    first, second = text_columns(train.column_names)
    if not isinstance(train.features["label"], ClassLabel):
        names = sorted(set(train["label"]) | set(evaluation["label"]))
        train = train.cast_column("label", ClassLabel(names=[str(n) for n in names]))
        evaluation = evaluation.cast_column("label", ClassLabel(names=[str(n) for n in names]))
    names = train.features["label"].names
    if data_args.max_train_samples:
        train = train.select(range(data_args.max_train_samples))
    if data_args.max_eval_samples:
        evaluation = evaluation.select(range(data_args.max_eval_samples))

    labels = dict(num_labels=len(names), id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    if model_args.preset == "stock":
        model = AutoModelForSequenceClassification.from_pretrained(model_args.model_name_or_path, **labels)
    else:
        try:
            model, _ = convert(
                model_args.model_name_or_path,
                "bridge",
                task="sequence-classification",
                preset=model_args.preset,
                **labels,
                **options,
            )
        except ConfigError as err:  # an option the bridge does not have, or a bad value
            parser.error(str(err))
        model.label_smoothing = model_args.label_smoothing
    if model_args.preset == "stock":
        training_args.label_smoothing_factor = model_args.label_smoothing

    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)

    def tokenize(batch):
        texts = (batch[first],) if second is None else (batch[first], batch[second])
        return tokenizer(*texts, truncation=True, max_length=data_args.max_seq_length)

    keep = {"label"}
    train = train.map(tokenize, batched=True, remove_columns=[c for c in train.column_names if c not in keep])
    evaluation = evaluation.map(
        tokenize, batched=True, remove_columns=[c for c in evaluation.column_names if c not in keep]
    )

    callbacks = []
    if model_args.early_stop_below is not None:
        callbacks.append(EarlyStopBelowCallback(model_args.early_stop_below))
    trainer = classification_trainer(
        model, training_args, train, evaluation, tokenizer, model_args.head_learning_rate, callbacks
    )
    trainer.train()
    evals = [row for row in trainer.state.log_history if "eval_accuracy" in row]
    best = max(evals, key=lambda r: r["eval_accuracy"]) if evals else {}
    summary = {
        "preset": model_args.preset or "default",
        "seed": training_args.seed,
        "final_eval_accuracy": evals[-1]["eval_accuracy"] if evals else None,
        "best_eval_accuracy": best.get("eval_accuracy"),
        "best_epoch": best.get("epoch"),
        "eval_f1_at_best": best.get("eval_f1"),
        "epochs_run": trainer.state.epoch,
    }
    model.card_data = {"metrics": {"accuracy": summary["final_eval_accuracy"] or 0.0}}
    if trainer.is_world_process_zero():  # an interrupted save keeps the model already in the folder
        save_atomically(model, training_args.output_dir, overwrite=True, tokenizer=tokenizer, keep=is_trainer_output)
    trainer.accelerator.wait_for_everyone()  # no rank writes into the folder while rank 0 swaps it
    with open(os.path.join(training_args.output_dir, "results.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
