"""The zoo's mechanisms, one record each, registered once (as PEFT registers a method with `register_peft_method`):
its name, its modeling file (whose classes registered for an Auto class are its model and config classes), the
prefix every parameter it adds is named under, the prefix of its statistics, its pictures, its `interlayer bench`
cases and its training tools. The registry (`interlayer.zoo`), the CLI, `interlayer inspect`, the callbacks and
`interlayer bench` read these records rather than naming mechanisms.

A new mechanism is one more `register_mechanism(...)` call at the bottom of this file; a name, parameter prefix,
statistics prefix or bench case name another mechanism has is refused.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from types import ModuleType

from transformers import PreTrainedModel

from . import pictures as draw
from .models import (
    modeling_attention_bridge,
    modeling_bridge,
    modeling_hyper_connections,
    modeling_latent,
    modeling_sentinel,
)
from .models.zoo_common import has_parameter_prefix


@dataclasses.dataclass(frozen=True)
class Picture:
    """A picture of what the mechanism does (`interlayer inspect`, and TensorBoard through `MechanismStatsCallback`).

    `draw(model, stats, inputs, tokens, path)` writes it (`interlayer.pictures`) and returns the path, or None where
    the model has none (`absent` says why). One that `reads_inputs` is drawn from a forward on a source sentence, not
    from the statistics alone: `interlayer inspect` draws it, the Trainer callback does not."""

    name: str
    file: str
    draw: Callable
    reads_inputs: bool = False
    absent: str = ""


@dataclasses.dataclass(frozen=True)
class BenchCase:
    """One zoo model `interlayer bench` measures against its stock model: `interlayer.convert(stock, mechanism,
    task, preset, **options)` on a stock checkpoint of `family` (`mechanism` is filled in by `register_mechanism`)."""

    family: str
    task: str | None = None
    preset: str | None = None
    options: dict = dataclasses.field(default_factory=dict)
    quick_options: dict = dataclasses.field(default_factory=dict)  # replaces `options` at the tiny shapes
    shape: str | None = None  # a shape of `interlayer.bench.SHAPES` instead of the family's full shape
    # after conversion, `interlayer.sentinel.prune_by_strategy(model, prune_fraction, "magnitude")`: that fraction of
    # all heads removed structurally, chosen over the whole model (so layers may keep different numbers of heads)
    prune_fraction: float | None = None
    train: bool = True  # timed training steps (`train_*` in the record)
    forward: bool = False  # timed inference forwards (no grad, eval, no cache: `forward_*`) and their FLOPs
    mechanism: str = ""


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """The record of one mechanism (see the module). `training_tools` are the dotted names of what trains it beyond
    the stock `Trainer` and `MechanismStatsCallback` (`tool()` imports one)."""

    name: str
    modeling_module: ModuleType
    parameter_prefix: str
    statistics_prefix: str
    pictures: tuple[Picture, ...] = ()
    bench_cases: dict[str, BenchCase] = dataclasses.field(default_factory=dict)
    training_tools: tuple[str, ...] = ()
    # options `interlayer inspect` loads a saved model with: where the statistics its pictures read are recorded by
    # one implementation only (the eager hyper-connections record none), the one that records them
    inspect_options: dict = dataclasses.field(default_factory=dict)

    @property
    def model_classes(self) -> tuple[type, ...]:
        """Every model class the modeling file defines and registers for an Auto class, once (an older name kept for
        a class is the same class)."""
        found = []
        for value in vars(self.modeling_module).values():
            if (
                isinstance(value, type)
                and issubclass(value, PreTrainedModel)
                and value.__module__ == self.modeling_module.__name__
                and value.__dict__.get("_auto_class") is not None
                and value not in found
            ):
                found.append(value)
        return tuple(found)

    @property
    def config_classes(self) -> tuple[type, ...]:
        return tuple(dict.fromkeys(cls.config_class for cls in self.model_classes))

    def is_parameter(self, name: str) -> bool:
        """Whether the parameter or checkpoint tensor `name` is this mechanism's (`has_parameter_prefix`)."""
        return has_parameter_prefix(name, self.parameter_prefix)

    def tool(self, dotted: str):
        """The training tool named `interlayer.module.attribute`, imported."""
        module, _, attribute = dotted.rpartition(".")
        return getattr(importlib.import_module(module), attribute)


MECHANISMS: dict[str, Mechanism] = {}


def register_mechanism(
    *,
    name: str,
    modeling_module: ModuleType,
    parameter_prefix: str,
    statistics_prefix: str,
    pictures: tuple[Picture, ...] = (),
    bench_cases: dict[str, BenchCase] | None = None,
    training_tools: tuple[str, ...] = (),
    inspect_options: dict | None = None,
) -> Mechanism:
    """Add a mechanism's record to `MECHANISMS`. Refuses (ValueError naming the field, the value and its owner) a
    name, parameter prefix, statistics prefix or bench case another mechanism has, a parameter prefix that starts
    another's or starts with it (a parameter would be both's), and a model class whose `mechanism_param_prefix` is
    not the record's."""
    taken = {
        "name": {m.name: m.name for m in MECHANISMS.values()},
        "parameter_prefix": {m.parameter_prefix: m.name for m in MECHANISMS.values()},
        "statistics_prefix": {m.statistics_prefix: m.name for m in MECHANISMS.values()},
    }
    given = {"name": name, "parameter_prefix": parameter_prefix, "statistics_prefix": statistics_prefix}
    for field, value in given.items():
        if not value:
            raise ValueError(f"register_mechanism: `{field}` must not be empty.")
        if value in taken[field]:
            owner = taken[field][value]
            raise ValueError(f"register_mechanism: `{field}` {value!r} is taken by mechanism {owner!r}; choose another")
    for other, owner in taken["parameter_prefix"].items():
        if other.startswith(parameter_prefix) or parameter_prefix.startswith(other):
            raise ValueError(
                f"register_mechanism: `parameter_prefix` {parameter_prefix!r} and {other!r} (mechanism {owner!r}) "
                "start alike: a parameter named under one would be taken for the other's; choose another."
            )
    cases = {case: owner for m in MECHANISMS.values() for case in m.bench_cases for owner in [m.name]}
    for case in bench_cases or {}:
        if case in cases:
            raise ValueError(
                f"register_mechanism: bench case {case!r} is taken by mechanism {cases[case]!r}; rename it."
            )
    record = Mechanism(
        name,
        modeling_module,
        parameter_prefix,
        statistics_prefix,
        tuple(pictures),
        {case: dataclasses.replace(c, mechanism=name) for case, c in (bench_cases or {}).items()},
        tuple(training_tools),
        dict(inspect_options or {}),
    )
    if not record.model_classes:
        raise ValueError(f"register_mechanism: {modeling_module.__name__} registers no model class for an Auto class.")
    for cls in record.model_classes:
        if cls.mechanism_param_prefix != parameter_prefix:
            raise ValueError(
                f"register_mechanism: {cls.__name__}.mechanism_param_prefix is {cls.mechanism_param_prefix!r}, the "
                f"record's `parameter_prefix` is {parameter_prefix!r}: they must be the same."
            )
    MECHANISMS[name] = record
    return record


def mechanism_of(model_class: type) -> Mechanism:
    """The record of the mechanism a zoo model class (or model) belongs to."""
    model_class = model_class if isinstance(model_class, type) else type(model_class)
    for record in MECHANISMS.values():
        if model_class in record.model_classes:
            return record
    raise ValueError(f"{model_class.__name__} is not a zoo model class; `interlayer list` shows them.")


# -- the records -------------------------------------------------------------------------------------------------

register_mechanism(
    name="bridge",
    modeling_module=modeling_bridge,
    parameter_prefix="bridge",  # the bridge of a target layer (`bridge`) and the router (`bridge_router`)
    statistics_prefix="bridge/",
    pictures=(
        Picture("bridge routing", "bridge_routing.png", draw.bridge_routing),
        Picture("bridge gates", "bridge_gates.png", draw.bridge_gates),
    ),
    bench_cases={
        "bridge-H9": BenchCase("bert", task="sequence-classification", preset="H9"),
        "bridge-hybrid": BenchCase("bert", task="sequence-classification", preset="hybrid"),
        # the eager HDIM scorer (the compiled one is the default)
        "bridge-H9-eager": BenchCase("bert", "sequence-classification", "H9", dict(hdim_fused=False)),
        "bridge-hybrid-eager": BenchCase("bert", "sequence-classification", "hybrid", dict(hdim_fused=False)),
        # the seed's shape: RoBERTa-large, bridges into the last 4 of its 24 layers
        "bridge-seed-H9": BenchCase("roberta", "sequence-classification", "H9", dict(route_last_n=4)),
        "bridge-seed-hybrid": BenchCase("roberta", "sequence-classification", "hybrid", dict(route_last_n=4)),
    },
    training_tools=(
        "interlayer.training.seed_param_groups",
        "interlayer.training.seed_optimizer",
        "interlayer.training.classification_trainer",
    ),
)
register_mechanism(
    name="sentinel",
    modeling_module=modeling_sentinel,
    parameter_prefix="sentinel_",  # the gates and the mask (`sentinel_gate_logits`), the U-Net skip fusions
    statistics_prefix="sentinel/",
    pictures=(Picture("sentinel gates", "sentinel_gates.png", draw.sentinel_gates),),
    bench_cases={
        "sentinel": BenchCase("gpt2"),
        **{
            f"sentinel-prune-{percent}": BenchCase(
                "gpt2", shape="gpt2-124m", prune_fraction=percent / 100, train=False, forward=True
            )
            for percent in (30, 50, 70)
        },
    },
    training_tools=(
        "interlayer.sentinel.SentinelControllerCallback",
        "interlayer.sentinel.ProgressiveGrowthCallback",
        "interlayer.sentinel.prune_by_strategy",
    ),
)
register_mechanism(
    name="hyper-connections",
    modeling_module=modeling_hyper_connections,
    parameter_prefix="hc_",
    statistics_prefix="hc/",
    pictures=(
        Picture("H_res", "hc_res.png", draw.hc_res),
        Picture("composite gain", "hc_composite_gain.png", draw.hc_gain),
        Picture("H_pre and H_post", "hc_pre_post.png", draw.hc_pre_post),
    ),
    inspect_options={"hc_implementation": "fast"},
    bench_cases={
        "hc-static": BenchCase("llama", options=dict(hc_mode="static", freeze_base=False)),
        "hc-dynamic": BenchCase("llama", options=dict(hc_mode="dynamic", freeze_base=False)),
        "mhc": BenchCase("llama", options=dict(hc_mode="mhc", freeze_base=False)),  # fused coefficients (default)
        "mhc-unfused": BenchCase("llama", options=dict(hc_mode="mhc", hc_fused=False, freeze_base=False)),
        "mhc-static": BenchCase("llama", options=dict(hc_mode="mhc", mhc_dynamic=False, freeze_base=False)),
    },
)
register_mechanism(
    name="latent",
    modeling_module=modeling_latent,
    parameter_prefix="latent_",
    statistics_prefix="latent/",
    pictures=(Picture("latent gates", "latent.png", draw.latent),),
    bench_cases={
        "latent": BenchCase("llama", options=dict(latent_source="previous_position", freeze_base=False)),
        # targets from half depth at `--layers 8` (the second half of the default pairs there: L5..L6 -> L4..L5), so
        # the layers below the first target run once for both passes; valid at any depth of at least 7 layers
        "latent-deep": BenchCase(
            "llama",
            options=dict(latent_source_layers=[5, 6], latent_target_layers=[4, 5], freeze_base=False),
            quick_options=dict(latent_source_layers=[1], latent_target_layers=[1], freeze_base=False),
        ),
    },
)
register_mechanism(
    name="attention-bridge",
    modeling_module=modeling_attention_bridge,
    parameter_prefix="attention_bridge",  # the bridge (`encoder.attention_bridge`), the further languages' decoders
    statistics_prefix="attention_bridge/",
    pictures=(
        Picture(
            "slot attention",
            "slot_attention.png",
            draw.slot_attention,
            reads_inputs=True,
            absent="the bridge has no fixed-length layer (`bridge_layers`)",
        ),
    ),
    bench_cases={
        "attention-bridge": BenchCase(
            "marian",
            options=dict(bridge_fixed_length=16, bridge_hidden_size=512, bridge_heads=8),
            quick_options=dict(bridge_fixed_length=5, bridge_hidden_size=48, bridge_heads=4),
        )
    },
    training_tools=(
        "interlayer.training.TargetLanguageSampler",
        "interlayer.training.target_language_trainer",
        "interlayer.training.split_by_language",
    ),
)
