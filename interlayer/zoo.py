"""The zoo's registry (which mechanism converts which stock architecture, for which task) and conversion."""

from __future__ import annotations

import os
import shutil
import warnings
from dataclasses import dataclass

from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    PretrainedConfig,
)

from .models.configuration_attention_bridge import (
    BartAttentionBridgeConfig,
    M2M100AttentionBridgeConfig,
    MarianAttentionBridgeConfig,
    MBartAttentionBridgeConfig,
    T5AttentionBridgeConfig,
)
from .models.configuration_bridge import BertBridgeConfig, RobertaBridgeConfig
from .models.configuration_gated_gpt2 import GatedGPT2Config
from .models.configuration_hyper_connections import LlamaMHCConfig, Qwen3MHCConfig
from .models.configuration_latent import LlamaLatentConfig, Qwen3LatentConfig
from .models.modeling_attention_bridge import (
    BartAttentionBridgeForConditionalGeneration,
    BartAttentionBridgeModel,
    M2M100AttentionBridgeForConditionalGeneration,
    M2M100AttentionBridgeModel,
    MarianAttentionBridgeForConditionalGeneration,
    MarianAttentionBridgeModel,
    MBartAttentionBridgeForConditionalGeneration,
    MBartAttentionBridgeModel,
    T5AttentionBridgeForConditionalGeneration,
    T5AttentionBridgeModel,
)
from .models.modeling_bridge import (
    BertBridgeForSequenceClassification,
    BertBridgeModel,
    RobertaBridgeForSequenceClassification,
    RobertaBridgeModel,
)
from .models.modeling_gated_gpt2 import GatedGPT2LMHeadModel, GatedGPT2Model
from .models.modeling_hyper_connections import LlamaMHCForCausalLM, LlamaMHCModel, Qwen3MHCForCausalLM, Qwen3MHCModel
from .models.modeling_latent import LlamaLatentForCausalLM, LlamaLatentModel, Qwen3LatentForCausalLM, Qwen3LatentModel
from .models.zoo_common import check_choice, check_option_names


@dataclass(frozen=True)
class ZooEntry:
    mechanism: str
    stock_model_type: str
    task: str
    config_class: type
    model_class: type
    auto_class: type


ZOO: tuple[ZooEntry, ...] = (
    ZooEntry("bridge", "roberta", "base", RobertaBridgeConfig, RobertaBridgeModel, AutoModel),
    ZooEntry(
        "bridge",
        "roberta",
        "sequence-classification",
        RobertaBridgeConfig,
        RobertaBridgeForSequenceClassification,
        AutoModelForSequenceClassification,
    ),
    ZooEntry("bridge", "bert", "base", BertBridgeConfig, BertBridgeModel, AutoModel),
    ZooEntry(
        "bridge",
        "bert",
        "sequence-classification",
        BertBridgeConfig,
        BertBridgeForSequenceClassification,
        AutoModelForSequenceClassification,
    ),
    ZooEntry("sentinel", "gpt2", "base", GatedGPT2Config, GatedGPT2Model, AutoModel),
    ZooEntry("sentinel", "gpt2", "causal-lm", GatedGPT2Config, GatedGPT2LMHeadModel, AutoModelForCausalLM),
    ZooEntry("hyper-connections", "qwen3", "base", Qwen3MHCConfig, Qwen3MHCModel, AutoModel),
    ZooEntry("hyper-connections", "qwen3", "causal-lm", Qwen3MHCConfig, Qwen3MHCForCausalLM, AutoModelForCausalLM),
    ZooEntry("hyper-connections", "llama", "base", LlamaMHCConfig, LlamaMHCModel, AutoModel),
    ZooEntry("hyper-connections", "llama", "causal-lm", LlamaMHCConfig, LlamaMHCForCausalLM, AutoModelForCausalLM),
    ZooEntry("latent", "qwen3", "base", Qwen3LatentConfig, Qwen3LatentModel, AutoModel),
    ZooEntry("latent", "qwen3", "causal-lm", Qwen3LatentConfig, Qwen3LatentForCausalLM, AutoModelForCausalLM),
    ZooEntry("latent", "llama", "base", LlamaLatentConfig, LlamaLatentModel, AutoModel),
    ZooEntry("latent", "llama", "causal-lm", LlamaLatentConfig, LlamaLatentForCausalLM, AutoModelForCausalLM),
    ZooEntry("attention-bridge", "marian", "base", MarianAttentionBridgeConfig, MarianAttentionBridgeModel, AutoModel),
    ZooEntry(
        "attention-bridge",
        "marian",
        "translation",
        MarianAttentionBridgeConfig,
        MarianAttentionBridgeForConditionalGeneration,
        AutoModelForSeq2SeqLM,
    ),
    ZooEntry("attention-bridge", "bart", "base", BartAttentionBridgeConfig, BartAttentionBridgeModel, AutoModel),
    ZooEntry(
        "attention-bridge",
        "bart",
        "translation",
        BartAttentionBridgeConfig,
        BartAttentionBridgeForConditionalGeneration,
        AutoModelForSeq2SeqLM,
    ),
    ZooEntry("attention-bridge", "mbart", "base", MBartAttentionBridgeConfig, MBartAttentionBridgeModel, AutoModel),
    ZooEntry(
        "attention-bridge",
        "mbart",
        "translation",
        MBartAttentionBridgeConfig,
        MBartAttentionBridgeForConditionalGeneration,
        AutoModelForSeq2SeqLM,
    ),
    ZooEntry("attention-bridge", "m2m_100", "base", M2M100AttentionBridgeConfig, M2M100AttentionBridgeModel, AutoModel),
    ZooEntry(
        "attention-bridge",
        "m2m_100",
        "translation",
        M2M100AttentionBridgeConfig,
        M2M100AttentionBridgeForConditionalGeneration,
        AutoModelForSeq2SeqLM,
    ),
    ZooEntry("attention-bridge", "t5", "base", T5AttentionBridgeConfig, T5AttentionBridgeModel, AutoModel),
    ZooEntry(
        "attention-bridge",
        "t5",
        "translation",
        T5AttentionBridgeConfig,
        T5AttentionBridgeForConditionalGeneration,
        AutoModelForSeq2SeqLM,
    ),
)

TASKS = sorted({e.task for e in ZOO})
MECHANISMS = sorted({e.mechanism for e in ZOO})


def find_entry(mechanism: str, model_type: str, task: str) -> ZooEntry:
    """The zoo entry for a mechanism on a stock `model_type` and task, or an error listing what exists."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"`mechanism` must be one of {MECHANISMS}, got {mechanism!r}.")
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}, got {task!r}.")
    for entry in ZOO:
        if entry.mechanism == mechanism and task == entry.task:
            if model_type in (entry.stock_model_type, entry.config_class.model_type):
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
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return "sequence-classification"
    if any(a.endswith(("LMHeadModel", "ForCausalLM")) for a in architectures):
        return "causal-lm"
    if any(a.endswith(("MTModel", "ForConditionalGeneration")) for a in architectures):
        return "translation"
    return "base"


@dataclass
class ConversionReport:
    entry: ZooEntry
    missing_keys: list[str]
    unexpected_keys: list[str]
    new_mechanism_keys: list[str]
    new_head_keys: list[str]
    parameters: dict


def convert(
    source: str,
    mechanism: str,
    task: str | None = None,
    preset: str | None = None,
    **options,
):
    """Load a stock checkpoint as a zoo model: every stock weight loaded, the mechanism initialised per its config.

    Returns `(model, report)`. Raises `ValueError` for an option name the mechanism's config does not have (naming
    the closest one), or if a stock base weight would be missing or a checkpoint weight would go unused, which means
    the checkpoint is not the architecture it claims to be.
    """
    config_dict, _ = PretrainedConfig.get_config_dict(source)
    task = task or default_task(config_dict)
    entry = find_entry(mechanism, config_dict.get("model_type"), task)
    check_option_names(entry.config_class, options)
    if preset is not None:
        check_choice("preset", preset, entry.config_class.presets)
        options = {**entry.config_class.presets[preset], **options}
    config = entry.config_class.from_pretrained(source, **options)
    model, info = entry.model_class.from_pretrained(source, config=config, output_loading_info=True)
    markers = model.mechanism_param_markers
    missing = list(info["missing_keys"])
    unexpected = list(info["unexpected_keys"])
    new_mechanism = [k for k in missing if any(m in k for m in markers)]
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


def staging_folders(output_dir: str) -> tuple[str, str]:
    """The hidden folders beside `output_dir` that `save_atomically` writes the new model into and parks the old one
    in while it swaps them: `.NAME.interlayer-new` and `.NAME.interlayer-old`."""
    parent, name = os.path.split(os.path.abspath(output_dir))
    return os.path.join(parent, f".{name}.interlayer-new"), os.path.join(parent, f".{name}.interlayer-old")


def recover_interrupted_save(output_dir: str) -> None:
    """Undo what a `save_atomically` killed between its two renames left behind: the previous model parked in
    `.NAME.interlayer-old` with no `output_dir` goes back into place; a finished or half-written staging folder of
    an interrupted save is removed."""
    output_dir = os.path.abspath(output_dir)
    new, old = staging_folders(output_dir)
    if os.path.isdir(old):
        if os.path.exists(output_dir):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, output_dir)
    shutil.rmtree(new, ignore_errors=True)


def prepare_output_dir(output_dir: str, overwrite: bool) -> None:
    """Recover an interrupted save into `output_dir`, then refuse it if it is not empty unless `overwrite`: call
    before any work that the refusal would waste."""
    recover_interrupted_save(output_dir)
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        raise FileExistsError(f"{output_dir} exists and is not empty; pass overwrite=True (--overwrite) to replace it.")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise FileExistsError(f"{output_dir} exists and is not a folder.")


def save_atomically(
    model, output_dir: str, tokenizer_source: str | None = None, overwrite: bool = False, tokenizer=None
) -> str:
    """`save_pretrained` into a hidden folder beside `output_dir`, then swap it into place, so that an interrupted
    save never leaves a half-written model or loses the one already there, and an existing folder is only replaced
    when `overwrite` is set. The tokenizer saved beside the model is `tokenizer` (an object) or the one of
    `tokenizer_source` (a checkpoint).

    The swap is two renames: the old folder to `.NAME.interlayer-old`, the new one into place. An exception between
    them puts the old folder back at once; a process killed between them leaves it parked, and the next
    `save_atomically` (or `recover_interrupted_save`) into the same folder puts it back before anything else. A
    parked folder that cannot be removed after a successful swap is reported as a warning, not an error: the new
    model is saved."""
    output_dir = os.path.abspath(output_dir)
    prepare_output_dir(output_dir, overwrite)
    os.makedirs(os.path.dirname(output_dir), exist_ok=True)
    new, old = staging_folders(output_dir)
    try:
        model.save_pretrained(new)
        if tokenizer is not None:
            tokenizer.save_pretrained(new)
        elif tokenizer_source is not None:
            save_tokenizer(tokenizer_source, new)
        if os.path.exists(output_dir):
            os.replace(output_dir, old)
        os.replace(new, output_dir)
    except BaseException:
        if os.path.isdir(old) and not os.path.exists(output_dir):
            os.replace(old, output_dir)
        raise
    finally:
        shutil.rmtree(new, ignore_errors=True)
    if os.path.exists(old):
        shutil.rmtree(old, ignore_errors=True)
        if os.path.exists(old):
            warnings.warn(f"The model is saved in {output_dir}, but the previous one could not be removed from {old}.")
    return output_dir


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
