"""Writes the classes of the decoder mechanisms on every family they convert, as `class` statements, into the
configuration and modeling files and into `interlayer/__init__.py`, from the family declarations (`families.py`) and
each mechanism's spec below (`MECHANISMS`); and the attention bridge's classes on every encoder-decoder family
(`Seq2SeqFamily`) into `modeling_attention_bridge.py`:

    python -m interlayer.models.generate_classes        # names every generated block that is out of date
    python -m interlayer.models.generate_classes --fix  # rewrites them

A generated block sits between the lines `# --- begin generated <block> ...` and `# --- end generated <block> ---`
and is not edited by hand; `tests/contract/test_generated_classes.py` fails when one differs from what this renders (as
transformers' `utils/check_modular_conversion.py` does for its modular files). A new decoder family is its declaration
in `families.py` and a run of `--fix`. The model files never import this module (it is a tool, not remote code).

Each generated model class has an `__init__` of its own that calls through: DeepSpeed's `zero.Init` partitions a
module's parameters once the outermost `__init__` found in a module class's own `__dict__` returns, so without one it
would partition them when the stock `__init__` returns, and the parameters the mechanism's mixin adds after it (gates,
read-outs) would stay whole on every rank (the conformance suite's `test_zero3_init_partitions_every_parameter`).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import textwrap

from . import families
from .families import LLAMA, QWEN2, QWEN3, DecoderFamily, Seq2SeqFamily

LINE = 120
MODELS = pathlib.Path(__file__).parent
PACKAGE_INIT = MODELS.parent / "__init__.py"
BEGIN = "# --- begin generated {} (python -m interlayer.models.generate_classes --fix): do not edit ---"
END = "# --- end generated {} ---"


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """A decoder mechanism, by the names of its files and mixins.

    Attributes:
        infix: its part of the class names (`"MHC"`: `Qwen3MHCModel`); `model_type_suffix` that of the model types.
        configuration, modeling: its files (module names in this folder).
        config_bases: the config's bases before the stock config; `fields` its options dataclass (the last base).
        options: how the config docstring names the options; `config_note` a sentence the docstring ends with.
        layer_mixin, model_mixin, lm_mixin: put before the family's stock decoder layer, base model and causal LM.
        records_attentions: the model records the stock attention weights (`output_attentions`).
        no_split_parts: module classes besides the layer that are FSDP units (`_no_split_modules`).
        attention_mixin: put before the family's stock attention class, the layer's `attention_class`.
        families: the families it converts; None for every `DecoderFamily` of `families.py`.
        family_attribute: the config attribute holding the family's `model_type`, if any.
    """

    infix: str
    model_type_suffix: str
    configuration: str
    modeling: str
    config_bases: tuple[str, ...]
    fields: str
    options: str
    layer_mixin: str
    model_mixin: str
    lm_mixin: str
    records_attentions: bool
    no_split_parts: tuple[str, ...] = ()
    attention_mixin: str | None = None
    families: tuple[DecoderFamily, ...] | None = None
    family_attribute: str | None = None
    config_note: str = ""

    @property
    def decoder_families(self) -> list[DecoderFamily]:
        return list(self.families) if self.families is not None else every_decoder_family()


MECHANISMS = (
    Mechanism(
        infix="MHC",
        model_type_suffix="mhc",
        configuration="configuration_hyper_connections",
        modeling="modeling_hyper_connections",
        config_bases=("ZooConfigMixin",),
        fields="HyperConnectionFields",
        options="the options of [`HyperConnectionFields`]",
        layer_mixin="HCDecoderLayerMixin",
        model_mixin="HCModelMixin",
        lm_mixin="HCForCausalLMMixin",
        records_attentions=True,
    ),
    Mechanism(
        infix="Latent",
        model_type_suffix="latent",
        configuration="configuration_latent",
        modeling="modeling_latent",
        config_bases=("ZooConfigMixin",),
        fields="LatentFields",
        options="the options of [`LatentFields`]",
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
    Mechanism(
        infix="Sentinel",
        model_type_suffix="sentinel",
        configuration="configuration_sentinel",
        modeling="modeling_sentinel",
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
)


def every_decoder_family() -> list[DecoderFamily]:
    """The decoder families of `families.py`, in the order they are declared there."""
    return [value for value in vars(families).values() if isinstance(value, DecoderFamily)]


def every_seq2seq_family() -> list[Seq2SeqFamily]:
    """The encoder-decoder families of `families.py`, in the order they are declared there."""
    return [value for value in vars(families).values() if isinstance(value, Seq2SeqFamily)]


def family_constant(family) -> str:
    """The name `families.py` declares `family` under (`QWEN3`)."""
    return next(name for name, value in vars(families).items() if value is family)


# ---- ruff-formatted source ------------------------------------------------------------------------------------------


def _import_key(name: str) -> tuple[int, str]:
    """ruff's (isort's) order of imported names: constants, classes, then the rest, case-insensitively."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name.lower())


def from_import(module: str, names) -> str:
    names = sorted(set(names), key=_import_key)
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= LINE:
        return line + "\n"
    return f"from {module} import (\n" + "".join(f"    {name},\n" for name in names) + ")\n"


def bracketed(opening: str, items: list[str], closing: str, indent: str = "") -> str:
    """`opening item, item closing` as ruff format lays it out: on one line, else the items on one indented line,
    else one item per line with a trailing comma."""
    line = f"{indent}{opening}{', '.join(items)}{closing}"
    if len(line) <= LINE:
        return line + "\n"
    inner = f"{indent}    {', '.join(items)}"
    if len(inner) <= LINE:
        return f"{indent}{opening}\n{inner}\n{indent}{closing}\n"
    return f"{indent}{opening}\n" + "".join(f"{indent}    {item},\n" for item in items) + f"{indent}{closing}\n"


def class_statement(name: str, bases: list[str], body: list[str], decorator: str | None = None) -> str:
    """A class with `body` (lines of its body, "" for a blank line), two blank lines before it."""
    head = f"@{decorator}\n" if decorator else ""
    lines = "".join(f"    {line}\n" if line else "\n" for line in body)
    return "\n\n" + head + bracketed(f"class {name}(", bases, "):") + lines


def docstring(text: str) -> list[str]:
    """`text` as a docstring wrapped at the line length, never inside a `code span`."""
    spans = text.split("`")
    text = "`".join(part.replace(" ", "\0") if i % 2 else part for i, part in enumerate(spans))
    lines = textwrap.wrap(f'r"""{text}"""', width=LINE - 4, break_long_words=False, break_on_hyphens=False)
    return [line.replace("\0", " ") for line in lines]


def init(signature: str) -> list[str]:
    arguments = signature.removeprefix("self, ")
    return [f"def __init__({signature}):", f"    super().__init__({arguments})"]


def qualified(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__name__


# ---- the blocks -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Names:
    """The generated classes of one mechanism on one family."""

    config: str
    attention: str
    layer: str
    model: str
    lm: str

    @classmethod
    def of(cls, mechanism: Mechanism, family: DecoderFamily) -> Names:
        prefix = family.name + mechanism.infix
        return cls(*(prefix + end for end in ("Config", "Attention", "DecoderLayer", "Model", "ForCausalLM")))


def config_imports(mechanism: Mechanism) -> str:
    names = [family.model.config_class.__name__ for family in mechanism.decoder_families]
    return from_import("transformers", names) + "\n"


def config_classes(mechanism: Mechanism) -> str:
    out, names = [], []
    for family in mechanism.decoder_families:
        n, stock = Names.of(mechanism, family), family.model.config_class.__name__
        checkpoints = f" ({family.checkpoints})" if family.checkpoints else ""
        note = f" {mechanism.config_note}" if mechanism.config_note else ""
        text = (
            f"Configuration of [`{n.model}`]: every [`{stock}`] field plus {mechanism.options}. Converts checkpoints "
            f"of model_type `{family.model_type}`{checkpoints}.{note}"
        )
        body = [*docstring(text), "", f'model_type = "{family.model_type}_{mechanism.model_type_suffix}"']
        body.append(f'stock_model_types = ("{family.model_type}",)')
        if mechanism.family_attribute:
            body.append(f'{mechanism.family_attribute} = "{family.model_type}"')
        out.append(class_statement(n.config, [*mechanism.config_bases, stock, mechanism.fields], body, "zoo_config"))
        names.append(n.config)
    return "".join(out).lstrip("\n") + "\n\n" + bracketed("__all__ += [", [f'"{n}"' for n in names], "]")


def modeling_imports(mechanism: Mechanism) -> str:
    stock: dict[str, list[str]] = {}
    for family in mechanism.decoder_families:
        classes = [family.layer, family.model, family.causal_lm]
        if mechanism.records_attentions or mechanism.attention_mixin:
            classes.append(family.attention)
        for cls in classes:
            module, name = qualified(cls)
            stock.setdefault(module, []).append(name)
    lines = [from_import(module, names) for module, names in sorted(stock.items())]
    configs = [Names.of(mechanism, family).config for family in mechanism.decoder_families]
    constants = [family_constant(family) for family in mechanism.decoder_families]
    local = from_import(f".{mechanism.configuration}", configs) + from_import(".families", constants)
    return "".join(lines) + "\n" + local + "\n"


def modeling_classes(mechanism: Mechanism) -> str:
    out, names = [], []
    for family in mechanism.decoder_families:
        n, constant = Names.of(mechanism, family), family_constant(family)
        layer_body = [f"family = {constant}"]
        if mechanism.attention_mixin:
            out.append(
                class_statement(
                    n.attention, [mechanism.attention_mixin, family.attention.__name__], init("self, config, layer_idx")
                )
            )
            layer_body.append(f"attention_class = {n.attention}")
        layer_body += ["", *init("self, config, layer_idx")]
        out.append(class_statement(n.layer, [mechanism.layer_mixin, family.layer.__name__], layer_body))
        no_split = bracketed("_no_split_modules = [", [f'"{p}"' for p in (n.layer, *mechanism.no_split_parts)], "]")
        records = f'{{"attentions": {family.attention.__name__}}}' if mechanism.records_attentions else "{}"
        model_body = [
            f"config_class = {n.config}",
            f"family = {constant}",
            f"decoder_layer_class = {n.layer}",
            no_split.rstrip("\n"),
            f"_can_record_outputs = {records}",
            "",
            *init("self, config"),
        ]
        out.append(class_statement(n.model, [mechanism.model_mixin, family.model.__name__], model_body))
        lm_body = [
            f"config_class = {n.config}",
            f"family = {constant}",
            f"base_class = {n.model}",
            no_split.rstrip("\n"),
            "",
            *init("self, config"),
        ]
        out.append(class_statement(n.lm, [mechanism.lm_mixin, family.causal_lm.__name__, "GenerationMixin"], lm_body))
        register = [n.config, f"AutoModel={n.model}", f"AutoModelForCausalLM={n.lm}"]
        out.append("\n\n" + bracketed("register_for_auto_classes(", register, ")"))
        names += [n.model, n.lm]
    classes = "".join(out).lstrip("\n")
    exports = bracketed("__all__ += [", [f'"{n}"' for n in sorted(names)], "]")
    return f"# each class has an `__init__` of its own: generate_classes.py says why\n{classes}\n\n{exports}"


ATTENTION_BRIDGE = "modeling_attention_bridge"


def attention_bridge_imports() -> str:
    """The stock classes of every seq2seq family, their configs and declarations, for the attention bridge's file."""
    stock: dict[str, list[str]] = {}
    for family in every_seq2seq_family():
        for cls in (family.encoder, family.decoder, family.model, family.lm):
            module, name = qualified(cls)
            stock.setdefault(module, []).append(name)
    lines = [from_import(module, names) for module, names in sorted(stock.items())]
    configs = [f"{family.name}AttentionBridgeConfig" for family in every_seq2seq_family()]
    constants = [family_constant(family) for family in every_seq2seq_family()]
    local = from_import(".configuration_attention_bridge", configs) + from_import(".families", constants)
    return "".join(lines) + "\n" + local + "\n"


def attention_bridge_classes() -> str:
    """The attention bridge on each seq2seq family: its encoder (role 1, the encoder output), decoder (roles 2 and 3,
    the memory and the language's decoder), the class that owns them and the LM, as the mixins of the file put
    before the family's stock classes. No `__init__` of their own: the mixins add modules (which partition their own
    parameters under zero.Init), no parameter of the composed module."""
    out, names = [], []
    for family in every_seq2seq_family():
        constant, prefix = family_constant(family), f"{family.name}AttentionBridge"
        config, encoder, decoder = f"{prefix}Config", f"{prefix}Encoder", f"{prefix}Decoder"
        model, lm = f"{prefix}Model", f"{prefix}ForConditionalGeneration"
        family_line = f"family = {constant}"
        out.append(class_statement(encoder, ["AttentionBridgeEncoderMixin", family.encoder.__name__], [family_line]))
        out.append(class_statement(decoder, ["AttentionBridgeDecoderMixin", family.decoder.__name__], [family_line]))
        parts = [f"encoder_class = {encoder}", f"decoder_class = {decoder}"]
        no_split = []
        if family.no_split_modules:
            no_split = [bracketed("_no_split_modules = [", [f'"{n}"' for n in family.no_split_modules], "]").rstrip()]
        model_body = [f"config_class = {config}", family_line, *parts, *no_split]
        out.append(class_statement(model, ["AttentionBridgeSeq2SeqMixin", family.model.__name__], model_body))
        owns = " (the LM owns its encoder and decoder: no base model inside)" if family.lm_owns_stack else ""
        note = f" {family.note}" if family.note else ""
        text = f"{family.title} with an attention bridge{owns}; `generate(..., tgt_lang=...)` picks the decoder.{note}"
        lm_body = [*docstring(text), "", f"config_class = {config}", family_line]
        lm_bases = ["AttentionBridgeLMMixin", family.lm.__name__, "GenerationMixin"]
        if family.lm_owns_stack:
            lm_bases.insert(1, "AttentionBridgeSeq2SeqMixin")
            lm_body += parts
        else:
            lm_body.append(f"base_class = {model}")
        lm_body += no_split
        out.append(class_statement(lm, lm_bases, lm_body))
        register = [config, f"AutoModel={model}", f"AutoModelForSeq2SeqLM={lm}"]
        out.append("\n\n" + bracketed("register_for_auto_classes(", register, ")"))
        names += [model, lm]
    exports = bracketed("__all__ += [", [f'"{n}"' for n in sorted(names)], "]")
    return "".join(out).lstrip("\n") + "\n\n" + exports


def package_imports() -> str:
    lines = []
    for mechanism in sorted(MECHANISMS, key=lambda m: (m.configuration, m.modeling)):
        names = [Names.of(mechanism, family) for family in mechanism.decoder_families]
        lines.append((f".models.{mechanism.configuration}", [n.config for n in names]))
        lines.append((f".models.{mechanism.modeling}", [c for n in names for c in (n.model, n.lm)]))
    return "".join(from_import(module, names) for module, names in sorted(lines)) + "\n"


def package_exports() -> str:
    names = sorted(
        name
        for mechanism in MECHANISMS
        for family in mechanism.decoder_families
        for name in (lambda n: (n.config, n.model, n.lm))(Names.of(mechanism, family))
    )
    return bracketed("__all__ += [", [f'"{n}"' for n in names], "]")


def blocks() -> dict[pathlib.Path, dict[str, str]]:
    """`{file: {block name: its text}}` for every generated block."""
    out = {PACKAGE_INIT: {"imports": package_imports(), "exports": package_exports()}}
    for mechanism in MECHANISMS:
        out[MODELS / f"{mechanism.configuration}.py"] = {
            "imports": config_imports(mechanism),
            "classes": config_classes(mechanism),
        }
        out[MODELS / f"{mechanism.modeling}.py"] = {
            "imports": modeling_imports(mechanism),
            "classes": modeling_classes(mechanism),
        }
    out[MODELS / f"{ATTENTION_BRIDGE}.py"] = {
        "imports": attention_bridge_imports(),
        "classes": attention_bridge_classes(),
    }
    return out


# ---- checking and writing -------------------------------------------------------------------------------------------


def replace_block(text: str, name: str, block: str, path: pathlib.Path) -> str:
    begin, end = BEGIN.format(name) + "\n", END.format(name) + "\n"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{path}: needs exactly one `{begin.strip()}` line and one `{end.strip()}` line")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return head + begin + block + end + tail


def rendered(path: pathlib.Path) -> str:
    """`path`'s text with its generated blocks as this module renders them."""
    text = path.read_text()
    for name, block in blocks()[path].items():
        text = replace_block(text, name, block, path)
    return text


def stale_files() -> list[pathlib.Path]:
    """The files whose generated blocks differ from the rendering."""
    return [path for path in blocks() if path.read_text() != rendered(path)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fix", action="store_true", help="rewrite the blocks that are out of date")
    args = parser.parse_args(argv)
    stale = stale_files()
    for path in stale:
        if args.fix:
            path.write_text(rendered(path))
        print(f"{'rewrote' if args.fix else 'out of date'}: {path}")
    return 1 if stale and not args.fix else 0


if __name__ == "__main__":
    sys.exit(main())
