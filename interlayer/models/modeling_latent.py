"""Latent back-projection for the decoder families of families.py (seed 003): Llama, Qwen3, Qwen2, Mistral, Phi-3,
OLMo 2, Gemma 2, Gemma 3 text, GPT-2.

Shapes:
    B   batch                      h_l       [B, T, C]      the hidden states after layer l
    T   sequence                   z_s       [B, T, d]      source layer s's latent of every token
    C   hidden size                latents   [B, T, P, d]   the P pairs' latents, as the latent pass receives them
    P   pairs (`latent_pairs`)     g_t       [1]            target layer t's gate
    d   `latent_dim`

Pairs of layers `(s, t)`, by default `t = s - offset` (L5..L25 -> L0..L20 on 28 layers): source layer `s` compresses
its output to a latent `z_s = down_s(h_s)` of `latent_dim` numbers, and target layer `t` adds it back, gated, to the
output of its MLP branch (the down projection's output; after the post-norm or dropout in families that have them):

    F_mlp_t(x) + sigmoid(g_t) * up_t(z_s)

The latents come from a first, stock pass (no latents applied, run only up to the deepest source layer and, with a
frozen base, without building a graph); the second pass applies them. `latent_source` says which token's latents a
token receives: its own (`"same_position"`, the seed's training), the previous token's (`"previous_position"`), or
at generation the previous token's latent-applied pass (`"recurrent"`, the seed's inference). The first token of a
sequence (or the first after left padding, or a token whose position id is 0: the start of a sequence packed without
padding, as `DataCollatorWithFlattening` makes) has no previous token: it receives a zero latent. The model reads
`latent_source` once, when it is built, and keeps the matching strategy (`SamePositionPasses`,
`PreviousPositionPasses`, `RecurrentPasses`), which says how every forward runs its passes and what the cache keeps.

The layers below the first (shallowest) target layer see the same input in both passes (no latent is injected yet),
so they run once for both: the latent pass starts from the stock pass's hidden states at the first target layer
(`model.shared_depth`, the first target or the deepest source layer + 1 if that is lower).

Generation keeps both passes' keys and values in one `LatentCache`: the layers from the first target up to the deepest
source (`model.two_pass_layers`) hold the stock pass's rows first and the latent pass's after them, the layers below
them the rows both passes share, once; so in `"previous_position"` mode a new token runs through the shared layers as
B rows, then through both passes as one batch of 2B rows (the latent pass only needs the previous token's latents,
already known).

With `identity_init=True` the up projections start at zero, so the converted model computes the stock function.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMixin

from .decoder_common import CausalLMMixin, DecoderLayerRolesMixin, DecoderStackMixin, FreezeBaseMixin, StackRun
from .zoo_common import (
    StatsAccumulator,
    refuse_output_attentions,
    register_for_auto_classes,
    register_scalar_parameters,
)

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer, Gemma2ForCausalLM, Gemma2Model
from transformers.models.gemma3.modeling_gemma3 import Gemma3DecoderLayer, Gemma3ForCausalLM, Gemma3TextModel
from transformers.models.gpt2.modeling_gpt2 import GPT2Block, GPT2LMHeadModel, GPT2Model
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaModel
from transformers.models.mistral.modeling_mistral import MistralDecoderLayer, MistralForCausalLM, MistralModel
from transformers.models.olmo2.modeling_olmo2 import Olmo2DecoderLayer, Olmo2ForCausalLM, Olmo2Model
from transformers.models.phi3.modeling_phi3 import Phi3DecoderLayer, Phi3ForCausalLM, Phi3Model
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2ForCausalLM, Qwen2Model
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3ForCausalLM, Qwen3Model

from .configuration_latent import (
    Gemma2LatentConfig,
    Gemma3TextLatentConfig,
    GPT2LatentConfig,
    LlamaLatentConfig,
    MistralLatentConfig,
    Olmo2LatentConfig,
    Phi3LatentConfig,
    Qwen2LatentConfig,
    Qwen3LatentConfig,
)
from .decoder_families import GEMMA2, GEMMA3_TEXT, GPT2, LLAMA, MISTRAL, OLMO2, PHI3, QWEN2, QWEN3

# --- end generated imports ---


class LatentCache(DynamicCache):
    """The KV cache of a latent back-projection model, plus the latents the next token receives.

    Layers in `two_pass_layers` hold `2B` rows: the stock pass's `B` rows, then the latent pass's; the others `B` rows
    (below them: the rows both passes share, computed once; above them: the latent pass's). A forward that runs both
    passes as one batch of `2B` rows updates them as any cache does; a forward that runs the stock pass and then the
    latent pass gives each its own view of the cache (`two_pass_views`), so the rows of a layer grow together.
    """

    def __init__(self, *args, two_pass_layers: range = range(0), **kwargs):
        super().__init__(*args, **kwargs)
        self.two_pass_layers = two_pass_layers
        self.latents: torch.Tensor | None = None  # [B, 1, pairs, latent_dim]

    def two_pass_views(self) -> tuple["StockPassView", "LatentPassView"]:
        """The caches a stock pass and then a latent pass of the same tokens write through: in `two_pass_layers` the
        first holds the stock pass's keys and values back, and the second appends them with the latent pass's."""
        held: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        return StockPassView(self, held), LatentPassView(self, held)

    def _select_rows(self, index: torch.Tensor) -> None:
        """Keep (or reorder, or repeat) rows `index` of the batch, in both passes' rows and in the latents."""
        for layer_idx, layer in enumerate(self.layers):
            if not layer.is_initialized:
                continue
            layer_index = index.to(layer.keys.device)
            if layer_idx in self.two_pass_layers:
                half = layer.keys.shape[0] // 2
                layer_index = torch.cat((layer_index, layer_index + half))
            layer.keys = layer.keys.index_select(0, layer_index)
            layer.values = layer.values.index_select(0, layer_index)
        if self.latents is not None:
            self.latents = self.latents.index_select(0, index.to(self.latents.device))

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._select_rows(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._select_rows(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        rows = self.latents.shape[0] if self.latents is not None else self._rows()
        self._select_rows(torch.arange(rows).repeat_interleave(repeats))

    def _rows(self) -> int:
        layer_idx = len(self.layers) - 1
        layer = self.layers[layer_idx]
        rows = layer.keys.shape[0] if layer.is_initialized else 0
        return rows // 2 if layer_idx in self.two_pass_layers else rows

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove != 0:
            raise ValueError(
                "A LatentCache cannot be cropped: the latents of earlier tokens are not kept, so decoding methods "
                "that roll the cache back (assisted decoding, prompt lookup, DoLa) are not supported."
            )


class StockPassView:
    """A `LatentCache` as the stock pass of a two-pass forward sees it: in `two_pass_layers` the pass's new keys and
    values are held back (in `held`, for the latent pass to append) and attention reads the cached stock rows before
    them; below them (the layers both passes share, which the stock pass runs for both) they are cached at once."""

    def __init__(self, cache: LatentCache, held: dict):
        self.cache, self.held = cache, held

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        if layer_idx not in self.cache.two_pass_layers:
            return self.cache.update(key_states, value_states, layer_idx, *args, **kwargs)
        self.held[layer_idx] = (key_states, value_states)
        if self.cache.get_seq_length(layer_idx) == 0:
            return key_states, value_states
        layer, rows = self.cache.layers[layer_idx], key_states.shape[0]
        return (
            torch.cat((layer.keys[:rows], key_states), dim=-2),
            torch.cat((layer.values[:rows], value_states), dim=-2),
        )


class LatentPassView:
    """A `LatentCache` as the latent pass of a two-pass forward sees it: where the stock pass held keys and values
    back, both passes' rows are appended together (stock rows first) and attention reads the latent rows."""

    def __init__(self, cache: LatentCache, held: dict):
        self.cache, self.held = cache, held

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        if layer_idx not in self.held:
            return self.cache.update(key_states, value_states, layer_idx, *args, **kwargs)
        stock_keys, stock_values = self.held.pop(layer_idx)
        keys, values = self.cache.update(
            torch.cat((stock_keys, key_states)), torch.cat((stock_values, value_states)), layer_idx, *args, **kwargs
        )
        rows = stock_keys.shape[0]
        return keys[rows:], values[rows:]


class LatentProjection(nn.Linear):
    """A down (hidden -> latent) or up (latent -> hidden) projection; initialised by the model's `_init_weights`
    with Xavier-uniform of gain `gain` (0 gives zeros) and a zero bias."""

    def __init__(self, in_features: int, out_features: int, gain: float):
        super().__init__(in_features, out_features)
        self.gain = gain


class LatentDecoderLayerMixin(DecoderLayerRolesMixin):
    """A stock decoder layer that can compress its output (`latent_down`, on a source layer) and add a gated
    projection of a latent to the output of its MLP branch `F_mlp` (`latent_up`, `latent_gate`, on a target layer):
    `h + F_mlp(h) + sigmoid(g) * up(z)`, after the branch's post-norm and dropout in the families that have them."""

    # each `LatentProjection` is an FSDP unit of its own (`_no_split_modules`): the model's stock pass calls
    # `latent_down` outside the layer's forward

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        pairs = config.latent_pairs
        self.layer_idx = layer_idx
        self.latent_down = self.latent_up = self.latent_gate = None
        if layer_idx in {s for s, _ in pairs}:
            self.latent_down = LatentProjection(config.hidden_size, config.latent_dim, config.latent_down_init_gain)
        if layer_idx in {t for _, t in pairs}:
            up_gain = 0.0 if config.identity_init else config.latent_up_init_gain
            self.latent_up = LatentProjection(config.latent_dim, config.hidden_size, up_gain)
            self.latent_gate = nn.Parameter(torch.empty(1))  # (1,), not 0-d: FSDP2 shards no 0-d parameter
            self.stats = StatsAccumulator()

    def residual_block(self, h: torch.Tensor, attention, latent=None, latent_rows_from: int = 0) -> torch.Tensor:
        """The stock block; with `latent` (`[rows, seq, latent_dim]`), `sigmoid(gate) * up(latent)` is added to the
        MLP branch's output of rows `latent_rows_from` onwards (both are layer inputs: reentrant gradient
        checkpointing passes gradients only to positional inputs, and as a keyword the latent's backward would run
        into the already used graph of the stock pass that computed it)."""
        h = h + attention(h)
        out = self.mlp_branch(h)
        if latent is not None:
            out = self._inject(out, latent, latent_rows_from)
        return h + out

    def _inject(self, out: torch.Tensor, latent: torch.Tensor, rows_from: int) -> torch.Tensor:
        adjustment = torch.sigmoid(self.latent_gate).to(out.dtype) * self.latent_up(latent.to(out.dtype))
        with torch.no_grad():
            ratio = torch.linalg.vector_norm(adjustment) / torch.linalg.vector_norm(out[rows_from:]).clamp_min(1e-12)
            self.stats.add(f"latent/L{self.layer_idx}/adjustment_ratio", ratio)
        if rows_from == 0:
            return out + adjustment
        return torch.cat((out[:rows_from], out[rows_from:] + adjustment))


class LatentPreTrainedMixin(FreezeBaseMixin):
    """Init, statistics and card text shared by every latent back-projection model (put before the stock class)."""

    mechanism_name = "Latent back-projection"
    mechanism_param_prefix = "latent_"
    # what a serving engine's transformers backend asks (`is_backend_compatible()`): not this model, which it would
    # serve wrong tokens with
    _supports_attention_backend = False
    serving_exclusion = (
        "the layers from the first target up to the deepest source layer attend twice a forward (the stock pass, then "
        "the latent pass) under one layer index, and a token's latents reach the next token outside attention: a "
        "serving engine keeps one paged key/value cache per layer index and no other state between steps "
        "(docs/serving.md)"
    )

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, LatentProjection):
            if module.gain == 0:
                init.zeros_(module.weight)
            else:
                init.xavier_uniform_(module.weight, gain=module.gain)
            init.zeros_(module.bias)
        elif isinstance(module, LatentDecoderLayerMixin) and module.latent_gate is not None:
            init.constant_(module.latent_gate, float(self.config.latent_gate_init))

    def mechanism_summary(self) -> str:
        c = self.config
        pairs = c.latent_pairs
        shown = ", ".join(f"L{s}->L{t}" for s, t in pairs[:3]) + (", ..." if len(pairs) > 3 else "")
        frozen = "Only the latent projections and gates train (`freeze_base`). " if c.freeze_base else ""
        return (
            f"Latent back-projection (interlayer, seed 003): {len(pairs)} source layers compress their output to "
            f"{c.latent_dim}-dimensional latents that are projected back up, gated by a sigmoid, and added to the MLP "
            f"output of a shallower target layer ({shown}). Latents come from a first, stock pass "
            f"(`latent_source={c.latent_source!r}`). Stock weight names; the mechanism's tensors are named `latent_*`. "
            f"{frozen}Log `mechanism_stats()` (or use `interlayer.callbacks.MechanismStatsCallback`) to watch the "
            "gates and the adjustment ratios."
        )

    def mechanism_state(self) -> dict[str, float]:
        """The gate `sigmoid(g_t)` of every target layer."""
        return {
            f"latent/L{m.layer_idx}/gate": torch.sigmoid(m.latent_gate.detach().float()).item()
            for m in self.modules()
            if isinstance(m, LatentDecoderLayerMixin) and m.latent_gate is not None
        }


class LatentModelMixin(LatentPreTrainedMixin, DecoderStackMixin):
    """The decoder stack with latent back-projection and its two passes."""

    def build_mechanism(self, config) -> None:
        pairs = config.latent_pairs
        self.source_pair = {s: p for p, (s, _) in enumerate(pairs)}
        self.target_pair = {t: p for p, (_, t) in enumerate(pairs)}
        self.stock_depth = max(self.source_pair) + 1
        # below the first target both passes see the same input: those layers run once, for both
        self.shared_depth = min(min(self.target_pair), self.stock_depth)
        self.two_pass_layers = range(self.shared_depth, self.stock_depth)  # where the passes differ
        self.passes = LATENT_PASSES[config.latent_source]()  # how a forward runs its passes, chosen once

    def new_cache(self) -> LatentCache:
        """An empty cache for this model: from the first target up to the deepest source layer it keeps the stock pass
        too, unless the passes keep the latent pass only (`"recurrent"`)."""
        two_pass_layers = self.two_pass_layers if self.passes.cache_keeps_stock_pass else range(0)
        return LatentCache(config=self.config, two_pass_layers=two_pass_layers)

    def check_cache(self, cache: Cache) -> None:
        if not isinstance(cache, LatentCache):
            raise ValueError(
                f"`past_key_values` must be a LatentCache (model.model.new_cache()), got {type(cache).__name__}: the "
                "latent model keeps the stock pass's keys and values and the next token's latents beside its own."
            )

    def check_forward(self, kwargs: dict) -> None:
        refuse_output_attentions(self, kwargs)
        if self.config.latent_source != self.passes.source:
            raise ValueError(
                f"`latent_source={self.config.latent_source!r}` was set on a built {type(self).__name__}, which runs "
                f"its passes for latent_source={self.passes.source!r} (chosen when the model is built). Load it with "
                f"the option instead: from_pretrained(..., latent_source={self.config.latent_source!r})."
            )

    def run_layers(self, inputs_embeds: torch.Tensor, run: StackRun) -> torch.Tensor:
        """The two passes of `latent_source` (`LATENT_PASSES`); the hidden states recorded are the latent-applied
        pass's."""
        return self.passes.forward(_Run(run), inputs_embeds)


def _token_mask(attention_mask, position_ids) -> torch.Tensor | None:
    """`[batch, seq, 1, 1]` booleans: which of the new tokens (as many as `position_ids` has) are real (None without a
    2-d padding mask)."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        return None
    return attention_mask[:, -position_ids.shape[-1] :].bool()[:, :, None, None]


def _rows_twice(x):
    """Masks and position embeddings for a batch of 2B rows (the same for the stock and the latent rows)."""
    if isinstance(x, tuple):
        return tuple(_rows_twice(t) for t in x)
    if isinstance(x, dict):
        return {k: _rows_twice(v) for k, v in x.items()}
    if isinstance(x, torch.Tensor) and x.shape[0] > 1:
        return torch.cat((x, x))
    return x


class SamePositionPasses:
    """`latent_source="same_position"` (the seed's training): every forward runs the stock pass, then the latent pass,
    each token receiving its own latents."""

    source = "same_position"
    cache_keeps_stock_pass = True  # layers below the deepest source layer cache both passes' rows

    def forward(self, run: "_Run", x: torch.Tensor) -> torch.Tensor:
        stock_cache, latent_cache = run.two_pass_caches()
        latents, shared = run.stock_pass(x, run.cache, stock_cache)
        out = run.latent_pass(shared, latents, latent_cache, start=run.model.shared_depth)
        run.keep_latents(latents)
        return out


class PreviousPositionPasses:
    """`latent_source="previous_position"`: every token receives the previous token's stock-pass latents, so the two
    passes of a decoded token are independent and run as one batch of 2B rows; a forward of several tokens runs the
    stock pass, then the latent pass."""

    source = "previous_position"
    cache_keeps_stock_pass = True

    def forward(self, run: "_Run", x: torch.Tensor) -> torch.Tensor:
        if run.seen and x.shape[1] == 1:
            return run.batched_step(x)
        return self.one_after_the_other(run, x)

    @staticmethod
    def one_after_the_other(run: "_Run", x: torch.Tensor) -> torch.Tensor:
        """The stock pass, then the latent pass (what a decoded token's batched step computes, in two loops)."""
        stock_cache, latent_cache = run.two_pass_caches()
        latents, shared = run.stock_pass(x, run.cache, stock_cache)
        out = run.latent_pass(shared, run.shifted(latents), latent_cache, start=run.model.shared_depth)
        run.keep_latents(latents)
        return out


class RecurrentPasses:
    """`latent_source="recurrent"` (the seed's inference): a forward of several tokens runs as `"previous_position"`
    (of the stock pass, only the layers both passes share are cached); once the cache holds a prompt, one pass per
    token, whose latents come from the previous token's latent-applied pass. The cache keeps the latent pass only."""

    source = "recurrent"
    cache_keeps_stock_pass = False

    def forward(self, run: "_Run", x: torch.Tensor) -> torch.Tensor:
        cache = run.cache
        if run.seen:
            if x.shape[1] != 1:
                raise ValueError(
                    "latent_source='recurrent' decodes one token at a time once the cache holds a prompt, got "
                    f"{x.shape[1]} new tokens."
                )
            out, cache.latents = run.latent_pass(x, run.previous(cache.latents), cache, extract_last=True)
            return out
        latents, shared = run.stock_pass(x, cache, None)  # above the shared layers the stock pass is not cached
        start = run.model.shared_depth
        if cache is None:
            return run.latent_pass(shared, run.shifted(latents), None, start)
        out, cache.latents = run.latent_pass(
            shared, run.shifted(latents), cache, start, extract_last=True, shared_last=latents[:, -1:]
        )
        return out


LATENT_PASSES = {p.source: p for p in (PreviousPositionPasses, SamePositionPasses, RecurrentPasses)}


class _Run:
    """One forward of a latent model (`StackRun`): the layer loops its passes are made of (the stock pass, the latent
    pass, both as one batched step)."""

    def __init__(self, run: StackRun):
        self.stack = run
        self.model = run.model
        self.layers = run.model.stack_layers[: run.model.config.num_hidden_layers]
        self.masks = run.masks
        self.position_embeddings = run.position_embeddings
        self.position_ids = run.position_ids
        self.cache = run.cache
        self.seen = run.cache.get_seq_length() if run.cache is not None else 0  # tokens the cache already holds
        self.token_mask = _token_mask(run.attention_mask, run.position_ids)
        self.hidden = run.hidden

    def _layer(self, i, x, cache, latent=None, latent_rows_from=0, masks=None, position_embeddings=None):
        return self.stack.layer(
            i, x, latent, latent_rows_from, cache=cache, masks=masks, position_embeddings=position_embeddings
        )

    def two_pass_caches(self):
        """`(stock pass's cache, latent pass's cache)` for a stock pass followed by a latent pass (`two_pass_views`)."""
        return self.cache.two_pass_views() if self.cache is not None else (None, None)

    def _masked(self, latents: torch.Tensor, last: bool = False) -> torch.Tensor:
        """Zero the latents of padding tokens (`[batch, seq, pairs, latent_dim]`; with `last`, of the last token)."""
        if self.token_mask is None:
            return latents
        keep = self.token_mask[:, -1:] if last else self.token_mask
        return torch.where(keep, latents, torch.zeros((), dtype=latents.dtype, device=latents.device))

    def previous(self, latents: torch.Tensor) -> torch.Tensor:
        """The previous-token latents `latents` (`[batch, seq, pairs, latent_dim]`, for the last `seq` tokens) with
        those of tokens at position id 0 zeroed: such a token starts a sequence (in padding-free packing the position
        ids restart at every sequence), so the token before it belongs to another sequence."""
        starts = (self.position_ids[:, -latents.shape[1] :] == 0)[:, :, None, None]
        return torch.where(starts, torch.zeros((), dtype=latents.dtype, device=latents.device), latents)

    def shifted(self, latents: torch.Tensor) -> torch.Tensor:
        """What each token receives from the previous token's stock-pass latents `latents`: the cache's latents for
        the first new token (zeros without them)."""
        previous = self.cache.latents if self.cache is not None else None
        if previous is None:
            previous = latents.new_zeros(latents[:, :1].shape)
        return self.previous(torch.cat((previous.to(latents.dtype), latents[:, :-1]), dim=1))

    def keep_latents(self, latents: torch.Tensor) -> None:
        """Keep the last token's stock-pass latents in the cache, for the next token."""
        if self.cache is not None:
            self.cache.latents = latents[:, -1:].detach()

    def _record(self, x):
        if self.hidden is not None:
            self.hidden.append(x)

    def _tap(self, found: list, i: int, x: torch.Tensor) -> None:
        """If layer `i` is a source, its pair's latents `down(x)` into `found`."""
        p = self.model.source_pair.get(i)
        if p is not None:
            found[p] = self.layers[i].latent_down(x)

    def stock_pass(self, x: torch.Tensor, cache, stock_cache) -> tuple[torch.Tensor, torch.Tensor]:
        """Pass 1 up to the deepest source layer, from the embeddings `x`. Returns the latents of every token
        (`[batch, seq, pairs, latent_dim]`) and the hidden states after the layers below `model.shared_depth` (the
        first target), where the latent pass starts: those layers see the same input in both passes, so they run once,
        for both, as the latent pass runs them (with its graph; recorded as its hidden states; through `cache`). Above
        them the stock pass runs alone, through `stock_cache`, and with a frozen base builds no graph: only the down
        projections get gradients from it (they read the shared layers' outputs detached, too)."""
        model = self.model
        found = [None] * len(model.source_pair)
        stock_grad = torch.is_grad_enabled() and model.base_is_trainable
        if model.shared_depth:
            self._record(x)
        for i in range(model.shared_depth):
            x = self._layer(i, x, cache)
            self._record(x)
            self._tap(found, i, x if stock_grad else x.detach())
        shared = x
        for i in range(model.shared_depth, model.stock_depth):
            with torch.set_grad_enabled(stock_grad):
                x = self._layer(i, x, stock_cache)
            self._tap(found, i, x)
        return self._masked(torch.stack(found, dim=2)), shared

    def latent_pass(
        self, x: torch.Tensor, latents: torch.Tensor, cache, start: int = 0, extract_last=False, shared_last=None
    ):
        """Pass 2 from layer `start` (`x`: the hidden states there; the stock pass's, which the layers below `start`
        share) through every layer, with `latents[:, :, p]` injected at pair p's target layer. With `extract_last`
        also returns the latents this pass gives its last token (`"recurrent"`); `shared_last` gives those of the
        source layers below `start` (the stock pass's latents of the last token, `[batch, 1, pairs, latent_dim]`)."""
        model = self.model
        found = None
        if extract_last:
            found = list(shared_last.unbind(2)) if shared_last is not None else [None] * len(model.source_pair)
        if start == 0:
            self._record(x)
        for i in range(start, len(self.layers)):
            p = model.target_pair.get(i)
            x = self._layer(i, x, cache, latent=latents[:, :, p] if p is not None else None)
            self._record(x)
            if extract_last:
                self._tap(found, i, x[:, -1:])
        if extract_last:
            return x, self._masked(torch.stack(found, dim=2), last=True)
        return x

    def batched_step(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        """`"previous_position"` decoding of one token: the layers below the first target once, for both passes (B
        rows); then the stock and the latent pass as one batch of 2B rows (stock rows first) up to the deepest source
        layer (`model.two_pass_layers`); then the latent rows alone."""
        model, cache = self.model, self.cache
        rows, two_pass = inputs_embeds.shape[0], model.two_pass_layers
        stacked_masks, stacked_position_embeddings = _rows_twice(self.masks), _rows_twice(self.position_embeddings)
        found = [None] * len(model.source_pair)
        previous = self.previous(cache.latents)
        x = inputs_embeds
        self._record(x)
        for i in range(len(self.layers)):
            stacked = i in two_pass
            if stacked and i == two_pass.start:
                x = torch.cat((x, x))
            if two_pass and i == two_pass.stop:
                x = x[rows:]
            p = model.target_pair.get(i)
            x = self._layer(
                i,
                x,
                cache,
                latent=previous[:, :, p] if p is not None else None,
                latent_rows_from=rows if stacked else 0,
                masks=stacked_masks if stacked else None,
                position_embeddings=stacked_position_embeddings if stacked else None,
            )
            self._record(x[rows:] if stacked else x)
            self._tap(found, i, x[:rows])  # the stock rows (below `two_pass`: the rows both passes share)
        cache.latents = self._masked(torch.stack(found, dim=2), last=True)
        if two_pass and two_pass.stop == len(self.layers):  # the last layer is a source: the stock rows are stacked
            x = x[rows:]
        return x


class LatentForCausalLMMixin(LatentPreTrainedMixin, CausalLMMixin):
    """The stock causal-LM head on a latent model; `generate()` gets a `LatentCache`."""


# checkpoints saved with a 0-d `latent_gate` exist only for the families of that time
register_scalar_parameters(["qwen3_latent", "llama_latent"], ["latent_gate"])

__all__ = ["LatentCache"]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
# each class has an `__init__` of its own, so that DeepSpeed's zero.Init partitions the mixin's parameters too
class LlamaLatentDecoderLayer(LatentDecoderLayerMixin, LlamaDecoderLayer):
    family = LLAMA

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class LlamaLatentModel(LatentModelMixin, LlamaModel):
    config_class = LlamaLatentConfig
    family = LLAMA
    decoder_layer_class = LlamaLatentDecoderLayer
    _no_split_modules = ["LlamaLatentDecoderLayer", "LatentProjection"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class LlamaLatentForCausalLM(LatentForCausalLMMixin, LlamaForCausalLM, GenerationMixin):
    config_class = LlamaLatentConfig
    family = LLAMA
    base_class = LlamaLatentModel
    _no_split_modules = ["LlamaLatentDecoderLayer", "LatentProjection"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(LlamaLatentConfig, AutoModel=LlamaLatentModel, AutoModelForCausalLM=LlamaLatentForCausalLM)


class Qwen3LatentDecoderLayer(LatentDecoderLayerMixin, Qwen3DecoderLayer):
    family = QWEN3

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen3LatentModel(LatentModelMixin, Qwen3Model):
    config_class = Qwen3LatentConfig
    family = QWEN3
    decoder_layer_class = Qwen3LatentDecoderLayer
    _no_split_modules = ["Qwen3LatentDecoderLayer", "LatentProjection"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class Qwen3LatentForCausalLM(LatentForCausalLMMixin, Qwen3ForCausalLM, GenerationMixin):
    config_class = Qwen3LatentConfig
    family = QWEN3
    base_class = Qwen3LatentModel
    _no_split_modules = ["Qwen3LatentDecoderLayer", "LatentProjection"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Qwen3LatentConfig, AutoModel=Qwen3LatentModel, AutoModelForCausalLM=Qwen3LatentForCausalLM)


class Qwen2LatentDecoderLayer(LatentDecoderLayerMixin, Qwen2DecoderLayer):
    family = QWEN2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen2LatentModel(LatentModelMixin, Qwen2Model):
    config_class = Qwen2LatentConfig
    family = QWEN2
    decoder_layer_class = Qwen2LatentDecoderLayer
    _no_split_modules = ["Qwen2LatentDecoderLayer", "LatentProjection"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class Qwen2LatentForCausalLM(LatentForCausalLMMixin, Qwen2ForCausalLM, GenerationMixin):
    config_class = Qwen2LatentConfig
    family = QWEN2
    base_class = Qwen2LatentModel
    _no_split_modules = ["Qwen2LatentDecoderLayer", "LatentProjection"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Qwen2LatentConfig, AutoModel=Qwen2LatentModel, AutoModelForCausalLM=Qwen2LatentForCausalLM)


class MistralLatentDecoderLayer(LatentDecoderLayerMixin, MistralDecoderLayer):
    family = MISTRAL

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class MistralLatentModel(LatentModelMixin, MistralModel):
    config_class = MistralLatentConfig
    family = MISTRAL
    decoder_layer_class = MistralLatentDecoderLayer
    _no_split_modules = ["MistralLatentDecoderLayer", "LatentProjection"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class MistralLatentForCausalLM(LatentForCausalLMMixin, MistralForCausalLM, GenerationMixin):
    config_class = MistralLatentConfig
    family = MISTRAL
    base_class = MistralLatentModel
    _no_split_modules = ["MistralLatentDecoderLayer", "LatentProjection"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    MistralLatentConfig, AutoModel=MistralLatentModel, AutoModelForCausalLM=MistralLatentForCausalLM
)


class Phi3LatentDecoderLayer(LatentDecoderLayerMixin, Phi3DecoderLayer):
    family = PHI3

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Phi3LatentModel(LatentModelMixin, Phi3Model):
    config_class = Phi3LatentConfig
    family = PHI3
    decoder_layer_class = Phi3LatentDecoderLayer
    _no_split_modules = ["Phi3LatentDecoderLayer", "LatentProjection"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class Phi3LatentForCausalLM(LatentForCausalLMMixin, Phi3ForCausalLM, GenerationMixin):
    config_class = Phi3LatentConfig
    family = PHI3
    base_class = Phi3LatentModel
    _no_split_modules = ["Phi3LatentDecoderLayer", "LatentProjection"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Phi3LatentConfig, AutoModel=Phi3LatentModel, AutoModelForCausalLM=Phi3LatentForCausalLM)


class Olmo2LatentDecoderLayer(LatentDecoderLayerMixin, Olmo2DecoderLayer):
    family = OLMO2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Olmo2LatentModel(LatentModelMixin, Olmo2Model):
    config_class = Olmo2LatentConfig
    family = OLMO2
    decoder_layer_class = Olmo2LatentDecoderLayer
    _no_split_modules = ["Olmo2LatentDecoderLayer", "LatentProjection"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class Olmo2LatentForCausalLM(LatentForCausalLMMixin, Olmo2ForCausalLM, GenerationMixin):
    config_class = Olmo2LatentConfig
    family = OLMO2
    base_class = Olmo2LatentModel
    _no_split_modules = ["Olmo2LatentDecoderLayer", "LatentProjection"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Olmo2LatentConfig, AutoModel=Olmo2LatentModel, AutoModelForCausalLM=Olmo2LatentForCausalLM)


class Gemma2LatentDecoderLayer(LatentDecoderLayerMixin, Gemma2DecoderLayer):
    family = GEMMA2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Gemma2LatentModel(LatentModelMixin, Gemma2Model):
    config_class = Gemma2LatentConfig
    family = GEMMA2
    decoder_layer_class = Gemma2LatentDecoderLayer
    _no_split_modules = ["Gemma2LatentDecoderLayer", "LatentProjection"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class Gemma2LatentForCausalLM(LatentForCausalLMMixin, Gemma2ForCausalLM, GenerationMixin):
    config_class = Gemma2LatentConfig
    family = GEMMA2
    base_class = Gemma2LatentModel
    _no_split_modules = ["Gemma2LatentDecoderLayer", "LatentProjection"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Gemma2LatentConfig, AutoModel=Gemma2LatentModel, AutoModelForCausalLM=Gemma2LatentForCausalLM)


class Gemma3TextLatentDecoderLayer(LatentDecoderLayerMixin, Gemma3DecoderLayer):
    family = GEMMA3_TEXT

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Gemma3TextLatentModel(LatentModelMixin, Gemma3TextModel):
    config_class = Gemma3TextLatentConfig
    family = GEMMA3_TEXT
    decoder_layer_class = Gemma3TextLatentDecoderLayer
    _no_split_modules = ["Gemma3TextLatentDecoderLayer", "LatentProjection"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class Gemma3TextLatentForCausalLM(LatentForCausalLMMixin, Gemma3ForCausalLM, GenerationMixin):
    config_class = Gemma3TextLatentConfig
    family = GEMMA3_TEXT
    base_class = Gemma3TextLatentModel
    _no_split_modules = ["Gemma3TextLatentDecoderLayer", "LatentProjection"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Gemma3TextLatentConfig, AutoModel=Gemma3TextLatentModel, AutoModelForCausalLM=Gemma3TextLatentForCausalLM
)


class GPT2LatentDecoderLayer(LatentDecoderLayerMixin, GPT2Block):
    family = GPT2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class GPT2LatentModel(LatentModelMixin, GPT2Model):
    config_class = GPT2LatentConfig
    family = GPT2
    decoder_layer_class = GPT2LatentDecoderLayer
    _no_split_modules = ["GPT2LatentDecoderLayer", "LatentProjection"]
    _can_record_outputs = {}

    def __init__(self, config):
        super().__init__(config)


class GPT2LatentForCausalLM(LatentForCausalLMMixin, GPT2LMHeadModel, GenerationMixin):
    config_class = GPT2LatentConfig
    family = GPT2
    base_class = GPT2LatentModel
    _no_split_modules = ["GPT2LatentDecoderLayer", "LatentProjection"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(GPT2LatentConfig, AutoModel=GPT2LatentModel, AutoModelForCausalLM=GPT2LatentForCausalLM)


__all__ += [
    "GPT2LatentForCausalLM",
    "GPT2LatentModel",
    "Gemma2LatentForCausalLM",
    "Gemma2LatentModel",
    "Gemma3TextLatentForCausalLM",
    "Gemma3TextLatentModel",
    "LlamaLatentForCausalLM",
    "LlamaLatentModel",
    "MistralLatentForCausalLM",
    "MistralLatentModel",
    "Olmo2LatentForCausalLM",
    "Olmo2LatentModel",
    "Phi3LatentForCausalLM",
    "Phi3LatentModel",
    "Qwen2LatentForCausalLM",
    "Qwen2LatentModel",
    "Qwen3LatentForCausalLM",
    "Qwen3LatentModel",
]
# --- end generated classes ---
