"""Sentinel head pruning swept over the share of heads removed (issue 21, item 3): held-out perplexity and next-token
accuracy right after one-shot pruning, the share of heads actually removed, and the pruned model's forward time
against the unpruned converted model, for each head-selection strategy and for the seed's controller.

Two recipes, the same sweep on two families:

- `sentinel-smollm2`: SmolLM2-135M (Llama family, grouped-query attention: 30 layers x 9 query heads, 3 key/value
  heads) converted to sentinel gates;
- `sentinel-gpt2`: a GPT-2-architecture model. No real GPT-2 weights are available offline, so at `cpu` scale it is
  a small GPT-2 (6 layers, hidden 256, 8 heads, byte-level BPE of 1,024 trained on the same text) trained here from
  scratch on the first 90% of tinyshakespeare, once per output folder (cached in `OUT/work/checkpoints`); at `seed`
  scale it is the Hub's `gpt2` (the seed's model).

Methods: `none@0` (the converted, unpruned model), `<strategy>@<percent>` for the strategies `entropy`,
`magnitude`, `importance` (Michel et al. 2019), `random`, and the two one-shot structured-pruning baselines of
the FLAP paper (An et al. 2024, arXiv:2312.11983) as its authors' code computes them: `flap` (the fluctuation of
each channel of the output projection's input times the squared norm of its column, squared, standardised over the
layer's channels and averaged per head; `interlayer.sentinel.flap_head_scores`) and `wanda-sp` (the structured
Wanda: |W| times the input's root mean square, pruned evenly over the layers; `wanda_sp_head_scores`), with
`flap-heads` (the same fluctuation summed per head and standardised over the layer's heads: this project's `flap`
before it followed the authors' code) at 20, 40 and 60% of the heads; `controller`: a short run training only the
gate logits with the L1 pressure while `SentinelControllerCallback` (driven step by step, as the Trainer would)
lowers and masks heads within its budget (the seed's 30%), then `prune_masked_heads()`; its `heads_pruned` is
what the controller chose to remove. The `+ft` methods add a short recovery fine-tune after pruning, as the
pruning papers report it (every weight but the gates, on training blocks the seed draws); `none@0+ft` fine-tunes
the unpruned model the same way, the control for what the fine-tune gains without pruning.

Pruning is per head (`uniform=False`): the least important `round(share * all heads)` query heads over the whole
model, so `heads_pruned` equals the requested share to within half a head (1/540 on SmolLM2's 270 heads); layers
keep different head counts and, on SmolLM2, a key/value head goes only with every query head of its group. (The
uniform variant, whole key/value groups per layer, moves in thirds on SmolLM2 and is what `interlayer prune
--uniform --stock` exports; it is not swept here.) Without `+ft` the perplexity is the one-shot one.

Data: tinyshakespeare, the last 10% of the text held out (`quick`: a synthetic token stream, its last 10%).
The seed draws the scoring blocks (from the first 90%; the controller trains on blocks drawn the same way) and the
held-out blocks (from the last 10%): every method of a seed sees the same held-out and scoring data (the
fingerprints in the details), and another seed another sample of both. For `magnitude` the seed changes only the
held-out sample; for `random` it also changes the heads. `forward_time_ratio` is the median over interleaved
repeats of the pruned model's inference forward on one held-out batch over the unpruned converted model's, both
measured in the run: a measurement on a shared machine, to read with its spread over seeds.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..saving import save_file_atomically
from .core import Estimate, Recipe, RunResult, checkpoints, gpu_estimate, lr
from .loops import fingerprint, lm_eval_loss, param_groups, train

STRATEGY_NAMES = ("entropy", "magnitude", "importance", "random", "flap", "flap-heads", "wanda-sp")
SHARES = (20, 40, 60)
RECOVERED = ("none@0", "importance@40", "flap@40", "wanda-sp@40", "random@40")
"""The methods also run with a recovery fine-tune after pruning (`<method>+ft`)."""
RECOVERY = "+ft"
METHODS = (
    "none@0",
    *(f"{strategy}@{share}" for share in SHARES for strategy in STRATEGY_NAMES),
    "controller",
    *(method + RECOVERY for method in RECOVERED),
)
COMPARISONS = (
    *(
        (f"{strategy}@{share}", f"random@{share}")
        for share in SHARES
        for strategy in STRATEGY_NAMES
        if strategy != "random"
    ),
    *((method + RECOVERY, "random@40" + RECOVERY) for method in RECOVERED if method not in ("none@0", "random@40")),
)
"""The sweep's declared comparisons: every scoring strategy against random pruning of the same share, before and
after the recovery fine-tune (does the criterion beat chance)."""
VERSION, CHANGES = (
    2,
    (
        "`flap` follows the authors' code (rows of the earlier `flap` are `flap-heads`); `wanda-sp` and the `+ft` "
        "recovery methods added; the cpu-scale GPT-2 trains 2,000 steps, not 400"
    ),
)
CONTROLLER_BUDGET = 0.3  # the seed's max_pruned_fraction
ABOUTS = {
    "none@0": "the converted model, unpruned (the stock function)",
    **{
        f"{s}@{p}": f"{p}% of the heads pruned one-shot by `{s}` scores, no training"
        for p in SHARES
        for s in STRATEGY_NAMES
    },
    "controller": "gate logits trained with L1 pressure under the controller, then its masked heads pruned",
    "none@0+ft": "the unpruned model fine-tuned as the recovered methods are (the control)",
    **{m + RECOVERY: f"`{m}`, then the recovery fine-tune" for m in RECOVERED if m != "none@0"},
}


@dataclass(frozen=True)
class Setting:
    """The sizes of one scale: tokens per block; blocks scored, held out (in batches of `batch`) and trained on per
    controller step; the rows of the forward-timing batch and its repeats; the controller's steps."""

    block: int
    score_blocks: int
    eval_blocks: int
    batch: int
    timing_rows: int
    timing_repeats: int
    controller_steps: int
    controller_batch: int
    controller_warmup: int
    recovery_steps: int
    recovery_batch: int
    recovery_lr: float = 1e-4
    gate_lr: float = 0.05
    controller_lr: float = 20.0


SETTINGS = {
    "quick": Setting(
        block=16, score_blocks=4, eval_blocks=4, batch=2, timing_rows=2, timing_repeats=2,
        controller_steps=6, controller_batch=2, controller_warmup=1, recovery_steps=4, recovery_batch=2,
    ),
    "cpu": Setting(
        block=128, score_blocks=8, eval_blocks=16, batch=4, timing_rows=2, timing_repeats=3,
        controller_steps=10, controller_batch=1, controller_warmup=1, recovery_steps=16, recovery_batch=4,
    ),
    "seed": Setting(
        block=512, score_blocks=64, eval_blocks=128, batch=8, timing_rows=8, timing_repeats=7,
        controller_steps=300, controller_batch=8, controller_warmup=30, recovery_steps=200, recovery_batch=8,
        recovery_lr=5e-5,
    ),
}  # fmt: skip

QUICK_VOCAB = 64


def parse_method(method: str) -> tuple[str, float]:
    """`entropy@40` -> ("entropy", 0.4); `none@0` -> ("none", 0.0); `controller` -> ("controller", budget);
    `flap@40+ft` -> ("flap", 0.4) (whether it fine-tunes after pruning: `method.endswith(RECOVERY)`)."""
    if method not in METHODS:
        raise ValueError(f"the sentinel sweep has no method {method!r}; it has {list(METHODS)}.")
    if method == "controller":
        return "controller", CONTROLLER_BUDGET
    strategy, _, percent = method.removesuffix(RECOVERY).partition("@")
    return strategy, int(percent) / 100


def device_and_dtype(scale: str) -> tuple[str, torch.dtype]:
    if scale == "seed" and torch.cuda.is_available():
        return "cuda", torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return "cpu", torch.float32


# ---- checkpoints -------------------------------------------------------------------------------------------------


def tiny_llama(folder: Path) -> str:
    """A random stock Llama with SmolLM2's grouping (3 query heads per key/value head): 2 layers x 6 heads."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..zoo import save_atomically

    if not (folder / "model.safetensors").exists():
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=QUICK_VOCAB,
            hidden_size=48,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=6,
            num_key_value_heads=2,
            head_dim=8,
            max_position_embeddings=64,
        )
        save_atomically(LlamaForCausalLM(config), str(folder))
    return str(folder)


def tiny_gpt2(folder: Path) -> str:
    """A random stock GPT-2: 2 layers x 6 heads, hidden 48."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from ..zoo import save_atomically

    if not (folder / "model.safetensors").exists():
        torch.manual_seed(0)
        config = GPT2Config(vocab_size=QUICK_VOCAB, n_embd=48, n_layer=2, n_head=6, n_positions=64)
        save_atomically(GPT2LMHeadModel(config), str(folder))
    return str(folder)


GPT2_SHAKESPEARE = dict(
    n_layer=6, n_embd=256, n_head=8, n_positions=128, vocab=1024, block=128, batch=16, steps=2000, lr=1e-3
)
"""The `cpu` scale's GPT-2: the model of `benchmarks/sentinel_shakespeare.py`, trained as long (2,000 x 16 x 128
tokens, AdamW lr 1e-3, cosine; 18.7 minutes on 2 cores there, once per work folder), where pruning half its heads at
random costs 28 -> 36 in perplexity. Trained for 400 steps it barely used attention (60% of its heads pruned at
random cost +0.03 nats), so the order of the strategies was noise."""


def gpt2_shakespeare_description() -> str:
    c = GPT2_SHAKESPEARE
    return (
        f"GPT-2 architecture ({c['n_layer']} layers x {c['n_head']} heads, hidden {c['n_embd']}, BPE {c['vocab']:,}) "
        f"trained from scratch for {c['steps']:,} steps of {c['batch']} x {c['block']} tokens (AdamW lr {lr(c['lr'])}, "
        "cosine) on the first 90% of tinyshakespeare, once per work folder (no GPT-2 weights offline)"
    )


def shakespeare_text() -> str:
    from ..training import shared_data

    path = shared_data("tinyshakespeare", "input.txt")
    if path is None:
        raise FileNotFoundError("the sentinel sweep needs tinyshakespeare (../shared/data/tinyshakespeare/input.txt)")
    return path.read_text()


def gpt2_shakespeare(folder: Path) -> str:
    """The GPT-2-architecture stand-in for GPT-2 at `cpu` scale: trained from scratch on the first 90% of
    tinyshakespeare with seed 0, whatever the run's seed (it is the recipe's checkpoint), and saved once."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from ..training import lm_blocks, train_byte_bpe
    from ..zoo import save_atomically

    if (folder / "model.safetensors").exists():
        return str(folder)
    c = GPT2_SHAKESPEARE
    text = shakespeare_text()
    train_text = text[: int(0.9 * len(text))]
    torch.manual_seed(0)
    tokenizer = train_byte_bpe(train_text, vocab_size=c["vocab"])
    config = GPT2Config(
        n_layer=c["n_layer"],
        n_embd=c["n_embd"],
        n_head=c["n_head"],
        n_positions=c["n_positions"],
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    blocks = lm_blocks(tokenizer(train_text)["input_ids"], c["block"])
    order = torch.randint(len(blocks), (c["steps"], c["batch"]), generator=torch.Generator().manual_seed(0))
    batches = [{"input_ids": blocks[i], "labels": blocks[i]} for i in order]
    train(
        model, param_groups(model, {"all": c["lr"]}, lambda name: "all", 0.01), batches, warmup=0.05, schedule="cosine"
    )
    save_atomically(model.eval(), str(folder), tokenizer=tokenizer)
    return str(folder)


@dataclass(frozen=True)
class Family:
    """What a recipe prunes: the sentinel class, and the stock checkpoint at each scale."""

    model_class: str
    quick: object
    cpu: object
    hub_id: str

    def checkpoint(self, scale: str, workdir: Path) -> str:
        folder = checkpoints(workdir)
        if scale == "quick":
            return self.quick(folder / f"tiny-{self.model_class}")
        if scale == "cpu":
            return self.cpu(folder)
        return self.hub_id


def smollm2(folder: Path) -> str:
    """The real SmolLM2-135M, written once from the offline GGUF (`interlayer.training.smollm2_checkpoint`)."""
    from ..training import smollm2_checkpoint

    return smollm2_checkpoint(str(folder / "smollm2-135m"))


SMOLLM2 = Family("LlamaSentinelForCausalLM", tiny_llama, smollm2, "HuggingFaceTB/SmolLM2-135M")
GPT2 = Family(
    "GPT2SentinelLMHeadModel",
    tiny_gpt2,
    lambda folder: gpt2_shakespeare(folder / f"gpt2-shakespeare-{GPT2_SHAKESPEARE['steps']}"),
    "gpt2",
)


# ---- data --------------------------------------------------------------------------------------------------------


def token_blocks(scale: str, checkpoint: str, block: int, workdir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(training blocks, held-out blocks): the text's first 90% and last 10%, tokenised by the checkpoint's
    tokenizer (cached beside the checkpoints); at `quick` a synthetic stream of tokens (seed 0)."""
    from ..training import lm_blocks

    if scale == "quick":
        stream = torch.randint(QUICK_VOCAB, (4000,), generator=torch.Generator().manual_seed(0)).tolist()
        cut = int(0.9 * len(stream))
        return lm_blocks(stream[:cut], block), lm_blocks(stream[cut:], block)
    name = checkpoint.replace("/", "--") if scale == "seed" else Path(checkpoint).name  # a Hub id, or a folder
    cache = checkpoints(workdir) / "tokens" / f"{name}-{block}.pt"
    if cache.exists():
        return tuple(torch.load(cache))
    from transformers import AutoTokenizer

    text = shakespeare_text()
    cut = int(0.9 * len(text))
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    split = (lm_blocks(tokenizer(text[:cut])["input_ids"], block), lm_blocks(tokenizer(text[cut:])["input_ids"], block))
    cache.parent.mkdir(parents=True, exist_ok=True)
    save_file_atomically(cache, lambda staged: torch.save(split, staged))
    return split


def seeded_batches(blocks: torch.Tensor, count: int, batch: int, generator: torch.Generator) -> list[dict]:
    from ..training import lm_batches

    chosen = blocks[torch.randperm(len(blocks), generator=generator)[: min(count, len(blocks))]]
    return lm_batches(chosen, batch)


# ---- measurements ------------------------------------------------------------------------------------------------


@torch.no_grad()
def forward_times(models: list, batch: dict, repeats: int, device: str) -> list[float]:
    """Median inference-forward time of each model on `batch`, measured in interleaved turns after a warm-up."""
    inputs = {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}
    times = [[] for _ in models]
    for model in models:
        model.eval()
        model(**inputs, use_cache=False)
    for _ in range(repeats):
        for model, spent in zip(models, times):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            model(**inputs, use_cache=False)
            if device == "cuda":
                torch.cuda.synchronize()
            spent.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def run_controller(model, batches: list[dict], setting: Setting, device: str) -> int:
    """Train only the gate logits (AdamW, lr `gate_lr`) with the L1 pressure while `SentinelControllerCallback` runs
    its updates at the Trainer's hooks; the masked heads are then pruned. Returns the gates trained."""
    from transformers import TrainerControl, TrainerState

    from ..sentinel import SentinelControllerCallback

    controller = SentinelControllerCallback(
        warmup_steps=setting.controller_warmup,
        update_frequency=1,
        learning_rate=setting.controller_lr,
        lr_floor=setting.controller_lr / 10,
        max_pruned_fraction=CONTROLLER_BUDGET,
    )
    for name, p in model.named_parameters():
        p.requires_grad_("sentinel_gate_logits" in name)
    gates = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(gates, lr=setting.gate_lr, weight_decay=0.0)
    state, control = TrainerState(), TrainerControl()
    model.train()
    for batch in batches:
        controller.on_step_begin(None, state, control, model=model)
        loss = model(**{k: v.to(device) for k, v in batch.items()}).loss  # the LM loss plus gate_l1 * sum of gates
        loss.backward()
        controller.on_pre_optimizer_step(None, state, control, model=model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state.global_step += 1
        controller.on_step_end(None, state, control, model=model)
    model.eval()
    model.prune_masked_heads()
    return sum(p.numel() for p in gates)


def recover(model, batches: list[dict], setting: Setting, device: str) -> int:
    """The recovery fine-tune after pruning: every weight but the gate logits, AdamW at `recovery_lr` with 10%
    warm-up and linear decay, one step per batch, in float32 (the model goes back to its dtype after). Returns the
    weights trained."""
    dtype = next(model.parameters()).dtype
    model.float()
    for name, p in model.named_parameters():
        p.requires_grad_("sentinel_gate_logits" not in name)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    groups = param_groups(model, {"all": setting.recovery_lr}, lambda name: "all", weight_decay=0.0)
    train(model, groups, batches, warmup=0.1, schedule="linear", device=device)
    model.requires_grad_(False)
    model.to(dtype).eval()
    return trained


def run_sweep(family: Family, method: str, seed: int, scale: str, workdir: Path) -> RunResult:
    """One (method, seed): convert the checkpoint, prune by the method, measure."""
    import interlayer

    from ..sentinel import prune_by_strategy

    strategy, share = parse_method(method)
    setting = SETTINGS[scale]
    device, dtype = device_and_dtype(scale)
    checkpoint = family.checkpoint(scale, workdir)
    train_blocks, held_out = token_blocks(scale, checkpoint, setting.block, workdir)
    generator = torch.Generator().manual_seed(seed)
    score = seeded_batches(train_blocks, setting.score_blocks, setting.batch, generator)
    evaluation = seeded_batches(held_out, setting.eval_blocks, setting.batch, generator)
    torch.manual_seed(seed)
    model = getattr(interlayer, family.model_class).from_pretrained(checkpoint, dtype=dtype).to(device)
    model.requires_grad_(False)
    config = model.config
    total = config.num_hidden_layers * config.num_attention_heads
    reference = copy.deepcopy(model)
    trainable, train_tokens = 0, 0
    if strategy == "controller":
        count = setting.controller_steps * setting.controller_batch
        steps = seeded_batches(train_blocks, count, setting.controller_batch, generator)
        trainable = run_controller(model, [{k: v.to(device) for k, v in b.items()} for b in steps], setting, device)
        train_tokens = sum(b["input_ids"].numel() for b in steps)
    elif strategy != "none":
        scoring = [{k: v.to(device) for k, v in b.items()} for b in score]
        prune_by_strategy(model, share, strategy, scoring, seed=seed)
    if method.endswith(RECOVERY):
        count = setting.recovery_steps * setting.recovery_batch
        steps = seeded_batches(train_blocks, count, setting.recovery_batch, generator)
        trainable = recover(model, steps, setting, device)
        train_tokens = sum(b["input_ids"].numel() for b in steps)
    metrics = lm_eval_loss(model, evaluation, device)
    timing = {"input_ids": evaluation[0]["input_ids"][: setting.timing_rows]}
    timing["attention_mask"] = torch.ones_like(timing["input_ids"])
    before, after = forward_times([reference, model], timing, setting.timing_repeats, device)
    pruned = {int(layer): len(heads) for layer, heads in config.pruned_heads.items() if heads}
    metrics["heads_pruned"] = sum(pruned.values()) / total
    metrics["forward_time_ratio"] = after / before
    return RunResult(
        metrics=metrics,
        trainable_params=trainable,
        train_tokens=train_tokens,
        details={
            "strategy": strategy,
            "requested_share": share,
            "heads_total": total,
            "pruned_heads_per_layer": {str(layer): pruned.get(layer, 0) for layer in range(config.num_hidden_layers)},
            "uniform": False,
            "checkpoint": checkpoint if scale == "seed" else Path(checkpoint).name,
            "heldout_fingerprint": fingerprint(evaluation),
            "scoring_fingerprint": fingerprint(score),
            "forward_s": {
                "unpruned": round(before, 5),
                "pruned": round(after, 5),
                "tokens": timing["input_ids"].numel(),
            },
            "device": device,
            "dtype": str(dtype).removeprefix("torch."),
        },
    )


def describe(scale: str) -> str:
    """What a scale's runs measure on, from its `Setting` (so that the notes stay true to the sizes)."""
    c = SETTINGS[scale]
    data = "a synthetic token stream" if scale == "quick" else "tinyshakespeare"
    return (
        f"{data}, last 10% held out: {c.eval_blocks} held-out blocks of {c.block} tokens, {c.score_blocks} scoring "
        f"blocks; controller: {c.controller_steps} steps of {c.controller_batch} x {c.block} tokens (gates only), "
        f"warm-up {c.controller_warmup}, an update every step, lr {c.controller_lr:g} (on purpose not the seed's "
        "warm-up 500, an update every 100 steps and lr 0.01, with which no head falls to the mask threshold in runs "
        "this short); "
        f"forward timed on {c.timing_rows} x {c.block} tokens, median of {c.timing_repeats} interleaved repeats; "
        f"recovery fine-tune (`+ft`): {c.recovery_steps} steps of {c.recovery_batch} x {c.block} tokens, lr "
        f"{lr(c.recovery_lr)}"
    )


def estimate_for(family: str):
    """Seconds per run: cpu from the committed records of revision ad3262e (SmolLM2: about 8 s a one-shot run; the
    small GPT-2: under 1 s) plus the recovery fine-tune at a full fine-tuning step's cost (SmolLM2: 6.2 s per
    1,024 tokens on the idle machine, 2026-11-28); seed from the models' sizes."""

    def estimate(method: str, scale: str, tuning: bool) -> Estimate:
        setting = SETTINGS[scale]
        if scale == "quick":
            return Estimate(seconds=1.0)
        tokens = setting.recovery_steps * setting.recovery_batch * setting.block if method.endswith(RECOVERY) else 0
        if scale == "cpu":
            one_shot, step = (8.0, 6.2) if family == "smollm2" else (1.0, 0.6)
            return Estimate(seconds=one_shot + (4.0 if method == "controller" else 0.0) + step * tokens / 1024)
        controller = (
            setting.controller_steps * setting.controller_batch * setting.block if method == "controller" else 0
        )
        return gpu_estimate(
            params=0.135e9,
            trainable=0.135e9 if tokens else 0.0,
            train_tokens=tokens + controller,
            eval_tokens=(setting.eval_blocks + setting.score_blocks) * setting.block,
            layers=30 if family == "smollm2" else 12,
            hidden=576 if family == "smollm2" else 768,
            micro_tokens=setting.batch * setting.block,
            vocab=49_152 if family == "smollm2" else 50_257,
            extra_seconds=30.0,  # loading, conversion, the forward timings
        )

    return estimate


SENTINEL_SMOLLM2 = Recipe(
    name="sentinel-smollm2",
    mechanism="sentinel",
    summary="SmolLM2-135M (grouped-query) with sentinel gates: held-out perplexity, next-token accuracy and forward "
    "time against the share of heads pruned (per head, one-shot), by strategy (entropy, magnitude, importance, random, "
    "FLAP, Wanda-sp) and by the seed's controller, and after a short recovery fine-tune",
    methods=METHODS,
    run=lambda method, seed, scale, workdir: run_sweep(SMOLLM2, method, seed, scale, workdir),
    estimate=estimate_for("smollm2"),
    seeds={"quick": (0,), "cpu": (0, 1, 2), "seed": (0, 1, 2)},
    primary="perplexity",
    baselines=("none@0",),
    comparisons=COMPARISONS,
    version=VERSION,
    changes=CHANGES,
    abouts=ABOUTS,
    scale_notes={
        "quick": "a random stock Llama (2 layers x 6 heads, 2 key/value heads, hidden 48); " + describe("quick"),
        "cpu": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to fp32); " + describe("cpu"),
        "seed": "HuggingFaceTB/SmolLM2-135M from the Hub, on a GPU in bf16; " + describe("seed"),
    },
)

SENTINEL_GPT2 = Recipe(
    name="sentinel-gpt2",
    mechanism="sentinel",
    summary="A GPT-2-architecture model with sentinel gates: the same sweep as sentinel-smollm2 (at cpu scale a small "
    "GPT-2 trained from scratch on tinyshakespeare, since no GPT-2 weights are offline; at seed scale `gpt2`)",
    methods=METHODS,
    run=lambda method, seed, scale, workdir: run_sweep(GPT2, method, seed, scale, workdir),
    estimate=estimate_for("gpt2"),
    setup_seconds={"cpu": 0.56 * GPT2_SHAKESPEARE["steps"]},  # 18.7 minutes for 2,000 steps on 2 cores
    seeds={"quick": (0,), "cpu": (0, 1, 2), "seed": (0, 1, 2)},
    primary="perplexity",
    baselines=("none@0",),
    comparisons=COMPARISONS,
    version=VERSION,
    changes=CHANGES,
    abouts=ABOUTS,
    scale_notes={
        "quick": "a random stock GPT-2 (2 layers x 6 heads, hidden 48); " + describe("quick"),
        "cpu": gpt2_shakespeare_description() + "; " + describe("cpu"),
        "seed": "gpt2 from the Hub, on a GPU in bf16; " + describe("seed"),
    },
)

RECIPES = [SENTINEL_SMOLLM2, SENTINEL_GPT2]
