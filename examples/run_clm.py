#!/usr/bin/env python
"""Train a causal LM of the zoo (or the stock model, for comparison) in the style of transformers' `run_clm.py`:
Hub datasets or local text / json files, block packing, the stock `Trainer`, perplexity on a held-out split.

    # hyper-connections (mHC) on SmolLM2 with only the hyper-connection parameters training
    python examples/run_clm.py --model_name_or_path HuggingFaceTB/SmolLM2-135M --mechanism hyper-connections \
        --set hc_mode=mhc --set hc_streams=4 --freeze_base true \
        --dataset_name wikitext --dataset_config_name wikitext-2-raw-v1 --output_dir out/smollm2-mhc

    # the seed's SFT recipe: GSM8K question/answer pairs in the chat template, lr 2e-5, cosine, 10% warm-up
    python examples/run_clm.py --model_name_or_path Qwen/Qwen3-0.6B --mechanism hyper-connections \
        --set hc_mode=static --train_file ../shared/data/gsm8k/train.jsonl --validation_split_percentage 10 \
        --prompt_column question --response_column answer --block_size 1024 --learning_rate 2e-5 \
        --lr_scheduler_type cosine --warmup_steps 0.1 --per_device_train_batch_size 4 \
        --gradient_accumulation_steps 8 --bf16 true --output_dir out/qwen3-hc-gsm8k

`--mechanism stock` trains the unmodified stock model with the same recipe (`--stock_train_last_layers N`: only its
last N decoder layers, a baseline with a trainable-parameter count like a mechanism's on a frozen base).
`--set key=value` passes mechanism options (JSON values). With `--prompt_column`/`--response_column` each example
becomes one text, through the tokenizer's chat template when it has one (user turn, assistant turn), otherwise
`prompt + "\\n" + response`; texts are then concatenated and cut into blocks of `--block_size` tokens, as
`run_clm.py` does. The mechanism's statistics (`MechanismStatsCallback`) join every log. The output folder holds
the model (with its remote code and card), the tokenizer and `results.json` (held-out loss and perplexity).
"""

import json
import logging
import math
import os
import sys
from dataclasses import dataclass, field
from itertools import chain

import torch
from datasets import load_dataset
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)

from interlayer.callbacks import MechanismStatsCallback
from interlayer.command_options import (
    OutputArguments,
    add_option,
    parse_options,
    parse_script_arguments,
    repeatable_field,
)
from interlayer.models.zoo_common import ConfigError
from interlayer.zoo import convert, is_trainer_output, save_atomically

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "stock causal-LM checkpoint, folder or Hub id"})
    mechanism: str = field(default="hyper-connections", metadata={"help": "zoo mechanism, or 'stock'"})
    set: list[str] = repeatable_field("mechanism options key=value (JSON values)")
    freeze_base: bool | None = field(default=None, metadata={"help": "train only the mechanism's parameters"})
    stock_train_last_layers: int | None = field(
        default=None,
        metadata={"help": "with --mechanism stock: train only the last N decoder layers (a baseline of similar size)"},
    )
    evaluate_before_training: bool = field(default=False, metadata={"help": "also report the held-out loss at step 0"})


@dataclass
class DataArguments:
    dataset_name: str | None = None
    dataset_config_name: str | None = None
    train_file: str | None = field(default=None, metadata={"help": ".txt, .json or .jsonl"})
    validation_file: str | None = None
    validation_split_percentage: int = field(default=5, metadata={"help": "held out from the end of the train split"})
    text_column: str = "text"
    prompt_column: str | None = None
    response_column: str | None = None
    block_size: int = 512
    max_train_samples: int | None = field(default=None, metadata={"help": "examples kept before packing"})
    max_eval_samples: int | None = None


def load_splits(args: DataArguments):
    if args.dataset_name:
        raw = load_dataset(args.dataset_name, args.dataset_config_name)
        train = raw["train"]
        if "validation" in raw:
            return train, raw["validation"]
    elif args.train_file:
        builder = {"txt": "text", "json": "json", "jsonl": "json"}.get(args.train_file.rsplit(".", 1)[-1])
        if builder is None:
            raise ValueError(f"--train_file must be .txt, .json or .jsonl, got {args.train_file!r}")
        files = {"train": args.train_file, **({"validation": args.validation_file} if args.validation_file else {})}
        raw = load_dataset(builder, data_files=files)
        train = raw["train"]
        if "validation" in raw:
            return train, raw["validation"]
    else:
        raise ValueError("Give --dataset_name or --train_file.")
    cut = len(train) - len(train) * args.validation_split_percentage // 100
    return train.select(range(cut)), train.select(range(cut, len(train)))


def to_text(tokenizer, args: DataArguments):
    """The function mapping a batch of examples to one text each."""
    if args.prompt_column is None:
        return lambda batch: {"text": batch[args.text_column]}
    if bool(args.prompt_column) != bool(args.response_column):
        raise ValueError("--prompt_column and --response_column go together.")

    def pairs(batch):
        texts = []
        for prompt, response in zip(batch[args.prompt_column], batch[args.response_column]):
            if tokenizer.chat_template:
                turns = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
                texts.append(tokenizer.apply_chat_template(turns, tokenize=False))
            else:
                texts.append(f"{prompt}\n{response}{tokenizer.eos_token or ''}")
        return {"text": texts}

    return pairs


def pack(token_ids: dict, block_size: int) -> dict:
    """Concatenate the tokenised texts and cut them into blocks of `block_size` (the remainder dropped)."""
    ids = list(chain(*token_ids["input_ids"]))
    total = len(ids) // block_size * block_size
    blocks = [ids[i : i + block_size] for i in range(0, total, block_size)]
    return {"input_ids": blocks, "attention_mask": [[1] * block_size for _ in blocks], "labels": blocks}


def mechanism_options(args: ModelArguments) -> dict:
    """The options the mechanism is converted with: every `--set`, and `--freeze_base`. Refused (ValueError): a
    malformed or repeated option, one given twice, `--stock_train_last_layers` with a mechanism, and mechanism
    options with `--mechanism stock`; unknown options are refused by the conversion."""
    if args.stock_train_last_layers is not None and args.mechanism != "stock":
        raise ValueError(
            f"--stock_train_last_layers is for --mechanism stock, got --mechanism {args.mechanism!r} (use "
            "--freeze_base for a mechanism)."
        )
    options = parse_options(args.set)
    if args.freeze_base is not None:
        options = add_option(options, "freeze_base", args.freeze_base, "--freeze_base")
    if args.mechanism == "stock" and options:
        raise ValueError(
            f"--mechanism stock trains the stock model as it is: mechanism options {sorted(options)} do not apply "
            "(--stock_train_last_layers N trains its last N layers)"
        )
    return options


def train_last_layers(model, n: int) -> None:
    """Freeze every parameter but those of the last `n` decoder layers (embeddings, final norm and head frozen)."""
    layers = model.get_decoder().layers
    if not 1 <= n <= len(layers):
        raise ValueError(f"--stock_train_last_layers must be in [1, {len(layers)}], got {n}.")
    model.requires_grad_(False)
    for layer in layers[len(layers) - n :]:
        layer.requires_grad_(True)


def final_evaluation(trainer) -> dict:
    """The held-out metrics of the trained model: those the Trainer logged at the last step (an `eval_strategy` of
    "epoch" evaluates there), else a new evaluation. The held-out set is evaluated once."""
    last = trainer.state.global_step
    logged = [row for row in trainer.state.log_history if "eval_loss" in row and row.get("step") == last]
    return logged[-1] if logged else trainer.evaluate()


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser((ModelArguments, DataArguments, OutputArguments, TrainingArguments))
    parser.set_defaults(
        learning_rate=2e-5,
        lr_scheduler_type="cosine",
        warmup_steps=0.1,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        num_train_epochs=1,
        eval_strategy="epoch",
        save_strategy="no",
        logging_steps=10,
        report_to="none",
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        ddp_find_unused_parameters=False,  # every parameter of a causal LM of the zoo gets a gradient (multiprocess.md)
    )
    return parser


def load_model(args: ModelArguments, options: dict):
    """The stock model (its last layers training, if asked), or the checkpoint converted with `options`."""
    if args.mechanism == "stock":
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
        if args.stock_train_last_layers is not None:
            train_last_layers(model, args.stock_train_last_layers)
        return model
    return convert(args.model_name_or_path, args.mechanism, task="causal-lm", **options)[0]


def main(argv: list[str] | None = None):
    parser = build_parser()
    model_args, data_args, training_args = parse_script_arguments(parser, argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    set_seed(training_args.seed)

    # an option that cannot reach the model is an argument error (exit 2), before any training
    try:
        options = mechanism_options(model_args)
    except ValueError as err:
        parser.error(str(err))
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    try:
        model = load_model(model_args, options)
    except ConfigError as err:
        parser.error(str(err))
    report = {
        "total": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    logger.info("parameters: %s", report)

    train, evaluation = load_splits(data_args)
    if data_args.max_train_samples:
        train = train.select(range(min(data_args.max_train_samples, len(train))))
    if data_args.max_eval_samples:
        evaluation = evaluation.select(range(min(data_args.max_eval_samples, len(evaluation))))
    text = to_text(tokenizer, data_args)

    def prepare(split):
        split = split.map(text, batched=True, remove_columns=split.column_names)
        split = split.map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])
        return split.map(lambda b: pack(b, data_args.block_size), batched=True, remove_columns=split.column_names)

    train, evaluation = prepare(train), prepare(evaluation)
    if len(train) == 0 or len(evaluation) == 0:
        raise ValueError(f"--block_size {data_args.block_size} leaves an empty split; use more data or smaller blocks")

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=default_data_collator,
    )
    if model_args.mechanism != "stock":
        MechanismStatsCallback.attach(trainer)
    before = trainer.evaluate()["eval_loss"] if model_args.evaluate_before_training else None
    trainer.train()
    metrics = final_evaluation(trainer)
    summary = {
        "mechanism": model_args.mechanism,
        "seed": training_args.seed,
        "eval_loss_before": before,
        "eval_loss": metrics["eval_loss"],
        "perplexity": math.exp(metrics["eval_loss"]),
        "train_blocks": len(train),
        "eval_blocks": len(evaluation),
        "parameters": report,
    }
    if model_args.mechanism != "stock":
        model.card_data = {"metrics": {"eval_loss": metrics["eval_loss"], "perplexity": summary["perplexity"]}}
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
