"""Attention bridges between an encoder and language-specific decoders (seed 004), on Marian and BART.

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
mask. The bridge runs inside the encoder (`model.encoder.bridge`), so `generate()` computes and caches its output
once as the encoder memory.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqModelOutput
from transformers.models.bart.modeling_bart import BartEncoder, BartForConditionalGeneration, BartModel
from transformers.models.marian.modeling_marian import MarianEncoder, MarianModel, MarianMTModel

from .configuration_attention_bridge import FIXED_LENGTH_TYPES, BartBridgeConfig, MarianBridgeConfig
from .zoo_common import StatsAccumulator, ZooModelMixin, register_for_auto_classes


class BridgeRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def bridge_norm(config) -> nn.Module:
    if config.bridge_norm == "layernorm":
        return nn.LayerNorm(config.d_model, eps=config.bridge_norm_eps)
    if config.bridge_norm == "rmsnorm":
        return BridgeRMSNorm(config.d_model, config.bridge_norm_eps)
    return nn.Identity()


def masked_softmax(scores: torch.Tensor, keep: torch.Tensor | None, dim: int) -> torch.Tensor:
    """Softmax of `scores` along `dim` with the positions where `keep` is False given exactly zero weight."""
    if keep is not None:
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return scores.softmax(dim)


class FeedForward(nn.Sequential):
    def __init__(self, config):
        super().__init__(
            nn.Linear(config.d_model, config.bridge_hidden_size),
            nn.ReLU(),
            nn.Linear(config.bridge_hidden_size, config.d_model),
        )


class BridgeAttention(nn.Module):
    """Multi-head dot-product attention of `query` over `memory` (vectorised over heads), `keep` masking memory."""

    def __init__(self, config):
        super().__init__()
        d = config.d_model
        self.heads, self.head_dim = config.bridge_heads, d // config.bridge_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

    def _split(self, x):
        return x.unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)

    def forward(self, query, memory, keep: torch.Tensor | None = None, need_weights: bool = False):
        """`keep`: `[batch, memory]` booleans (True = a real position) or None. Returns the output and, with
        `need_weights`, the attention averaged over heads (`[batch, query, memory]`)."""
        q, k, v = self._split(self.q_proj(query)), self._split(self.k_proj(memory)), self._split(self.v_proj(memory))
        mask = keep[:, None, None, :] if keep is not None else None
        if not need_weights:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
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
            name = f"bridge/L{self.index}/{self.layer_type}"
            self.stats.add(f"{name}/slot_entropy", slot_entropy.mean())
            self.stats.add(f"{name}/coverage", coverage.mean())


class LinBridgeLayer(BridgeLayer):
    layer_type, fixed_length = "lin", True

    def __init__(self, config, index):
        super().__init__(config, index)
        self.w1 = nn.Linear(config.d_model, config.bridge_hidden_size)
        self.w2 = nn.Linear(config.bridge_hidden_size, config.bridge_fixed_length)
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
        self.k_proj = nn.Linear(config.d_model, config.bridge_hidden_size)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
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
        self.self_attn, self.ff = BridgeAttention(config), FeedForward(config)
        self.attn_norm, self.ff_norm = bridge_norm(config), bridge_norm(config)
        for branch_out in (self.self_attn.out_proj, self.ff[2]):  # zero at identity_init: the layer is the identity
            branch_out.zero_init = config.identity_init

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


class BridgeInitMixin:
    """Initialisation of the bridge's own tensors (used by every bridged class that is a `PreTrainedModel`, since
    each initialises its own submodules)."""

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        std = self.config.init_std
        if isinstance(module, nn.Linear) and getattr(module, "zero_init", False):
            init.zeros_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SimpleBridgeLayer):
            init.normal_(module.queries, std=std)
        elif isinstance(module, PerceiverBridgeLayer) and module.latents is not None:
            init.normal_(module.latents, std=std)
        elif isinstance(module, BridgeRMSNorm):
            init.ones_(module.weight)


class BridgeEncoderMixin(BridgeInitMixin):
    """The stock encoder followed by the attention bridge; its `last_hidden_state` is the decoders' memory (put
    before the stock encoder class)."""

    def __init__(self, config):
        super().__init__(config)
        self.bridge = AttentionBridge(config)

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, tgt_lang=None, **kwargs):
        """As the stock encoder, then the bridge (`tgt_lang`, for the decoders, is ignored here)."""
        kwargs["return_dict"] = True
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        keep = attention_mask.bool() if attention_mask is not None and attention_mask.dim() == 2 else None
        memory, _ = self.bridge(out.last_hidden_state, keep)
        return BaseModelOutput(last_hidden_state=memory, hidden_states=out.hidden_states, attentions=out.attentions)


class BridgePreTrainedMixin(BridgeInitMixin, ZooModelMixin):
    """Init, language decoders, statistics and card text shared by the bridged seq2seq models."""

    mechanism_name = "Attention bridge"
    mechanism_param_markers = ("encoder.bridge.", "language_decoders.")

    def finish_loading(self, info: dict) -> None:
        """A language decoder missing from the checkpoint (converting a stock checkpoint) starts as a copy of the
        stock decoder."""
        super().finish_loading(info)
        base = self.model if hasattr(self, "model") else self
        for language, decoder in base.language_decoders.items():
            if any(f"language_decoders.{language}." in k for k in info["missing_keys"]):
                decoder.load_state_dict(base.decoder.state_dict())

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
            f"decoders {memory}. {languages}Stock weight names; the bridge is `model.encoder.bridge`. Log "
            "`mechanism_stats()` (or use `interlayer.callbacks.MechanismStatsCallback`) to watch the slots' attention "
            "over the source (entropy, coverage)."
        )

    def bridge_attention(self, input_ids, attention_mask=None, layer: int | None = None) -> torch.Tensor:
        """The attention of each slot of a fixed-length bridge layer over the source tokens, `[batch, slots, source]`
        (the first fixed-length layer unless `layer` is given)."""
        base = self.model if hasattr(self, "model") else self
        layers = base.encoder.bridge.layers
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
                base.encoder(input_ids=input_ids, attention_mask=attention_mask)
            return target.last_attention
        finally:
            target.keep_attention, target.last_attention = False, None


class BridgeModelMixin(BridgePreTrainedMixin):
    """A stock seq2seq model whose encoder ends in an attention bridge and, with `decoder_languages`, one decoder per
    language (put before the stock model class)."""

    encoder_class: type

    def __init__(self, config):
        checkpointing = getattr(config, "gradient_checkpointing", False)  # the stock post_init consumes the flag
        super().__init__(config)  # the stock model: shared embeddings, encoder, decoder
        self.encoder = self.encoder_class(config)
        languages = list(config.decoder_languages or [])
        self.language_decoders = nn.ModuleDict({lang: type(self.decoder)(config) for lang in languages[1:]})
        self._tied_weights_keys = {**(self._tied_weights_keys or {}), **language_ties(config, self, prefix="")}
        config.gradient_checkpointing = checkpointing
        self.post_init()

    def decoder_for(self, tgt_lang) -> nn.Module:
        """The decoder of `tgt_lang` (a language name, or a tensor of language indices all equal)."""
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
            return self.decoder
        if tgt_lang is None and len(languages) == 1:
            tgt_lang = languages[0]
        if tgt_lang not in languages:
            raise ValueError(f"`tgt_lang` must be one of {languages}, got {tgt_lang!r}.")
        return self.decoder if tgt_lang == languages[0] else self.language_decoders[tgt_lang]

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
        use_cache=None,
        tgt_lang=None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        """As the stock model, with the bridge after the encoder and the decoder of `tgt_lang`."""
        decoder = self.decoder_for(tgt_lang)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(last_hidden_state=encoder_outputs[0])
        memory_mask = None if self.config.bridge_is_fixed_length else attention_mask
        decoder_outputs = decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=memory_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


def language_ties(config, base_model, prefix: str) -> dict[str, str]:
    """Every language decoder's input embedding tied to the shared embedding, or to the first decoder's where the
    model has no shared one (one target vocabulary)."""
    languages = list(config.decoder_languages or [])[1:]
    shared = getattr(base_model, "shared", None) is not None
    source = f"{prefix}shared.weight" if shared else f"{prefix}decoder.embed_tokens.weight"
    return {f"{prefix}language_decoders.{lang}.embed_tokens.weight": source for lang in languages}


class BridgeLMMixin(BridgePreTrainedMixin):
    """The stock seq2seq LM on a bridged model (`base_class`); `tgt_lang` chooses the decoder (put before the stock
    class)."""

    base_class: type
    pipeline_tag = None  # transformers 5 has no seq2seq pipeline ("translation" and "text2text-generation" are gone)
    # the stock seq2seq loss is a mean that ignores `num_items_in_batch`
    accepts_loss_kwargs = False

    def __init__(self, config):
        checkpointing = getattr(config, "gradient_checkpointing", False)  # the stock post_init consumes the flag
        super().__init__(config)  # the stock LM: a stock model, final_logits_bias, lm_head
        self.model = self.base_class(config)
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
        across the batch) chooses the decoder."""
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            tgt_lang=tgt_lang,
            **kwargs,
        )


class MarianBridgeEncoder(BridgeEncoderMixin, MarianEncoder):
    pass


class MarianBridgeModel(BridgeModelMixin, MarianModel):
    config_class = MarianBridgeConfig
    encoder_class = MarianBridgeEncoder
    _no_split_modules = ["MarianEncoderLayer", "MarianDecoderLayer"]  # stock Marian names none: FSDP wraps these


class MarianBridgeForConditionalGeneration(BridgeLMMixin, MarianMTModel, GenerationMixin):
    """Marian translation model with an attention bridge; `generate(..., tgt_lang=...)` picks the decoder."""

    config_class = MarianBridgeConfig
    base_class = MarianBridgeModel
    _no_split_modules = MarianBridgeModel._no_split_modules


class BartBridgeEncoder(BridgeEncoderMixin, BartEncoder):
    pass


class BartBridgeModel(BridgeModelMixin, BartModel):
    config_class = BartBridgeConfig
    encoder_class = BartBridgeEncoder


class BartBridgeForConditionalGeneration(BridgeLMMixin, BartForConditionalGeneration, GenerationMixin):
    """BART with an attention bridge; `generate(..., tgt_lang=...)` picks the decoder."""

    config_class = BartBridgeConfig
    base_class = BartBridgeModel


register_for_auto_classes(
    MarianBridgeConfig, AutoModel=MarianBridgeModel, AutoModelForSeq2SeqLM=MarianBridgeForConditionalGeneration
)
register_for_auto_classes(
    BartBridgeConfig, AutoModel=BartBridgeModel, AutoModelForSeq2SeqLM=BartBridgeForConditionalGeneration
)

__all__ = [
    "AttentionBridge",
    "BartBridgeForConditionalGeneration",
    "BartBridgeModel",
    "MarianBridgeForConditionalGeneration",
    "MarianBridgeModel",
]
