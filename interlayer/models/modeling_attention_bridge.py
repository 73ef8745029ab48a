"""Attention bridges between an encoder and language-specific decoders (seed 004), on Marian, BART, mBART, M2M100
(NLLB's architecture) and T5.

The encoder output `H` (`[batch, source, d_model]`, with the source padding mask) goes through a stack of bridge
layers before the decoders' cross-attention:

    lin          A = softmax over the source of (W2 relu(W1 H + b1) + b2)    [batch, source, r]; M = Norm(A^T H)
    simple       A = softmax(Q (W_k H)^T / sqrt(hidden)) with learned Q       [batch, r, source]; M = Norm(A W_v H)
    perceiver    x = Norm(q + CrossAttn(q, H)); x = Norm(x + FF(x)); then x = Norm(x + SelfAttn(x)); Norm(x + FF(x)),
                 q the learned latent array (the first fixed-length layer) or the previous output (later layers),
                 H the encoder output as the variable-length layers before the first fixed-length layer left it
    transformer  x = x + SelfAttn(Norm(x)); x = x + FF(Norm(x))   (pre-norm, variable length)
    feedforward  x = Norm(W2 relu(W1 x))                            (no residual)

Padding is masked in every attention over the source (scores of padded positions are set to the dtype's minimum, so
they get exactly zero weight); position-wise layers do not mix positions. A fixed-length bridge gives the decoder
`r = bridge_fixed_length` slots, so its cross-attention takes no mask; a variable-length bridge keeps the source
mask. The bridge runs inside the encoder (`model.encoder.attention_bridge`), so `generate()` computes and caches its
output once as the encoder memory.

The mechanism is written once against the three roles a seq2seq family plays, each a mixin put before a stock class:
the encoder output (`AttentionBridgeEncoderMixin`: the stock encoder, then the bridge), the decoders'
cross-attention memory and the choice of the target language's decoder (`AttentionBridgeDecoderMixin`: the stock
decoder, given no memory mask for a fixed-length memory and dispatching on `tgt_lang`), and the class that owns
the encoder and decoders (`AttentionBridgeSeq2SeqMixin`: swaps them for the bridged ones and adds the language
decoders). The stock forward passes are used as they are (they pass `**kwargs`, hence `tgt_lang`, to the encoder and
the decoder). A family is its declaration in `families.py` (`Seq2SeqFamily`: its stock encoder, decoder, base model
and LM); the classes at the end of this file, one per role and the LM, are written from it by
`python -m interlayer.generate_classes --fix` (the repository's class generator).
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import math

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import BaseModelOutput

from .configuration_attention_bridge import FIXED_LENGTH_TYPES
from .zoo_common import (
    CACHE_KWARG,
    StatsAccumulator,
    ZooModelMixin,
    dot_product_attention,
    register_for_auto_classes,
    returns_dict_to_its_head,
    take_cache,
)

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers.models.bart.modeling_bart import BartDecoder, BartEncoder, BartForConditionalGeneration, BartModel
from transformers.models.m2m_100.modeling_m2m_100 import (
    M2M100Decoder,
    M2M100Encoder,
    M2M100ForConditionalGeneration,
    M2M100Model,
)
from transformers.models.marian.modeling_marian import MarianDecoder, MarianEncoder, MarianModel, MarianMTModel
from transformers.models.mbart.modeling_mbart import (
    MBartDecoder,
    MBartEncoder,
    MBartForConditionalGeneration,
    MBartModel,
)
from transformers.models.t5.modeling_t5 import T5ForConditionalGeneration, T5Model, T5Stack

from .configuration_attention_bridge import (
    BartAttentionBridgeConfig,
    M2M100AttentionBridgeConfig,
    MarianAttentionBridgeConfig,
    MBartAttentionBridgeConfig,
    T5AttentionBridgeConfig,
)
from .seq2seq_families import BART, M2M100, MARIAN, MBART, T5

# --- end generated imports ---


class BridgeLinear(nn.Linear):
    """A linear layer of the bridge (so its initialisation is the bridge's whatever the family's stock init covers);
    `zero_init` starts it at zero (a residual branch's output at `identity_init`)."""

    def __init__(self, in_features: int, out_features: int, zero_init: bool = False):
        super().__init__(in_features, out_features)
        self.zero_init = zero_init


class BridgeLayerNorm(nn.LayerNorm):
    pass


class BridgeRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def bridge_norm(config) -> nn.Module:
    if config.bridge_norm == "layernorm":
        return BridgeLayerNorm(config.d_model, eps=config.bridge_norm_eps)
    if config.bridge_norm == "rmsnorm":
        return BridgeRMSNorm(config.d_model, config.bridge_norm_eps)
    return nn.Identity()


def masked_softmax(scores: torch.Tensor, keep: torch.Tensor | None, dim: int) -> torch.Tensor:
    """Softmax of `scores` along `dim` with the positions where `keep` is False given exactly zero weight."""
    if keep is not None:
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return scores.softmax(dim)


class FeedForward(nn.Sequential):
    def __init__(self, config, zero_init: bool = False):
        super().__init__(
            BridgeLinear(config.d_model, config.bridge_hidden_size),
            nn.ReLU(),
            BridgeLinear(config.bridge_hidden_size, config.d_model, zero_init=zero_init),
        )


class BridgeAttention(nn.Module):
    """Multi-head dot-product attention of `query` over `memory` (vectorised over heads), `keep` masking memory."""

    def __init__(self, config, zero_init: bool = False):
        super().__init__()
        d = config.d_model
        self.heads, self.head_dim = config.bridge_heads, d // config.bridge_heads
        self.q_proj, self.k_proj, self.v_proj = (BridgeLinear(d, d) for _ in range(3))
        self.out_proj = BridgeLinear(d, d, zero_init=zero_init)
        self.config = config  # it attends as the model's `attn_implementation` says

    def _split(self, x):
        return x.unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)

    def forward(self, query, memory, keep: torch.Tensor | None = None, need_weights: bool = False):
        """`keep`: `[batch, memory]` booleans (True = a real position) or None. Returns the output and, with
        `need_weights`, the attention averaged over heads (`[batch, query, memory]`)."""
        q, k, v = self._split(self.q_proj(query)), self._split(self.k_proj(memory)), self._split(self.v_proj(memory))
        mask = keep[:, None, None, :] if keep is not None else None
        if not need_weights:
            out = dot_product_attention(q, k, v, mask, 0.0, self.config._attn_implementation)
            return self.out_proj(out.transpose(1, 2).flatten(2)), None
        weights = masked_softmax(q @ k.transpose(-1, -2) / math.sqrt(self.head_dim), mask, dim=-1)
        out = (weights @ v).transpose(1, 2).flatten(2)
        return self.out_proj(out), weights.mean(1)


class BridgeLayer(nn.Module):
    """A bridge layer: `forward(x, keep, source, source_keep) -> (x, keep)`; `keep` None means every position."""

    fixed_length = False

    def __init__(self, config, index: int):
        super().__init__()
        self.index = index
        self.keep_attention = False
        self.last_attention = None
        if self.fixed_length:
            self.stats = StatsAccumulator()

    def _watch(self, attention: torch.Tensor, source_keep: torch.Tensor | None) -> None:
        """Statistics of `attention` (`[batch, slots, source]`, rows summing to 1 over real source tokens): mean
        normalised entropy of a slot, and coverage = exp(entropy of the slots' mean attention) / source length (the
        share of the source the bridge reads)."""
        if self.keep_attention:
            self.last_attention = attention.detach()
        with torch.no_grad():
            a = attention.float()
            length = (
                source_keep.sum(-1).float()
                if source_keep is not None
                else torch.full(a.shape[:1], a.shape[-1], dtype=a.dtype)
            )
            log_len = length.clamp_min(2).log()
            slot_entropy = -(a * a.clamp_min(1e-12).log()).sum(-1) / log_len[:, None]
            mean = a.mean(1)
            coverage = torch.exp(-(mean * mean.clamp_min(1e-12).log()).sum(-1)) / length
            name = f"attention_bridge/L{self.index}/{self.layer_type}"
            self.stats.add(f"{name}/slot_entropy", slot_entropy.mean())
            self.stats.add(f"{name}/coverage", coverage.mean())


class LinBridgeLayer(BridgeLayer):
    layer_type, fixed_length = "lin", True

    def __init__(self, config, index):
        super().__init__(config, index)
        self.w1 = BridgeLinear(config.d_model, config.bridge_hidden_size)
        self.w2 = BridgeLinear(config.bridge_hidden_size, config.bridge_fixed_length)
        self.norm = bridge_norm(config)

    def forward(self, x, keep, source, source_keep):
        attention = masked_softmax(self.w2(torch.relu(self.w1(x))).transpose(1, 2), _rows(keep), dim=-1)
        self._watch(attention, keep)
        return self.norm(attention @ x), None


class SimpleBridgeLayer(BridgeLayer):
    layer_type, fixed_length = "simple", True

    def __init__(self, config, index):
        super().__init__(config, index)
        self.queries = nn.Parameter(torch.empty(config.bridge_fixed_length, config.bridge_hidden_size))
        self.k_proj = BridgeLinear(config.d_model, config.bridge_hidden_size)
        self.v_proj = BridgeLinear(config.d_model, config.d_model)
        self.norm = bridge_norm(config)

    def forward(self, x, keep, source, source_keep):
        scores = self.queries @ self.k_proj(x).transpose(1, 2) / math.sqrt(self.queries.shape[-1])
        attention = masked_softmax(scores, _rows(keep), dim=-1)
        self._watch(attention, keep)
        return self.norm(attention @ self.v_proj(x)), None


class PerceiverBridgeLayer(BridgeLayer):
    layer_type, fixed_length = "perceiver", True

    def __init__(self, config, index, first: bool):
        super().__init__(config, index)
        self.latents = nn.Parameter(torch.empty(config.bridge_fixed_length, config.d_model)) if first else None
        self.cross_attn, self.self_attn = BridgeAttention(config), BridgeAttention(config)
        self.cross_ff, self.self_ff = FeedForward(config), FeedForward(config)
        self.norms = nn.ModuleList(bridge_norm(config) for _ in range(4))

    def forward(self, x, keep, source, source_keep):
        q = self.latents.expand(source.shape[0], -1, -1) if self.latents is not None else x
        attended, attention = self.cross_attn(q, source, source_keep, need_weights=True)
        self._watch(attention, source_keep)
        x = self.norms[0](q + attended)
        x = self.norms[1](x + self.cross_ff(x))
        x = self.norms[2](x + self.self_attn(x, x)[0])
        return self.norms[3](x + self.self_ff(x)), None


class TransformerBridgeLayer(BridgeLayer):
    layer_type = "transformer"

    def __init__(self, config, index):
        super().__init__(config, index)
        # the residual branches' outputs start at zero at identity_init: the layer is the identity
        self.self_attn = BridgeAttention(config, zero_init=config.identity_init)
        self.ff = FeedForward(config, zero_init=config.identity_init)
        self.attn_norm, self.ff_norm = bridge_norm(config), bridge_norm(config)

    def forward(self, x, keep, source, source_keep):
        normed = self.attn_norm(x)
        x = x + self.self_attn(normed, normed, keep)[0]
        return x + self.ff(self.ff_norm(x)), keep


class FeedForwardBridgeLayer(BridgeLayer):
    layer_type = "feedforward"

    def __init__(self, config, index):
        super().__init__(config, index)
        self.ff, self.norm = FeedForward(config), bridge_norm(config)

    def forward(self, x, keep, source, source_keep):
        return self.norm(self.ff(x)), keep


def _rows(keep):
    """A `[batch, source]` mask broadcast over the slots of a `[batch, slots, source]` score."""
    return keep[:, None, :] if keep is not None else None


LAYER_CLASSES = {
    "lin": LinBridgeLayer,
    "simple": SimpleBridgeLayer,
    "transformer": TransformerBridgeLayer,
    "feedforward": FeedForwardBridgeLayer,
}


class AttentionBridge(nn.Module):
    """The stack of bridge layers; `forward(H, source_keep) -> (memory, memory_keep)`."""

    def __init__(self, config):
        super().__init__()
        layers, fixed = [], False
        for i, layer_type in enumerate(config.bridge_layers):
            if layer_type == "perceiver":
                layers.append(PerceiverBridgeLayer(config, i, first=not fixed))
            else:
                layers.append(LAYER_CLASSES[layer_type](config, i))
            fixed = fixed or layer_type in FIXED_LENGTH_TYPES
        self.layers = nn.ModuleList(layers)

    def forward(self, hidden_states: torch.Tensor, source_keep: torch.Tensor | None):
        """Perceiver layers attend to `source`: the encoder output as the variable-length layers before the first
        fixed-length layer left it."""
        x, keep = hidden_states, source_keep
        source, fixed = hidden_states, False
        for layer in self.layers:
            x, keep = layer(x, keep, source, source_keep)
            fixed = fixed or layer.fixed_length
            if not fixed:
                source = x
        return x, keep


@torch.no_grad()
def init_bridge_module(module: nn.Module, std: float) -> bool:
    """Initialise one of the bridge's own modules (its own tensors only, as transformers' per-module init expects),
    the same in every family; False for any other module (left to the family's stock init)."""
    if isinstance(module, BridgeLinear):
        if module.zero_init:
            init.zeros_(module.weight)
        else:
            init.normal_(module.weight, std=std)
        init.zeros_(module.bias)
    elif isinstance(module, BridgeLayerNorm):
        init.ones_(module.weight)
        init.zeros_(module.bias)
    elif isinstance(module, BridgeRMSNorm):
        init.ones_(module.weight)
    elif isinstance(module, SimpleBridgeLayer):
        init.normal_(module.queries, std=std)
    elif isinstance(module, PerceiverBridgeLayer):
        if module.latents is not None:
            init.normal_(module.latents, std=std)
    else:
        return False
    return True


class AttentionBridgeInitMixin:
    """The bridge's initialisation (std `config.bridge_init_std`), in every bridged class that is a
    `PreTrainedModel`, since each initialises its own submodules; other modules get the family's stock init."""

    @torch.no_grad()
    def _init_weights(self, module):
        if not init_bridge_module(module, self.config.bridge_init_std):
            super()._init_weights(module)


class AttentionBridgeEncoderMixin(AttentionBridgeInitMixin):
    """Role 1, the encoder output: the stock encoder followed by the attention bridge; its `last_hidden_state` is the
    decoders' memory (put before the stock encoder class)."""

    def __init__(self, config):
        super().__init__(config)
        self.attention_bridge = AttentionBridge(config)

    def forward(
        self, input_ids=None, attention_mask=None, inputs_embeds=None, tgt_lang=None, return_dict=None, **kwargs
    ):
        """As the stock encoder, then the bridge (`tgt_lang`, for the decoders, is ignored here). Returns its output
        class unless the call asks for a tuple (the model that runs it reads the output by field name, whatever
        `config.return_dict` says)."""
        kwargs["return_dict"] = True
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        keep = attention_mask.bool() if attention_mask is not None and attention_mask.dim() == 2 else None
        memory, _ = self.attention_bridge(out.last_hidden_state, keep)
        output = BaseModelOutput(last_hidden_state=memory, hidden_states=out.hidden_states, attentions=out.attentions)
        return output.to_tuple() if return_dict is False else output


class AttentionBridgeDecoderMixin:
    """Roles 2 and 3, the cross-attention memory and the language's decoder: a stock decoder reading the bridge's
    memory, with no memory mask when the memory is fixed-length (every slot is real; a variable-length memory keeps
    the source mask the stock model passes). The stock `decoder` (the first language's) also picks the decoder of
    `tgt_lang` among the language decoders its owner binds to it (put before the stock decoder class)."""

    def bind_language_decoders(self, decoders: nn.ModuleDict) -> None:
        """Let this decoder dispatch to `decoders` (registered on the owner, which saves them under its own names:
        a plain reference here, not a submodule)."""
        object.__setattr__(self, "_language_decoders", decoders)

    def decoder_for(self, tgt_lang) -> nn.Module:
        """The decoder of `tgt_lang` (a language name, or a tensor of language indices all equal). None is the only
        decoder of a model with one; with several it raises, naming the languages (there is no default language)."""
        languages = list(self.config.decoder_languages or [])
        if isinstance(tgt_lang, torch.Tensor):
            values = tgt_lang.unique().tolist()
            if len(values) != 1 or not 0 <= values[0] < max(len(languages), 1):
                raise ValueError(
                    f"`tgt_lang` as a tensor must hold one language index in [0, {len(languages) - 1}] for the whole "
                    f"batch (one decoder runs per batch), got {values}."
                )
            tgt_lang = languages[values[0]] if languages else None
        if not languages:
            if tgt_lang is not None:
                raise ValueError(f"this model has one decoder (`decoder_languages` is None); got tgt_lang={tgt_lang!r}")
            return self
        if tgt_lang is None and len(languages) == 1:
            tgt_lang = languages[0]
        if tgt_lang is None:
            # no silent default: a batch run by the wrong language's decoder would look like a poor translation
            raise ValueError(
                f"this model has one decoder per target language, {languages}: pass `tgt_lang=` (one of them) to "
                f"forward() or generate(), e.g. `model.generate(**inputs, tgt_lang={languages[0]!r})`."
            )
        if tgt_lang not in languages:
            raise ValueError(f"`tgt_lang` must be one of {languages}, got {tgt_lang!r}.")
        return self if tgt_lang == languages[0] else self.__dict__["_language_decoders"][tgt_lang]

    def forward(self, *args, encoder_attention_mask=None, tgt_lang=None, **kwargs):
        """As the stock decoder, run by the decoder of `tgt_lang`; it returns its output class unless the call asks
        for a tuple (the model that runs it reads the output by field name, whatever `config.return_dict` says)."""
        if self.config.bridge_is_fixed_length:
            encoder_attention_mask = None
        kwargs.setdefault("return_dict", True)
        decoder = self.decoder_for(tgt_lang) if "_language_decoders" in self.__dict__ else self
        if decoder is not self:
            return decoder(*args, encoder_attention_mask=encoder_attention_mask, **kwargs)
        return super().forward(*args, encoder_attention_mask=encoder_attention_mask, **kwargs)


class AttentionBridgePreTrainedMixin(AttentionBridgeInitMixin, ZooModelMixin):
    """Init, language decoders, statistics and card text shared by the bridged seq2seq models."""

    mechanism_name = "Attention bridge"
    mechanism_param_prefix = "attention_bridge"
    # the names until 2026-11-24, when they were named under the mechanism's prefix (apart from the bridges' `bridge`)
    renamed_parameters = {
        "encoder.bridge": "encoder.attention_bridge",
        "language_decoders": "attention_bridge_decoders",
    }

    @property
    def seq2seq(self) -> nn.Module:
        """The module that owns the encoder, the decoder and the language decoders (`model` in an LM that wraps a
        base model, otherwise this one)."""
        return self.model if hasattr(self, "model") else self

    def finish_loading(self, info: dict) -> None:
        """A language decoder missing from the checkpoint (converting a stock checkpoint) starts as a copy of the
        stock decoder."""
        super().finish_loading(info)
        owner = self.seq2seq
        for language, decoder in owner.attention_bridge_decoders.items():
            if any(f"attention_bridge_decoders.{language}." in k for k in info["missing_keys"]):
                decoder.load_state_dict(owner.decoder.state_dict())

    def mechanism_summary(self) -> str:
        c = self.config
        layers = " -> ".join(c.bridge_layers) or "no bridge layer"
        memory = (
            f"a fixed-length memory of {c.bridge_fixed_length} slots"
            if c.bridge_is_fixed_length
            else "the source length"
        )
        languages = (
            f"One decoder per target language ({', '.join(c.decoder_languages)}; choose with `tgt_lang=`). "
            if c.decoder_languages
            else ""
        )
        return (
            f"An attention bridge (interlayer, seed 004) between the encoder and the decoders: {layers}, giving the "
            f"decoders {memory}. {languages}Stock weight names; the bridge is `encoder.attention_bridge`. Log "
            "`mechanism_stats()` (or use `interlayer.callbacks.MechanismStatsCallback`) to watch the slots' attention "
            "over the source (entropy, coverage)."
        )

    def decoder_for(self, tgt_lang) -> nn.Module:
        """The decoder that runs for `tgt_lang` (a language name, or a tensor of language indices all equal)."""
        return self.seq2seq.decoder.decoder_for(tgt_lang)

    def bridge_attention(self, input_ids, attention_mask=None, layer: int | None = None) -> torch.Tensor:
        """The attention of each slot of a fixed-length bridge layer over the source tokens, `[batch, slots, source]`
        (the first fixed-length layer unless `layer` is given)."""
        encoder = self.seq2seq.encoder
        layers = encoder.attention_bridge.layers
        fixed = [i for i, m in enumerate(layers) if m.fixed_length]
        if layer is None and not fixed:
            raise ValueError(f"this bridge ({self.config.bridge_layers}) has no fixed-length layer to show")
        index = fixed[0] if layer is None else layer
        if index not in fixed:
            raise ValueError(f"`layer` must be the index of a fixed-length bridge layer, one of {fixed}; got {layer!r}")
        target = layers[index]
        target.keep_attention = True
        try:
            with torch.no_grad():
                encoder(input_ids=input_ids, attention_mask=attention_mask)
            return target.last_attention
        finally:
            target.keep_attention, target.last_attention = False, None


class AttentionBridgeSeq2SeqMixin(AttentionBridgePreTrainedMixin):
    """A stock class that owns the encoder and the decoder (a base model, or an LM without one, such as T5's): its
    encoder becomes the family's `encoder_class` (the bridge after the stock encoder) and its decoder the
    `decoder_class`, and with `decoder_languages` one more decoder per further language (`attention_bridge_decoders`).
    Each is built from the config the stock class gave the part it replaces (T5 gives its encoder and decoder their
    own copies). Put before the stock class."""

    encoder_class: type
    decoder_class: type

    def __init__(self, config):
        checkpointing = getattr(config, "gradient_checkpointing", False)  # the stock post_init consumes the flag
        super().__init__(config)  # the stock model: shared embeddings, encoder, decoder
        self.encoder = self.encoder_class(self.encoder.config)
        self.decoder = self.decoder_class(self.decoder.config)
        languages = list(config.decoder_languages or [])
        self.attention_bridge_decoders = nn.ModuleDict(
            {lang: self.decoder_class(self.decoder.config) for lang in languages[1:]}
        )
        self.decoder.bind_language_decoders(self.attention_bridge_decoders)
        self._tied_weights_keys = {**(self._tied_weights_keys or {}), **language_ties(config, self, prefix="")}
        config.gradient_checkpointing = checkpointing
        self.post_init()


def language_ties(config, owner, prefix: str) -> dict[str, str]:
    """Every language decoder's input embedding tied to the shared embedding, or to the first decoder's where the
    model has no shared one (one target vocabulary)."""
    languages = list(config.decoder_languages or [])[1:]
    shared = getattr(owner, "shared", None) is not None
    source = f"{prefix}shared.weight" if shared else f"{prefix}decoder.embed_tokens.weight"
    return {f"{prefix}attention_bridge_decoders.{lang}.embed_tokens.weight": source for lang in languages}


class AttentionBridgeLMMixin(AttentionBridgePreTrainedMixin):
    """The stock seq2seq LM with the bridge: either it wraps a bridged base model (`base_class`, as `model`), or it
    owns the encoder and decoder itself (then `AttentionBridgeSeq2SeqMixin` follows this mixin). `tgt_lang` chooses
    the decoder (put before the stock class)."""

    base_class: type | None = None
    pipeline_tag = None  # transformers 5 has no seq2seq pipeline ("translation" and "text2text-generation" are gone)
    # the stock seq2seq loss is a mean that ignores `num_items_in_batch`
    accepts_loss_kwargs = False

    def __init__(self, config):
        checkpointing = getattr(config, "gradient_checkpointing", False)  # the stock post_init consumes the flag
        super().__init__(config)  # the stock LM
        if self.base_class is not None:
            self.model = self.base_class(config)
            returns_dict_to_its_head(self.model)
            self._tied_weights_keys = {
                **(self._tied_weights_keys or {}),
                **language_ties(config, self.model, prefix="model."),
            }
            config.gradient_checkpointing = checkpointing
            self.post_init()

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        past_key_values=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels=None,
        use_cache=None,
        tgt_lang=None,
        **kwargs,
    ):
        """As the stock model; `tgt_lang` (a language of `decoder_languages`, or a tensor of language indices, equal
        across the batch) chooses the decoder. A model with several decoders has no default language: without
        `tgt_lang` it raises, naming them. (Named here so that the Trainer keeps a `tgt_lang` dataset column.)"""
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            tgt_lang=tgt_lang,
            **{CACHE_KWARG: take_cache(past_key_values, kwargs)},
            **kwargs,
        )

    def generate(self, *args, tgt_lang=None, **kwargs):
        """As the stock `generate()`; `tgt_lang` chooses the decoder as in `forward`, and is required when the model
        has several (checked before the encoder runs)."""
        self.decoder_for(tgt_lang)
        if tgt_lang is not None:
            kwargs["tgt_lang"] = tgt_lang
        return super().generate(*args, **kwargs)


# ---- the families: each a declaration of `families.py` (`Seq2SeqFamily`), its classes the mixins above put before its
# stock encoder, decoder, base model and LM

__all__ = [
    "AttentionBridge",
    "BartBridgeForConditionalGeneration",
    "BartBridgeModel",
    "MarianBridgeForConditionalGeneration",
    "MarianBridgeModel",
]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
class MarianAttentionBridgeEncoder(AttentionBridgeEncoderMixin, MarianEncoder):
    family = MARIAN


class MarianAttentionBridgeDecoder(AttentionBridgeDecoderMixin, MarianDecoder):
    family = MARIAN


class MarianAttentionBridgeModel(AttentionBridgeSeq2SeqMixin, MarianModel):
    config_class = MarianAttentionBridgeConfig
    family = MARIAN
    encoder_class = MarianAttentionBridgeEncoder
    decoder_class = MarianAttentionBridgeDecoder
    _no_split_modules = ["MarianEncoderLayer", "MarianDecoderLayer"]


class MarianAttentionBridgeForConditionalGeneration(AttentionBridgeLMMixin, MarianMTModel, GenerationMixin):
    r"""Marian translation model with an attention bridge; `generate(..., tgt_lang=...)` picks the decoder."""

    config_class = MarianAttentionBridgeConfig
    family = MARIAN
    base_class = MarianAttentionBridgeModel
    _no_split_modules = ["MarianEncoderLayer", "MarianDecoderLayer"]


register_for_auto_classes(
    MarianAttentionBridgeConfig,
    AutoModel=MarianAttentionBridgeModel,
    AutoModelForSeq2SeqLM=MarianAttentionBridgeForConditionalGeneration,
)


class BartAttentionBridgeEncoder(AttentionBridgeEncoderMixin, BartEncoder):
    family = BART


class BartAttentionBridgeDecoder(AttentionBridgeDecoderMixin, BartDecoder):
    family = BART


class BartAttentionBridgeModel(AttentionBridgeSeq2SeqMixin, BartModel):
    config_class = BartAttentionBridgeConfig
    family = BART
    encoder_class = BartAttentionBridgeEncoder
    decoder_class = BartAttentionBridgeDecoder


class BartAttentionBridgeForConditionalGeneration(
    AttentionBridgeLMMixin, BartForConditionalGeneration, GenerationMixin
):
    r"""BART with an attention bridge; `generate(..., tgt_lang=...)` picks the decoder."""

    config_class = BartAttentionBridgeConfig
    family = BART
    base_class = BartAttentionBridgeModel


register_for_auto_classes(
    BartAttentionBridgeConfig,
    AutoModel=BartAttentionBridgeModel,
    AutoModelForSeq2SeqLM=BartAttentionBridgeForConditionalGeneration,
)


class MBartAttentionBridgeEncoder(AttentionBridgeEncoderMixin, MBartEncoder):
    family = MBART


class MBartAttentionBridgeDecoder(AttentionBridgeDecoderMixin, MBartDecoder):
    family = MBART


class MBartAttentionBridgeModel(AttentionBridgeSeq2SeqMixin, MBartModel):
    config_class = MBartAttentionBridgeConfig
    family = MBART
    encoder_class = MBartAttentionBridgeEncoder
    decoder_class = MBartAttentionBridgeDecoder


class MBartAttentionBridgeForConditionalGeneration(
    AttentionBridgeLMMixin, MBartForConditionalGeneration, GenerationMixin
):
    r"""mBART with an attention bridge; `generate(..., tgt_lang=...)` picks the decoder."""

    config_class = MBartAttentionBridgeConfig
    family = MBART
    base_class = MBartAttentionBridgeModel


register_for_auto_classes(
    MBartAttentionBridgeConfig,
    AutoModel=MBartAttentionBridgeModel,
    AutoModelForSeq2SeqLM=MBartAttentionBridgeForConditionalGeneration,
)


class M2M100AttentionBridgeEncoder(AttentionBridgeEncoderMixin, M2M100Encoder):
    family = M2M100


class M2M100AttentionBridgeDecoder(AttentionBridgeDecoderMixin, M2M100Decoder):
    family = M2M100


class M2M100AttentionBridgeModel(AttentionBridgeSeq2SeqMixin, M2M100Model):
    config_class = M2M100AttentionBridgeConfig
    family = M2M100
    encoder_class = M2M100AttentionBridgeEncoder
    decoder_class = M2M100AttentionBridgeDecoder


class M2M100AttentionBridgeForConditionalGeneration(
    AttentionBridgeLMMixin, M2M100ForConditionalGeneration, GenerationMixin
):
    r"""M2M100 / NLLB with an attention bridge; `generate(..., tgt_lang=...)` picks the decoder. NLLB's own target
    language token, `forced_bos_token_id`, still works as in the stock model."""

    config_class = M2M100AttentionBridgeConfig
    family = M2M100
    base_class = M2M100AttentionBridgeModel


register_for_auto_classes(
    M2M100AttentionBridgeConfig,
    AutoModel=M2M100AttentionBridgeModel,
    AutoModelForSeq2SeqLM=M2M100AttentionBridgeForConditionalGeneration,
)


class T5AttentionBridgeEncoder(AttentionBridgeEncoderMixin, T5Stack):
    family = T5


class T5AttentionBridgeDecoder(AttentionBridgeDecoderMixin, T5Stack):
    family = T5


class T5AttentionBridgeModel(AttentionBridgeSeq2SeqMixin, T5Model):
    config_class = T5AttentionBridgeConfig
    family = T5
    encoder_class = T5AttentionBridgeEncoder
    decoder_class = T5AttentionBridgeDecoder


class T5AttentionBridgeForConditionalGeneration(
    AttentionBridgeLMMixin, AttentionBridgeSeq2SeqMixin, T5ForConditionalGeneration, GenerationMixin
):
    r"""T5 with an attention bridge (the LM owns its encoder and decoder: no base model inside);
    `generate(..., tgt_lang=...)` picks the decoder."""

    config_class = T5AttentionBridgeConfig
    family = T5
    encoder_class = T5AttentionBridgeEncoder
    decoder_class = T5AttentionBridgeDecoder


register_for_auto_classes(
    T5AttentionBridgeConfig,
    AutoModel=T5AttentionBridgeModel,
    AutoModelForSeq2SeqLM=T5AttentionBridgeForConditionalGeneration,
)


__all__ += [
    "BartAttentionBridgeForConditionalGeneration",
    "BartAttentionBridgeModel",
    "M2M100AttentionBridgeForConditionalGeneration",
    "M2M100AttentionBridgeModel",
    "MBartAttentionBridgeForConditionalGeneration",
    "MBartAttentionBridgeModel",
    "MarianAttentionBridgeForConditionalGeneration",
    "MarianAttentionBridgeModel",
    "T5AttentionBridgeForConditionalGeneration",
    "T5AttentionBridgeModel",
]
# --- end generated classes ---

# The names before the attention bridges were renamed (they named two mechanisms "bridge"): the same classes.
MarianBridgeModel = MarianAttentionBridgeModel
MarianBridgeForConditionalGeneration = MarianAttentionBridgeForConditionalGeneration
BartBridgeModel = BartAttentionBridgeModel
BartBridgeForConditionalGeneration = BartAttentionBridgeForConditionalGeneration
