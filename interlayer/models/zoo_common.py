"""Behaviour shared by every interlayer mechanism: config conventions, conversion from stock checkpoints,
statistics for watching a mechanism, and the model card written beside the weights.

This file sits in the same folder as the configuration and modeling files that import it, so that
`save_pretrained` ships it with the remote code (a parent-relative import would break `trust_remote_code`).
"""

import dataclasses
import difflib
import functools
import inspect
import itertools
import json
import logging
import math
import os
import re
import sys
from typing import Any, ClassVar

import torch
import transformers
from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import StrictDataclassError
from torch import nn
from transformers.conversion_mapping import register_checkpoint_conversion_mapping
from transformers.core_model_loading import ConversionOps, WeightConverter
from transformers.masking_utils import create_causal_mask
from transformers.utils import logging as hf_logging

logger = hf_logging.get_logger("transformers.interlayer")

MIN_TRANSFORMERS = 5
if int(transformers.__version__.split(".")[0]) < MIN_TRANSFORMERS:
    raise ImportError(
        f"interlayer models need transformers>={MIN_TRANSFORMERS} (strict dataclass configs, the v5 attention and "
        f"cache interfaces); this environment has transformers {transformers.__version__}. "
        f"Upgrade with `pip install 'transformers>={MIN_TRANSFORMERS},<6'`."
    )


# The name of the cache keyword in the installed transformers: `cache` from 5.24 on (its models, mask functions,
# `generate()` and outputs), `past_key_values` before. The zoo's forwards keep `past_key_values` in their signatures
# and read the cache under either name (`take_cache`); what they pass to stock modules and mask functions, and put in
# their outputs, goes under `CACHE_KWARG` (the old name still works there from 5.24, with a deprecation warning).
CACHE_KWARG = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def take_cache(past_key_values, kwargs: dict):
    """The cache a forward was given: its `past_key_values` argument, or `cache` (what transformers >= 5.24's stock
    heads, layers and `generate()` pass), taken out of `kwargs` so it is not passed on twice."""
    cache = kwargs.pop("cache", None)
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("Both `cache` and `past_key_values` were given a cache: pass one of them.")
    return past_key_values if past_key_values is not None else cache


def stock_cache_kwargs(kwargs: dict) -> dict:
    """`kwargs` for a stock module or mask function: a `past_key_values` entry put under `CACHE_KWARG`."""
    if CACHE_KWARG == "past_key_values" or "past_key_values" not in kwargs:
        return kwargs
    kwargs = dict(kwargs)
    kwargs[CACHE_KWARG] = kwargs.pop("past_key_values")
    return kwargs


def check_choice(field: str, value: Any, allowed) -> None:
    """Raise the zoo's standard error for a config field whose value is not one of `allowed`."""
    if value not in allowed:
        raise ValueError(f"`{field}` must be one of {sorted(allowed)}, got {value!r}.")


def check_range(field: str, value, low=None, high=None, *, low_open=False, allow_none=False) -> None:
    """Raise the zoo's standard error for a numeric config field outside its allowed range (NaN, infinities and
    non-numbers are outside every range)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"`{field}` must be a finite number, got {value!r}.")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if value is None or too_low or too_high:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low}"
        hi = "" if high is None else f"<= {high}"
        allowed = " and ".join(x for x in (lo, hi) if x)
        raise ValueError(f"`{field}` must be {allowed}, got {value!r}.")


class ConfigError(ValueError, StrictDataclassError):
    """A config value or option name the zoo refuses. A `ValueError` (as every config docstring promises), and also a
    `huggingface_hub` `StrictDataclassError` for code that catches the strict-dataclass errors of transformers."""


def zoo_config(cls):
    """`huggingface_hub`'s `@strict` for a zoo config, whose validation errors surface as `ConfigError` (a
    `ValueError`) carrying the validator's own message, which names the field, the value and what is allowed."""
    cls = strict(cls)
    validated_init = cls.__init__

    @functools.wraps(validated_init)
    def __init__(self, *args, **kwargs):
        try:
            validated_init(self, *args, **kwargs)
        except StrictDataclassError as err:
            if isinstance(err, ConfigError):
                raise
            cause = err.__cause__ if isinstance(err.__cause__, (ValueError, TypeError)) else err
            raise ConfigError(str(cause)) from err

    cls.__init__ = __init__
    return cls


def closest_name(name: str, candidates) -> str:
    """`"; did you mean `x`?"` for the candidate closest to a misspelt `name`, or an empty string."""
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def option_names(config_class) -> set[str]:
    """Every option a config class takes by name: its dataclass fields and `num_labels`."""
    return {f.name for f in dataclasses.fields(config_class)} | {"num_labels"}


def check_option_names(config_class, names) -> None:
    """Refuse option names `config_class` does not have, naming the closest valid one, so that a typo never runs an
    experiment with the default value."""
    valid = option_names(config_class)
    for name in names:
        if name not in valid:
            raise ConfigError(
                f"{config_class.__name__} has no option `{name}`{closest_name(name, valid)} (the mechanism's options: "
                f"{', '.join(mechanism_field_names(config_class))})."
            )


def mechanism_field_names(config_class) -> list[str]:
    """The mechanism's own config fields (those declared by the zoo's `...Fields` dataclasses), in declaration order."""
    names = []
    for klass in config_class.__mro__:
        if klass.__name__.endswith("Fields") and dataclasses.is_dataclass(klass):
            names += [f.name for f in dataclasses.fields(klass) if f.name not in names]
    return names


def field_defaults(config_class) -> dict[str, Any]:
    """`{field: default}` of a config class's dataclass fields that have a default (a fresh one from a factory)."""
    defaults = {}
    for f in dataclasses.fields(config_class):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return defaults


@dataclasses.dataclass(kw_only=True)
class ZooConfigFields:
    """Fields every interlayer config has, whatever the mechanism.

    Args:
        identity_init (`bool`, defaults to `True`):
            Initialise the mechanism so that the converted model computes exactly the stock model's function
            until it is trained. A mechanism that cannot honour it raises a `ValueError` naming the setting
            that prevents it.
        base_model_name_or_path (`str`, *optional*):
            The stock checkpoint this model was converted from; recorded automatically by `from_pretrained`
            on a stock checkpoint and written into the model card.
    """

    identity_init: bool = True
    base_model_name_or_path: str | None = None

    # Reloading a saved model with an option: `reload_options` may change (they act at run time), `init_options` only
    # shape a conversion's initialisation (ignored with a warning: the weights are loaded); any other mechanism option
    # changes what the saved weights mean and is refused. A mechanism extends both sets.
    reload_options: ClassVar[frozenset[str]] = frozenset({"base_model_name_or_path"})
    init_options: ClassVar[frozenset[str]] = frozenset({"identity_init"})


STOCK_SOURCE = "<stock checkpoint>"  # replaced by the checkpoint's path or id once `from_pretrained` knows it


class ZooConfigMixin:
    """Conversion rules for configs: which stock `model_type`s a mechanism accepts, and presets.

    `from_pretrained(stock_checkpoint, **options)` applies the options before validation (so a bad value fails at
    config creation) and refuses a checkpoint whose `model_type` is not one of `stock_model_types`.
    """

    stock_model_types: ClassVar[tuple[str, ...]] = ()
    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        model_type = config_dict.get("model_type")
        allowed = (cls.model_type, *cls.stock_model_types)
        if model_type is None:
            raise ConfigError(
                f"{cls.__name__} needs the checkpoint's `model_type` (one of {list(allowed)}) in its config.json to "
                "know what it converts; this config has none. Add it, or save the checkpoint with transformers."
            )
        if model_type not in allowed:
            raise ValueError(
                f"{cls.__name__} converts checkpoints with model_type in {list(allowed)}, but this checkpoint has "
                f"model_type={model_type!r}. Use the interlayer class for that architecture "
                f"(`interlayer convert --help` lists them)."
            )
        field_names = {f.name for f in dataclasses.fields(cls)}
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in field_names}
        if model_type == cls.model_type:
            cls._check_reload_options(config_dict, options)
        config_dict = {**config_dict, **options, "model_type": cls.model_type}
        if model_type in cls.stock_model_types:
            config_dict["base_model_name_or_path"] = STOCK_SOURCE
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def _check_reload_options(cls, saved: dict[str, Any], options: dict[str, Any]) -> None:
        """Refuse an option that would change what a saved model's weights mean; warn about one that only shapes
        a conversion's initialisation."""
        defaults = field_defaults(cls)
        for name in mechanism_field_names(cls):
            if name not in options or name in cls.reload_options:
                continue
            before = saved.get(name, defaults.get(name))
            if name in cls.init_options:
                logger.warning(
                    f"`{name}` only shapes how a conversion initialises the mechanism; it has no effect on a saved "
                    f"{cls.__name__}, whose weights are loaded."
                )
            elif options[name] != before:
                raise ConfigError(
                    f"`{name}={options[name]!r}` would change what the saved weights of this {cls.__name__} mean "
                    f"(saved with {name}={before!r}). Reload without it, or convert the stock checkpoint again with "
                    f"it. Options a saved model takes: {sorted(set(mechanism_field_names(cls)) & cls.reload_options)}."
                )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """Also records which stock checkpoint a converted config came from (`base_model_name_or_path`). Drops
        transformers' warning that a `model_type` instantiates another: for a stock type this config converts, that
        is the point, and any other type is refused."""
        with _HeldRecords("transformers.configuration_utils", "to instantiate a model of type"):
            loaded = super().from_pretrained(pretrained_model_name_or_path, **kwargs)
        config = loaded[0] if isinstance(loaded, tuple) else loaded
        if config.base_model_name_or_path == STOCK_SOURCE:
            config.base_model_name_or_path = str(pretrained_model_name_or_path)
        return loaded

    def validate_option_spelling(self):
        """A keyword no field takes is kept by transformers as a plain attribute and saved into `config.json`; one
        that looks like a misspelt mechanism option is refused instead, so a typo never runs with the default."""
        fields = {f.name for f in dataclasses.fields(self)}
        settings = mechanism_field_names(type(self))
        for name in vars(self):
            if name in fields or name.startswith("_"):
                continue
            if difflib.get_close_matches(name, settings, n=1, cutoff=0.8):
                raise ValueError(f"{type(self).__name__} has no option `{name}`{closest_name(name, settings)}")

    def validate_finite_numbers(self):
        """Every numeric mechanism option is finite: NaN or an infinity would only surface as NaN outputs later."""
        for name in mechanism_field_names(type(self)):
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"`{name}` must be a finite number, got {value!r}.")

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """A config for one of the seed's named runs (`cls.presets`), with any field overridden."""
        check_choice("preset", name, cls.presets)
        return cls(**{**cls.presets[name], **overrides})


EVAL_PREFIX = "eval/"


def _in_split(name: str, split: str | None) -> bool:
    if split is None:
        return True
    return name.startswith(EVAL_PREFIX) == (split == "eval")


class StatsAccumulator(nn.Module):
    """Running sums of scalar statistics, kept on the model's device (no host sync in the forward pass).

    A mechanism calls `add(name, value)` with tensors of fixed shape during forward; `read()` averages over the
    forwards since the last reset and returns plain floats (a 1-d statistic `x` becomes `x_0`, `x_1`, ...; a 2-d
    one `x_0_0`, `x_0_1`, ...).
    Forwards in eval mode are kept apart under the prefix `eval/`. Forwards traced by torch.compile or torch.export
    record nothing: the running sums are Python-side state, and a counter that changes every step would make the
    compiled model recompile every step. Nothing here is saved with the model.
    """

    def __init__(self):
        super().__init__()
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}

    @torch.no_grad()
    def add(self, name: str, value: torch.Tensor) -> None:
        """Record `value` under `name` (under `eval/name` in eval mode); nothing in a compiled or exported forward."""
        if torch.compiler.is_compiling():
            return
        self._record(EVAL_PREFIX + name if not self.training else name, value.detach())

    def _record(self, name: str, value: torch.Tensor) -> None:
        value = value.float()
        if name in self._sums:
            self._sums[name] = self._sums[name] + value
            self._counts[name] += 1
        else:
            self._sums[name] = value.clone()
            self._counts[name] = 1

    def read(self, reset: bool = True, split: str | None = None) -> dict[str, float]:
        out = {}
        for name in [n for n in self._sums if _in_split(n, split)]:
            mean = (self._sums[name] / self._counts[name]).cpu()
            if split == "eval":
                name = name[len(EVAL_PREFIX) :]
            if mean.ndim == 0:
                out[name] = mean.item()
            else:
                for index, v in zip(itertools.product(*map(range, mean.shape)), mean.flatten().tolist()):
                    out[f"{name}_{'_'.join(map(str, index))}"] = v
            if reset:
                key = EVAL_PREFIX + name if split == "eval" else name
                del self._sums[key], self._counts[key]
        return out


class _HeldRecords(logging.Filter):
    """While active, holds back the records of the logger `logger_name` whose message contains `marker`;
    `release()` logs them after all. Used for what transformers writes about a conversion that is expected there."""

    def __init__(self, logger_name: str, marker: str):
        super().__init__()
        self.logger = logging.getLogger(logger_name)
        self.marker = marker
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if self.marker in str(record.msg):
            self.held.append(record)
            return False
        return True

    def __enter__(self):
        self.logger.addFilter(self)
        return self

    def __exit__(self, *exc):
        self.logger.removeFilter(self)

    def release(self) -> None:
        for record in self.held:
            self.logger.handle(record)


class ZooModelMixin:
    """Model behaviour shared by the zoo: statistics, trainable-parameter report, model card on save.

    A mechanism sets `mechanism_name` (card title), `mechanism_param_markers` (substrings that name its own
    parameters, as PEFT names adapters) and implements `mechanism_summary()` (markdown for the card).
    """

    mechanism_name: ClassVar[str] = ""
    mechanism_param_markers: ClassVar[tuple[str, ...]] = ()
    pipeline_tag: ClassVar[str | None] = "feature-extraction"  # a base model; task heads name their pipeline

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """The stock `from_pretrained`, then the mechanism's `finish_loading`. Loading a stock checkpoint (a
        conversion) also remembers the parameters' state, so that the model card can say whether the saved model is
        still the untrained conversion."""
        return cls._load(pretrained_model_name_or_path, pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def from_stock_model(cls, stock_model, config, **kwargs):
        """Convert an already-loaded stock model in memory, as `from_pretrained` converts a stock checkpoint, without
        reading it from disk: the new model takes the stock model's weight tensors themselves (no copy, as
        `peft.get_peft_model` wraps the model it is given), in their dtype. `config` is this class's config built
        from the stock model's (`interlayer.convert` does it all)."""
        kwargs.setdefault("dtype", stock_model.dtype)
        source = getattr(stock_model, "name_or_path", None) or f"in-memory {type(stock_model).__name__}"
        config.base_model_name_or_path = source
        return cls._load(source, None, config=config, state_dict=stock_model.state_dict(), **kwargs)

    @classmethod
    def _load(cls, source, pretrained_model_name_or_path, *args, **kwargs):
        want_info = kwargs.pop("output_loading_info", False)
        with _HeldRecords("transformers.modeling_utils", "LOAD REPORT") as load_report:
            model, info = super().from_pretrained(
                pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs
            )
        model.finish_loading(info)
        if getattr(model.config, "base_model_name_or_path", None) == str(source):
            model._conversion_fingerprint = model._parameter_fingerprint()
            model._report_conversion(source, info)
        else:  # a saved zoo model: transformers' report of anything missing or unused is news
            load_report.release()
        return (model, info) if want_info else model

    def _report_conversion(self, source, info: dict) -> None:
        """One line for what the conversion added (the mechanism's tensors are expected to be missing from a stock
        checkpoint, so transformers' load report of them is dropped); real problems are still warned about."""
        markers = self.mechanism_param_markers
        added = [k for k in info["missing_keys"] if any(m in k for m in markers)]
        others = sorted(k for k in info["missing_keys"] if k not in added)
        sizes = dict(self.named_parameters())
        count = sum(sizes[k].numel() for k in added if k in sizes)
        complete = "every stock weight loaded; " if not (others or info["unexpected_keys"]) else ""
        logger.warning(
            f"{type(self).__name__}: converted {source}: {complete}added {len(added)} "
            f"{self.mechanism_name.lower()} tensors ({count:,} parameters), initialised per the config."
        )
        if others:
            logger.warning(f"{type(self).__name__}: newly initialised, not in {source}: {others}")
        if info["unexpected_keys"]:
            logger.warning(f"{type(self).__name__}: unused weights of {source}: {sorted(info['unexpected_keys'])}")
        if info.get("mismatched_keys"):
            logger.warning(f"{type(self).__name__}: weights of another shape in {source}: {info['mismatched_keys']}")

    def finish_loading(self, info: dict) -> None:
        """What a mechanism does once `from_pretrained` has loaded the weights (`info`: transformers' loading info,
        with `missing_keys`); nothing by default."""

    def _parameter_fingerprint(self) -> tuple:
        return tuple((name, id(p), p._version) for name, p in self.named_parameters())

    def is_untrained_conversion(self) -> bool:
        """True while no parameter has changed since this model was converted from a stock checkpoint."""
        fingerprint = getattr(self, "_conversion_fingerprint", None)
        return fingerprint is not None and fingerprint == self._parameter_fingerprint()

    def claims_stock_function(self) -> bool:
        """Whether the untrained conversion computes the stock function (`identity_init`); a mechanism with settings
        that break it even then overrides this."""
        return bool(self.config.identity_init)

    def _sibling_auto_map(self) -> dict[str, str]:
        """`{Auto class: "module.Class"}` for the classes of this model's file that take its config class."""
        module = sys.modules[type(self).__module__]
        siblings = {}
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and getattr(value, "config_class", None) is type(self).config_class
                and getattr(value, "_auto_class", None)
                and issubclass(value, nn.Module)
            ):
                siblings[value._auto_class] = f"{module.__name__.split('.')[-1]}.{value.__name__}"
        return siblings

    def mechanism_parameter_names(self) -> list[str]:
        return [n for n, _ in self.named_parameters() if any(m in n for m in self.mechanism_param_markers)]

    def mechanism_stats(self, reset: bool = True, split: str | None = None) -> dict[str, float]:
        """Statistics gathered since the last reset, averaged over forward passes, as `{name: float}`.

        `split="train"` reads the forwards made in training mode, `split="eval"` those made in eval mode (names
        without their `eval/` prefix), `None` both. Reading resets what it read unless `reset=False`. Training and
        unsplit reads also include `mechanism_state()`."""
        out = {} if split == "eval" else dict(self.mechanism_state())
        for module in self.modules():
            if isinstance(module, StatsAccumulator):
                out.update(module.read(reset=reset, split=split))
        return out

    def mechanism_state(self) -> dict[str, float]:
        """Instantaneous values of the mechanism (for example gate parameters) that belong in every training log;
        a mechanism overrides it. Forward-pass statistics go through `StatsAccumulator` instead."""
        return {}

    def parameter_report(self) -> dict[str, int | float]:
        mech = set(self.mechanism_parameter_names())
        total = trainable = mechanism = 0
        for name, p in self.named_parameters():
            total += p.numel()
            trainable += p.numel() if p.requires_grad else 0
            mechanism += p.numel() if name in mech else 0
        return {
            "total": total,
            "trainable": trainable,
            "mechanism": mechanism,
            "mechanism_percent": 100.0 * mechanism / max(total, 1),
        }

    def save_pretrained(self, save_directory, *args, **kwargs):
        """The stock method; `auto_map` names every class of this model's file registered for an Auto class (the
        base model too), so any Auto class loads the folder with `trust_remote_code=True`; then the model card."""
        self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **self._sibling_auto_map()}
        result = super().save_pretrained(save_directory, *args, **kwargs)
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            write_model_card(self, save_directory)
        return result


def register_for_auto_classes(config_class, **model_classes) -> None:
    """Register `config_class` and each model class for the Auto class it is given under
    (`register_for_auto_classes(Qwen3MHCConfig, AutoModel=Qwen3MHCModel, AutoModelForCausalLM=Qwen3MHCForCausalLM)`).

    This is the one declaration of a zoo model: `save_pretrained` writes it into the folder's `auto_map` (remote
    code), and the zoo's registry (`interlayer.zoo.ZOO`: Auto registration, `interlayer list`, conversion) reads it."""
    config_class.register_for_auto_class()
    for auto_class, model_class in model_classes.items():
        model_class.register_for_auto_class(auto_class)


def _yaml_value(value) -> str:
    return json.dumps(value)


def write_model_card(model, save_directory) -> str:
    """Write README.md (YAML metadata + what the mechanism is and its settings) into `save_directory`.

    `model.card_data` (a dict, optional) adds `datasets`, `metrics` (name -> value), free `notes`, and `base_model`
    (a Hub id, for a model converted from a local copy of a Hub checkpoint).
    The file is written to a temporary name and renamed, so an interrupted save never leaves half a card.
    """
    config = model.config
    extra = getattr(model, "card_data", None) or {}
    base = getattr(config, "base_model_name_or_path", None)
    meta = {
        "library_name": "transformers",
        "tags": ["interlayer", model.mechanism_name.lower().replace(" ", "-"), "custom_code"],
    }
    hub_base = extra.get("base_model") or hub_id(base)
    if hub_base:
        meta["base_model"] = hub_base
    if model.pipeline_tag:
        meta["pipeline_tag"] = model.pipeline_tag
    if extra.get("datasets"):
        meta["datasets"] = list(extra["datasets"])
    if extra.get("metrics"):
        meta["metrics"] = sorted(extra["metrics"])
    lines = ["---"] + [f"{k}: {_yaml_value(v)}" for k, v in meta.items()] + ["---", ""]
    arch = (config.architectures or [type(model).__name__])[0]
    lines += [f"# {arch} ({model.mechanism_name})", ""]
    lines += [model.mechanism_summary(), ""]
    if base:
        source = f"the stock checkpoint `{hub_base}`" if hub_base else "a local stock checkpoint"
        lines += [f"Converted from {source} with interlayer.", ""]
    if model.is_untrained_conversion():
        lines += [
            "This is an untrained conversion: "
            + (
                "it computes exactly the stock model's function until it is trained (`identity_init=True`)."
                if model.claims_stock_function()
                else "the mechanism's new parameters are initialised, not trained, and it does not compute the stock "
                "model's function."
            ),
            "",
        ]
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
    for name, value in mechanism_settings(config).items():
        if name == "base_model_name_or_path":  # said above, as a Hub id: a local path means nothing to a reader
            continue
        lines.append(f"| `{name}` | `{value!r}` |")
    if extra.get("metrics"):
        lines += ["", "## Results", "", "| metric | value |", "| --- | --- |"]
        lines += [
            f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in extra["metrics"].items()
        ]
    if extra.get("notes"):
        lines += ["", str(extra["notes"])]
    folder_name = json.dumps(os.path.basename(os.path.abspath(str(save_directory))))
    lines += [
        "",
        "## Use",
        "",
        f"Needs `transformers>={MIN_TRANSFORMERS},<6` (saved with {transformers.__version__}); the modeling code ships "
        "in this folder, so `interlayer` itself need not be installed.",
        "",
        "```python",
        f"from transformers import {auto_class_name(model)}",
        "",
        f"model = {auto_class_name(model)}.from_pretrained({folder_name}, trust_remote_code=True)",
        "```",
        "",
    ]
    path = os.path.join(str(save_directory), "README.md")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)
    return path


_HUB_CACHE_FOLDER = re.compile(r"models--([^/\\]+)--([^/\\]+)")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def hub_id(source) -> str | None:
    """The Hub id of a stock checkpoint: `source` itself when it is one, the id inside a Hugging Face cache path
    (`.../models--org--name/snapshots/...`), otherwise None (a local folder's path is never a Hub id)."""
    if not source:
        return None
    source = str(source)
    cached = _HUB_CACHE_FOLDER.search(source)
    if cached:
        return f"{cached.group(1)}/{cached.group(2)}"
    if os.path.exists(source) or not _HUB_ID.fullmatch(source):
        return None
    return source


def mechanism_settings(config) -> dict[str, Any]:
    """The mechanism's own config fields and their values, in declaration order."""
    return {n: getattr(config, n) for n in mechanism_field_names(type(config))}


def auto_class_name(model) -> str:
    auto_map = getattr(model.config, "auto_map", None) or {}
    for key in auto_map:
        if key.startswith("AutoModel"):
            return key
    return getattr(model, "_auto_class", None) or "AutoModel"


class _ScalarAsVector(ConversionOps):
    """Reads a gate or temperature saved as a 0-d tensor (the layout of checkpoints written before these became
    shape `(1,)`) into its `(1,)` parameter; a `(1,)` tensor passes unchanged, and saving keeps `(1,)`."""

    def convert(self, input_dict, source_patterns, target_patterns, **kwargs):
        tensors = next(iter(input_dict.values()))
        tensor = tensors[0] if isinstance(tensors, list) else tensors
        return {target_patterns[0]: tensor.reshape(1)}

    @property
    def reverse_op(self):
        return self


def register_scalar_parameters(model_types, names) -> None:
    """Scalar parameters are stored with shape `(1,)`, never 0-d, because FSDP2 (`fully_shard`) refuses 0-d
    parameters. Registers, for each model type, the load-time conversion that still reads them from checkpoints
    saved as 0-d tensors (bit-exact: a reshape)."""
    for model_type in model_types:
        register_checkpoint_conversion_mapping(
            model_type, [WeightConverter(name, name, [_ScalarAsVector()]) for name in names], overwrite=True
        )
