"""What every command that converts a model shares on its command line (`interlayer convert`, `examples/run_clm.py`,
`run_translation.py`, `run_classification.py`): options given as `--set key=value`, each of which reaches the model or
is refused, never dropped; an output folder that exists and is not empty refused before any work, unless the command
is told to replace it (`OutputArguments`)."""

from __future__ import annotations

import dataclasses
import json
import logging


def parse_option(text: str, flag: str = "--set") -> tuple[str, object]:
    """`key=value` with a JSON value (`route_topk=2`, `identity_init=false`, `route_pool="cls"`), or a bare string
    (`hc_mode=mhc`). Without `=` or without a key: a ValueError naming `flag` and the text."""
    key, sign, raw = text.partition("=")
    if not sign or not key.strip():
        raise ValueError(f"{flag} takes key=value (a JSON value or a bare string), got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def parse_options(items, flag: str = "--set") -> dict:
    """The options of every occurrence of `flag`, as one dict: `items` is what the parser collected, `key=value`
    texts, or lists of them (a flag repeated, each time with one or more values: `--set a=1 --set b=2 c=3`). A key
    given twice is refused (a ValueError naming it and both values): no option is dropped silently."""
    options: dict = {}
    for text in flattened(items):
        key, value = parse_option(text, flag)
        if key in options:
            raise ValueError(f"{flag} {key} is given twice ({options[key]!r}, then {value!r}): give each option once")
        options[key] = value
    return options


def add_option(options: dict, key: str, value, flag: str, set_flag: str = "--set") -> dict:
    """`options` with `key` from its own flag (`--freeze_base`, `--num-labels`) added: refused (ValueError) when
    `set_flag` gave it too, so that neither silently wins."""
    if key in options:
        raise ValueError(f"{key} is given by {flag} and by {set_flag} {key}=...: give it once")
    return {**options, key: value}


def repeatable_field(help: str):
    """The dataclass field of a list flag for `HfArgumentParser` (`set: list[str] = repeatable_field(...)`): the flag
    may be repeated (`--set a=1 --set b=2`), each time with one or more values (`--set a=1 b=2`); read it with
    `parse_options` (`key=value` options) or `flattened` (plain values). (`HfArgumentParser` gives a list field
    `nargs="+"`, whose repeats replace each other; with `action="append"` they add up.)"""
    return dataclasses.field(default_factory=list, metadata={"help": f"{help}; repeatable", "action": "append"})


def flattened(items) -> list:
    """The values of every occurrence of a `repeatable_field` flag, in order, as one list."""
    flat = []
    for item in items or []:
        flat.extend(flattened(item) if isinstance(item, (list, tuple)) else [item])
    return flat


@dataclasses.dataclass
class OutputArguments:
    """The example scripts' output folder rule, as `interlayer convert`, `prune` and `demo` have it (`--overwrite`):
    `--output_dir` that exists and is not empty is refused before any work (`parse_script_arguments`) unless
    `--overwrite_output_dir` is given (the flag transformers' own example scripts had)."""

    overwrite_output_dir: bool = dataclasses.field(
        default=False, metadata={"help": "replace --output_dir if it exists and is not empty (refused otherwise)"}
    )


def parse_script_arguments(parser, argv=None) -> tuple:
    """An example script's `(model_args, data_args, training_args)` from its `HfArgumentParser` of `(ModelArguments,
    DataArguments, OutputArguments, TrainingArguments)`, having done what every script does before any work: its
    `--output_dir` refused as `OutputArguments` says (an argument error, exit status 2) and, unless it runs DeepSpeed,
    DeepSpeed's CPU notice dropped (`quiet_deepspeed_cpu_notice`)."""
    from .zoo import prepare_output_dir

    model_args, data_args, output_args, training_args = parser.parse_args_into_dataclasses(argv)
    try:
        prepare_output_dir(training_args.output_dir, output_args.overwrite_output_dir, "--overwrite_output_dir")
    except FileExistsError as err:
        parser.error(str(err))
    if not training_args.deepspeed:
        quiet_deepspeed_cpu_notice()
    return model_args, data_args, training_args


def _not_deepspeed_cpu_fallback(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Setting accelerator to CPU.")


def quiet_deepspeed_cpu_notice() -> None:
    """Drop DeepSpeed's notice that it found no accelerator and uses the CPU, which its import (by `save_pretrained`,
    through accelerate, wherever DeepSpeed is installed) logs: a command that does not run DeepSpeed (the `interlayer`
    commands, the example scripts without `--deepspeed`) should not print it."""
    deepspeed = logging.getLogger("DeepSpeed")  # the logger DeepSpeed's import configures
    if _not_deepspeed_cpu_fallback not in deepspeed.filters:
        deepspeed.addFilter(_not_deepspeed_cpu_fallback)
