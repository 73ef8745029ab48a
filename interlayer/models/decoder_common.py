"""Pieces shared by the zoo's decoder-only mechanisms (hyper-connections, latent back-projection, the sentinel's
Llama-family decoders): the stock decoder stack of a family (`families.DecoderFamily`) built around a mechanism's
layer class, its causal masks and positions, the stock causal-LM head, and `freeze_base`.

A mechanism writes its math once against the roles of a family: the attention branch `F_attn(x)` and the MLP branch
`F_mlp(x)` of a residual block, the embedding, the mask of each layer type, the rotary position embeddings
(`DecoderLayerRolesMixin`, `DecoderStackMixin`). The families are declared in `families.py`.

It sits beside the modeling files that import it, so `save_pretrained` ships it with the remote code.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_utils import PreTrainedModel

from .families import DecoderFamily
from .zoo_common import (
    CACHE_KWARG,
    ZooModelMixin,
    returns_dict_to_its_head,
    stock_cache_kwargs,
    take_cache,
)


class FreezeBaseMixin(ZooModelMixin):
    """`config.freeze_base`: only the mechanism's parameters (`is_mechanism_parameter`) require gradients, also
    after `from_pretrained` (loading resets `requires_grad`)."""

    def finish_loading(self, info: dict) -> None:
        """Applies `config.freeze_base` once the weights are loaded."""
        super().finish_loading(info)
        self.apply_freeze_base()

    def apply_freeze_base(self) -> None:
        """With `config.freeze_base`, only the mechanism's parameters require gradients; without, all do."""
        mechanism = set(self.mechanism_parameter_names())
        for name, param in self.named_parameters():
            param.requires_grad_(name in mechanism or not self.config.freeze_base)

    @property
    def base_is_trainable(self) -> bool:
        """Whether any parameter outside the mechanism requires gradients."""
        mechanism = set(self.mechanism_parameter_names())
        return any(p.requires_grad for n, p in self.named_parameters() if n not in mechanism)


class DecoderLayerRolesMixin:
    """A stock decoder layer's two residual branches, as its family declares them (put before the stock class)."""

    family: DecoderFamily

    def attention_branch(self, x: torch.Tensor, **attention_kwargs) -> torch.Tensor:
        """`F_attn(x)`: the attention sublayer with the family's norms and dropout."""
        return self.family.attention_branch(self, x, **attention_kwargs)

    def mlp_branch(self, x: torch.Tensor) -> torch.Tensor:
        """`F_mlp(x)`: the MLP sublayer with the family's norms and dropout."""
        return self.family.mlp_branch(self, x)


def build_stack(model: nn.Module, family: DecoderFamily, config, layer_class: type) -> None:
    """Give `model` the stock stack of `family` under the stock attribute names: the embedding (and GPT-2's position
    embedding and embedding dropout), `layer_class` layers, the final norm and the rotary embedding."""
    names = family.names
    setattr(model, names.embed, family.embedding(config, config.pad_token_id))
    if names.positions is not None:
        setattr(model, names.positions, nn.Embedding(config.max_position_embeddings, config.hidden_size))
        setattr(model, names.dropout, nn.Dropout(config.embd_pdrop))
    layers = [layer_class(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
    setattr(model, names.layers, nn.ModuleList(layers))
    setattr(model, names.norm, family.final_norm(config))
    if family.rotary is not None:
        model.rotary_emb = family.rotary(config=config)


class DecoderStackMixin(FreezeBaseMixin):
    """The stock decoder stack of `family` (embeddings, `decoder_layer_class` layers, final norm, rotary embedding)
    with the stock attribute names, so stock checkpoints load with no weight missing."""

    family: DecoderFamily
    decoder_layer_class: type

    def __init__(self, config):
        self.family.check(config)
        PreTrainedModel.__init__(self, config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        build_stack(self, self.family, config, self.decoder_layer_class)
        self.gradient_checkpointing = False
        self.build_mechanism(config)
        self.post_init()
        self.apply_freeze_base()

    @property
    def stack_layers(self) -> nn.ModuleList:
        """The decoder layers (`layers`, GPT-2's `h`)."""
        return getattr(self, self.family.names.layers)

    def final_norm(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The stock final norm (`norm`, GPT-2's `ln_f`)."""
        return getattr(self, self.family.names.norm)(hidden_states)

    def build_mechanism(self, config) -> None:
        """Create the model-level parameters of the mechanism (before `post_init` initialises them)."""

    def new_cache(self) -> Cache:
        """The cache a forward with `use_cache` and no cache starts (and `generate()` gets)."""
        return DynamicCache(config=self.config)

    def check_cache(self, cache: Cache) -> None:
        """Refuse a cache this model cannot use (a mechanism overrides it)."""

    def prepare_inputs(
        self, input_ids, inputs_embeds, attention_mask, position_ids, past_key_values, use_cache, kwargs
    ):
        """The stock forward's preamble: embeddings, the cache, position ids, the mask and the rotary position
        embeddings of each layer type, as `(hidden_states, past_key_values, position_ids, masks,
        position_embeddings)`; layer `i` takes `masks[t]` and `position_embeddings[t]` for its type
        `t = layer_types[i]`. `hidden_states` is what the first layer reads: the embeddings, plus the absolute
        position embeddings and the embedding dropout where the family has them. The family's `extra_inputs` are
        taken out of `kwargs`, and the cache if it came as `cache` (transformers >= 5.24)."""
        self.family.check_inputs(kwargs)
        past_key_values = take_cache(past_key_values, kwargs)
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = getattr(self, self.family.names.embed)(input_ids)
        if use_cache and past_key_values is None:
            past_key_values = self.new_cache()
        if past_key_values is not None:
            self.check_cache(past_key_values)
        if position_ids is None:
            position_ids = self.position_ids_for(inputs_embeds, past_key_values)
        masks = self.causal_masks(
            attention_mask, inputs_embeds=inputs_embeds, position_ids=position_ids, **{CACHE_KWARG: past_key_values}
        )
        position_embeddings = self.position_embeddings_for(inputs_embeds, position_ids)
        names = self.family.names
        if names.positions is not None:
            positions = getattr(self, names.positions)(position_ids).to(inputs_embeds.device)
            inputs_embeds = getattr(self, names.dropout)(inputs_embeds + positions)
        return inputs_embeds, past_key_values, position_ids, masks, position_embeddings

    @property
    def layer_types(self) -> list[str]:
        """The attention type of each layer: the config's `layer_types`, else (Llama, Mistral, Phi-3, OLMo 2) one
        type for every layer, sliding when the config has a `sliding_window`, as the stock models choose the mask."""
        types = getattr(self.config, "layer_types", None)
        if types:
            return list(types)
        sliding = getattr(self.config, "sliding_window", None) is not None
        return ["sliding_attention" if sliding else "full_attention"] * self.config.num_hidden_layers

    def position_ids_for(self, inputs_embeds: torch.Tensor, past_key_values) -> torch.Tensor:
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
        return position_ids.unsqueeze(0)

    def causal_masks(self, attention_mask, **mask_kwargs) -> dict:
        """The stock mask of each layer type (an already-built dict of masks passes through)."""
        if isinstance(attention_mask, dict):
            return attention_mask
        mask_kwargs = dict(config=self.config, attention_mask=attention_mask, **mask_kwargs)
        build = {"full_attention": create_causal_mask, "sliding_attention": create_sliding_window_causal_mask}
        return {kind: build[kind](**stock_cache_kwargs(mask_kwargs)) for kind in sorted(set(self.layer_types))}

    def position_embeddings_for(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> dict:
        """The rotary `(cos, sin)` of each layer type: one shared pair, or (Gemma 3) one per type; None without
        rotary embeddings (GPT-2)."""
        kinds = sorted(set(self.layer_types))
        if self.family.rotary is None:
            return dict.fromkeys(kinds)
        if self.family.rotary_per_layer_type:
            return {kind: self.rotary_emb(inputs_embeds, position_ids, kind) for kind in kinds}
        return dict.fromkeys(kinds, self.rotary_emb(inputs_embeds, position_ids=position_ids))


class CausalLMMixin(FreezeBaseMixin):
    """The stock causal-LM head on top of a zoo decoder (`base_class`); the stock forward (with the family's logit
    soft-capping, if any) and `generate()`."""

    base_class: type
    pipeline_tag = "text-generation"

    def __init__(self, config):
        PreTrainedModel.__init__(self, config)
        setattr(self, self.base_model_prefix, self.base_class(config))  # `model`, GPT-2's `transformer`
        returns_dict_to_its_head(self.base_model)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()
        self.apply_freeze_base()

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        """As the stock method; the default dynamic cache it makes is replaced by the decoder's own `new_cache()`."""
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)
        cache = model_kwargs.get(CACHE_KWARG)
        if type(cache) is DynamicCache and not getattr(cache, "_is_user_defined", False):
            model_kwargs[CACHE_KWARG] = self.base_model.new_cache()
