"""Tiny models of every mechanism's record, built from its `Example`s (`interlayer.mechanisms`): the tiny stock
checkpoint of the example's family and its batches, labels, LoRA targets and config fields, by family. Whatever test
enumerates mechanisms builds its cases here (the conformance suite, the multi-process runs, the decoder families), so a
new mechanism is covered by its record alone; a new family needs its fixtures here."""

import dataclasses

import stock_checkpoints
from batches import labels_for, lm_batch, lm_labels, pair_batch, source_batch, target_labels, token_labels_for
from stock_checkpoints import (
    FAMILY_CONFIG,
    TINY_BART,
    TINY_DECODER,
    TINY_ENCODER,
    TINY_GPT2,
    TINY_MARIAN,
    TINY_T5,
    build_bert,
    build_gpt2,
    encoder_builder,
)

from interlayer.mechanisms import MECHANISMS, Example, Mechanism
from interlayer.zoo import AUTO_CLASS_TASKS

DECODERS = ("llama", "qwen3", "qwen2", "mistral", "phi3", "olmo2", "gemma2", "gemma3_text", "gpt2")
SEQ2SEQ_CONFIG = {"marian": TINY_MARIAN, "bart": TINY_BART, "mbart": TINY_BART, "m2m_100": TINY_BART, "t5": TINY_T5}
# the attention bridge's sizes on the tiny seq2seq checkpoints
TINY_BRIDGE = MECHANISMS["attention-bridge"].tiny_options
# the stock projections a LoRA adapter wraps in each family (PEFT cannot find them for the zoo's model types)
LORA_TARGETS = {
    "phi3": ["qkv_proj"],
    "gpt2": ["c_attn"],
    "bert": ["query", "value"],
    "roberta": ["query", "value"],
    "xlm-roberta": ["query", "value"],
    "electra": ["query", "value"],
    "deberta-v2": ["query_proj", "value_proj"],
    "modernbert": ["Wqkv"],
    "t5": ["q", "v"],
}
TASK_LABELS = {
    "causal-lm": lm_labels,
    "sequence-classification": labels_for,
    "token-classification": token_labels_for,
    "translation": target_labels,
}
# the tiny stock config a `stock` variant is built from, where it is not its family's
STOCK_CONFIG = {"gpt2": TINY_GPT2, "bert_wide": TINY_ENCODER, "roberta_wide": TINY_ENCODER}


def kind(family: str) -> str:
    return "decoder" if family in DECODERS else "seq2seq" if family in SEQ2SEQ_CONFIG else "encoder"


def classes_on(record: Mechanism, family: str) -> dict[str, type]:
    """`{task: model class}` of the record's classes on a family (as `interlayer.zoo.ZOO` lists them)."""
    return {
        AUTO_CLASS_TASKS[cls._auto_class]: cls
        for cls in record.model_classes
        if family in cls.config_class.stock_model_types
    }


def task_of(record: Mechanism, example: Example) -> str:
    """The example's task: its own, else the mechanism's task on the family that is not the base model's."""
    return example.task or sorted(task for task in classes_on(record, example.family) if task != "base")[0]


def class_of(record: Mechanism, example: Example) -> type:
    return classes_on(record, example.family)[task_of(record, example)]


def stock_builder(record: Mechanism, example: Example):
    """`build(folder) -> stock model`: the example's tiny stock checkpoint (seed 0), saved into `folder`."""
    if example.stock:
        return getattr(stock_checkpoints, f"build_stock_{example.stock}")
    if kind(example.family) == "encoder":
        return encoder_builder(example.family, task_of(record, example))
    name = {"gpt2": "gpt2_decoder", "gemma3_text": "gemma3", "m2m_100": "m2m100"}.get(example.family, example.family)
    return getattr(stock_checkpoints, f"build_stock_{name}")


def stock_config_fields(example: Example) -> dict:
    """The fields of the example's tiny stock config, over which its config errors are checked."""
    if example.stock in STOCK_CONFIG:
        return STOCK_CONFIG[example.stock]
    family_kind = kind(example.family)
    if family_kind == "decoder":
        return TINY_DECODER
    if family_kind == "seq2seq":
        return SEQ2SEQ_CONFIG[example.family]
    return {**TINY_ENCODER, **{k: v for k, v in FAMILY_CONFIG[example.family].items() if k != "model_type"}}


def batch_of(example: Example) -> dict:
    """The example's padded batch (example 0 unpadded)."""
    family_kind = kind(example.family)
    if family_kind == "decoder":
        return lm_batch()
    return source_batch() if family_kind == "seq2seq" else pair_batch(example.family)


def active_options(record: Mechanism, example: Example) -> dict:
    return {**record.tiny_options, **example.options}


def conformance_case(record: Mechanism, example: Example):
    """The conformance suite's case of one example."""
    from interlayer.testing import ConformanceCase

    model_class = class_of(record, example)
    task = task_of(record, example)
    family_kind = kind(example.family)
    base = stock_config_fields(example)
    errors = [e for e in record.config_errors if e.families is None or example.family in e.families]
    return ConformanceCase(
        build_stock=stock_builder(record, example),
        model_class=model_class,
        auto_class_name=model_class._auto_class,
        active_options=active_options(record, example),
        identity_options={**record.tiny_options, **example.identity_options},
        more_identity_options=[dict(o) for o in example.more_identity_options],
        make_batch=lambda: batch_of(example),
        labels=TASK_LABELS[task],
        wrong_architecture=build_gpt2 if family_kind == "encoder" else build_bert,
        config_errors=[({**base, **record.tiny_options, **e.options}, e.pattern) for e in errors],
        lora_targets=LORA_TARGETS.get(example.family, ["q_proj", "v_proj"]),
        stationary=list(record.stationary),
    )


@dataclasses.dataclass(frozen=True)
class Tiny:
    """One example of one mechanism, as the enumerating tests name and build it."""

    name: str  # the example's label
    record: Mechanism
    example: Example

    @property
    def model_class(self) -> type:
        return class_of(self.record, self.example)

    @property
    def options(self) -> dict:
        return active_options(self.record, self.example)

    @property
    def build_stock(self):
        return stock_builder(self.record, self.example)

    @property
    def task(self) -> str:
        return task_of(self.record, self.example)


def no_dropout(model_class) -> dict:
    """Options that set every dropout probability of `model_class`'s config to 0 (the stock ones and the mechanism's),
    for runs that must be deterministic across processes."""
    defaults = vars(model_class.config_class())
    return {
        name: 0.0
        for name, value in defaults.items()
        if ("dropout" in name or "pdrop" in name) and (value is None or isinstance(value, float))
    }


def examples(distributed: bool = False) -> dict[str, Tiny]:
    """Every example of every registered mechanism by label (`distributed`: those trained in several processes)."""
    return {
        example.label: Tiny(example.label, record, example)
        for record in MECHANISMS.values()
        for example in record.examples
        if example.distributed or not distributed
    }


def conformance_suites() -> dict[str, type]:
    """The conformance suite (`interlayer.testing`) on every example: `{"Test<label>Conformance": class}`, for a test
    module to expose (`tests/contract/test_conformance.py`). The first example of each zoo class runs the whole suite
    (`ConformanceSuite`); a further example of the same class, another of its option sets, the parts its options can
    change (`OptionsConformanceSuite`)."""
    from interlayer.testing import ConformanceSuite, OptionsConformanceSuite

    suites, seen = {}, set()
    for tiny in examples().values():

        def make_case(self, tiny=tiny):
            return conformance_case(tiny.record, tiny.example)

        suite = OptionsConformanceSuite if tiny.model_class in seen else ConformanceSuite
        seen.add(tiny.model_class)
        name = f"Test{tiny.name}Conformance"
        doc = f"The conformance suite on {tiny.record.name}: {tiny.name} ({tiny.example.family}, {tiny.options})."
        suites[name] = type(name, (suite,), {"make_case": make_case, "__doc__": doc})
    return suites
