"""Decoder recipes on GSM8K: hyper-connections (seed 002) and latent back-projection (seed 003) on a causal LM,
each against LoRA and plain fine-tuning of the last layers at the mechanism's trainable budget, and full
fine-tuning.

Data: GSM8K training problems as "Question: ...\\nAnswer: ..." texts (the latent seed's format), packed into blocks
of the scale's length with the end-of-text token between problems (the HC seed packs too). The last problems are
held out (cpu: the last 500 of `../shared/data/gsm8k/train.jsonl`; the GSM8K test split is never used for tuning);
the rest is shuffled by the seed, so every method of one seed trains on the same blocks in the same order.
Metric: held-out loss and perplexity. GSM8K exact match is not computed at cpu scale: SmolLM2-135M answers close to
none of the problems (its 5-shot score is at the floor), and greedy decoding of 200-token answers for a held-out set
costs more than the training; at seed scale each trained model is saved so lm-eval's `gsm8k` (5-shot) scores it, as
the HC seed did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from .core import Recipe, RunResult, checkpoints, lr
from .loops import fingerprint, lm_eval_loss, mixed_precision, param_groups, train, trainable_count
from .methods import Method, build

LLAMA_LORA_SETS = [
    ("q_proj", "v_proj"),
    ("q_proj", "k_proj", "v_proj", "o_proj"),
    ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    ("v_proj",),  # the smallest layouts, for budgets below one rank of q and v in one layer
    ("k_proj",),
]


@dataclass(frozen=True)
class LMScale:
    model: str  # "smollm2" (the offline checkpoint), "tiny" (built here) or a Hub id
    train_blocks: int  # training blocks (each method sees the same ones, once)
    batch: int
    block: int  # tokens per block
    eval_blocks: int
    held_out: int  # problems held out at the end of the training file
    accumulation: int = 1
    autocast: str | None = None  # "bfloat16": float32 weights, bf16 autocast (the seeds' mixed precision)


SCALES = {
    "quick": LMScale(model="tiny", train_blocks=16, batch=4, block=64, eval_blocks=8, held_out=40),
    "cpu": LMScale(model="smollm2", train_blocks=160, batch=8, block=128, eval_blocks=32, held_out=500),
    # the seed: one epoch of GSM8K train (about 1,500 blocks of 1024), batch 4 x 8 accumulated, bf16
    "seed": LMScale(
        model="Qwen/Qwen3-0.6B",
        train_blocks=10**6,
        batch=32,
        block=1024,
        eval_blocks=256,
        held_out=0,
        accumulation=8,
        autocast="bfloat16",
    ),
}


def methods_for(mechanism: str, seed_options: dict, seed_lr: float, schedule: str) -> dict[str, Method]:
    """The five methods of a decoder recipe. The seed's recipe trains the mechanism alone at the seed's learning
    rate; the retrofit recipe (identity at conversion, new parameters at 100x the base learning rate, the base
    training too) is the one Delta Attention Residuals used on Qwen3-0.6B. LoRA and the last layers train as many
    parameters as the mechanism adds; full fine-tuning trains every weight at the base learning rate."""
    base_lr = 2e-5
    return {
        "seed": Method(
            mechanism,
            {**seed_options, "freeze_base": True},
            "mechanism",
            {"new": seed_lr},
            schedule,
            about=f"the mechanism alone, base frozen, lr {lr(seed_lr)} (the seed's recipe)",
        ),
        "retrofit": Method(
            mechanism,
            {**seed_options, "identity_init": True, "freeze_base": False},
            "mechanism+base",
            {"base": base_lr, "new": 100 * base_lr},
            schedule,
            about=f"identity at conversion; base lr {lr(base_lr)}, the mechanism at 100x ({lr(100 * base_lr)})",
        ),
        "lora": Method(None, {}, "lora", {"lora": 2e-4}, schedule, about="LoRA at the mechanism's budget, lr 2e-4"),
        "last-layers": Method(
            None, {}, "top", {"base": 1e-4}, schedule, about="the top tensors at the mechanism's budget, lr 1e-4"
        ),
        "full": Method(None, {}, "all", {"base": base_lr}, schedule, about=f"every weight, lr {lr(base_lr)}"),
    }


HC_OPTIONS = dict(hc_mode="static", hc_streams=4)
LATENT_OPTIONS = dict(latent_source="same_position", identity_init=False)  # the seed's init: gate 0.5, Xavier up
HC_METHODS = methods_for("hyper-connections", HC_OPTIONS, seed_lr=2e-5, schedule="cosine")
LATENT_METHODS = methods_for("latent", LATENT_OPTIONS, seed_lr=1e-4, schedule="linear")


def gsm8k_texts(scale: LMScale) -> tuple[list[str], list[str]]:
    """Training and held-out texts. Offline scales read `../shared/data/gsm8k/train.jsonl` and hold out its last
    `held_out` problems; the seed scale reads GSM8K from the Hub (train, and test for held-out loss only)."""
    if scale.held_out == 0:
        from datasets import load_dataset

        data = load_dataset("openai/gsm8k", "main")
        fmt = [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in data["train"]]
        return fmt, [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in data["test"]]
    from ..training import shared_data

    path = shared_data("gsm8k", "train.jsonl")
    if path is None:
        raise FileNotFoundError("the GSM8K recipes need ../shared/data/gsm8k/train.jsonl (the project's data folder)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    texts = [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in rows]
    return texts[: -scale.held_out], texts[-scale.held_out :]


def stock_checkpoint(scale: LMScale, workdir: Path) -> str:
    """The stock checkpoint every method starts from."""
    if scale.model == "smollm2":
        from ..training import smollm2_checkpoint

        return smollm2_checkpoint(str(checkpoints(workdir) / "smollm2-135m"))
    if scale.model != "tiny":
        return scale.model
    folder = checkpoints(workdir) / "tiny-llama"
    if (folder / "config.json").exists():
        return str(folder)
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..training import train_byte_bpe
    from ..zoo import save_atomically

    train_texts, _ = gsm8k_texts(scale)
    tokenizer = train_byte_bpe("\n".join(train_texts[:400]), vocab_size=384)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(1234)
    return save_atomically(LlamaForCausalLM(config), str(folder), tokenizer=tokenizer)


def packed_blocks(tokenizer, texts: list[str], block: int, count: int) -> torch.Tensor:
    """The texts in order, end-of-text between them, cut into `count` blocks of `block` tokens (fewer if short)."""
    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
        if len(ids) >= block * count:
            break
    usable = min(count, len(ids) // block)
    return torch.tensor(ids[: usable * block]).view(usable, block)


def lm_data(scale: LMScale, checkpoint: str, seed: int) -> tuple[list[dict], list[dict]]:
    """Training batches in the seed's order and the fixed held-out batches."""
    from transformers import AutoTokenizer

    from ..training import lm_batches

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    train_texts, eval_texts = gsm8k_texts(scale)
    order = torch.randperm(len(train_texts), generator=torch.Generator().manual_seed(seed)).tolist()
    train_blocks = packed_blocks(tokenizer, [train_texts[i] for i in order], scale.block, scale.train_blocks)
    eval_blocks = packed_blocks(tokenizer, eval_texts, scale.block, scale.eval_blocks)
    return lm_batches(train_blocks, scale.batch), lm_batches(eval_blocks, scale.batch)


def lm_run(methods: dict[str, Method]):
    def run(method_name: str, seed: int, scale_name: str, workdir: Path) -> RunResult:
        scale = SCALES[scale_name]
        device = "cuda" if torch.cuda.is_available() else "cpu"
        checkpoint = stock_checkpoint(scale, workdir)
        train_batches, eval_batches = lm_data(scale, checkpoint, seed)
        method = methods[method_name]
        from transformers import AutoModelForCausalLM

        model, classify, details = build(
            method, checkpoint, methods["seed"], seed, AutoModelForCausalLM, LLAMA_LORA_SETS
        )
        model = model.to(device)
        groups = param_groups(model, method.lrs, classify, weight_decay=0.0)
        with mixed_precision(device, scale.autocast):
            before = lm_eval_loss(model, eval_batches, device)
            log = train(
                model, groups, train_batches, schedule=method.schedule, device=device, accumulation=scale.accumulation
            )
            metrics = {**lm_eval_loss(model, eval_batches, device), "eval_loss_before": before["eval_loss"], **log}
        if scale_name == "seed":
            model.save_pretrained(workdir / "model")
        tokens = sum(b["input_ids"].numel() for b in train_batches)
        details.update(data_order=fingerprint(train_batches), held_out=fingerprint(eval_batches), lrs=method.lrs)
        return RunResult(metrics=metrics, trainable_params=trainable_count(model), train_tokens=tokens, details=details)

    return run


SCALE_NOTES = {
    "quick": "a 4-layer Llama (hidden 64) with random weights and a 384-token BPE, 16 blocks of 64 tokens",
    "cpu": "SmolLM2-135M (real weights, fp32), 160 blocks of 128 tokens (20,480 tokens, 20 steps of 8), held-out "
    "loss on 32 blocks of the last 500 GSM8K training problems",
    "seed": "Qwen3-0.6B in bf16, one epoch of GSM8K train packed in blocks of 1024, batch 4 x 8 accumulated; held-out "
    "loss on the GSM8K test split; the saved model is scored with lm-eval gsm8k 5-shot",
}

# the seed's recipe trains the mechanism alone, at the baselines' budget (and against full fine-tuning, how far it is
# from training everything); the retrofit trains the base too
COMPARISONS = (("seed", "lora"), ("seed", "last-layers"), ("seed", "full"), ("retrofit", "full"))

NOTES = (
    "GSM8K exact match is not measured at the cpu scale: SmolLM2-135M solves close to none of the problems, so it "
    "cannot separate methods, and greedy decoding of 200-token answers would cost more than the training. At the "
    "seed scale each trained model is saved under `--work` for lm-eval's `gsm8k` (5-shot), as the HC seed scored it."
)

RECIPES = [
    Recipe(
        name="hc-gsm8k",
        mechanism="hyper-connections",
        summary="Static hyper-connections (K=4) on a causal LM, GSM8K question/answer text (seed 002: Qwen3-0.6B, "
        "base frozen, lr 2e-5 cosine)",
        methods=tuple(HC_METHODS),
        run=lm_run(HC_METHODS),
        abouts={name: m.about for name, m in HC_METHODS.items()},
        comparisons=COMPARISONS,
        scale_notes=SCALE_NOTES,
        notes=NOTES,
    ),
    Recipe(
        name="latent-gsm8k",
        mechanism="latent",
        summary="Latent back-projection (same-position latents, two passes) on a causal LM, GSM8K question/answer "
        "text (seed 003: Qwen3-0.6B, base frozen, lr 1e-4)",
        methods=tuple(LATENT_METHODS),
        run=lm_run(LATENT_METHODS),
        abouts={name: m.about for name, m in LATENT_METHODS.items()},
        comparisons=COMPARISONS,
        scale_notes=SCALE_NOTES,
        notes=NOTES,
        shares={"full": "hc-gsm8k"},
    ),
]
