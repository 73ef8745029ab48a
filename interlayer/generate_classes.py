"""Writes the zoo's generated classes as `class` statements: each mechanism whose record (`interlayer.mechanisms`)
has a class spec gets its config and model classes on every family it converts, written into its configuration and
modeling files, and the decoder mechanisms' classes are imported and exported by `interlayer/__init__.py`. A decoder
mechanism's spec is a `DecoderClasses` (its classes on each family of `decoder_families.py`), the attention bridge's
a `Seq2SeqClasses` (on each family of `seq2seq_families.py`), an encoder mechanism's an `EncoderClasses` (the record's
`encoder_classes`: its config, layer, base model and task classes on each family of `encoder_families.py`, their
registration and a `FAMILIES` dict; the bridges', and the sentinel's beside its `DecoderClasses`):

    python -m interlayer.generate_classes        # names every generated block that is out of date
    python -m interlayer.generate_classes --fix  # rewrites them, adding the blocks a file does not have yet

A generated block sits between the lines `# --- begin generated <block> ...` and `# --- end generated <block> ---`
and is not edited by hand; `tests/contract/test_generated_classes.py` fails when one differs from what this renders (as
transformers' `utils/check_modular_conversion.py` does for its modular files). A file without a block gets it from
`--fix`: the imports block after the file's last top-level import, the classes block at its end. A new decoder or
encoder family is its declaration in `decoder_families.py` or `encoder_families.py` and a run of `--fix`; a new
decoder or encoder mechanism its record (with its spec), its configuration and modeling files (the options and the
mixins) and a run of `--fix`. An encoder family's differences from BERT's base model are hooks of its declaration
(`EncoderFamily.build_stack`, `embed`, `layer_inputs`, `after_layer`, `final_norm`) that the mechanisms' mixins call,
so the generated classes name only the family, the stock bases and each other. This tool sits outside the
models folder: saved checkpoints ship the classes it wrote, never the tool.

Each generated model class has an `__init__` of its own that calls through: DeepSpeed's `zero.Init` partitions a
module's parameters once the outermost `__init__` found in a module class's own `__dict__` returns, so without one it
would partition them when the stock `__init__` returns, and the parameters the mechanism's mixin adds after it (gates,
read-outs) would stay whole on every rank (the conformance suite's `test_zero3_init_partitions_every_parameter`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import pathlib
import sys
import textwrap

from .models import decoder_families, encoder_families, seq2seq_families
from .models.encoder_families import EncoderFamily
from .models.families import DecoderFamily
from .models.seq2seq_families import Seq2SeqFamily

LINE = 120
PACKAGE = pathlib.Path(__file__).parent
MODELS = PACKAGE / "models"
PACKAGE_INIT = PACKAGE / "__init__.py"
BEGIN = "# --- begin generated {} (python -m interlayer.generate_classes --fix): do not edit ---"
END = "# --- end generated {} ---"
# the line above a generated block of model classes, in the shipped file (which does not ship this tool)
INIT_NOTE = (
    "# each class has an `__init__` of its own, so that DeepSpeed's zero.Init partitions the mixin's parameters too"
)


def records():
    """The records of the mechanisms whose decoder or seq2seq classes are generated, in registration order."""
    from .mechanisms import MECHANISMS

    return [record for record in MECHANISMS.values() if record.classes is not None]


def encoder_records():
    """The records of the mechanisms whose encoder classes are generated, in registration order."""
    from .mechanisms import MECHANISMS

    return [record for record in MECHANISMS.values() if record.encoder_classes is not None]


def every_decoder_family() -> list[DecoderFamily]:
    """The decoder families of `decoder_families.py`, in the order they are declared there."""
    return [value for value in vars(decoder_families).values() if isinstance(value, DecoderFamily)]


def every_seq2seq_family() -> list[Seq2SeqFamily]:
    """The encoder-decoder families of `seq2seq_families.py`, in the order they are declared there."""
    return [value for value in vars(seq2seq_families).values() if isinstance(value, Seq2SeqFamily)]


def every_encoder_family() -> list[EncoderFamily]:
    """The encoder families of `encoder_families.py`, in the order they are declared there."""
    return [value for value in vars(encoder_families).values() if isinstance(value, EncoderFamily)]


def family_constant(family) -> str:
    """The name its module declares `family` under (`QWEN3`)."""
    modules = {DecoderFamily: decoder_families, EncoderFamily: encoder_families, Seq2SeqFamily: seq2seq_families}
    module = modules[type(family)]
    return next(name for name, value in vars(module).items() if value is family)


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


def init(signature: str, arguments: str | None = None) -> list[str]:
    """An `__init__` that calls through: with `arguments` (default: the signature's names)."""
    arguments = signature.removeprefix("self, ") if arguments is None else arguments
    return [f"def __init__({signature}):", f"    super().__init__({arguments})"]


def stock_imports(classes) -> str:
    """`from module import name` for each stock class of `classes`, grouped by module, in module order."""
    stock: dict[str, list[str]] = {}
    for cls in classes:
        module, name = qualified(cls)
        stock.setdefault(module, []).append(name)
    return "".join(from_import(module, names) for module, names in sorted(stock.items()))


def exports(names) -> str:
    return bracketed("__all__ += [", [f'"{n}"' for n in names], "]")


def qualified(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__name__


# ---- the blocks -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Names:
    """The generated classes of one decoder mechanism on one family."""

    config: str
    attention: str
    layer: str
    model: str
    lm: str

    @classmethod
    def of(cls, record, family: DecoderFamily) -> Names:
        prefix = family.name + record.classes.infix
        return cls(*(prefix + end for end in ("Config", "Attention", "DecoderLayer", "Model", "ForCausalLM")))


def families_of(record) -> list[DecoderFamily]:
    """The families a decoder mechanism converts: its spec's, or every family of `decoder_families.py`."""
    return list(record.classes.families) if record.classes.families is not None else every_decoder_family()


def config_imports(record) -> str:
    names = [family.model.config_class.__name__ for family in families_of(record)]
    return from_import("transformers", names) + "\n"


def config_statement(spec, family, model: str, more: list[str], note: str = "") -> str:
    """The config class of a mechanism (its spec `spec`) on `family`, whose model class is `model`: every stock field
    plus the spec's options, the model types, the lines `more`, the family's model type under `family_attribute`."""
    stock = family.model.config_class.__name__
    checkpoints = f" ({family.checkpoints})" if family.checkpoints else ""
    text = (
        f"Configuration of [`{model}`]: every [`{stock}`] field plus {spec.options}. Converts checkpoints "
        f"of model_type `{family.model_type}`{checkpoints}.{note}"
    )
    body = [*docstring(text), "", f'model_type = "{family.model_type}_{spec.model_type_suffix}"']
    body += [f'stock_model_types = ("{family.model_type}",)', *more]
    if spec.family_attribute:
        body.append(f'{spec.family_attribute} = "{family.model_type}"')
    name = f"{family.name}{spec.infix}Config"
    return class_statement(name, [*spec.config_bases, stock, spec.fields], body, "zoo_config")


def config_classes(record) -> str:
    spec, out, names = record.classes, [], []
    for family in families_of(record):
        n = Names.of(record, family)
        note = f" {spec.config_note}" if spec.config_note else ""
        more = [] if family.input_norms else ["branch_input_norms = False"]
        out.append(config_statement(spec, family, n.model, more, note))
        names.append(n.config)
    return "".join(out).lstrip("\n") + "\n\n" + exports(names)


def modeling_imports(record) -> str:
    spec, classes = record.classes, []
    for family in families_of(record):
        classes += [family.layer, family.model, family.causal_lm]
        if spec.records_attentions or spec.attention_mixin:
            classes.append(family.attention)
    configs = [Names.of(record, family).config for family in families_of(record)]
    constants = [family_constant(family) for family in families_of(record)]
    local = from_import(f".{record.configuration}", configs) + from_import(".decoder_families", constants)
    return stock_imports(classes) + "\n" + local + "\n"


def modeling_classes(record) -> str:
    spec, out, names = record.classes, [], []
    for family in families_of(record):
        n, constant = Names.of(record, family), family_constant(family)
        layer_body = [f"family = {constant}"]
        if spec.attention_mixin:
            out.append(
                class_statement(
                    n.attention, [spec.attention_mixin, family.attention.__name__], init("self, config, layer_idx")
                )
            )
            layer_body.append(f"attention_class = {n.attention}")
        layer_body += ["", *init("self, config, layer_idx")]
        out.append(class_statement(n.layer, [spec.layer_mixin, family.layer.__name__], layer_body))
        no_split = bracketed("_no_split_modules = [", [f'"{p}"' for p in (n.layer, *spec.no_split_parts)], "]")
        records = f'{{"attentions": {family.attention.__name__}}}' if spec.records_attentions else "{}"
        model_body = [
            f"config_class = {n.config}",
            f"family = {constant}",
            f"decoder_layer_class = {n.layer}",
            no_split.rstrip("\n"),
            f"_can_record_outputs = {records}",
            "",
            *init("self, config"),
        ]
        out.append(class_statement(n.model, [spec.model_mixin, family.model.__name__], model_body))
        lm_body = [
            f"config_class = {n.config}",
            f"family = {constant}",
            f"base_class = {n.model}",
            no_split.rstrip("\n"),
            "",
            *init("self, config"),
        ]
        out.append(class_statement(n.lm, [spec.lm_mixin, family.causal_lm.__name__, "GenerationMixin"], lm_body))
        register = [n.config, f"AutoModel={n.model}", f"AutoModelForCausalLM={n.lm}"]
        out.append("\n\n" + bracketed("register_for_auto_classes(", register, ")"))
        names += [n.model, n.lm]
    classes = "".join(out).lstrip("\n")
    return f"{INIT_NOTE}\n{classes}\n\n{exports(sorted(names))}"


def seq2seq_imports(record) -> str:
    """The stock classes of every seq2seq family, their configs and declarations, for the mechanism's modeling file."""
    families = every_seq2seq_family()
    classes = [cls for family in families for cls in (family.encoder, family.decoder, family.model, family.lm)]
    configs = [f"{family.name}{record.classes.infix}Config" for family in families]
    constants = [family_constant(family) for family in families]
    local = from_import(f".{record.configuration}", configs) + from_import(".seq2seq_families", constants)
    return stock_imports(classes) + "\n" + local + "\n"


def seq2seq_classes(record) -> str:
    """The mechanism on each seq2seq family: its encoder, decoder, the class that owns them and the LM, as the spec's
    mixins put before the family's stock classes. No `__init__` of their own: the mixins add modules (which partition
    their own parameters under zero.Init), no parameter of the composed module."""
    spec, out, names = record.classes, [], []
    for family in every_seq2seq_family():
        constant, prefix = family_constant(family), f"{family.name}{spec.infix}"
        config, encoder, decoder = f"{prefix}Config", f"{prefix}Encoder", f"{prefix}Decoder"
        model, lm = f"{prefix}Model", f"{prefix}ForConditionalGeneration"
        family_line = f"family = {constant}"
        out.append(class_statement(encoder, [spec.encoder_mixin, family.encoder.__name__], [family_line]))
        out.append(class_statement(decoder, [spec.decoder_mixin, family.decoder.__name__], [family_line]))
        parts = [f"encoder_class = {encoder}", f"decoder_class = {decoder}"]
        no_split = []
        if family.no_split_modules:
            no_split = [bracketed("_no_split_modules = [", [f'"{n}"' for n in family.no_split_modules], "]").rstrip()]
        model_body = [f"config_class = {config}", family_line, *parts, *no_split]
        out.append(class_statement(model, [spec.model_mixin, family.model.__name__], model_body))
        owns = " (the LM owns its encoder and decoder: no base model inside)" if family.lm_owns_stack else ""
        note = f" {family.note}" if family.note else ""
        text = f"{family.title} with {spec.description}{owns}; {spec.generate_note}{note}"
        lm_body = [*docstring(text), "", f"config_class = {config}", family_line]
        lm_bases = [spec.lm_mixin, family.lm.__name__, "GenerationMixin"]
        if family.lm_owns_stack:
            lm_bases.insert(1, spec.model_mixin)
            lm_body += parts
        else:
            lm_body.append(f"base_class = {model}")
        lm_body += no_split
        out.append(class_statement(lm, lm_bases, lm_body))
        register = [config, f"AutoModel={model}", f"AutoModelForSeq2SeqLM={lm}"]
        out.append("\n\n" + bracketed("register_for_auto_classes(", register, ")"))
        names += [model, lm]
    return "".join(out).lstrip("\n") + "\n\n" + exports(sorted(names))


def encoder_families_of(spec) -> list[EncoderFamily]:
    """The families an encoder mechanism converts: its spec's, or every family of `encoder_families.py`."""
    return list(spec.families) if spec.families is not None else every_encoder_family()


def encoder_files(record) -> tuple[str, str]:
    """The configuration and modeling files of a mechanism's encoder classes."""
    spec = record.encoder_classes
    return spec.configuration or record.configuration, spec.modeling or record.modeling


def encoder_config_imports(record) -> str:
    families = encoder_families_of(record.encoder_classes)
    return from_import("transformers", [family.model.config_class.__name__ for family in families]) + "\n"


def encoder_config_classes(record) -> str:
    """Each family's config: the spec's `config_attributes` (the family's fields) and `config_lines` added."""
    spec, out, names = record.encoder_classes, [], []
    for family in encoder_families_of(spec):
        prefix = family.name + spec.infix
        more = [f"{name} = {json.dumps(getattr(family, field))}" for name, field in spec.config_attributes.items()]
        out.append(config_statement(spec, family, f"{prefix}Model", [*more, *spec.config_lines]))
        names.append(f"{prefix}Config")
    return "".join(out).lstrip("\n") + "\n\n" + exports(names)


def encoder_modeling_imports(record) -> str:
    spec, classes = record.encoder_classes, []
    for family in encoder_families_of(spec):
        classes += [family.layer, family.model, family.pretrained]
        if spec.attention_mixin:
            classes.append(family.attention)
    families = encoder_families_of(spec)
    configs = [f"{family.name}{spec.infix}Config" for family in families]
    local = from_import(f".{encoder_files(record)[0]}", configs)
    local += from_import(".encoder_families", [family_constant(family) for family in families])
    return stock_imports(classes) + "\n" + local + "\n"


def encoder_modeling_classes(record) -> str:
    """Each family's (self-attention,) layer, base model and task classes, registered, and `FAMILIES`: `{stock model
    type: (config, base model, task classes...)}`."""
    spec, out, names, registry = record.encoder_classes, [], [], []
    for family in encoder_families_of(spec):
        prefix, family_line = family.name + spec.infix, f"family = {family_constant(family)}"
        config, layer, model = f"{prefix}Config", f"{prefix}Layer", f"{prefix}Model"
        no_split = bracketed("_no_split_modules = [", [f'"{family.embeddings.__name__}"', f'"{layer}"'], "]").rstrip()
        layer_body = [family_line]
        if spec.attention_mixin:
            attention = f"{prefix}SelfAttention"
            body = init("self, *args, **kwargs")
            out.append(class_statement(attention, [spec.attention_mixin, family.attention.__name__], body))
            layer_body.append(f"attention_class = {attention}")
        layer_body += ["", *init("self, config, layer_idx=None", "config, layer_idx")]
        out.append(class_statement(layer, [spec.layer_mixin, family.layer.__name__], layer_body))
        model_body = [f"config_class = {config}", family_line, f"layer_class = {layer}", no_split, ""]
        model_body += init("self, config, add_pooling_layer=True", "config, add_pooling_layer")
        out.append(class_statement(model, [spec.model_mixin, family.model.__name__], model_body))
        tasks = {task: f"{prefix}For{task}" for task in spec.tasks}
        for task, name in tasks.items():
            body = [f"config_class = {config}", family_line, f"base_class = {model}", no_split, ""]
            body += init("self, config")
            out.append(class_statement(name, [spec.tasks[task], family.pretrained.__name__], body))
        register = [config, f"AutoModel={model}", *(f"AutoModelFor{task}={name}" for task, name in tasks.items())]
        out.append("\n\n" + bracketed("register_for_auto_classes(", register, ")"))
        registry.append(bracketed(f'"{family.model_type}": (', [config, model, *tasks.values()], "),", "    "))
        names += [model, *tasks.values()]
    roles = ", ".join(["config", "base model", *(f"{task} class" for task in spec.tasks)])
    families = f"\n\n# stock model_type -> ({roles})\nFAMILIES = {{\n" + "".join(registry) + "}\n"
    return "".join(out).lstrip("\n") + families + "\n" + exports(["FAMILIES", *sorted(names)])


def package_imports() -> str:
    lines = []
    for record in sorted(decoder_records(), key=lambda r: (r.configuration, r.modeling)):
        names = [Names.of(record, family) for family in families_of(record)]
        lines.append((f".models.{record.configuration}", [n.config for n in names]))
        lines.append((f".models.{record.modeling}", [c for n in names for c in (n.model, n.lm)]))
    return "".join(from_import(module, names) for module, names in sorted(lines)) + "\n"


def package_exports() -> str:
    names = sorted(
        name
        for record in decoder_records()
        for family in families_of(record)
        for name in (lambda n: (n.config, n.model, n.lm))(Names.of(record, family))
    )
    return exports(names)


def decoder_records() -> list:
    return [record for record in records() if record.classes.kind == "decoder"]


def blocks() -> dict[pathlib.Path, dict[str, str]]:
    """`{file: {block name: its text}}` for every generated block."""
    out = {PACKAGE_INIT: {"imports": package_imports(), "exports": package_exports()}}
    for record in records():
        if record.classes.kind == "decoder":
            out[MODELS / f"{record.configuration}.py"] = {
                "imports": config_imports(record),
                "classes": config_classes(record),
            }
            out[MODELS / f"{record.modeling}.py"] = {
                "imports": modeling_imports(record),
                "classes": modeling_classes(record),
            }
        else:
            out[MODELS / f"{record.modeling}.py"] = {
                "imports": seq2seq_imports(record),
                "classes": seq2seq_classes(record),
            }
    for record in encoder_records():
        configuration, modeling = encoder_files(record)
        out[MODELS / f"{configuration}.py"] = {
            "imports": encoder_config_imports(record),
            "classes": encoder_config_classes(record),
        }
        out[MODELS / f"{modeling}.py"] = {
            "imports": encoder_modeling_imports(record),
            "classes": f"{INIT_NOTE}\n{encoder_modeling_classes(record)}",
        }
    return out


# ---- checking and writing -------------------------------------------------------------------------------------------


def with_block(text: str, name: str, path: pathlib.Path) -> str:
    """`text` with an empty block `name` added where it belongs, if it has none: imports after the last top-level
    import statement, anything else at the end (after an `__all__` of the file's own names, which the generated
    classes add theirs to, where the file has none)."""
    begin, end = BEGIN.format(name) + "\n", END.format(name) + "\n"
    if begin in text or end in text:
        return text
    empty = f"{begin}{end}"
    if name != "imports":
        own = "" if "\n__all__ = " in text else "__all__ = []  # the file's own exports; the generated ones follow"
        return text.rstrip("\n") + "\n\n\n" + (own + "\n\n\n" if own else "") + empty
    imports = [n for n in ast.parse(text).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not imports:
        raise ValueError(f"{path}: has no import statement to put the generated imports after")
    lines = text.splitlines(keepends=True)
    at = imports[-1].end_lineno
    return "".join(lines[:at]) + "\n# isort: split\n" + empty + "".join(lines[at:])


def replace_block(text: str, name: str, block: str, path: pathlib.Path) -> str:
    begin, end = BEGIN.format(name) + "\n", END.format(name) + "\n"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{path}: needs exactly one `{begin.strip()}` line and one `{end.strip()}` line")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return head + begin + block + end + tail


def rendered(path: pathlib.Path, add_missing: bool = False) -> str:
    """`path`'s text with its generated blocks as this module renders them (`add_missing`: adding the blocks the file
    does not have yet)."""
    text = path.read_text()
    for name, block in blocks()[path].items():
        if add_missing:
            text = with_block(text, name, path)
        text = replace_block(text, name, block, path)
    return text


def stale_files() -> list[pathlib.Path]:
    """The files whose generated blocks differ from the rendering (or are missing)."""
    return [path for path in blocks() if path.read_text() != rendered(path, add_missing=True)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fix", action="store_true", help="rewrite the blocks that are out of date")
    args = parser.parse_args(argv)
    stale = stale_files()
    for path in stale:
        if args.fix:
            path.write_text(rendered(path, add_missing=True))
        print(f"{'rewrote' if args.fix else 'out of date'}: {path}")
    return 1 if stale and not args.fix else 0


if __name__ == "__main__":
    sys.exit(main())
