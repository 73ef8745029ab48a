"""Pieces shared by the zoo's decoder-only mechanisms (hyper-connections, latent back-projection): the families they
convert, each declared once by the roles its layers play, the stock decoder stack built around a mechanism's layer
class, its causal masks and positions, the stock causal-LM head, and `freeze_base`.

A mechanism writes its math once against the roles of a family (`DecoderFamily`): the attention branch
`F_attn(x)` and the MLP branch `F_mlp(x)` of a residual block (the stock layer computes `h + F_attn(h)`, then
`h + F_mlp(h)`), with the family's norms and dropouts inside the branch; the embedding (scaled or not); the mask of
each layer type; the rotary position embeddings (shared, or one per layer type). A new family is one declaration.

It sits beside the modeling files that import it, so `save_pretrained` ships it with the remote code.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
import functools
from collections.abc import Callable

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast, BaseModelOutputWithPastAndCrossAttentions
from transformers.modeling_utils import PreTrainedModel
from transformers.models.gemma2 import modeling_gemma2 as gemma2
from transformers.models.gemma3 import modeling_gemma3 as gemma3
from transformers.models.gpt2 import modeling_gpt2 as gpt2
from transformers.models.llama import modeling_llama as llama
from transformers.models.mistral import modeling_mistral as mistral
from transformers.models.olmo2 import modeling_olmo2 as olmo2
from transformers.models.phi3 import modeling_phi3 as phi3
from transformers.models.qwen2 import modeling_qwen2 as qwen2
from transformers.models.qwen3 import modeling_qwen3 as qwen3

from .zoo_common import (
    CACHE_KWARG,
    ZooModelMixin,
    register_for_auto_classes,
    returns_dict_to_its_head,
    stock_cache_kwargs,
    take_cache,
)


@dataclasses.dataclass(frozen=True)
class Branch:
    """One residual branch `F(x)` of a stock decoder layer, by the layer's attribute names:
    `F(x) = after[-1](... after[0](module(before[-1](... before[0](x)))))`. An attention module is called with
    `hidden_states=` and the layer's keywords (mask, cache, positions) and its first output kept (the second is the
    attention weights); an MLP, called with no keywords, with `x` alone."""

    module: str
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    def __call__(self, layer: nn.Module, x: torch.Tensor, **kwargs) -> torch.Tensor:
        kwargs = stock_cache_kwargs(kwargs)
        for name in self.before:
            x = getattr(layer, name)(x)
        x = getattr(layer, self.module)(hidden_states=x, **kwargs) if kwargs else getattr(layer, self.module)(x)
        if isinstance(x, tuple):
            x = x[0]
        for name in self.after:
            x = getattr(layer, name)(x)
        return x


@dataclasses.dataclass(frozen=True)
class StackNames:
    """The stock model's attribute names for the pieces of its stack (so stock weight names load unchanged):
    token embedding, layers, final norm, and (GPT-2) the absolute position embedding and the embedding dropout."""

    embed: str = "embed_tokens"
    layers: str = "layers"
    norm: str = "norm"
    positions: str | None = None
    dropout: str | None = None


def plain_embedding(config, padding_idx):
    return nn.Embedding(config.vocab_size, config.hidden_size, padding_idx)


def rms_norm(norm_class):
    """The final RMS norm of a family, as its stock model builds it."""

    def build(config):
        return norm_class(config.hidden_size, eps=config.rms_norm_eps)

    return build


def scaled_embedding(embedding_class):
    """The embedding of a family that multiplies it by sqrt(hidden_size) (Gemma), as its stock model builds it."""

    def build(config, padding_idx):
        return embedding_class(config.vocab_size, config.hidden_size, padding_idx, embed_scale=config.hidden_size**0.5)

    return build


@dataclasses.dataclass(frozen=True)
class DecoderFamily:
    """A stock decoder-only family, declared by the roles its pieces play.

    Attributes:
        model_type: the stock `model_type` (`"qwen2"`).
        layer, model, causal_lm: the stock decoder layer, base model and causal-LM classes (a zoo class subclasses
            them, so their weight names, init and generation code apply unchanged).
        attention: the stock attention module (recorded for `output_attentions`).
        final_norm: `final_norm(config)` builds the stock final norm.
        rotary: the stock rotary-embedding class; None for absolute positions (GPT-2).
        attention_branch, mlp_branch: `F_attn`, `F_mlp` of the stock layer, norms and dropouts included.
        embedding: `embedding(config, padding_idx)` builds the stock embedding (scaled for Gemma).
        names: the stock model's attribute names (`StackNames`); with `names.positions`, the absolute position
            embedding is added to the token embedding and `names.dropout` applied, as GPT-2 does.
        rotary_per_layer_type: the rotary embedding takes the layer type and differs per type (Gemma 3's local and
            global bases).
        refused: `{config field: why}`: settings of the family the zoo's stack does not reproduce; a config with
            one of them set (truthy) is refused with a ValueError naming the family.
        extra_inputs: keywords the stock base model takes that the zoo's stack does not (GPT-2's `token_type_ids`,
            cross-attention inputs): accepted as None, refused otherwise.
        output_class: the stock base model's output class (the stock head reads its fields).
    """

    model_type: str
    layer: type
    model: type
    causal_lm: type
    attention: type
    final_norm: Callable
    rotary: type | None
    attention_branch: Branch
    mlp_branch: Branch
    embedding: Callable = plain_embedding
    names: StackNames = StackNames()
    rotary_per_layer_type: bool = False
    refused: dict = dataclasses.field(default_factory=dict)
    extra_inputs: tuple[str, ...] = ()
    output_class: type = BaseModelOutputWithPast

    def check(self, config) -> None:
        for name, why in self.refused.items():
            if getattr(config, name, None):
                raise ValueError(
                    f"The {self.model_type} family with `{name}={getattr(config, name)!r}` is not supported by the "
                    f"zoo's decoder stack: {why}. Use `{name}=False`."
                )

    def check_inputs(self, kwargs: dict) -> None:
        """Take the stock base model's `extra_inputs` out of a forward's keywords, refusing any that is set."""
        for name in self.extra_inputs:
            if kwargs.pop(name, None) is not None:
                raise ValueError(f"`{name}` is not supported by the zoo's {self.model_type} models; leave it None.")


# pre-norm blocks: F_attn(x) = attn(norm_1(x)), F_mlp(x) = mlp(norm_2(x))
PRE_NORM_ATTENTION = Branch("self_attn", before=("input_layernorm",))
PRE_NORM_MLP = Branch("mlp", before=("post_attention_layernorm",))


def _family(module, prefix: str, model_type: str, **roles) -> DecoderFamily:
    """A family whose stock classes follow transformers' naming (`{prefix}DecoderLayer`, ...); pre-norm unless
    `roles` say otherwise."""
    names = {"layer": "DecoderLayer", "model": "Model", "causal_lm": "ForCausalLM", "attention": "Attention"}
    classes = {role: getattr(module, prefix + name) for role, name in names.items() if role not in roles}
    classes |= {"final_norm": rms_norm(getattr(module, prefix + "RMSNorm"))}
    classes |= {"rotary": getattr(module, prefix + "RotaryEmbedding")}
    branches = {"attention_branch": PRE_NORM_ATTENTION, "mlp_branch": PRE_NORM_MLP}
    return DecoderFamily(model_type=model_type, **{**classes, **branches, **roles})


LLAMA = _family(llama, "Llama", "llama")
QWEN3 = _family(qwen3, "Qwen3", "qwen3")
QWEN2 = _family(qwen2, "Qwen2", "qwen2")
MISTRAL = _family(mistral, "Mistral", "mistral")
# Phi-3: fused qkv / gate_up projections (inside the stock modules) and a residual dropout after each branch
PHI3 = _family(
    phi3,
    "Phi3",
    "phi3",
    attention_branch=Branch("self_attn", before=("input_layernorm",), after=("resid_attn_dropout",)),
    mlp_branch=Branch("mlp", before=("post_attention_layernorm",), after=("resid_mlp_dropout",)),
)
# OLMo 2: no input norms; each branch ends in its own norm
OLMO2 = _family(
    olmo2,
    "Olmo2",
    "olmo2",
    attention_branch=Branch("self_attn", after=("post_attention_layernorm",)),
    mlp_branch=Branch("mlp", after=("post_feedforward_layernorm",)),
)
# Gemma 2 / 3: a norm before and after each branch, the embedding scaled by sqrt(hidden_size)
GEMMA_ATTENTION = Branch("self_attn", before=("input_layernorm",), after=("post_attention_layernorm",))
GEMMA_MLP = Branch("mlp", before=("pre_feedforward_layernorm",), after=("post_feedforward_layernorm",))
BIDIRECTIONAL = "it builds causal masks only"
GEMMA2 = _family(
    gemma2,
    "Gemma2",
    "gemma2",
    attention_branch=GEMMA_ATTENTION,
    mlp_branch=GEMMA_MLP,
    embedding=scaled_embedding(gemma2.Gemma2TextScaledWordEmbedding),
    refused={"use_bidirectional_attention": BIDIRECTIONAL},
)
GEMMA3_TEXT = _family(
    gemma3,
    "Gemma3",
    "gemma3_text",
    attention_branch=GEMMA_ATTENTION,
    mlp_branch=GEMMA_MLP,
    embedding=scaled_embedding(gemma3.Gemma3TextScaledWordEmbedding),
    model=gemma3.Gemma3TextModel,
    rotary_per_layer_type=True,
    refused={"use_bidirectional_attention": BIDIRECTIONAL},
)

# GPT-2: pre-norm LayerNorms (ln_1, ln_2), absolute position embeddings and an embedding dropout, `transformer.h`
GPT2 = DecoderFamily(
    model_type="gpt2",
    layer=gpt2.GPT2Block,
    model=gpt2.GPT2Model,
    causal_lm=gpt2.GPT2LMHeadModel,
    attention=gpt2.GPT2Attention,
    final_norm=lambda config: nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon),
    rotary=None,
    attention_branch=Branch("attn", before=("ln_1",)),
    mlp_branch=Branch("mlp", before=("ln_2",)),
    embedding=lambda config, padding_idx: nn.Embedding(config.vocab_size, config.hidden_size),
    names=StackNames(embed="wte", layers="h", norm="ln_f", positions="wpe", dropout="drop"),
    refused={"add_cross_attention": "it has no cross-attention"},
    extra_inputs=("token_type_ids", "encoder_hidden_states", "encoder_attention_mask"),
    output_class=BaseModelOutputWithPastAndCrossAttentions,
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


class DecoderStackMixin(FreezeBaseMixin):
    """The stock decoder stack of `family` (embeddings, `decoder_layer_class` layers, final norm, rotary embedding)
    with the stock attribute names, so stock checkpoints load with no weight missing."""

    family: DecoderFamily
    decoder_layer_class: type

    def __init__(self, config):
        family, names = self.family, self.family.names
        family.check(config)
        PreTrainedModel.__init__(self, config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        setattr(self, names.embed, family.embedding(config, self.padding_idx))
        if names.positions is not None:
            setattr(self, names.positions, nn.Embedding(config.max_position_embeddings, config.hidden_size))
            setattr(self, names.dropout, nn.Dropout(config.embd_pdrop))
        layers = [self.decoder_layer_class(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        setattr(self, names.layers, nn.ModuleList(layers))
        setattr(self, names.norm, family.final_norm(config))
        if family.rotary is not None:
            self.rotary_emb = family.rotary(config=config)
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


def composed_class(name: str, bases: tuple, attributes: dict) -> type:
    """`type(name, bases, attributes)` for a mechanism mixin before a stock module class, with an `__init__` of its
    own (the inherited one, called through): DeepSpeed's `zero.Init` partitions a module's parameters once the
    outermost `__init__` found in a module class's own `__dict__` returns, so without one it partitions them when the
    stock `__init__` returns and the parameters the mixin adds after it (gates, read-outs) stay whole on every rank."""
    cls = type(name, bases, attributes)
    inherited = cls.__init__

    @functools.wraps(inherited)
    def __init__(self, *args, **kwargs):
        inherited(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


def family_classes(
    family: DecoderFamily,
    name: str,
    config_class,
    layer_mixin,
    model_mixin,
    lm_mixin,
    module: str,
    layer_attributes: dict | None = None,
):
    """A mechanism's classes on one family: `{name}DecoderLayer`, `{name}Model` and `{name}ForCausalLM` (`name`
    such as `"Qwen2MHC"`), each the mechanism's mixin before the family's stock class, defined as classes of the
    modeling file `module` (which binds them to those names, for the Auto classes and remote code), and registered
    for `AutoModel` / `AutoModelForCausalLM`. The model records the stock attention weights when
    `model_mixin.records_attentions`. `layer_attributes` are further class attributes of the layer. The classes'
    `_no_split_modules` (the FSDP units) are the layer and the layer mixin's `no_split_parts`."""

    def define(suffix, bases, attributes):
        class_name = name + suffix
        return composed_class(class_name, bases, {"__module__": module, "__qualname__": class_name, **attributes})

    layer = define("DecoderLayer", (layer_mixin, family.layer), {"family": family, **(layer_attributes or {})})
    no_split = [layer.__name__, *getattr(layer_mixin, "no_split_parts", ())]
    shared = {"config_class": config_class, "_no_split_modules": no_split}
    model = define(
        "Model",
        (model_mixin, family.model),
        {
            **shared,
            "family": family,
            "decoder_layer_class": layer,
            "_can_record_outputs": {"attentions": family.attention} if model_mixin.records_attentions else {},
        },
    )
    causal_lm = define("ForCausalLM", (lm_mixin, family.causal_lm, GenerationMixin), {**shared, "base_class": model})
    register_for_auto_classes(config_class, AutoModel=model, AutoModelForCausalLM=causal_lm)
    return layer, model, causal_lm
