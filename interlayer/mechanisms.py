"""The zoo's mechanisms, one record each, registered once (as PEFT registers a method with `register_peft_method`):
everything about a mechanism that is not its equations. Its name; its configuration and modeling files (whose classes
registered for an Auto class are its model and config classes); the specs of its generated classes (`DecoderClasses`,
`Seq2SeqClasses`, `EncoderClasses`: `python -m interlayer.generate_classes --fix` writes them); the prefix every
parameter it adds is named under; the prefix of its statistics; its docs page; its pictures; its `interlayer bench`
cases; its training tools; the tiny models on which it acts (`Example`: the conformance suite, the multi-process tests
and every other test that enumerates mechanisms build them) and the config errors it documents.

The registry (`interlayer.zoo`), the class generator, the CLI, `interlayer inspect`, the callbacks, `interlayer bench`
and the tests read these records rather than naming mechanisms: a new mechanism is one more `register_mechanism(...)`
call at the bottom of this file (a name, parameter prefix, statistics prefix, docs page, example label or bench case
another mechanism has is refused, and so is a record without examples or bench cases), and `check_record` (which the
tests run on every record) checks what needs its classes.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable

from transformers import PreTrainedModel

from . import pictures as draw
from .models.decoder_families import LLAMA, QWEN2, QWEN3
from .models.encoder_families import BERT, ROBERTA, EncoderFamily
from .models.families import DecoderFamily
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
class DecoderClasses:
    """The spec of a decoder mechanism's generated classes: on every family it converts, a config, a decoder layer,
    a base model and a causal LM (and, with `attention_mixin`, an attention class), each the mixin of this spec put
    before the family's stock class. The names are strings: the generator writes them into the mechanism's files.

    Attributes:
        infix: its part of the class names (`"MHC"`: `Qwen3MHCModel`); `model_type_suffix` that of the model types.
        config_bases: the config's bases before the stock config; `fields` its options dataclass (the last base).
        options: how the config docstring names the options; `config_note` a sentence the docstring ends with.
        model_mixin, lm_mixin: put before the family's stock base model and causal LM.
        layer_mixin: put before the family's stock decoder layer; `DecoderLayerRolesMixin` (the stock block, written
            once) for a mechanism that changes no layer.
        records_attentions: the model records the stock attention weights (`output_attentions`).
        no_split_parts: module classes besides the layer that are FSDP units (`_no_split_modules`).
        attention_mixin: put before the family's stock attention class, the layer's `attention_class`.
        families: the families it converts; None for every `DecoderFamily` of `families.py`.
        family_attribute: the config attribute holding the family's `model_type`, if any.
    """

    infix: str
    model_type_suffix: str
    fields: str
    model_mixin: str
    lm_mixin: str
    layer_mixin: str = "DecoderLayerRolesMixin"
    config_bases: tuple[str, ...] = ("ZooConfigMixin",)
    options: str = ""
    records_attentions: bool = True
    no_split_parts: tuple[str, ...] = ()
    attention_mixin: str | None = None
    families: tuple[DecoderFamily, ...] | None = None
    family_attribute: str | None = None
    config_note: str = ""
    kind = "decoder"

    def __post_init__(self):
        if not self.options:
            object.__setattr__(self, "options", f"the options of [`{self.fields}`]")


@dataclasses.dataclass(frozen=True)
class Seq2SeqClasses:
    """The spec of a seq2seq mechanism's generated classes: on every `Seq2SeqFamily`, its encoder, decoder, the class
    that owns them and the LM, each a mixin put before the family's stock class; the config classes are hand-written
    (`{Family}{infix}Config`). `description` and `generate_note` make the LM's docstring."""

    infix: str
    encoder_mixin: str
    decoder_mixin: str
    model_mixin: str
    lm_mixin: str
    description: str
    generate_note: str
    kind = "seq2seq"


@dataclasses.dataclass(frozen=True)
class EncoderClasses:
    """The spec of an encoder mechanism's generated classes: on every family it converts, a config, a layer, a base
    model and a class per task (and, with `attention_mixin`, a self-attention class), each the mixin of this spec put
    before the family's stock class; a `FAMILIES` dict of them by stock model type. The names are strings.

    Attributes:
        infix: its part of the class names (`"Bridge"`: `BertBridgeModel`); `model_type_suffix` that of the model types.
        config_bases: the config's bases before the stock config; `fields` its options dataclass (the last base).
        options: how the config docstring names the options.
        layer_mixin, model_mixin: put before the family's stock layer and base model.
        tasks: `{task: mixin}`, each task class (`{Family}{infix}For{task}`) the mixin put before the family's stock
            pre-trained class and registered for `AutoModelFor{task}`.
        attention_mixin: put before the family's stock self-attention class, the layer's `attention_class`.
        families: the families it converts; None for every `EncoderFamily` of `encoder_families.py`.
        family_attribute: the config attribute holding the family's `model_type`, if any.
        config_attributes: `{config attribute: EncoderFamily field}` written into each config class.
        config_lines: lines every config class ends with.
        configuration, modeling: the files the classes go to, where not the record's (`configuration`, `modeling`).
    """

    infix: str
    model_type_suffix: str
    fields: str
    options: str
    layer_mixin: str
    model_mixin: str
    tasks: dict[str, str]
    config_bases: tuple[str, ...] = ("ZooConfigMixin",)
    attention_mixin: str | None = None
    families: tuple[EncoderFamily, ...] | None = None
    family_attribute: str | None = None
    config_attributes: dict[str, str] = dataclasses.field(default_factory=dict)
    config_lines: tuple[str, ...] = ()
    configuration: str | None = None
    modeling: str | None = None
    kind = "encoder"


@dataclasses.dataclass(frozen=True)
class Example:
    """A tiny model on which the mechanism acts: the tiny stock checkpoint of `family` (`tests/stock_checkpoints.py`;
    `stock` names another of that family's builders, `build_stock_<stock>`) converted with `options` into the
    mechanism's class for `task` (None: the family's first task of the mechanism). The conformance suite runs on each
    as `Test<label>Conformance`; `distributed` ones are also trained in several processes (DDP, FSDP, DeepSpeed).

    Attributes:
        identity_options: options under which `identity_init=True` gives the stock function, when not the defaults.
        more_identity_options: further option sets that also claim it (an optional part that starts as a no-op).
    """

    label: str
    family: str
    options: dict
    task: str | None = None
    stock: str | None = None
    identity_options: dict = dataclasses.field(default_factory=dict)
    more_identity_options: tuple[dict, ...] = ()
    distributed: bool = False


@dataclasses.dataclass(frozen=True)
class ConfigError:
    """A config error the mechanism documents: its config built with `options` (over a tiny stock config of a family
    in `families`, None for all) raises a ValueError whose message matches `pattern` (it names the field, the value
    and what is allowed)."""

    options: dict
    pattern: str
    families: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """The record of one mechanism (see the module). `configuration` and `modeling` are its files' module names in
    `interlayer/models` (or the import paths of modules elsewhere, for a mechanism that is not shipped: a test's);
    `docs_page` its page in `docs/`; `classes` the spec of its generated classes (None where they are hand-written),
    `encoder_classes` that of its classes on the encoder families;
    `training_tools` the dotted names of what trains it beyond the stock `Trainer` and `MechanismStatsCallback`
    (`tool()` imports one); `tiny_options` options every tiny model of it takes (sizes that fit the tiny checkpoints);
    `stationary` name endings of parameters whose gradient is zero by construction (a bias added to every logit of a
    softmax), which training moves only by float rounding."""

    name: str
    configuration: str
    modeling: str
    parameter_prefix: str
    statistics_prefix: str
    docs_page: str
    examples: tuple[Example, ...]
    config_errors: tuple[ConfigError, ...]
    classes: DecoderClasses | Seq2SeqClasses | None = None
    # the spec of its generated classes on the encoder families (a mechanism may have both: the sentinel)
    encoder_classes: EncoderClasses | None = None
    pictures: tuple[Picture, ...] = ()
    bench_cases: dict[str, BenchCase] = dataclasses.field(default_factory=dict)
    training_tools: tuple[str, ...] = ()
    tiny_options: dict = dataclasses.field(default_factory=dict)
    stationary: tuple[str, ...] = ()
    # options `interlayer inspect` loads a saved model with: where the statistics its pictures read are recorded by
    # one implementation only (the eager hyper-connections record none), the one that records them
    inspect_options: dict = dataclasses.field(default_factory=dict)

    @property
    def modeling_modules(self) -> list:
        """The modules of its modeling files (`modeling`, then its encoder classes' where they have their own: a
        checkpoint of one kind of family ships the file of its kind alone, the sentinel's decoders and encoders): each
        names a file of `interlayer/models`, else a module by its import path (a mechanism that is not shipped with
        the package: a test's)."""
        more = self.encoder_classes.modeling if self.encoder_classes is not None else None
        modules = []
        for name in dict.fromkeys(name for name in (self.modeling, more) if name):
            shipped = f"{__package__}.models.{name}"
            modules.append(importlib.import_module(shipped if importlib.util.find_spec(shipped) else name))
        return modules

    @property
    def model_classes(self) -> tuple[type, ...]:
        """Every model class its modeling files define and register for an Auto class, once (an older name kept for a
        class is the same class)."""
        found = []
        for module in self.modeling_modules:
            for value in vars(module).values():
                if (
                    isinstance(value, type)
                    and issubclass(value, PreTrainedModel)
                    and value.__module__ == module.__name__
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


def register_mechanism(*, name: str, bench_cases: dict[str, BenchCase] | None = None, **fields) -> Mechanism:
    """Add a mechanism's record (the fields of `Mechanism`) to `MECHANISMS`. Refuses (ValueError naming the field, the
    value and its owner) a name, parameter prefix, statistics prefix, docs page, example label or bench case another
    mechanism has, and a parameter prefix that starts another's or starts with it (a parameter would be both's)."""
    record = Mechanism(
        name=name,
        bench_cases={case: dataclasses.replace(c, mechanism=name) for case, c in (bench_cases or {}).items()},
        **fields,
    )
    unique = {
        "name": lambda m: [m.name],
        "parameter_prefix": lambda m: [m.parameter_prefix],
        "statistics_prefix": lambda m: [m.statistics_prefix],
        "docs_page": lambda m: [m.docs_page],
        "example label": lambda m: [e.label for e in m.examples],
        "bench case": lambda m: list(m.bench_cases),
    }
    for field, values in unique.items():
        for value in values(record):
            if not value:
                raise ValueError(f"register_mechanism: `{field}` must not be empty.")
            for other in MECHANISMS.values():
                if value in values(other):
                    raise ValueError(
                        f"register_mechanism: {field} {value!r} is taken by mechanism {other.name!r}; choose another."
                    )
    for other in MECHANISMS.values():
        if other.parameter_prefix.startswith(record.parameter_prefix) or record.parameter_prefix.startswith(
            other.parameter_prefix
        ):
            raise ValueError(
                f"register_mechanism: `parameter_prefix` {record.parameter_prefix!r} and {other.parameter_prefix!r} "
                f"(mechanism {other.name!r}) start alike: a parameter named under one would be taken for the other's; "
                "choose another."
            )
    if not record.examples:
        raise ValueError(f"register_mechanism: mechanism {name!r} has no `examples`: the tests build them.")
    if not record.bench_cases:
        raise ValueError(
            f"register_mechanism: mechanism {name!r} has no `bench_cases`: `interlayer bench` measures every mechanism "
            "against its stock model."
        )
    MECHANISMS[name] = record
    return record


def check_record(record: Mechanism) -> None:
    """What a record promises of its classes (once they exist: after `python -m interlayer.generate_classes --fix`):
    its modeling file registers a model class for an Auto class, and each has the record's parameter prefix."""
    if not record.model_classes:
        raise ValueError(f"mechanism {record.name!r}: {record.modeling} registers no model class for an Auto class.")
    for cls in record.model_classes:
        if cls.mechanism_param_prefix != record.parameter_prefix:
            raise ValueError(
                f"mechanism {record.name!r}: {cls.__name__}.mechanism_param_prefix is {cls.mechanism_param_prefix!r}, "
                f"the record's `parameter_prefix` is {record.parameter_prefix!r}: they must be the same."
            )


def mechanism_of(model_class: type) -> Mechanism:
    """The record of the mechanism a zoo model class (or model) belongs to."""
    model_class = model_class if isinstance(model_class, type) else type(model_class)
    for record in MECHANISMS.values():
        if model_class in record.model_classes:
            return record
    raise ValueError(f"{model_class.__name__} is not a zoo model class; `interlayer list` shows them.")


# -- the records -------------------------------------------------------------------------------------------------

# the options with which the bridges act on the tiny encoders (also the multi-process runs')
_ROBERTA_ACTIVE = dict(
    identity_init=False, route_topk=2, hdim_chunk_size=4, hdim_pair_mask="cross_segment", qkv_value_proj=True
)
_BERT_ACTIVE = dict(
    identity_init=False,
    gate_activation="softplus",
    gate_placement="post_norm",
    hdim_token_temp=1.0,
    hdim_entropy_reg=1e-3,
    hdim_mask_special_tokens=True,
)
_DEBERTA_V2_ACTIVE = dict(
    identity_init=False, route_topk=2, qkv_kv_weights="target", hdim_share_proj=True, hdim_mask_special_tokens=True
)
_ENCODERS_WITH_IS_DECODER = ("bert", "roberta", "xlm-roberta", "electra", "deberta-v2")
# the compiled HDIM scorer (the default) is a function of tensors alone, the same in every family: the two
# sequence-classification examples run it, the four token-classification ones the eager scorer, which spares the
# suite a compilation per input kind and family
_EAGER_SCORER = dict(hdim_fused=False)

register_mechanism(
    name="bridge",
    configuration="configuration_bridge",
    modeling="modeling_bridge",
    parameter_prefix="bridge",  # the bridge of a target layer (`bridge`) and the router (`bridge_router`)
    statistics_prefix="bridge/",
    docs_page="bridges.md",
    encoder_classes=EncoderClasses(
        infix="Bridge",
        model_type_suffix="bridge",
        config_bases=("BridgeConfigMixin",),
        fields="BridgeFields",
        options="the bridge fields of [`BridgeFields`]",
        layer_mixin="BridgeLayerMixin",
        model_mixin="BridgeModelMixin",
        tasks={
            "SequenceClassification": "BridgeForSequenceClassificationMixin",
            "TokenClassification": "BridgeForTokenClassificationMixin",
        },
        config_attributes={
            "default_sep_token_id": "sep_token_id",
            "default_cls_token_id": "cls_token_id",
            "norm_eps_field": "norm_eps_field",
            "attention_dropout_field": "attention_dropout_field",
        },
    ),
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
    # every family on its most demanding task
    examples=(
        Example("RobertaBridge", "roberta", _ROBERTA_ACTIVE, task="sequence-classification", distributed=True),
        Example("BertBridge", "bert", _BERT_ACTIVE, task="sequence-classification"),
        Example("XLMRobertaBridge", "xlm-roberta", {**_ROBERTA_ACTIVE, **_EAGER_SCORER}, task="token-classification"),
        Example("ElectraBridge", "electra", {**_BERT_ACTIVE, **_EAGER_SCORER}, task="token-classification"),
        Example("DebertaV2Bridge", "deberta-v2", {**_DEBERTA_V2_ACTIVE, **_EAGER_SCORER}, task="token-classification"),
        Example("ModernBertBridge", "modernbert", {**_ROBERTA_ACTIVE, **_EAGER_SCORER}, task="token-classification"),
    ),
    config_errors=(
        ConfigError(dict(route_topk=0), r"route_topk.*>= 1.*got 0"),
        ConfigError(dict(route_last_n=0), r"route_last_n"),
        ConfigError(dict(route_temp=0.0), r"route_temp.*> 0"),
        ConfigError(dict(route_pool="max"), r"route_pool.*mean.*cls"),
        ConfigError(dict(bridge_mode="both"), r"bridge_mode"),
        ConfigError(dict(route_estimator="gumbel"), r"route_estimator"),
        ConfigError(dict(route_placement="before"), r"route_placement"),
        ConfigError(
            dict(route_placement="pre_norm"), r"straight_through.*cannot train the router.*pre_norm.*route_topk=1"
        ),
        ConfigError(dict(hdim_scorer="mlp"), r"hdim_scorer"),
        ConfigError(dict(hdim_value_fusion="sum"), r"hdim_value_fusion"),
        ConfigError(dict(hdim_dim=0), r"hdim_dim"),
        ConfigError(dict(hdim_chunk_size=0), r"hdim_chunk_size"),
        ConfigError(dict(hdim_token_temp=0.0), r"hdim_token_temp"),
        ConfigError(dict(bridge_dropout=1.5), r"bridge_dropout.*<= 1"),
        ConfigError(dict(gate_activation="softplus", gate_init_attn=0.0), r"gate_init_attn.*> 0"),
        ConfigError(dict(classifier_head="seed"), r"identity_init=True.*classifier_head='seed'"),
        ConfigError(dict(num_hidden_layers=1), r"num_hidden_layers.*>= 2"),
        ConfigError(dict(is_decoder=True), r"encoder-only", families=_ENCODERS_WITH_IS_DECODER),
        ConfigError(dict(attention_head_size=4), r"attention_head_size.*deberta-v2.*got 4", families=("deberta-v2",)),
    ),
    # the HDIM scorer's last bias is added to every alignment logit of a softmax: its gradient is zero by construction
    stationary=("hdim.scorer.2.bias",),
)
_UNET = dict(identity_init=False, unet_skips=True)
_DECODER_SENTINEL = ("gpt2", "llama", "qwen2", "qwen3")
register_mechanism(
    name="sentinel",
    configuration="configuration_sentinel",
    modeling="modeling_sentinel",
    parameter_prefix="sentinel_",  # the gates and the mask (`sentinel_gate_logits`), the U-Net skip fusions
    statistics_prefix="sentinel/",
    docs_page="sentinel.md",
    classes=DecoderClasses(
        infix="Sentinel",
        model_type_suffix="sentinel",
        config_bases=("SentinelConfigMixin", "ZooConfigMixin"),
        fields="SentinelFields",
        options="the sentinel options of [`SentinelFields`]",
        config_note="The gates are per query head (grouped-query attention included).",
        layer_mixin="DecoderSentinelLayerMixin",
        model_mixin="DecoderSentinelModelMixin",
        lm_mixin="DecoderSentinelLMMixin",
        records_attentions=False,  # `output_attentions` is refused (the config's `no_attention_weights`)
        attention_mixin="DecoderSentinelAttention",
        # the families whose attention `DecoderSentinelAttention.forward` computes (GPT-2's is its own class)
        families=(LLAMA, QWEN2, QWEN3),
        family_attribute="sentinel_family",
    ),
    encoder_classes=EncoderClasses(
        infix="Sentinel",
        model_type_suffix="sentinel",
        config_bases=("SentinelConfigMixin", "ZooConfigMixin"),
        fields="SentinelFields",
        options="the sentinel options of [`SentinelFields`] (no U-Net skips: an encoder)",
        layer_mixin="EncoderSentinelLayerMixin",
        model_mixin="EncoderSentinelModelMixin",
        tasks={"SequenceClassification": "EncoderSentinelForSequenceClassificationMixin"},
        attention_mixin="EncoderSentinelSelfAttention",
        # the families whose self-attention `EncoderSentinelSelfAttention.forward` computes
        families=(BERT, ROBERTA),
        family_attribute="sentinel_family",
        config_lines=("sentinel_is_encoder = True",),
        configuration="configuration_sentinel_encoders",
        modeling="modeling_sentinel_encoders",
    ),
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
    examples=(
        # the seed's GPT-2 (4 layers: two U-Net skips)
        Example(
            "GPT2Sentinel",
            "gpt2",
            _UNET,
            stock="gpt2",
            more_identity_options=(dict(unet_skips=True),),
            distributed=True,
        ),
        Example("LlamaSentinel", "llama", _UNET, more_identity_options=(dict(unet_skips=True),)),
        # every layer full attention, as Qwen2's stock config has it (the gates' attention takes no sliding window)
        Example(
            "Qwen2Sentinel",
            "qwen2",
            _UNET,
            stock="qwen2_full_attention",
            more_identity_options=(dict(unet_skips=True),),
        ),
        Example("Qwen3Sentinel", "qwen3", _UNET, more_identity_options=(dict(unet_skips=True),)),
        # heads wide enough to prune: 4 heads of 16
        Example("BertSentinel", "bert", dict(identity_init=False), task="sequence-classification", stock="bert_wide"),
        Example(
            "RobertaSentinel",
            "roberta",
            dict(identity_init=False),
            task="sequence-classification",
            stock="roberta_wide",
        ),
    ),
    config_errors=(
        ConfigError(dict(gate_l1=-1.0), r"gate_l1.*>= 0"),
        ConfigError(dict(unet_skip_scale=-0.1), r"unet_skip_scale", families=_DECODER_SENTINEL),
        ConfigError(dict(pruned_heads={9: [0]}), r"pruned_heads layer.*<= [0-9].*got 9"),
        ConfigError(dict(pruned_heads={0: [7]}), r"pruned_heads\[0\] head.*<= 3.*got 7"),
        ConfigError(
            dict(pruned_heads={0: "a"}), r"`pruned_heads` maps layer indices to lists of head indices.*got \{0: 'a'\}"
        ),
        ConfigError(dict(pruned_heads={"first": [0]}), r"`pruned_heads` maps layer indices.*got \{'first': \[0\]\}"),
        ConfigError(dict(identity_init="yes"), r"identity_init"),
        ConfigError(
            dict(sentinel_gate_init=-1e5), r"`sentinel_gate_init` must be >= -65504.0 and <= 65504.0, got -100000.0"
        ),
        ConfigError(
            dict(unet_skips=True),
            r"unet_skips=True does not apply to the (bert|roberta) family",
            families=("bert", "roberta"),
        ),
        ConfigError(dict(is_decoder=True), r"encoder-only.*is_decoder=True", families=("bert", "roberta")),
    ),
)
_HC_NOISE = dict(hc_init_noise=0.1)
_GATED, _HY4 = dict(hc_mode="gated"), dict(hc_mode="independent")
register_mechanism(
    name="hyper-connections",
    configuration="configuration_hyper_connections",
    modeling="modeling_hyper_connections",
    parameter_prefix="hc_",
    statistics_prefix="hc/",
    docs_page="hyper_connections.md",
    classes=DecoderClasses(
        infix="MHC",
        model_type_suffix="mhc",
        fields="HyperConnectionFields",
        layer_mixin="HCDecoderLayerMixin",
        model_mixin="HCModelMixin",
        lm_mixin="HCForCausalLMMixin",
    ),
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
        "hc-independent": BenchCase("llama", options=dict(hc_mode="independent", freeze_base=False)),
        # Qwen3.8's rank-to-width ratio (320 / 2048) at SmolLM2's width 576
        "hc-gated": BenchCase("llama", options=dict(hc_mode="gated", hc_lowrank=96, freeze_base=False)),
        "hc-gated-eager": BenchCase(
            "llama", options=dict(hc_mode="gated", hc_lowrank=96, hc_implementation="eager", freeze_base=False)
        ),
        "mhc-glm5": BenchCase(
            "llama", options=dict(hc_mode="mhc", mhc_variant="deepseek_v4", hc_read_out="mean", freeze_base=False)
        ),
    },
    # the forms varied across the families: mHC (seed init, static, DeepSeek-V4's as shipped with its input-dependent
    # read-out, GLM-5.3's with the mean), static and dynamic HC (with and without tanh, two streams), Hy4's independent
    # HC and Qwen3.8's gated residual each on Llama, Qwen3 and Gemma 2 (K = 2, 3, 4; the four read-outs), and the eager
    # equations beside the fast implementations
    examples=(
        Example("Qwen3GatedResidual", "qwen3", dict(hc_mode="gated", **_HC_NOISE), identity_options=_GATED),
        # identity at init holds to DeepSeek's eps (about 1e-6 per sublayer)
        Example(
            "Qwen3DeepSeekMHC",
            "qwen3",
            dict(mhc_variant="deepseek_v4", hc_read_out="dynamic", **_HC_NOISE),
            identity_options=dict(mhc_variant="deepseek_v4", hc_read_out="dynamic"),
        ),
        Example("Qwen3IndependentHC", "qwen3", dict(hc_mode="independent", **_HC_NOISE), identity_options=_HY4),
        Example(
            "LlamaTwoStreamIndependentHC",
            "llama",
            dict(hc_mode="independent", hc_streams=2, hc_read_out="mean", **_HC_NOISE),
            identity_options=dict(hc_mode="independent", hc_streams=2, hc_read_out="mean"),
        ),
        Example("LlamaDynamicHC", "llama", dict(hc_mode="dynamic", **_HC_NOISE), distributed=True),
        # the equations as written (the specifications the fast implementations are tested against)
        Example(
            "LlamaEagerGLMMHC",
            "llama",
            dict(hc_implementation="eager", mhc_variant="deepseek_v4", hc_read_out="mean", **_HC_NOISE),
            identity_options=dict(hc_implementation="eager", mhc_variant="deepseek_v4", hc_read_out="mean"),
        ),
        Example(
            "LlamaEagerGatedResidual",
            "llama",
            dict(hc_mode="gated", hc_implementation="eager", **_HC_NOISE),
            identity_options=dict(hc_mode="gated", hc_implementation="eager"),
        ),
        Example("Qwen2MHC", "qwen2", dict(identity_init=False)),
        Example("MistralStaticHC", "mistral", dict(hc_mode="static", **_HC_NOISE)),
        Example("Phi3DynamicHC", "phi3", dict(hc_mode="dynamic", **_HC_NOISE)),
        Example("Olmo2StaticMHC", "olmo2", dict(hc_mode="mhc", mhc_dynamic=False, **_HC_NOISE)),
        Example("Gemma2GatedResidual", "gemma2", dict(hc_mode="gated", **_HC_NOISE), identity_options=_GATED),
        Example(
            "Gemma2ThreeStreamIndependentHC",
            "gemma2",
            dict(hc_mode="independent", hc_streams=3, **_HC_NOISE),
            identity_options=dict(hc_mode="independent", hc_streams=3),
        ),
        Example(
            "Gemma3TextTwoStreamDynamicNoTanhHC",
            "gemma3_text",
            dict(hc_mode="dynamic", hc_streams=2, hc_dynamic_tanh=False, **_HC_NOISE),
        ),
        Example("GPT2MHC", "gpt2", dict(hc_read_in_focus=0.25, **_HC_NOISE)),
    ),
    config_errors=(
        ConfigError(dict(hc_streams=0), r"hc_streams.*>= 1.*got 0"),
        ConfigError(dict(hc_mode="residual"), r"hc_mode"),
        ConfigError(dict(mhc_variant="deepseek"), r"mhc_variant.*'seed', 'deepseek_v4'.*got deepseek"),
        ConfigError(dict(sinkhorn_iters=0), r"sinkhorn_iters.*>= 1.*got 0"),
        ConfigError(dict(hc_read_in_focus=1.5), r"hc_read_in_focus.*<= 1.*got 1.5"),
        ConfigError(dict(hc_mode="mhc", hc_streams=1), r"identity_init=True.*hc_mode='mhc'.*hc_streams. >= 2"),
        ConfigError(dict(hc_mode="mhc", hc_read_in_focus=1.0), r"hc_read_in_focus.*< 1.*mhc"),
        ConfigError(dict(hc_init_noise=-0.1), r"hc_init_noise.*>= 0"),
        ConfigError(dict(freeze_base="no"), r"freeze_base"),
        ConfigError(dict(hc_implementation="kernel"), r"hc_implementation.*'fast', 'eager'.*got kernel"),
        ConfigError(dict(hc_eps=-1e-6), r"hc_eps.*>= 0 and <= 0.01.*got -1e-06"),
        ConfigError(dict(hc_magnitude=0), r"hc_magnitude.*> 0.*got 0"),
        ConfigError(dict(hc_lowrank=0), r"hc_lowrank.*>= 1.*got 0"),
        ConfigError(dict(hc_read_out="max"), r"hc_read_out.*'learned', 'mean', 'dynamic', 'gated'.*got max"),
        ConfigError(
            dict(hc_mode="independent", hc_magnitude=0.5), r"identity_init=True.*'independent'.*hc_magnitude. > 1.*0.5"
        ),
        ConfigError(dict(hc_mode="independent", hc_read_in_focus=1.0), r"hc_read_in_focus.*< 1.*'independent'"),
        ConfigError(dict(hc_mode="gated"), r"hc_mode='gated'.*olmo2 family.*start with none", families=("olmo2",)),
    ),
    tiny_options=dict(hc_lowrank=8),  # the gated residual's read gate at the tiny hidden size (Qwen3.8 uses 320)
)
_LATENT = dict(identity_init=False)
register_mechanism(
    name="latent",
    configuration="configuration_latent",
    modeling="modeling_latent",
    parameter_prefix="latent_",
    statistics_prefix="latent/",
    docs_page="latent.md",
    classes=DecoderClasses(
        infix="Latent",
        model_type_suffix="latent",
        fields="LatentFields",
        layer_mixin="LatentDecoderLayerMixin",
        model_mixin="LatentModelMixin",
        lm_mixin="LatentForCausalLMMixin",
        records_attentions=False,  # two passes: there is no single set of attention weights
        # `latent_down` is called by the model's stock pass on the layer's output, outside the layer's forward (under
        # a frozen base the layer runs without gradients and `latent_down` with them, which one checkpointed call
        # cannot do), so each projection is its own FSDP unit: sharded with `fully_shard` it gathers its weights
        # around its own forward
        no_split_parts=("LatentProjection",),
    ),
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
    # one example a family, the `latent_source` and the layer pairs varied across them: first targets above L0 (the
    # layers below them run once for both passes, and the cache keeps them once) on Qwen2 and Gemma 3, a target above
    # its source on GPT-2
    examples=(
        Example("Qwen3PreviousPosition", "qwen3", _LATENT),
        Example(
            "LlamaSamePosition",
            "llama",
            dict(_LATENT, latent_source="same_position", latent_source_layers=[1, 2]),
            distributed=True,
        ),
        Example("MistralSamePosition", "mistral", dict(_LATENT, latent_source="same_position")),
        Example("Phi3Recurrent", "phi3", dict(_LATENT, latent_source="recurrent")),
        Example("Olmo2TwoPairs", "olmo2", dict(_LATENT, latent_source_layers=[1, 2], latent_target_layers=[0, 1])),
        Example("Gemma2SamePosition", "gemma2", dict(_LATENT, latent_source="same_position", latent_offset=2)),
        Example("Qwen2SharedLayers", "qwen2", dict(_LATENT, latent_source_layers=[2], latent_target_layers=[1])),
        Example(
            "Gemma3TextSharedLayersSamePosition",
            "gemma3_text",
            dict(_LATENT, latent_source="same_position", latent_source_layers=[0, 2], latent_target_layers=[2, 1]),
        ),
        Example(
            "GPT2TargetAboveTheSourceRecurrent",
            "gpt2",
            dict(_LATENT, latent_source="recurrent", latent_dim=8, latent_source_layers=[0], latent_target_layers=[2]),
        ),
    ),
    config_errors=(
        ConfigError(dict(latent_dim=0), r"latent_dim.*>= 1.*got 0"),
        ConfigError(dict(latent_source="next_position"), r"latent_source.*previous_position.*next_position"),
        ConfigError(dict(latent_source_layers=[1, 5]), r"latent_source_layers.*\[0, 2\].*got \[1, 5\]"),
        ConfigError(
            dict(latent_source_layers=[2, 2], latent_target_layers=[0, 1]), r"latent_source_layers.*must not repeat"
        ),
        ConfigError(dict(latent_source_layers=[1, 2], latent_target_layers=[0]), r"same length"),
        ConfigError(dict(latent_offset=3), r"latent_offset.*<= 2.*got 3"),
        ConfigError(dict(latent_offset=2, latent_target_layers=[1]), r"latent_offset.*outside \[0, 2\]"),
        ConfigError(dict(latent_up_init_gain=-1.0), r"latent_up_init_gain.*>= 0"),
        ConfigError(dict(latent_down_init_gain=-1.0), r"latent_down_init_gain.*>= 0"),
        ConfigError(dict(latent_source_layers=[], latent_target_layers=[]), r"at least one \(source, target\) pair"),
        ConfigError(dict(freeze_base="no"), r"freeze_base"),
    ),
)
register_mechanism(
    name="attention-bridge",
    configuration="configuration_attention_bridge",
    modeling="modeling_attention_bridge",
    parameter_prefix="attention_bridge",  # the bridge (`encoder.attention_bridge`), the further languages' decoders
    statistics_prefix="attention_bridge/",
    docs_page="attention_bridges.md",
    classes=Seq2SeqClasses(
        infix="AttentionBridge",
        encoder_mixin="AttentionBridgeEncoderMixin",
        decoder_mixin="AttentionBridgeDecoderMixin",
        model_mixin="AttentionBridgeSeq2SeqMixin",
        lm_mixin="AttentionBridgeLMMixin",
        description="an attention bridge",
        generate_note="`generate(..., tgt_lang=...)` picks the decoder.",
    ),
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
    tiny_options=dict(bridge_fixed_length=5, bridge_hidden_size=48, bridge_heads=4),
    # fixed-length (lin; perceiver over a transformer layer with RMSNorm) and variable-length (transformer and
    # feed-forward) bridges on Marian, a simple bridge with one language decoder on BART, one bridge on each of mBART,
    # M2M100 (NLLB's architecture) and T5; the identity holds for bridges of transformer layers
    examples=tuple(
        Example(
            label,
            family,
            options,
            identity_options=dict(bridge_layers=["transformer", "transformer"]),
            distributed=distributed,
        )
        for label, family, options, distributed in (
            ("LinBridge", "marian", dict(bridge_layers=["lin"]), False),
            (
                "PerceiverBridge",
                "marian",
                dict(bridge_layers=["transformer", "perceiver", "perceiver"], bridge_norm="rmsnorm"),
                True,
            ),
            (
                "VariableLengthBridge",
                "marian",
                dict(bridge_layers=["transformer", "feedforward"], decoder_languages=["de"]),
                False,
            ),
            ("BartSimpleBridge", "bart", dict(bridge_layers=["simple"], decoder_languages=["de"]), False),
            ("MBartLinBridge", "mbart", dict(bridge_layers=["lin"], decoder_languages=["de"]), False),
            (
                "M2M100PerceiverBridge",
                "m2m_100",
                dict(bridge_layers=["transformer", "perceiver"], decoder_languages=["de"]),
                False,
            ),
            (
                "T5Bridge",
                "t5",
                dict(bridge_layers=["transformer", "simple"], bridge_norm="rmsnorm", decoder_languages=["de"]),
                False,
            ),
        )
    ),
    config_errors=(
        ConfigError(dict(bridge_layers=["lin", "mlp"]), r"bridge_layers\[1\].*one of.*'transformer'.*got 'mlp'"),
        ConfigError(dict(bridge_fixed_length=0), r"bridge_fixed_length.*>= 1.*got 0"),
        ConfigError(dict(bridge_hidden_size=0), r"bridge_hidden_size.*>= 1"),
        ConfigError(dict(bridge_norm="batchnorm"), r"bridge_norm.*batchnorm"),
        ConfigError(dict(bridge_layers=["perceiver"], bridge_heads=5), r"bridge_heads.*divide d_model=32.*got 5"),
        ConfigError(dict(decoder_languages=["de", "de"]), r"decoder_languages.*must not repeat"),
        ConfigError(dict(decoder_languages=[]), r"decoder_languages.*non-empty"),
        ConfigError(dict(decoder_languages=["de", ""]), r"decoder_languages.*non-empty list of language names"),
        ConfigError(dict(bridge_norm_eps=0.0), r"bridge_norm_eps.*> 0.*got 0.0"),
        ConfigError(dict(bridge_heads=0), r"bridge_heads.*>= 1"),
        ConfigError(
            dict(bridge_layers=["transformer", "lin"], identity_init=True),
            r"identity_init=True.*'lin' bridge layer cannot",
        ),
        ConfigError(dict(bridge_layers=["feedforward"], identity_init=True), r"'feedforward' bridge layer cannot"),
    ),
)
_DEPTH = dict(identity_init=False)
register_mechanism(
    name="depth-routing",
    configuration="configuration_depth_routing",
    modeling="modeling_depth_routing",
    parameter_prefix="depth_",
    statistics_prefix="depth/",
    docs_page="depth_routing.md",
    pictures=(
        Picture(
            "depth weights",
            "depth_weights.png",
            draw.depth_weights,
            absent="the form weighs no earlier outputs (value residual, LAuReL)",
        ),
        Picture(
            "depth gates",
            "depth_gates.png",
            draw.depth_gates,
            absent="the form has no per-layer weights (DenseFormer's averages and MUDD are drawn as maps)",
        ),
    ),
    classes=DecoderClasses(
        infix="DepthRouting",
        model_type_suffix="depth_routing",
        fields="DepthRoutingFields",
        layer_mixin="DepthRoutingLayerMixin",
        model_mixin="DepthRoutingModelMixin",
        lm_mixin="DepthRoutingForCausalLMMixin",
    ),
    bench_cases={
        "depth-dwa": BenchCase("llama", options=dict(depth_form="dwa", freeze_base=False)),
        "depth-mudd": BenchCase("llama", options=dict(depth_form="mudd", freeze_base=False)),
        "depth-attention-residual": BenchCase(
            "llama", options=dict(depth_form="attention_residual", freeze_base=False)
        ),
        "depth-value-residual": BenchCase("llama", options=dict(depth_form="value_residual", freeze_base=False)),
        "depth-laurel": BenchCase("llama", options=dict(depth_form="laurel", freeze_base=False)),
    },
    # the forms varied across the families (each on one with separate and one with fused projections where the form
    # reads them: MUDD's key and value inputs, the value residual's values)
    examples=(
        Example("LlamaDWA", "llama", dict(_DEPTH, depth_form="dwa")),
        Example("Olmo2DilatedDWA", "olmo2", dict(_DEPTH, depth_form="dwa", dwa_dilation=2, dwa_period=2)),
        Example("Qwen3MUDD", "qwen3", dict(_DEPTH, depth_form="mudd")),
        Example("GPT2MUDD", "gpt2", dict(_DEPTH, depth_form="mudd", mudd_ways=["k", "v", "r"])),
        Example(
            "Qwen2AttentionResidual",
            "qwen2",
            dict(_DEPTH, depth_form="attention_residual", attention_residual_gate_init=0.5, freeze_base=False),
            # both its pictures: the weights over the sources, the gates; the base trains too, so that the processes
            # meet gradients through every path (the routing alone moves a tiny random model's loss by rounding)
            distributed=True,
        ),
        Example("Phi3ValueResidual", "phi3", dict(_DEPTH, depth_form="value_residual")),
        Example("MistralNormedLowRankLaurel", "mistral", dict(_DEPTH, depth_form="laurel", laurel_norm=True)),
        Example("Gemma2ResidualWeightLaurel", "gemma2", dict(_DEPTH, depth_form="laurel", laurel_form="rw")),
        Example(
            "Gemma3TextPreviousActivationLaurel", "gemma3_text", dict(_DEPTH, depth_form="laurel", laurel_form="pa")
        ),
    ),
    config_errors=(
        ConfigError(dict(depth_form="densenet"), r"depth_form.*'dwa'.*got '?densenet"),
        ConfigError(dict(dwa_dilation=0), r"dwa_dilation.*>= 1.*got 0"),
        ConfigError(dict(dwa_period=0), r"dwa_period.*>= 1.*got 0"),
        ConfigError(dict(mudd_ways=["q", "x"]), r"mudd_ways\[1\].*'k'.*got 'x'"),
        ConfigError(dict(mudd_ways=["q", "q"]), r"mudd_ways.*must not repeat"),
        ConfigError(dict(mudd_ways=[]), r"mudd_ways.*non-empty"),
        ConfigError(dict(laurel_rank=0), r"laurel_rank.*>= 1.*got 0"),
        ConfigError(dict(laurel_form="xl"), r"laurel_form.*'rw'.*got '?xl"),
        ConfigError(dict(laurel_previous=0), r"laurel_previous.*>= 1.*got 0"),
        ConfigError(
            dict(attention_residual_variant="full", attention_residual_block_size=2, identity_init=False),
            r"attention_residual_block_size.*delta variant.*got attention_residual_block_size=2",
        ),
        ConfigError(
            dict(depth_form="attention_residual", attention_residual_variant="full"),
            r"identity_init=True.*attention_residual_variant='full'",
        ),
        ConfigError(dict(depth_form="value_residual", value_residual_mix="half"), r"identity_init=True.*'half'"),
        ConfigError(dict(freeze_base="no"), r"freeze_base"),
    ),
)
