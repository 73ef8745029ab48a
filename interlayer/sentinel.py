"""Training-side tools for the sentinel-gated models (seed 001): choosing heads to prune, the gate controller,
progressive growth, and the gate heat-map. The model itself is `interlayer.models.modeling_sentinel`."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from .callbacks import ResumableCallback, _unwrap, add_to_logs, mean_tensor_over_ranks
from .models.sentinel_common import _feature_dims

STRATEGIES = ("entropy", "magnitude", "random", "importance", "flap", "flap-heads", "wanda-sp")
DATA_STRATEGIES = ("entropy", "importance", "flap", "flap-heads", "wanda-sp")
"""The strategies that score heads on batches of inputs."""
LAYERWISE = ("wanda-sp",)
"""Strategies whose heads are pruned evenly over the layers, as their authors prune (the others rank the heads of the
whole model together)."""


def _attentions(model):
    return _unwrap(model).gated_attentions


def _batches(batches: Iterable[dict] | None, needed: str):
    """The batches a data-driven strategy scores heads on, with a progress bar on a terminal."""
    from tqdm.auto import tqdm

    if batches is None:
        raise ValueError(f"strategy {needed!r} needs batches of inputs (input_ids, attention_mask, labels)")
    batches = list(batches)
    return tqdm(batches, desc=f"scoring heads ({needed})", unit="batch", disable=None, leave=False)


@torch.no_grad()
def head_entropy(model, batches: Iterable[dict]) -> list[torch.Tensor]:
    """Mean attention entropy of every remaining head over the real (non-padding) query tokens of the batches
    (nats), one tensor per layer. Padded key positions get no attention and padded query positions are left out,
    so an example's entropies do not depend on how it is padded."""
    attns = _attentions(model)
    sums = [torch.zeros(a.num_heads) for a in attns]
    tokens = 0.0
    batches = _batches(batches, "entropy")
    was_training = model.training
    model.eval()
    try:
        for a in attns:
            a.measure_entropy = True
        for batch in batches:
            model(**{k: v for k, v in batch.items() if k != "labels"})
            count = next((float(a.last_entropy_tokens) for a in attns if a.num_heads), 0.0)
            tokens += count
            for s, a in zip(sums, attns):
                if a.num_heads:
                    s += a.last_entropy.float().cpu() * count
    finally:
        for a in attns:
            a.measure_entropy = False
        model.train(was_training)
    return [s / max(tokens, 1.0) for s in sums]


def head_magnitude(model) -> list[torch.Tensor]:
    """Norm of each head's own weights (its query, key and value weights and its part of the output projection;
    a key/value head shared by a group counts for each head of the group): `model.head_weight_norms()`."""
    return _unwrap(model).head_weight_norms()


def task_loss(outputs):
    """The loss of the task without the L1 pressure: `lm_loss` of a causal LM, `task_loss` of a classifier."""
    return outputs.lm_loss if "lm_loss" in outputs else outputs.task_loss


def loss_items(labels: torch.Tensor) -> int:
    """How many targets a batch's labels hold: examples for a classifier (one label each), predicted tokens for a
    causal LM (labels shifted by one, -100 ignored)."""
    if labels.dim() == 1:
        return labels.numel()
    return int((labels[..., 1:] != -100).sum())


def mask_gradient(model, batches: Iterable[dict], absolute: bool = True) -> list[torch.Tensor]:
    """dL/d mask_h at the current mask, summed over the batches, one tensor per layer. With `absolute=True`, the
    sum of |dL/d mask_h| per batch (Michel et al. 2019, "Are Sixteen Heads Really Better than One?"): how much the
    loss reacts to head h, whatever the direction. With `absolute=False`, the signed sum: changing head h's mask
    by d changes the loss by about `gradient * d`."""
    attns = _attentions(model)
    sums = [torch.zeros(a.num_heads) for a in attns]
    masks = [a.sentinel_head_mask for a in attns]
    was_training = model.training
    model.eval()
    try:
        for m in masks:
            m.requires_grad_(True)
        for batch in _batches(batches, "importance"):
            loss = task_loss(model(**batch))
            grads = torch.autograd.grad(loss, [m for m in masks if m.numel()], allow_unused=True)
            grads = iter(grads)
            for s, m in zip(sums, masks):
                if m.numel():
                    g = next(grads)
                    g = g if g is not None else torch.zeros_like(m)
                    s += (g.abs() if absolute else g).float().cpu()
    finally:
        for m in masks:
            m.requires_grad_(False)
        model.train(was_training)
    return sums


@torch.no_grad()
def output_projection_inputs(model, batches: Iterable[dict], needed: str) -> list[tuple | None]:
    """What each layer's attention output projection reads (the heads' gated outputs, one input feature per head
    channel) over the batches' real (non-padding) tokens, in one pass with a hook per layer: per layer
    `(module, mean, variance, mean square)`, each a float64 tensor over the input features (the variance divided by
    the token count), or None where the layer has no head left. `needed` names the strategy for the progress bar."""
    inner = _unwrap(model)
    out_path = inner.sentinel_roles.out
    modules = [layer.get_submodule(out_path) for layer in inner.sentinel_layers]
    sums = [None] * len(modules)  # per layer: (tokens, sum of x, sum of x^2) in float64
    real: list[torch.Tensor | None] = [None]

    def collect(index):
        def hook(module, args):
            x = args[0].reshape(-1, args[0].shape[-1]).double()
            if real[0] is not None:
                x = x[real[0].reshape(-1).to(x.device)]
            n, s, q = sums[index] or (0, 0.0, 0.0)
            sums[index] = (n + x.shape[0], s + x.sum(0), q + x.pow(2).sum(0))

        return hook

    handles = [m.register_forward_pre_hook(collect(i)) for i, m in enumerate(modules)]
    was_training = model.training
    model.eval()
    try:
        for batch in _batches(batches, needed):
            mask = batch.get("attention_mask")
            real[0] = mask.bool() if mask is not None else None
            model(**{k: v for k, v in batch.items() if k != "labels"})
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    out = []
    for attn, module, stats in zip(_attentions(model), modules, sums):
        if not attn.num_heads or stats is None:
            out.append(None)
            continue
        n, s, q = stats
        mean, square = s / max(n, 1), q / max(n, 1)
        out.append((module, mean, (square - mean.pow(2)).clamp(min=0), square))
    return out


def _input_columns(module) -> torch.Tensor:
    """The output projection's weight as (input features, output features), in float64."""
    _, in_dim = _feature_dims(module)
    return module.weight.detach().movedim(in_dim, 0).double()


def channel_fluctuation(model, batches: Iterable[dict]) -> list[torch.Tensor]:
    """FLAP's weighted input feature variance (WIFV; An et al. 2024, "Fluctuation-based Adaptive Structured Pruning
    for Large Language Models", AAAI, arXiv:2312.11983, eq. 5) of the attention output projection, one float64
    tensor per layer over its input features: the variance over the batches' real tokens of input feature j (the
    heads' gated outputs) times the squared norm of its weight column W_{:,j}."""
    scores = []
    for attn, stats in zip(_attentions(model), output_projection_inputs(model, batches, "flap")):
        if stats is None:
            scores.append(torch.zeros(attn.num_heads * attn.head_dim, dtype=torch.float64))
            continue
        module, _, variance, _ = stats
        scores.append(variance * _input_columns(module).pow(2).sum(1).to(variance.device))
    return scores


def head_fluctuation(model, batches: Iterable[dict]) -> list[torch.Tensor]:
    """The fluctuation metric (`channel_fluctuation`) summed over each remaining head's features, one tensor per
    layer: a head whose output hardly moves from its mean, or whose columns are small, changes the layer's output
    little when removed. The `flap-heads` strategy standardises these sums over each layer's heads."""
    return [
        c.view(a.num_heads, a.head_dim).sum(1).float().cpu()
        for a, c in zip(_attentions(model), channel_fluctuation(model, batches))
    ]


def flap_head_scores(model, batches: Iterable[dict]) -> list[torch.Tensor]:
    """FLAP's head scores as the authors' code computes them (CASIA-IVA-Lab/FLAP, `prune_flap` with its adaptive
    structures): each layer's WIFV (`channel_fluctuation`) squared, standardised over the layer's input channels
    (minus their mean, over their standard deviation), then averaged over each head's channels; the heads of the
    whole model are then ranked together on these scores. The variance is taken over every real token at once; the
    authors' code updates it sample by sample from a running mean, which leaves the first sample out (the ranks
    agree: tests/tooling/test_results_sentinel.py). FLAP's bias compensation is not done."""
    return [
        standardised(channels.pow(2)).view(attn.num_heads, attn.head_dim).mean(1).float().cpu()
        for attn, channels in zip(_attentions(model), channel_fluctuation(model, batches))
    ]


def wanda_sp_head_scores(model, batches: Iterable[dict]) -> list[torch.Tensor]:
    """Wanda-sp's head scores (the structured Wanda baseline of the FLAP paper, CASIA-IVA-Lab/FLAP
    `prune_wanda_sp`; Wanda: Sun et al. 2024, arXiv:2306.11695): every weight W_ij of the attention output
    projection as |W_ij| times the root mean square over the batches' real tokens of its input feature j, averaged
    over the output features i and summed over each head's features. The statistics come from the unpruned model in
    one pass, where the authors' code feeds each layer the outputs of the layers it has already pruned."""
    out = []
    for attn, stats in zip(_attentions(model), output_projection_inputs(model, batches, "wanda-sp")):
        if stats is None:
            out.append(torch.zeros(attn.num_heads))
            continue
        module, _, _, square = stats
        channels = _input_columns(module).abs().mean(1).to(square.device) * square.sqrt()
        out.append(channels.view(attn.num_heads, attn.head_dim).sum(1).float().cpu())
    return out


def standardised(scores: torch.Tensor) -> torch.Tensor:
    """Scores minus their mean, over their standard deviation (FLAP's adaptive structure ranks the whole model on
    scores standardised within each layer, since the raw fluctuation's scale differs from layer to layer); zeros
    where there are fewer than two scores or all are equal."""
    if scores.numel() < 2 or not scores.std() > 0:
        return torch.zeros_like(scores)
    return (scores - scores.mean()) / scores.std()


def head_scores(model, strategy: str, batches: Iterable[dict] | None = None, seed: int = 0) -> list[torch.Tensor]:
    """Importance of every remaining head, one tensor per layer: higher means keep.

    entropy: minus the mean attention entropy (diffuse heads go first, as the seed's controller assumes);
    magnitude: weight norm; random: seeded noise; importance: |dL/d mask| (Michel et al. 2019); flap: FLAP's head
    scores as its authors compute them (An et al. 2024, `flap_head_scores`); flap-heads: the fluctuation metric
    summed per head, standardised over the layer's heads (`head_fluctuation`; this project's `flap` before it
    followed the authors' code); wanda-sp: the structured Wanda of the FLAP paper (`wanda_sp_head_scores`)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"`strategy` must be one of {list(STRATEGIES)}, got {strategy!r}.")
    if strategy == "entropy":
        return [-e for e in head_entropy(model, batches)]
    if strategy == "magnitude":
        return head_magnitude(model)
    if strategy == "importance":
        return mask_gradient(model, batches)
    if strategy == "flap":
        return flap_head_scores(model, batches)
    if strategy == "flap-heads":
        return [standardised(s) for s in head_fluctuation(model, batches)]
    if strategy == "wanda-sp":
        return wanda_sp_head_scores(model, batches)
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(a.num_heads, generator=generator) for a in _attentions(model)]


def select_heads_to_prune(
    model,
    fraction: float,
    strategy: str,
    batches: Iterable[dict] | None = None,
    seed: int = 0,
    uniform: bool = False,
) -> dict[int, list[int]]:
    """The least important remaining heads, by original index per layer, so that `fraction` of all the model's
    original heads are pruned in total (heads pruned earlier count towards it): ranked over the whole model, or for
    the `LAYERWISE` strategies (wanda-sp) evenly over the layers, each losing as many heads as the others or one more.

    With `uniform=True` every layer keeps the same number of heads, as a stock config describes them (what
    `interlayer.zoo.export_stock` needs): each layer loses its least important whole key/value groups (a group is
    one head under multi-head attention; all the query heads of a key/value head under grouped-query attention,
    scored by the sum of their scores), `round(fraction * key/value heads)` groups per layer in total."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"`fraction` must be between 0 and 1, got {fraction!r}.")
    config = _unwrap(model).config
    if uniform:
        groups = _uniform_groups(model, fraction)  # checked before the heads are scored, which can take long
        return _select_uniform(model, fraction, groups, head_scores(model, strategy, batches, seed))
    scores = head_scores(model, strategy, batches, seed)
    total = config.num_hidden_layers * config.num_attention_heads
    already = sum(len(v) for v in config.pruned_heads.values())
    count = max(0, round(fraction * total) - already)
    ranked = []
    for layer, (layer_scores, attn) in enumerate(zip(scores, _attentions(model))):
        gone = len(config.pruned_heads.get(layer, ()))
        order = sorted(zip(layer_scores.tolist(), attn.head_ids.tolist()))
        for rank, (score, head) in enumerate(order):
            # layerwise: every layer loses its weakest head, then its next weakest..., the layers whose next head
            # scores lowest first where the count does not divide evenly
            share = (gone + rank + 1) / config.num_attention_heads if strategy in LAYERWISE else 0.0
            ranked.append((share, float(score), layer, int(head)))
    ranked.sort()
    chosen: dict[int, list[int]] = {}
    for _, _, layer, head in ranked[:count]:
        chosen.setdefault(layer, []).append(head)
    return {layer: sorted(heads) for layer, heads in sorted(chosen.items())}


def _uniform_groups(model, fraction: float) -> list[dict[int, list[int]]]:
    """The remaining query heads of each layer by key/value head, once checked that uniform pruning to `fraction`
    can leave every layer the same whole groups."""
    config = _unwrap(model).config
    group = config.num_attention_heads // config.num_kv_heads
    keep = config.num_kv_heads - round(fraction * config.num_kv_heads)
    layers = []
    for layer, attn in enumerate(_attentions(model)):
        groups: dict[int, list[int]] = {}
        for head in attn.head_ids.tolist():
            groups.setdefault(head // group, []).append(head)
        partial = [kv for kv, members in groups.items() if len(members) != group]
        if partial:
            raise ValueError(
                f"uniform pruning removes whole key/value groups of {group} query heads, but layer {layer} has a "
                f"partly pruned group (key/value head {partial[0]} keeps query heads {groups[partial[0]]}); prune "
                "from the unpruned model."
            )
        if len(groups) < keep:
            raise ValueError(
                f"uniform pruning to fraction {fraction} keeps {keep} key/value groups per layer, but layer {layer} "
                f"has only {len(groups)} left; prune from the unpruned model, or with a larger fraction."
            )
        layers.append(groups)
    return layers


def _select_uniform(model, fraction, groups, scores) -> dict[int, list[int]]:
    """`select_heads_to_prune(uniform=True)`: the least important whole key/value groups of every layer (by the sum
    of their query heads' scores), so that each layer keeps `kv heads - round(fraction * kv heads)` groups."""
    config = _unwrap(model).config
    keep = config.num_kv_heads - round(fraction * config.num_kv_heads)
    chosen: dict[int, list[int]] = {}
    for layer, (layer_groups, layer_scores, attn) in enumerate(zip(groups, scores, _attentions(model))):
        score = dict(zip(attn.head_ids.tolist(), layer_scores.tolist()))
        ranked = sorted(layer_groups, key=lambda kv: (sum(score[h] for h in layer_groups[kv]), kv))
        heads = sorted(h for kv in ranked[: len(layer_groups) - keep] for h in layer_groups[kv])
        if heads:
            chosen[layer] = heads
    return chosen


def prune_by_strategy(model, fraction, strategy, batches=None, seed=0, uniform=False) -> dict[int, list[int]]:
    """Choose heads with `select_heads_to_prune` and remove them structurally; returns what was pruned."""
    chosen = select_heads_to_prune(model, fraction, strategy, batches, seed, uniform=uniform)
    _unwrap(model).prune_heads(chosen)
    return chosen


class SentinelControllerCallback(ResumableCallback):
    """The seed's controller (section 3): every `update_frequency` steps after `warmup_steps`, move gate logits
    from live metrics. Heads whose attention entropy exceeds `entropy_threshold` lose `entropy_step * lr`; heads
    whose mean |gradient| of the gate logit since the last update is below `grad_threshold` lose
    `grad_step * lr`. A head whose learned gate (without the mask) falls below `mask_threshold` is masked, as long
    as masked and pruned heads together stay within `max_pruned_fraction` of all heads (the budget). The
    controller lowers only as many heads per update as the budget still allows: of the heads whose rules fire,
    those lowest after the step (ties: highest entropy first), so it keeps pushing the same heads until they are
    masked and never lowers a head it could not remove; once the budget is used up it moves no gate. Masked heads
    are removed with `model.prune_masked_heads()`. The controller's lr decays by `lr_decay` every
    `lr_decay_every` steps down to `lr_floor`.

    The seed also moved only heads with gate > 0.2 while masking below 0.05, so no head could ever be masked;
    that dead zone is gone. With the seed's step sizes (lr 0.01) a head needs thousands of updates to fall from
    gate 1 to 0.05 (6 logits under `identity_init`); larger `learning_rate` values make it practical.

    With `plateau_patience` set, training stops once that many consecutive updates changed no gate by more than
    `plateau_tolerance`. The state (accumulated gradients, update and plateau counters) is saved in Trainer
    checkpoints and restored on resume when `TrainingArguments(restore_callback_states_from_checkpoint=True)`.
    """

    resumable_attributes = ("grad_sums", "grad_count", "updates", "plateau_count")

    def __init__(
        self,
        warmup_steps: int = 500,
        update_frequency: int = 100,
        entropy_threshold: float = 1.5,
        entropy_step: float = 0.1,
        grad_threshold: float = 1e-3,
        grad_step: float = 0.05,
        learning_rate: float = 0.01,
        lr_decay: float = 0.95,
        lr_decay_every: int = 1000,
        lr_floor: float = 0.001,
        mask_threshold: float = 0.05,
        max_pruned_fraction: float = 0.3,
        plateau_patience: int | None = None,
        plateau_tolerance: float = 1e-4,
    ):
        if update_frequency < 1:
            raise ValueError(f"`update_frequency` must be >= 1, got {update_frequency!r}.")
        if not 0.0 <= max_pruned_fraction <= 1.0:
            raise ValueError(f"`max_pruned_fraction` must be between 0 and 1, got {max_pruned_fraction!r}.")
        self.warmup_steps = warmup_steps
        self.update_frequency = update_frequency
        self.entropy_threshold = entropy_threshold
        self.entropy_step = entropy_step
        self.grad_threshold = grad_threshold
        self.grad_step = grad_step
        self.learning_rate = learning_rate
        self.lr_decay = lr_decay
        self.lr_decay_every = lr_decay_every
        self.lr_floor = lr_floor
        self.mask_threshold = mask_threshold
        self.max_pruned_fraction = max_pruned_fraction
        self.plateau_patience = plateau_patience
        self.plateau_tolerance = plateau_tolerance
        self.grad_sums: list[list[float]] | None = None
        self.grad_count = 0
        self.updates = 0
        self.plateau_count = 0
        self.last_report: dict[str, float] = {}

    def current_lr(self, step: int) -> float:
        return max(self.lr_floor, self.learning_rate * self.lr_decay ** (step // self.lr_decay_every))

    def _due(self, step: int) -> bool:
        return step >= self.warmup_steps and step % self.update_frequency == 0

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if model is not None and self._due(state.global_step + 1):
            for a in _attentions(model):
                a.measure_entropy = True

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if model is None:
            return
        attns = _attentions(model)
        if self.grad_sums is None or [len(s) for s in self.grad_sums] != [a.num_heads for a in attns]:
            self.grad_sums, self.grad_count = [[0.0] * a.num_heads for a in attns], 0
        for sums, a in zip(self.grad_sums, attns):
            grad = a.sentinel_gate_logits.grad
            if grad is not None:
                for i, g in enumerate(grad.abs().tolist()):
                    sums[i] += g
        self.grad_count += 1

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is None or not self._due(state.global_step):
            return
        attns = _attentions(model)
        entropies = [
            mean_tensor_over_ranks(a.last_entropy, a.last_entropy_tokens) if a.last_entropy is not None else None
            for a in attns
        ]
        for a in attns:
            a.measure_entropy = False
        grads = None
        if self.grad_sums is not None and self.grad_count:
            grads = [torch.tensor(s) / self.grad_count for s in self.grad_sums]
        changed = self.update(model, entropies, grads, self.current_lr(state.global_step))
        self.grad_sums, self.grad_count = None, 0
        self.updates += 1
        if self.plateau_patience is not None:
            self.plateau_count = 0 if changed > self.plateau_tolerance else self.plateau_count + 1
            if self.plateau_count >= self.plateau_patience:
                control.should_training_stop = True

    @torch.no_grad()
    def update(self, model, entropies, grads, lr: float) -> float:
        """One controller update; returns the largest change of any gate value."""
        attns = _attentions(model)
        before = [a.gates().clone() for a in attns]
        # the seed's rules: each firing rule lowers a head's logit by its step
        candidates = []
        for i, a in enumerate(attns):
            if not a.num_heads:
                continue
            delta = torch.zeros_like(a.sentinel_gate_logits)
            if entropies[i] is not None:
                delta -= self.entropy_step * lr * (entropies[i].to(delta) > self.entropy_threshold).to(delta)
            if grads is not None:
                delta -= self.grad_step * lr * (grads[i].to(delta) < self.grad_threshold).to(delta)
            after = (a.sentinel_gate_logits + delta).tolist()
            entropy = entropies[i].tolist() if entropies[i] is not None else [0.0] * a.num_heads
            for h, (d, mask) in enumerate(zip(delta.tolist(), a.sentinel_head_mask.tolist())):
                if d < 0 and mask > 0:
                    candidates.append((after[h], -entropy[h], i, h, d))
        # only as many heads as may still be removed are lowered: those furthest down after this step (then the
        # most diffuse), so the controller never pushes down a head it could not mask
        for _, _, i, h, d in sorted(candidates)[: self._budget_left(model)]:
            attns[i].sentinel_gate_logits[h] += d
        self._mask_low_gates(model)
        changed = max(((a.gates() - b).abs().max().item() for a, b in zip(attns, before) if a.num_heads), default=0.0)
        config = _unwrap(model).config
        self.last_report = {
            **{f"sentinel/L{i}/entropy": float(e.mean()) for i, e in enumerate(entropies) if e is not None},
            **{f"sentinel/L{i}/gate_grad": float(g.mean()) for i, g in enumerate(grads or []) if len(g)},
            "sentinel/controller_lr": lr,
            "sentinel/masked_heads": float(sum(int((a.sentinel_head_mask == 0).sum()) for a in attns)),
            "sentinel/pruned_heads": float(sum(len(v) for v in config.pruned_heads.values())),
            "sentinel/controller_budget_left": float(self._budget_left(model)),
            "sentinel/max_gate_change": changed,
        }
        return changed

    def _budget_left(self, model) -> int:
        """How many more heads may be masked: `max_pruned_fraction` of all heads minus those masked or pruned."""
        config = _unwrap(model).config
        total = config.num_hidden_layers * config.num_attention_heads
        used = sum(len(v) for v in config.pruned_heads.values())
        used += sum(int((a.sentinel_head_mask == 0).sum()) for a in _attentions(model))
        return max(0, math.floor(self.max_pruned_fraction * total) - used)

    def _mask_low_gates(self, model) -> None:
        attns = _attentions(model)
        low = sorted(
            (gate, i, h)
            for i, a in enumerate(attns)
            for h, (gate, mask) in enumerate(zip(a.learned_gates().tolist(), a.sentinel_head_mask.tolist()))
            if mask > 0 and gate < self.mask_threshold
        )
        for _, i, h in low[: self._budget_left(model)]:
            attns[i].sentinel_head_mask[h] = 0.0

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and self.last_report and not any(k.startswith("eval_") for k in logs):
            add_to_logs(state, logs, self.last_report)


class ProgressiveGrowthCallback(ResumableCallback):
    """Progressive growth (seed section 6): start with only `start_active` of the heads switched on, and at the end
    of every epoch switch on up to `grow_per_epoch` of all heads more, until `target_active` are on. A grown head
    starts at mask `initial_scale` and ramps linearly to 1 over `warmup_steps` steps.

    Heads are ranked by the first-order expected loss decrease of having them on, from the signed mask gradient
    g = dL/d mask on `score_batches` training batches: switching head h from mask m to 1 changes the loss by about
    g * (1 - m), so its expected decrease is -g * (1 - m). At the start (every mask 1) the kept heads are those
    whose removal would raise the loss most (-g, the seed's "loss increase when the head is ablated" to first
    order); at growth only inactive heads expected to lower the loss (-g > 0) are grown, the largest decrease
    first, so an epoch may grow fewer heads than `grow_per_epoch`, or none. (|g| would also rank heads whose
    revival raises the loss.)"""

    resumable_attributes = ("warming", "started")

    def __init__(
        self,
        start_active: float = 0.1,
        grow_per_epoch: float = 0.1,
        target_active: float = 0.3,
        initial_scale: float = 0.01,
        warmup_steps: int = 100,
        score_batches: int = 4,
    ):
        for name, value in (
            ("start_active", start_active),
            ("grow_per_epoch", grow_per_epoch),
            ("target_active", target_active),
        ):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"`{name}` must be between 0 and 1, got {value!r}.")
        self.start_active = start_active
        self.grow_per_epoch = grow_per_epoch
        self.target_active = target_active
        self.initial_scale = initial_scale
        self.warmup_steps = warmup_steps
        self.score_batches = score_batches
        self.warming: list[list[int]] = []  # [layer, head position, start step]
        self.started = False

    def _batches(self, dataloader, model):
        device = next(model.parameters()).device
        out = []
        for i, batch in enumerate(dataloader):
            if i >= self.score_batches:
                break
            out.append({k: v.to(device) for k, v in batch.items()})
        return out

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        if self.started or model is None:
            return
        attns = _attentions(model)
        # expected loss increase of removing each head (mask m -> 0): -g * m
        batches = self._batches(train_dataloader, model)
        tokens = sum(loss_items(b["labels"]) for b in batches)
        grads = [mean_tensor_over_ranks(g, tokens) for g in mask_gradient(model, batches, absolute=False)]
        scores = [-g * a.sentinel_head_mask.float().cpu() for g, a in zip(grads, attns)]
        total = sum(a.num_heads for a in attns)
        keep = set(
            self._top(
                [(float(s), i, h) for i, sc in enumerate(scores) for h, s in enumerate(sc.tolist())],
                round(self.start_active * total),
            )
        )
        with torch.no_grad():
            for i, a in enumerate(attns):
                for h in range(a.num_heads):
                    a.sentinel_head_mask[h] = 1.0 if (i, h) in keep else 0.0
        self.started = True

    @staticmethod
    def _top(scored, count):
        return [(i, h) for _, i, h in sorted(scored, reverse=True)[:count]]

    def on_epoch_end(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        if model is None:
            return
        attns = _attentions(model)
        total = sum(a.num_heads for a in attns)
        active = sum(int((a.sentinel_head_mask > 0).sum()) for a in attns)
        grow = min(round(self.grow_per_epoch * total), round(self.target_active * total) - active)
        if grow <= 0:
            return
        # expected loss decrease of switching each inactive head on (mask 0 -> 1): -g * (1 - 0)
        batches = self._batches(train_dataloader, model)
        tokens = sum(loss_items(b["labels"]) for b in batches)
        grads = [mean_tensor_over_ranks(g, tokens) for g in mask_gradient(model, batches, absolute=False)]
        helpful = [
            (-float(grads[i][h]), i, h)
            for i, a in enumerate(attns)
            for h in range(a.num_heads)
            if a.sentinel_head_mask[h] == 0 and grads[i][h] < 0
        ]
        with torch.no_grad():
            for i, h in self._top(helpful, grow):
                attns[i].sentinel_head_mask[h] = self.initial_scale
                self.warming.append([i, h, state.global_step])

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is None or not self.warming:
            return
        attns = _attentions(model)
        still = []
        with torch.no_grad():
            for i, h, start in self.warming:
                progress = min(1.0, (state.global_step - start) / max(1, self.warmup_steps))
                attns[i].sentinel_head_mask[h] = self.initial_scale + (1.0 - self.initial_scale) * progress
                if progress < 1.0:
                    still.append([i, h, start])
        self.warming = still
