"""`interlayer inspect`: what a saved zoo model is, whether it still computes the stock function, and pictures of
what its mechanism does (from a model folder: the pictures of its record, `interlayer.mechanisms`, drawn by
`interlayer.pictures`) or did over training (from a Trainer output folder: `draw_training_curves`, which takes a
Trainer log history and a folder, so that a training script can draw the same pictures).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import re

import torch

from .mechanisms import MECHANISMS
from .models.zoo_common import agrees_with_stock, field_defaults, mechanism_field_names, stock_function_words
from .pictures import _figure, _save
from .zoo import ZOO, stock_config

SAMPLE_SENTENCES = (
    "The cat sat on the mat.",
    "Residual streams carry what every layer writes.",
    "A router picks which earlier layers to read.",
    "Small models train quickly on a laptop.",
)
DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog."
STOCK_CHECK_MAX_PARAMETERS = 1_000_000_000  # above this, building a second (stock) copy costs too much memory
STATISTIC_PREFIXES = tuple(record.statistics_prefix for record in MECHANISMS.values())


# --- what the folder is ---------------------------------------------------------------------------------------


def zoo_entry(config, architecture: str | None = None):
    """The zoo entry of a saved config: its config class, and the model class named by `architecture` (default the
    config's first `architectures`), or the base model."""
    entries = [e for e in ZOO if e.config_class.model_type == config.model_type]
    if not entries:
        known = sorted({e.config_class.model_type for e in ZOO})
        raise ValueError(f"model_type {config.model_type!r} is not an interlayer model (one of {known}).")
    wanted = architecture or (config.architectures or [None])[0]
    for entry in entries:
        if entry.model_class.__name__ == wanted:
            return entry
    return next(e for e in entries if e.task == "base")


def load_model(folder: str):
    """The zoo model saved in `folder`, in fp32 and eval mode (with its mechanism record's `inspect_options`), with
    its zoo entry."""
    from transformers import AutoConfig

    from . import zoo  # noqa: F401  (importing the package registers the zoo with the Auto classes)
    from .mechanisms import MECHANISMS

    config = AutoConfig.from_pretrained(folder)
    entry = zoo_entry(config)
    options = MECHANISMS[entry.mechanism].inspect_options
    model = entry.model_class.from_pretrained(folder, dtype=torch.float32, **options)
    return model.eval(), entry


def changed_settings(config) -> dict[str, tuple[object, object]]:
    """`{name: (value, default)}` for the mechanism settings that differ from their defaults. The default is the
    config class's dataclass default; a value the config derives on its own (the same stock config with the default
    mechanism settings has it too, such as a bridge's `route_last_n` capped at the layer count, or None/{}/[]
    normalised to one another) is not a change."""
    config_class = type(config)
    defaults = field_defaults(config_class)
    names = mechanism_field_names(config_class)
    try:
        reference = config_class.from_dict({**config.to_dict(), **{n: defaults.get(n) for n in names}})
    except (ValueError, TypeError):
        reference = None
    out = {}
    for name in names:
        if name == "base_model_name_or_path":
            continue
        default = defaults.get(name)
        value = getattr(config, name)
        empty = (None, {}, [], ())
        if value == default or (value in empty and default in empty):
            continue
        if reference is not None and getattr(reference, name, default) == value:
            continue
        out[name] = (value, default)
    return out


@dataclasses.dataclass
class StockCheck:
    """The answer to "does this model still compute the stock function?": `same` is True, False or None (not
    checked), `detail` says how it was decided."""

    same: bool | None
    detail: str


def _main_output(outputs) -> torch.Tensor:
    for name in ("logits", "last_hidden_state"):
        value = getattr(outputs, name, None)
        if value is not None:
            return value
    return outputs[0]


def stock_model(model, entry):
    """The stock model of the zoo model's family and task, with the zoo model's stock weights (same names), or
    `(None, reason)` when the zoo model does not keep every stock weight in the stock shape."""
    config = stock_config(model, entry)
    stock = entry.auto_class.from_config(config, attn_implementation=model.config._attn_implementation)
    ours = model.state_dict()
    wanted = stock.state_dict()
    missing = [k for k in wanted if k not in ours]
    reshaped = [k for k in wanted if k in ours and ours[k].shape != wanted[k].shape]
    if missing:
        return None, f"the stock {type(stock).__name__} has weights this model does not keep: {missing[:4]}"
    if reshaped:
        return None, f"{len(reshaped)} stock weights have another shape here (e.g. {reshaped[0]}: pruned heads?)"
    stock.load_state_dict({k: ours[k] for k in wanted})
    return stock.eval(), ""


def check_stock_function(model, entry, inputs: dict, outputs=None) -> StockCheck:
    """Whether `model` computes what the stock model built from the same weights computes, on `inputs`: both
    forwards are compared (logits, or the last hidden state of a base model) as the model card words it
    (`stock_function_words`): bit for bit, or within the mechanism's stated float-rounding tolerance.

    A saved folder does not remember whether it was trained (`is_untrained_conversion()` only knows in the process
    that converted it), so this is decided from the function itself: it answers for trained models too, and a
    mechanism that was trained back to the identity counts as the stock function, which it is."""
    stock, reason = stock_model(model, entry)
    if stock is None:
        return StockCheck(False, f"no: {reason}")
    with torch.no_grad():
        ours = _main_output(outputs if outputs is not None else model(**inputs)).float()
        theirs = _main_output(stock(**inputs)).float()
    name = type(stock).__name__
    if ours.shape != theirs.shape:
        return StockCheck(
            False, f"no: its output has shape {tuple(ours.shape)}, the stock {name}'s {tuple(theirs.shape)}"
        )
    same, diff = agrees_with_stock(model, ours, theirs)
    if same:
        return StockCheck(
            True,
            f"yes, {stock_function_words(model)}: the stock {name} built from its weights gives the same outputs "
            f"(max |diff| {diff:.2g})",
        )
    return StockCheck(
        False,
        f"no: its outputs differ from the stock {name}'s built from its weights by up to {diff:.3g}",
    )


# --- inputs ---------------------------------------------------------------------------------------------------


def load_tokenizer(folder: str):
    """The folder's tokenizer, or None when it has none or one without a vocabulary (transformers 5 builds a
    tokenizer of special tokens only from a folder that has just a config.json; it maps every word to `<unk>`)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, TypeError, ImportError):
        return None
    probe = tokenizer(DEFAULT_TEXT, add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids)
    return tokenizer if any(i not in special for i in probe) else None


def model_inputs(model, folder: str, texts=None, seed: int = 0, tokenizer=None):
    """A small batch for the model: `texts` (default a few sample sentences) through the folder's tokenizer, or
    random token ids when the folder has none. Returns `(inputs, tokens of the first example, description)`;
    seq2seq models also get `decoder_input_ids`."""
    config = model.config
    limit = min(64, getattr(config, "max_position_embeddings", None) or 64)
    texts = list(texts or SAMPLE_SENTENCES)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(folder)
    if tokenizer is not None:
        if tokenizer.pad_token is None:
            if tokenizer.eos_token is None:
                texts = texts[:1]
            else:
                tokenizer.pad_token = tokenizer.eos_token
        encoded = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=limit)
        inputs = {k: v for k, v in encoded.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        first = inputs["input_ids"][0][inputs["attention_mask"][0].bool()] if "attention_mask" in inputs else None
        tokens = tokenizer.convert_ids_to_tokens(first.tolist()) if first is not None else None
        what = f"{len(texts)} sentence(s) through the folder's tokenizer ({type(tokenizer).__name__})"
    else:
        g = torch.Generator().manual_seed(seed)
        length = min(16, limit)
        count = len(texts) if texts != list(SAMPLE_SENTENCES) else 4
        ids = torch.randint(0, config.vocab_size, (count, length), generator=g)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        tokens = [str(i) for i in ids[0].tolist()]
        what = f"random token ids, {count} x {length} (the folder has no tokenizer with a vocabulary; seed {seed})"
    if getattr(config, "is_encoder_decoder", False):
        g = torch.Generator().manual_seed(seed + 1)
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None else 0
        vocab = getattr(config, "decoder_vocab_size", None) or config.vocab_size
        decoder = torch.randint(0, vocab, (inputs["input_ids"].shape[0], 6), generator=g)
        decoder[:, 0] = start
        inputs["decoder_input_ids"] = decoder
    return inputs, tokens, what


def read_statistics(model, inputs: dict, outputs_holder: list | None = None) -> dict[str, float]:
    """The mechanism's statistics of one eval-mode forward on `inputs` (names without `eval/`), with its
    `mechanism_state()`. The forward's output is appended to `outputs_holder` when given."""
    model.mechanism_stats(reset=True)
    with torch.no_grad():
        outputs = model(**inputs)
    if outputs_holder is not None:
        outputs_holder.append(outputs)
    return {**model.mechanism_state(), **model.mechanism_stats(reset=True, split="eval")}


def target_languages(model, entry, tgt_lang: str | None = None) -> list[str | None]:
    """The target languages inspect runs the model for: `[tgt_lang]` when given (checked against the model's
    `decoder_languages`), otherwise every language of a model with one decoder per language, and `[None]` for a
    model with one decoder."""
    languages = list(getattr(model.config, "decoder_languages", None) or [])
    if tgt_lang is not None:
        if not hasattr(model, "decoder_for"):
            raise ValueError(
                "--tgt-lang chooses a decoder of a model with one decoder per target language (`decoder_languages`, "
                f"an attention-bridge model); this is a `{entry.mechanism}` model"
            )
        model.decoder_for(tgt_lang)  # raises naming the languages, or that the model has one decoder
        return [tgt_lang]
    return languages or [None]


def draw_model(model, entry, stats: dict, inputs: dict | None, tokens, out: str) -> tuple[list[str], list]:
    """The pictures of the mechanism's record (`interlayer.mechanisms`) for `model` into `out`: the paths drawn, and
    the pictures this model has none of. Without `inputs` (a batch), only those drawn from the statistics."""
    paths, absent = [], []
    for picture in MECHANISMS[entry.mechanism].pictures:
        if picture.reads_inputs and not inputs:
            continue
        path = picture.draw(model, stats, inputs, tokens, os.path.join(out, picture.file))
        if path is None:
            absent.append(picture)
        else:
            paths.append(path)
    return paths, absent


# --- curves over training -------------------------------------------------------------------------------------


def _quantity(name: str) -> str:
    """The quantity a statistic measures, its layer and indices replaced by `*` (`hc/L3/attn/res_0_1` ->
    `hc/L*/attn/res_*`)."""
    return re.sub(r"(_\d+)+$", "_*", re.sub(r"/L\d+/", "/L*/", name))


def training_series(log_history: list[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """`{statistic: (steps, values)}` for every mechanism statistic in the training logs (not the evaluation ones)."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for row in log_history:
        step = row.get("step")
        if step is None:
            continue
        for key, value in row.items():
            if key.startswith(STATISTIC_PREFIXES) and isinstance(value, (int, float)):
                steps, values = series.setdefault(key, ([], []))
                steps.append(step)
                values.append(float(value))
    return series


def _series_label(name: str) -> str:
    """What tells a statistic's line apart from the others of its quantity: layer and indices (`hc/L3/attn/res_0_1`
    -> `L3 0_1`), or the name."""
    layer = re.search(r"/L(\d+)/", name)
    indices = re.search(r"_(\d+(?:_\d+)*)$", name)
    parts = ([f"L{layer.group(1)}"] if layer else []) + ([indices.group(1)] if indices else [])
    return " ".join(parts) or name


def training_curves_figure(quantity: str, names: list[str], series: dict, max_lines: int = 48):
    """One quantity over training steps, a line per layer / index (at most `max_lines`), each named in the legend:
    inside the axes up to 12 lines, beside them in columns of 16 beyond."""
    shown = names[:max_lines]
    columns = 0 if len(shown) <= 12 else math.ceil(len(shown) / 16)
    fig = _figure(6.0 + 1.1 * columns, 3.6 if columns <= 1 else 4.2)
    ax = fig.add_subplot()
    for name in shown:
        steps, values = series[name]
        ax.plot(steps, values, marker="." if len(steps) < 30 else None, linewidth=1, label=_series_label(name))
    if columns:
        ax.legend(fontsize=6, ncol=columns, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=6)
    more = "" if len(names) <= max_lines else f" (first {max_lines} of {len(names)})"
    ax.set_title(quantity + more, fontsize=9)
    ax.set_xlabel("step")
    ax.xaxis.get_major_locator().set_params(integer=True)
    return fig


def draw_training_curves(log_history: list[dict], out: str, max_lines: int = 48) -> list[str]:
    """One picture per logged quantity (`curves_<quantity>.png`, `training_curves_figure`)."""
    from tqdm.auto import tqdm

    series = training_series(log_history)
    groups: dict[str, list[str]] = {}
    for name in series:
        groups.setdefault(_quantity(name), []).append(name)
    paths = []
    for quantity, names in tqdm(sorted(groups.items()), desc="training curves", disable=None):
        fig = training_curves_figure(quantity, names, series, max_lines)
        slug = re.sub(r"[^A-Za-z0-9]+", "_", quantity.replace("*", "")).strip("_")
        paths.append(_save(fig, os.path.join(out, f"curves_{slug}.png")))
    return paths


def trainer_run(folder: str):
    """`(log_history, model folder)` of a Trainer output folder (its own `trainer_state.json`, else the last
    `checkpoint-N`'s); the model folder is `folder` itself when it holds a saved model, else the last checkpoint
    holding one. None when `folder` is not a Trainer output folder."""
    checkpoints = sorted(
        (d for d in glob.glob(os.path.join(folder, "checkpoint-*")) if re.search(r"checkpoint-\d+$", d)),
        key=lambda d: int(d.rsplit("-", 1)[1]),
    )
    states = [os.path.join(d, "trainer_state.json") for d in [folder, *reversed(checkpoints)]]
    state = next((s for s in states if os.path.isfile(s)), None)
    if state is None:
        return None
    with open(state, encoding="utf-8") as f:
        history = json.load(f).get("log_history", [])
    models = [d for d in [folder, *reversed(checkpoints)] if os.path.isfile(os.path.join(d, "config.json"))]
    return history, (models[0] if models else None)


# --- the command ----------------------------------------------------------------------------------------------


def _format(value) -> str:
    return json.dumps(value) if isinstance(value, (list, dict, str)) else repr(value)


def inspect_folder(
    folder: str,
    out: str | None = None,
    text: str | None = None,
    stock_check: bool = True,
    seed: int = 0,
    tgt_lang: str | None = None,
    echo=print,
) -> dict:
    """What `interlayer inspect` does: print the summary with `echo`, write the pictures; returns the facts
    (`mechanism`, `changed`, `stock_check`, `pictures`, ...). A model with one decoder per target language runs
    and is checked for `tgt_lang`, or for every language when it is None (`stock_checks`: the check of each)."""
    from tqdm.auto import tqdm

    folder = os.path.abspath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder} is not a folder")
    out = os.path.abspath(out or os.path.join(folder, "inspect"))
    run = trainer_run(folder)
    model_folder = folder
    report: dict = {"folder": folder, "out": out, "pictures": []}
    if run is not None:
        history, model_folder = run
        echo(f"Trainer output folder {folder}: {len(history)} log rows")
        curves = draw_training_curves(history, out)
        report["pictures"] += curves
        if not curves:
            echo("  no mechanism statistics in the logs (attach interlayer.callbacks.MechanismStatsCallback)")
        if model_folder is None:
            echo("  no saved model or checkpoint with a config.json: no model pictures")
            _print_pictures(report["pictures"], echo)
            return report
        echo(f"  model: {model_folder}")
    elif not os.path.isfile(os.path.join(folder, "config.json")):
        raise FileNotFoundError(
            f"{folder} has no config.json (a saved model) and no trainer_state.json (a Trainer run)"
        )

    steps = ["load the model", "forward", "stock check", "pictures"]
    with tqdm(total=len(steps), desc="inspect", disable=None) as bar:
        bar.set_postfix_str(steps[0])
        model, entry = load_model(model_folder)
        languages = target_languages(model, entry, tgt_lang)
        bar.update()
        config = model.config
        bar.set_postfix_str(steps[1])
        inputs, tokens, what = model_inputs(model, model_folder, [text or DEFAULT_TEXT] if text else None, seed)
        outputs: list = []
        for language in languages:  # the bridge's statistics are the encoder's: the same for every language
            chosen = {"tgt_lang": language} if language is not None else {}
            stats = read_statistics(model, {**inputs, **chosen}, outputs)
        bar.update()
        bar.set_postfix_str(steps[2])
        parameters = model.parameter_report()
        if not stock_check:
            checks = {None: StockCheck(None, "not checked (--no-stock-check)")}
        elif parameters["total"] > STOCK_CHECK_MAX_PARAMETERS:
            reason = f"not checked: {parameters['total']:,} parameters (a second, stock copy is built)"
            checks = {None: StockCheck(None, reason)}
        else:
            checks = {
                language: check_stock_function(model, entry, inputs, output)
                for language, output in zip(languages, outputs)
            }
        check = next(iter(checks.values()))
        bar.update()
        bar.set_postfix_str(steps[3])
        if text is None and any(p.reads_inputs for p in MECHANISMS[entry.mechanism].pictures):
            inputs, tokens, _ = model_inputs(model, model_folder, [DEFAULT_TEXT], seed)  # a source sentence
        pictures, absent = draw_model(model, entry, stats, inputs, tokens, out)
        bar.update()
    report["pictures"] += pictures
    changed = changed_settings(config)
    report.update(mechanism=entry.mechanism, changed=changed, stock_check=check, stock_checks=checks, statistics=stats)

    echo(f"{model_folder}")
    echo(f"  model: {type(model).__name__} ({model.mechanism_name}; interlayer mechanism `{entry.mechanism}`)")
    echo(f"  family: {entry.stock_model_type} (task {entry.task})")
    echo(f"  base checkpoint: {config.base_model_name_or_path or 'not recorded'}")
    if changed:
        echo("  settings that differ from the default:")
        for name, (value, default) in changed.items():
            echo(f"    {name} = {_format(value)} (default {_format(default)})")
    else:
        echo("  settings: all mechanism settings at their defaults")
    p = parameters
    echo(
        f"  parameters: total {p['total']:,}; trainable {p['trainable']:,}; added by the mechanism {p['mechanism']:,} "
        f"({p['mechanism_percent']:.2f}%)"
    )
    if languages != [None]:
        several = len(languages) > 1
        how = "each inspected; --tgt-lang LANG for one" if several else "inspected: " + ", ".join(languages)
        echo(f"  target languages: {', '.join(config.decoder_languages)} ({how})")
    if list(checks) == [None]:
        echo(f"  computes the stock function: {check.detail}")
    else:
        echo("  computes the stock function (the stock model has the first language's decoder):")
        for language, language_check in checks.items():
            echo(f"    tgt_lang={language!r}: {language_check.detail}")
    echo(f"  inputs: {what}")
    for picture in absent:
        echo(f"  no {picture.name}: {picture.absent}")
    _print_pictures(report["pictures"], echo)
    return report


def _print_pictures(paths, echo) -> None:
    echo(f"  pictures ({len(paths)}):")
    for path in paths:
        echo(f"    {path}")
