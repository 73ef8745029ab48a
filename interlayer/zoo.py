"""The zoo's registry (which mechanism converts which stock architecture, for which task) and conversion."""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass

import transformers
from transformers import PretrainedConfig, PreTrainedModel

from .mechanisms import MECHANISMS as RECORDS
from .models.zoo_common import (
    check_choice,
    check_option_names,
    field_defaults,
    hub_id,
    mechanism_field_names,
)
from .saving import (
    can_stage_beside,
    parked_folder,  # noqa: F401  (the zoo's name for it: interlayer.zoo.parked_folder)
    recover_interrupted_save,
    save_file_atomically,  # noqa: F401  (the zoo's name for it: interlayer.zoo.save_file_atomically)
    staging_folders,  # noqa: F401  (the zoo's name for it: interlayer.zoo.staging_folders)
    swap_into_place,
    warn_saving_in_place,
)

# the task each Auto class serves, and the stock class-name endings that say a checkpoint was saved for it
AUTO_CLASS_TASKS = {
    "AutoModel": "base",
    "AutoModelForCausalLM": "causal-lm",
    "AutoModelForSequenceClassification": "sequence-classification",
    "AutoModelForTokenClassification": "token-classification",
    "AutoModelForSeq2SeqLM": "translation",
}
TASK_ARCHITECTURE_ENDINGS = {
    "sequence-classification": ("ForSequenceClassification",),
    "token-classification": ("ForTokenClassification",),
    "causal-lm": ("LMHeadModel", "ForCausalLM"),
    "translation": ("MTModel", "ForConditionalGeneration"),
}


@dataclass(frozen=True)
class ZooEntry:
    """One cell of the zoo: `mechanism` on stock checkpoints of `stock_model_type` for `task`."""

    mechanism: str
    stock_model_type: str
    task: str
    config_class: type
    model_class: type
    auto_class: type


def _registered_entries() -> tuple[ZooEntry, ...]:
    """Every model class a mechanism's record holds (those its modeling file registers for an Auto class), one entry
    per stock model type its config converts, sorted by mechanism, stock model type and task."""
    entries = []
    for record in RECORDS.values():
        for model_class in record.model_classes:
            config_class = model_class.config_class
            for stock_model_type in config_class.stock_model_types:
                entries.append(
                    ZooEntry(
                        record.name,
                        stock_model_type,
                        AUTO_CLASS_TASKS[model_class._auto_class],
                        config_class,
                        model_class,
                        getattr(transformers, model_class._auto_class),
                    )
                )
    order = list(RECORDS)
    entries.sort(key=lambda e: (order.index(e.mechanism), e.stock_model_type, e.task != "base", e.task))
    return tuple(entries)


ZOO: tuple[ZooEntry, ...] = _registered_entries()
TASKS = sorted({e.task for e in ZOO})
MECHANISMS = list(RECORDS)


def matrix() -> dict[tuple[str, str], dict[str, type]]:
    """The zoo as a mechanism x family matrix: `{(mechanism, stock model_type): {task: model class}}`."""
    cells: dict[tuple[str, str], dict[str, type]] = {}
    for e in ZOO:
        cells.setdefault((e.mechanism, e.stock_model_type), {})[e.task] = e.model_class
    return cells


def matrix_markdown() -> str:
    """`matrix()` as a markdown table (the one in docs/matrix.md, printed by `interlayer list --markdown`)."""
    lines = [
        "| mechanism | family (stock `model_type`) | " + " | ".join(TASKS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in TASKS) + " |",
    ]
    for (mechanism, family), tasks in matrix().items():
        cells = [f"`{tasks[t].__name__}`" if t in tasks else "" for t in TASKS]
        lines.append(f"| {mechanism} | {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_DOC_ENTRY = re.compile(r"^(\s+)(\w+) \(((?:[^()]|\([^()]*\))*)\):\s*(.*)$")


def option_docs(config_class) -> dict[str, tuple[str, str]]:
    """`{option: (type and default, meaning)}` for every mechanism option of `config_class`, read from the
    `name (`type`, defaults to X): meaning` entries of its options classes' docstrings (the one place an option is
    documented). Raises `ValueError` naming an option without an entry."""
    names = mechanism_field_names(config_class)
    found: dict[str, tuple[str, str]] = {}
    for klass in config_class.__mro__:
        lines = (klass.__dict__.get("__doc__") or "").splitlines()
        i = 0
        while i < len(lines):
            line, i = lines[i], i + 1
            while line.lstrip().split(" (", 1)[0] in names and "):" not in line and i < len(lines):
                line, i = f"{line} {lines[i].strip()}", i + 1  # a type that runs over two lines
            match = _DOC_ENTRY.match(line)
            if not match or match.group(2) not in names or match.group(2) in found:
                continue
            indent, text = len(match.group(1)), [match.group(4)]
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                text.append(lines[i].strip())
                i += 1
            found[match.group(2)] = (match.group(3), " ".join(t for t in text if t))
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"{config_class.__name__}: options without a docstring entry: {missing}")
    return {n: found[n] for n in names}


def options_markdown(mechanism: str) -> str:
    """The options of `mechanism` as a markdown table (type, default, meaning), as its docs page shows them
    (`interlayer list --options MECHANISM`): from the docstrings, with the default the config really has."""
    check_choice("mechanism", mechanism, MECHANISMS)
    config_class = next(e.config_class for e in ZOO if e.mechanism == mechanism)
    defaults = field_defaults(config_class)
    lines = ["| option | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, (kind, meaning) in option_docs(config_class).items():
        kind = re.sub(r",?\s*(defaults to .*|\*optional\*)$", "", kind)
        meaning = meaning.replace("|", "\\|")
        lines.append(f"| `{name}` | {kind} | `{defaults.get(name)!r}` | {meaning} |")
    return "\n".join(lines) + "\n"


def find_entry(mechanism: str, model_type: str, task: str) -> ZooEntry:
    """The zoo entry for a mechanism on a stock `model_type` and task, or an error listing what exists."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"`mechanism` must be one of {MECHANISMS}, got {mechanism!r}.")
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}, got {task!r}.")
    for entry in ZOO:
        if entry.mechanism == mechanism and task == entry.task:
            legacy = getattr(entry.config_class, "legacy_model_types", ())
            if model_type in (entry.stock_model_type, entry.config_class.model_type, *legacy):
                return entry
    supported = sorted({e.stock_model_type for e in ZOO if e.mechanism == mechanism and e.task == task})
    if supported:
        why = f"supported model types: {supported}."
    else:
        tasks = sorted({e.task for e in ZOO if e.mechanism == mechanism})
        why = f"it has no model for task {task!r}; its tasks: {tasks} (choose one with `task=` / `--task`)."
    raise ValueError(f"mechanism {mechanism!r} does not convert model_type={model_type!r} for task {task!r}; {why}")


def default_task(config_dict: dict) -> str:
    """The task a stock checkpoint was saved for, from its `architectures`."""
    architectures = config_dict.get("architectures") or []
    for task, endings in TASK_ARCHITECTURE_ENDINGS.items():
        if any(a.endswith(endings) for a in architectures):
            return task
    return "base"


@dataclass(repr=False)
class ConversionReport:
    """What `convert` did. The lists hold every key; the repr (what `print(report)` shows) gives their counts and
    first names."""

    entry: ZooEntry
    missing_keys: list[str]  # every tensor the checkpoint did not have: the mechanism's and a new head's
    unexpected_keys: list[str]
    new_mechanism_keys: list[str]
    new_head_keys: list[str]
    parameters: dict

    def __repr__(self) -> str:
        def keys(names: list[str], shown: int = 3) -> str:
            more = f", ... {len(names) - shown} more" if len(names) > shown else ""
            return f"{len(names)}" + (f" ({', '.join(names[:shown])}{more})" if names else "")

        p, e = self.parameters, self.entry
        return "\n".join(
            [
                f"ConversionReport({e.model_class.__name__}: {e.mechanism} on {e.stock_model_type}, task {e.task})",
                f"  new mechanism tensors: {keys(self.new_mechanism_keys)}",
                f"  new head tensors: {keys(self.new_head_keys)}",
                f"  unused checkpoint tensors: {keys(self.unexpected_keys)}",
                f"  parameters: {p['total']:,} total, {p['trainable']:,} trainable, {p['mechanism']:,} of the "
                f"mechanism ({p['mechanism_percent']:.2f}%)",
                "  every key: .new_mechanism_keys, .new_head_keys, .missing_keys, .unexpected_keys",
            ]
        )


def convert(
    source,
    mechanism: str,
    task: str | None = None,
    preset: str | None = None,
    **options,
):
    """Turn a stock model into a zoo model: every stock weight loaded, the mechanism initialised per its config.

    `source` is a stock checkpoint (a local folder or a Hub id) or an already-loaded stock model (a
    `PreTrainedModel`, as `peft.get_peft_model` takes one), converted in memory: the new model takes the stock
    model's weight tensors themselves, in their dtype (no copy: training the new model's base changes them in the
    stock model too; pass `copy.deepcopy(model)` to keep it apart). `task` defaults to the one the checkpoint (or
    the loaded model's class) was made for.

    Returns `(model, report)`. Raises `ValueError` for an option name the mechanism's config does not have (naming
    the closest one), or if a stock base weight would be missing or a checkpoint weight would go unused, which means
    the checkpoint is not the architecture it claims to be.
    """
    if isinstance(source, PreTrainedModel):
        config_dict = {**source.config.to_dict(), "architectures": [type(source).__name__]}
    else:
        check_local_source(source)
        config_dict, _ = PretrainedConfig.get_config_dict(source)
    task = task or default_task(config_dict)
    entry = find_entry(mechanism, config_dict.get("model_type"), task)
    check_option_names(entry.config_class, options)
    if preset is not None:
        check_choice("preset", preset, entry.config_class.presets)
        options = {**entry.config_class.presets[preset], **options}
    # a weight of another shape is reported below, naming it, rather than by transformers' RuntimeError
    load = dict(output_loading_info=True, ignore_mismatched_sizes=True)
    if isinstance(source, PreTrainedModel):
        config = entry.config_class.from_dict(config_dict, **options)
        model, info = entry.model_class.from_stock_model(source, config, **load)
        source = config.base_model_name_or_path
    else:
        config = entry.config_class.from_pretrained(source, **options)
        model, info = entry.model_class.from_pretrained(source, config=config, **load)
    if info.get("mismatched_keys"):
        shapes = ", ".join(f"{k} {tuple(saved)} -> {tuple(new)}" for k, saved, new in sorted(info["mismatched_keys"]))
        saved_labels = len(config_dict.get("id2label") or {}) or config_dict.get("num_labels")
        hint = (
            f" `num_labels={config.num_labels}` asks for a head of another size than the checkpoint's "
            f"{saved_labels}-label head: leave it out to convert the trained head."
            if "num_labels" in options and saved_labels and options["num_labels"] != saved_labels
            else ""
        )
        raise ValueError(
            f"{source} does not fit {entry.model_class.__name__}: weights of another shape: {shapes}.{hint}"
        )
    missing = list(info["missing_keys"])
    unexpected = list(info["unexpected_keys"])
    new_mechanism = [k for k in missing if model.is_mechanism_parameter(k)]
    base_prefix = model.base_model_prefix + "."
    new_head = [k for k in missing if k not in new_mechanism and not k.startswith(base_prefix) and "pooler" not in k]
    missing_base = [k for k in missing if k not in new_mechanism and k not in new_head]
    if missing_base or (unexpected and task == default_task(config_dict)):
        raise ValueError(
            f"{source} does not fit {entry.model_class.__name__}: missing stock weights {missing_base[:8]}, "
            f"unused checkpoint weights {unexpected[:8]}."
        )
    report = ConversionReport(entry, missing, unexpected, new_mechanism, new_head, model.parameter_report())
    return model, report


def model_entry(model) -> ZooEntry:
    """The zoo entry of a zoo model (its mechanism, stock family and task)."""
    for entry in ZOO:
        if entry.model_class is type(model):
            return entry
    raise ValueError(f"{type(model).__name__} is not a zoo model class; `interlayer list` shows them.")


def stock_config(model, entry: ZooEntry, **changes) -> PretrainedConfig:
    """The stock config of the zoo model's family: its config without the mechanism's options, with `changes`."""
    from transformers import AutoConfig

    config_dict = model.config.to_dict()
    for name in [*mechanism_field_names(type(model.config)), "auto_map", "architectures", "model_type"]:
        config_dict.pop(name, None)
    return AutoConfig.for_model(entry.stock_model_type, **{**config_dict, **changes})


def to_stock(model) -> PreTrainedModel:
    """The stock model (the family's stock class for the zoo model's task) that computes what `model` computes, in
    `model`'s dtype, from `model.stock_export()`: the sentinel gates folded into the output projections, a uniformly
    pruned model's head counts in the config; an untrained identity conversion of any mechanism as its stock
    weights. Raises ValueError saying why when the mechanism cannot leave."""
    entry = model_entry(model)
    changes, state = model.stock_export()
    config = stock_config(model, entry, **changes)
    stock = entry.auto_class.from_config(
        config, dtype=model.dtype, attn_implementation=model.config._attn_implementation
    )
    wanted = stock.state_dict()
    missing = [k for k in wanted if k not in state]
    reshaped = [
        f"{k} {tuple(state[k].shape)} -> {tuple(v.shape)}"
        for k, v in wanted.items()
        if k in state and state[k].shape != v.shape
    ]
    if missing or reshaped:
        raise ValueError(
            f"{type(model).__name__} does not fit the stock {type(stock).__name__}: missing weights {missing[:4]}, "
            f"weights of another shape {reshaped[:4]}."
        )
    stock.load_state_dict({k: state[k] for k in wanted})
    if model.can_generate():
        stock.generation_config = copy.deepcopy(model.generation_config)
    return stock.train(model.training)


def export_stock(model, output_dir: str, tokenizer_source: str | None = None, overwrite: bool = False) -> str:
    """Save `to_stock(model)` as a stock checkpoint of the model's family (config and weights only: no remote code,
    loaded by the stock class), with the tokenizer of `tokenizer_source`, safely (`save_atomically`)."""
    return save_atomically(to_stock(model), output_dir, tokenizer_source=tokenizer_source, overwrite=overwrite)


def check_local_source(source) -> None:
    """Refuse a checkpoint that can only be a local folder (a path from the root, `.`, `..` or `~`, or a name no Hub
    id takes) when there is none, with that error rather than the Hub's about repository ids; and a folder without
    `config.json`, naming the missing file."""
    text = os.fspath(source)
    if os.path.isdir(text) and not os.path.isfile(os.path.join(text, "config.json")):
        raise FileNotFoundError(f"{text} has no config.json: a stock checkpoint folder holds its config and weights")
    if os.path.exists(text):
        return
    if text.startswith(("/", "./", "../", "~")) or (os.sep != "/" and os.sep in text) or hub_id(text) is None:
        raise FileNotFoundError(
            f"no such folder: {text} (a stock checkpoint is a local folder or a Hub id, such as "
            "`FacebookAI/roberta-base`)"
        )


def prepare_output_dir(output_dir: str, overwrite: bool, flag: str = "--overwrite") -> None:
    """Recover an interrupted save into `output_dir`, then refuse it if it is not empty unless `overwrite` (the one
    rule of every command that writes a model: `interlayer convert`, `prune`, `demo` and the example scripts, whose
    flag is `flag`): call before any work that the refusal would waste."""
    recover_interrupted_save(output_dir)
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        raise FileExistsError(f"{output_dir} exists and is not empty; pass {flag} to replace it.")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise FileExistsError(f"{output_dir} exists and is not a folder.")


def is_trainer_output(name: str) -> bool:
    """What a `Trainer` writes into its `output_dir` besides the final model: `keep` for `save_atomically` when the
    final model goes into the Trainer's own folder."""
    return (
        name.startswith("checkpoint-")
        or name in ("runs", "trainer_state.json", "training_args.bin")
        or (name.endswith("results.json"))
    )


def save_atomically(
    model, output_dir: str, tokenizer_source: str | None = None, overwrite: bool = False, tokenizer=None, keep=None
) -> str:
    """Save the model and its tokenizer together, safely: written into a hidden folder beside `output_dir` that then
    takes its place (`swap_into_place`), so that an interrupted save never leaves a half-written model or loses the
    one already there, and an existing folder is only replaced when `overwrite` is set. The tokenizer saved beside
    the model is `tokenizer` (an object) or the one of `tokenizer_source` (a checkpoint).

    Unlike a plain `save_pretrained` (safe as well, and which keeps every file of the folder but the old weights),
    this replaces the whole folder except the entries `keep(name) -> bool` names (a Trainer's `checkpoint-*` folders
    and `trainer_state.json`: `keep=is_trainer_output`), which survive the swap. The card's usage snippet loads the
    folder by its name. A folder that cannot be staged (`can_stage_beside`) is written in place, with a warning."""
    output_dir = os.path.realpath(output_dir)
    prepare_output_dir(output_dir, overwrite)
    os.makedirs(os.path.dirname(output_dir), exist_ok=True)

    def write(staging):
        save = getattr(model, "save_unstaged", None)
        if save is not None:
            save(staging, card_name=os.path.basename(output_dir))
        else:
            model.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        elif tokenizer_source is not None:
            save_tokenizer(tokenizer_source, staging)

    if not can_stage_beside(output_dir):
        warn_saving_in_place(output_dir)
        write(output_dir)
        return output_dir
    return swap_into_place(output_dir, write, keep=keep)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model", "spm.model")


def save_tokenizer(source: str, output_dir: str) -> bool:
    """Copy the source's tokenizer next to the converted weights, when the source has one (a local folder without
    tokenizer files has none: transformers would otherwise build one that knows only special tokens)."""
    from transformers import AutoTokenizer

    if os.path.isdir(source) and not any(os.path.exists(os.path.join(source, f)) for f in TOKENIZER_FILES):
        return False
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError):
        return False
    tokenizer.save_pretrained(output_dir)
    return True
