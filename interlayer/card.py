"""The model card interlayer writes beside a saved model, and the one line it logs for a conversion.

Saved models do not need this file and do not ship it: `save_pretrained` (`ZooModelMixin`, in the shipped
zoo_common.py) calls it when the interlayer package is imported in the process (`zoo_common.interlayer_library`). A
model loaded as remote code in a process without interlayer saves with no card (and removes a card interlayer wrote
for the weights it replaces), and a conversion made there logs transformers' own load report. A `Trainer` publishes
the card with its training summary below it once `attach_card` is called on it.
"""

import json
import os
import re
from typing import Any

import transformers

from .models.zoo_common import hub_id, logger, mechanism_field_names, stock_function_words
from .models.zoo_requirements import MIN_TRANSFORMERS, TESTED_TRANSFORMERS
from .saving import save_file_atomically


def mechanism_settings(config) -> dict[str, Any]:
    """The mechanism's own config fields and their values, in declaration order."""
    return {n: getattr(config, n) for n in mechanism_field_names(type(config))}


def auto_class_name(model) -> str:
    """The Auto class that loads `model`'s class (the one it is registered for: `AutoModelForCausalLM` for a causal
    LM, `AutoModel` for a base model)."""
    return type(model).__dict__.get("_auto_class") or getattr(type(model), "_auto_class", None) or "AutoModel"


def _yaml_value(value) -> str:
    return json.dumps(value)


def write_model_card(
    model, save_directory, name=None, untrained: bool | None = None, training_summary: str | None = None
) -> str:
    """Write README.md (YAML metadata + what the mechanism is and its settings) into `save_directory`.

    `name` is what the usage snippet loads (the final folder's name or the Hub repository; default `save_directory`'s
    own name). `untrained` says whether the weights saved are still the untrained conversion (default: the model's
    parameters, `is_untrained_conversion()`). `model.card_data` (a dict, optional) adds `license` (a Hub license
    id, such as `"apache-2.0"`; by default the stock checkpoint's, read from its model card when it has one),
    `datasets`, `metrics` (name -> value), free `notes`, and `base_model` (a Hub id, for a model converted from a
    local copy of a Hub checkpoint). Its tags are the model's `hub_tags()` and `model_tags`. `training_summary`: a
    `Trainer`'s draft card (`attach_card`), whose metadata joins the card's and whose evaluation results and training
    procedure (hyperparameters, results, framework versions) follow it. The file is written whole or not at all
    (`save_file_atomically`).
    """
    config = model.config
    extra = getattr(model, "card_data", None) or {}
    base = getattr(config, "base_model_name_or_path", None)
    trainer_meta, trainer_text = _split_trainer_card(training_summary) if training_summary else ({}, "")
    meta = {"library_name": "transformers"}
    license = extra.get("license") or trainer_meta.get("license")
    if license:
        meta["license"] = str(license)
    if trainer_meta.get("language"):
        meta["language"] = trainer_meta["language"]
    tags = [*model.hub_tags(), *(getattr(model, "model_tags", None) or []), "custom_code"]
    meta["tags"] = list(dict.fromkeys(tags + trainer_meta.get("tags", [])))
    hub_base = extra.get("base_model") or hub_id(base)
    if hub_base:
        meta["base_model"] = hub_base
    if model.pipeline_tag:
        meta["pipeline_tag"] = model.pipeline_tag
    datasets = [*(extra.get("datasets") or []), *trainer_meta.get("datasets", [])]
    if datasets:
        meta["datasets"] = list(dict.fromkeys(datasets))
    metrics = sorted(extra.get("metrics") or {}) + trainer_meta.get("metrics", [])
    if metrics:
        meta["metrics"] = list(dict.fromkeys(metrics))
    if trainer_meta.get("model-index"):
        meta["model-index"] = trainer_meta["model-index"]
    lines = ["---"] + [f"{k}: {_yaml_value(v)}" for k, v in meta.items()] + ["---", ""]
    arch = (config.architectures or [type(model).__name__])[0]
    lines += [f"# {arch} ({model.mechanism_name})", ""]
    lines += [model.mechanism_summary(), ""]
    if base:
        source = f"the stock checkpoint `{hub_base}`" if hub_base else "a local stock checkpoint"
        lines += [f"Converted from {source} with interlayer.", ""]
    if untrained is None:
        untrained = model.is_untrained_conversion()
    if untrained:
        lines += [f"This is an untrained conversion: {stock_function_statement(model)}", ""]
    report = model.parameter_report()
    lines += [
        "## Parameters",
        "",
        f"- total: {report['total']:,}",
        f"- trainable: {report['trainable']:,}",
        f"- mechanism: {report['mechanism']:,} ({report['mechanism_percent']:.2f}% of the total)",
        "",
        "## Settings",
        "",
        "| field | value |",
        "| --- | --- |",
    ]
    for setting, value in mechanism_settings(config).items():
        if setting == "base_model_name_or_path":  # said above, as a Hub id: a local path means nothing to a reader
            continue
        lines.append(f"| `{setting}` | `{value!r}` |")
    if extra.get("metrics"):
        lines += ["", "## Results", "", "| metric | value |", "| --- | --- |"]
        lines += [
            f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in extra["metrics"].items()
        ]
    if extra.get("notes"):
        lines += ["", str(extra["notes"])]
    if name is None:
        name = os.path.basename(os.path.abspath(str(save_directory)))
    auto_class = auto_class_name(model)
    lines += [
        "",
        "## Use",
        "",
        f"Needs `transformers>={MIN_TRANSFORMERS}` (tested with {', '.join(TESTED_TRANSFORMERS)}; saved with "
        f"{transformers.__version__}); the modeling code ships in this folder, so `interlayer` itself need not be "
        "installed.",
        "",
        "```python",
        f"from transformers import {auto_class}",
        "",
        f"model = {auto_class}.from_pretrained({json.dumps(str(name))}, trust_remote_code=True)",
        "```",
        "",
    ]
    if trainer_text:
        lines += [trainer_text]

    def write(staged):
        with open(staged, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))

    return save_file_atomically(os.path.join(str(save_directory), "README.md"), write)


def _split_trainer_card(draft: str) -> tuple[dict, str]:
    """A `Trainer`'s draft card (`Trainer.create_model_card`) as `(its metadata, its evaluation results and training
    procedure)`, without what it cannot know (its claim that the model was trained from scratch or fine-tuned from
    its config's checkpoint, its "More information needed" sections)."""
    import yaml

    meta, body = {}, draft
    if draft.startswith("---\n"):
        header, _, body = draft[4:].partition("\n---\n")
        meta = yaml.safe_load(header) or {}
    results = re.search(r"It achieves the following results on the evaluation set:\n((?:- .*\n)+)", body)
    procedure = body.partition("## Training procedure\n")[2]  # its hyperparameters, results, framework versions
    text = "## Training\n\nTrained with the transformers `Trainer`"
    text += f", which reports on the evaluation set:\n\n{results.group(1)}" if results else "."
    return meta, f"{text}\n{procedure}".rstrip() + "\n"


def attach_card(trainer):
    """Make `trainer` publish the project's model card with its own training summary below it: its
    `create_model_card` (which `trainer.push_to_hub()` runs before uploading the folder) writes its draft, then this
    card (`write_model_card`) over it, with the draft's hyperparameters, results and metadata (datasets, metrics,
    `model-index`, tags) and the usage snippet naming the Hub repository. Without it the Trainer uploads its own
    draft, which names the model's `model_tags` (`interlayer` and the mechanism) but says it was trained from
    scratch. Returns the trainer; the card is written by the main process only, as the Trainer's."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    if not hasattr(model, "hub_tags"):
        raise TypeError(
            f"attach_card: trainer.model is a {type(model).__name__}, not a model of the interlayer zoo; its card "
            "is the Trainer's."
        )
    draft = trainer.create_model_card

    def create_model_card(*args, **kwargs):
        draft(*args, **kwargs)
        if trainer.is_world_process_zero():
            folder = trainer.args.output_dir
            with open(os.path.join(folder, "README.md"), encoding="utf-8") as f:
                summary = f.read()
            name = trainer.hub_model_id or trainer.args.hub_model_id
            write_model_card(model, folder, name, training_summary=summary)

    trainer.create_model_card = create_model_card
    return trainer


def stock_function_statement(model) -> str:
    """The model card's sentence on what an untrained conversion computes."""
    if model.claims_stock_function():
        return (
            f"it computes the stock model's function {stock_function_words(model)} until it is trained "
            "(`identity_init=True`)."
        )
    return (
        "the mechanism's new parameters are initialised, not trained, and it does not compute the stock model's "
        "function."
    )


_CARD_FILE_OPTIONS = ("cache_dir", "revision", "token", "local_files_only", "subfolder")


def stock_license(source, load_kwargs: dict) -> str | None:
    """The `license` of the model card (README.md front matter) of the checkpoint `source`, a local folder or a Hub
    repository (its card fetched as `from_pretrained` fetches files), or None when it has none or it cannot be read."""
    if not source:
        return None
    from huggingface_hub import ModelCard
    from transformers.utils import cached_file

    try:
        path = cached_file(
            str(source),
            "README.md",
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            **{k: load_kwargs[k] for k in _CARD_FILE_OPTIONS if k in load_kwargs},
        )
        return ModelCard.load(path).data.license if path else None
    except (OSError, ValueError):
        return None


def take_stock_license(model, source, load_kwargs: dict) -> None:
    """Give `model.card_data` the license of the stock checkpoint's card (`stock_license`), unless it has one."""
    license_name = stock_license(source, load_kwargs)
    if license_name and "license" not in (getattr(model, "card_data", None) or {}):
        model.card_data = {**(getattr(model, "card_data", None) or {}), "license": license_name}


def report_conversion(model, source, info: dict) -> None:
    """One line for what the conversion added (the mechanism's tensors are expected to be missing from a stock
    checkpoint, so transformers' load report of them is dropped); real problems are still warned about."""
    added = [k for k in info["missing_keys"] if model.is_mechanism_parameter(k)]
    others = sorted(k for k in info["missing_keys"] if k not in added)
    sizes = dict(model.named_parameters())
    count = sum(sizes[k].numel() for k in added if k in sizes)
    complete = "every stock weight loaded; " if not (others or info["unexpected_keys"]) else ""
    logger.warning(
        f"{type(model).__name__}: converted {source}: {complete}added {len(added)} "
        f"{model.mechanism_name.lower()} tensors ({count:,} parameters), initialised per the config."
    )
    if others:
        logger.warning(f"{type(model).__name__}: newly initialised, not in {source}: {others}")
    if info["unexpected_keys"]:
        logger.warning(f"{type(model).__name__}: unused weights of {source}: {sorted(info['unexpected_keys'])}")
    if info.get("mismatched_keys"):
        logger.warning(f"{type(model).__name__}: weights of another shape in {source}: {info['mismatched_keys']}")
