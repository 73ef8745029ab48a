"""Every zoo class is a `class` statement of its file: the classes of the mechanisms on each family are written by
`python -m interlayer.generate_classes --fix` from the family declarations (`families.py`) and the mechanisms'
records (their class specs, `interlayer.mechanisms`), and these tests fail when a generated block differs from what
the generator renders (as transformers' `utils/check_modular_conversion.py` does for its modular files). The package
imports every exported class by name."""

import ast
import dataclasses
import pathlib
import re

import interlayer
from interlayer import generate_classes
from interlayer.models import decoder_families, encoder_families, seq2seq_families
from interlayer.models.modeling_sentinel import GPT2SentinelLMHeadModel, GPT2SentinelModel
from interlayer.zoo import ZOO

PACKAGE = pathlib.Path(interlayer.__file__).parent


def test_generated_blocks_are_what_the_generator_writes():
    stale = [str(path.relative_to(PACKAGE.parent)) for path in generate_classes.stale_files()]
    assert not stale, f"out of date (run `python -m interlayer.generate_classes --fix`): {stale}"


def _class_statements() -> dict[str, list[str]]:
    """`{class name: [file, ...]}` of every `class Name` statement at the start of a line in the package."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in re.findall(r"^class (\w+)\b", path.read_text(), flags=re.M):
            found.setdefault(name, []).append(path.name)
    return found


def test_every_registered_class_is_a_class_statement_of_its_file():
    """What `grep -rn "^class Qwen3MHCForCausalLM" interlayer/` finds: each config and model class of the zoo (and
    the layers and attentions the generator writes), once, in the file its `__module__` names."""
    statements = _class_statements()
    classes = {cls for e in ZOO for cls in (e.config_class, e.model_class)}
    classes |= {getattr(e.model_class, name, None) for e in ZOO for name in ("decoder_layer_class", "layer_class")}
    classes -= {None}
    classes |= {getattr(layer, "attention_class", None) for layer in classes} - {None}
    for cls in classes:
        assert statements.get(cls.__name__) == [cls.__module__.rpartition(".")[2] + ".py"], cls.__name__
        assert cls.__qualname__ == cls.__name__


def test_the_package_imports_every_exported_class_by_name():
    """`interlayer/__init__.py` names each class it exports in an import statement (no names made at import time),
    the older names kept for a class included."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "globals" not in calls
    for e in ZOO:
        for cls in (e.config_class, e.model_class):
            assert cls.__name__ in imported and cls.__name__ in interlayer.__all__, cls.__name__
    older = {"GatedGPT2Model": GPT2SentinelModel, "GatedGPT2LMHeadModel": GPT2SentinelLMHeadModel}
    older |= {
        "GatedGPT2Config": GPT2SentinelModel.config_class,
        "MarianBridgeModel": interlayer.MarianAttentionBridgeModel,
    }
    for name, cls in older.items():
        assert name in imported and getattr(interlayer, name) is cls, name
    assert set(interlayer.__all__) <= imported | {"ZOO", "convert"}


def test_the_generator_is_not_in_the_shipped_folder():
    """The generator is a tool: it sits outside the models folder (whose files `save_pretrained` ships), and no model
    file imports it or names it."""
    assert not (PACKAGE / "models" / "generate_classes.py").exists()
    for path in (PACKAGE / "models").glob("*.py"):
        assert "generate_classes" not in path.read_text().replace("python -m interlayer.generate_classes", ""), path


def test_a_new_decoder_family_is_one_declaration(monkeypatch):
    """A `DecoderFamily` declared in `decoder_families.py` gets the classes of every mechanism on every family (config,
    layer, model, causal LM, registration, exports) from the generator, as valid Python."""
    monkeypatch.setattr(
        decoder_families,
        "NEWFAM",
        dataclasses.replace(decoder_families.QWEN2, model_type="newfam", name="NewFam"),
        raising=False,
    )
    blocks = generate_classes.blocks()
    modeling = blocks[PACKAGE / "models" / "modeling_hyper_connections.py"]
    assert "class NewFamMHCForCausalLM(HCForCausalLMMixin, Qwen2ForCausalLM, GenerationMixin):" in modeling["classes"]
    assert "AutoModelForCausalLM=NewFamMHCForCausalLM" in modeling["classes"]
    assert "NEWFAM" in modeling["imports"] and "NewFamMHCConfig" in modeling["imports"]
    latent = blocks[PACKAGE / "models" / "configuration_latent.py"]["classes"]
    assert "class NewFamLatentConfig(ZooConfigMixin, Qwen2Config, LatentFields):" in latent
    assert 'model_type = "newfam_latent"' in latent
    assert "NewFamMHCModel" in blocks[PACKAGE / "__init__.py"]["imports"]
    # the sentinel's decoders are the families its attention forward is written for
    assert "NewFam" not in blocks[PACKAGE / "models" / "modeling_sentinel.py"]["classes"]
    for path in blocks:
        compile(generate_classes.rendered(path), str(path), "exec")


def test_a_new_seq2seq_family_is_one_declaration(monkeypatch):
    """A `Seq2SeqFamily` declared in `seq2seq_families.py` gets the attention bridge's encoder, decoder, base model and
    LM (registration and exports included) from the generator, as valid Python; an LM that owns its encoder and
    decoder (T5's) builds them itself instead of wrapping a base model."""
    monkeypatch.setattr(
        seq2seq_families,
        "NEWSEQ",
        dataclasses.replace(seq2seq_families.BART, model_type="newseq", name="NewSeq"),
        raising=False,
    )
    path = PACKAGE / "models" / "modeling_attention_bridge.py"
    block = generate_classes.blocks()[path]
    assert "class NewSeqAttentionBridgeEncoder(AttentionBridgeEncoderMixin, BartEncoder):" in block["classes"]
    assert "class NewSeqAttentionBridgeDecoder(AttentionBridgeDecoderMixin, BartDecoder):" in block["classes"]
    assert "class NewSeqAttentionBridgeModel(AttentionBridgeSeq2SeqMixin, BartModel):" in block["classes"]
    assert "    base_class = NewSeqAttentionBridgeModel\n" in block["classes"]
    assert "AutoModelForSeq2SeqLM=NewSeqAttentionBridgeForConditionalGeneration" in block["classes"]
    assert "NEWSEQ" in block["imports"] and "NewSeqAttentionBridgeConfig" in block["imports"]
    t5_lm = block["classes"].split("class T5AttentionBridgeForConditionalGeneration(")[1].split("\n\n\n")[0]
    assert "AttentionBridgeSeq2SeqMixin" in t5_lm and "base_class" not in t5_lm
    compile(generate_classes.rendered(path), str(path), "exec")


def test_a_new_encoder_family_is_one_declaration(monkeypatch):
    """An `EncoderFamily` declared in `encoder_families.py` gets the bridges' config, layer, base model and task
    classes (registration, `FAMILIES` and exports included) from the generator, as valid Python; the sentinel's
    encoders are the families its self-attention forward is written for."""
    monkeypatch.setattr(
        encoder_families,
        "NEWENC",
        dataclasses.replace(encoder_families.ROBERTA, model_type="newenc", name="NewEnc"),
        raising=False,
    )
    blocks = generate_classes.blocks()
    modeling = blocks[PACKAGE / "models" / "modeling_bridge.py"]
    assert "class NewEncBridgeLayer(BridgeLayerMixin, RobertaLayer):" in modeling["classes"]
    assert "class NewEncBridgeModel(BridgeModelMixin, RobertaModel):" in modeling["classes"]
    task = "class NewEncBridgeForTokenClassification(BridgeForTokenClassificationMixin, RobertaPreTrainedModel):"
    assert task in modeling["classes"]
    assert "AutoModelForSequenceClassification=NewEncBridgeForSequenceClassification" in modeling["classes"]
    assert '    "newenc": (' in modeling["classes"] and '"NewEncBridgeModel"' in modeling["classes"]
    assert "NEWENC" in modeling["imports"] and "NewEncBridgeConfig" in modeling["imports"]
    config = blocks[PACKAGE / "models" / "configuration_bridge.py"]["classes"]
    assert "class NewEncBridgeConfig(BridgeConfigMixin, RobertaConfig, BridgeFields):" in config
    assert 'model_type = "newenc_bridge"' in config and "default_sep_token_id = 2" in config
    assert "NewEnc" not in blocks[PACKAGE / "models" / "modeling_sentinel_encoders.py"]["classes"]
    for path in blocks:
        compile(generate_classes.rendered(path), str(path), "exec")


# the model files' layers, lowest first: a file imports only files of lower layers (so no cycle), and only from this
# folder (no parent-relative import: `save_pretrained` ships the folder's files the model files import as remote code)
LAYERS = [
    {"zoo_requirements"},
    {"zoo_common"},
    {"families"},
    {"decoder_families", "encoder_families", "seq2seq_families"},
    {"decoder_common"},
    {p.stem for p in (PACKAGE / "models").glob("configuration_*.py")} - {"configuration_sentinel_encoders"},
    {"configuration_sentinel_encoders"},
    {"hyper_connections_maths", "sentinel_common"},
    {"hyper_connections_triton", "hyper_connections_cpu"},
    {"hyper_connections_kernels"},
    {"hyper_connections_fast"},
    {p.stem for p in (PACKAGE / "models").glob("modeling_*.py")},
]


def test_model_files_import_only_lower_layers_of_their_folder():
    layer_of = {name: i for i, names in enumerate(LAYERS) for name in names}
    for path in (PACKAGE / "models").glob("*.py"):
        if path.stem == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1, f"{path.name}: a parent-relative import"
                modules = [node.module] if node.module else [alias.name for alias in node.names]
                for module in modules:
                    assert layer_of[module] < layer_of[path.stem], f"{path.name} imports {module}, not a lower layer"
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n.split(".")[0] == "interlayer" for n in names), f"{path.name} imports {names}"
