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

import contextlib
import dataclasses

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_utils import PreTrainedModel
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .families import DecoderFamily
from .zoo_common import (
    CACHE_KWARG,
    ZooModelMixin,
    cache_name_deprecation,
    returns_dict_to_its_head,
    select_hidden_states,
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
    """A stock decoder layer as its family declares it (put before the stock class): its two residual branches
    `F_attn` and `F_mlp`, and its forward `h + F_attn(h)`, then `+ F_mlp(.)`, written once for every family
    (`residual_block`, which a mechanism overrides to change the block). It computes what the stock layer computes,
    bit for bit: the same modules in the same order."""

    family: DecoderFamily

    def attention_branch(self, x: torch.Tensor, input_norm: bool = True, **attention_kwargs) -> torch.Tensor:
        """`F_attn(x)`: the attention sublayer with the family's norms and dropout (without its input norm when
        `input_norm=False`: `families.Branch`)."""
        return self.family.attention_branch(self, x, input_norm=input_norm, **attention_kwargs)

    def mlp_branch(self, x: torch.Tensor, input_norm: bool = True) -> torch.Tensor:
        """`F_mlp(x)`: the MLP sublayer with the family's norms and dropout (without its input norm when
        `input_norm=False`)."""
        return self.family.mlp_branch(self, x, input_norm=input_norm)

    def input_norm(self, sublayer: str) -> nn.Module | None:
        """The norm branch `sublayer` (`"attn"` or `"mlp"`) starts with, None where it has none (OLMo 2)."""
        branch = self.family.attention_branch if sublayer == "attn" else self.family.mlp_branch
        return branch.input_norm(self)

    def forward(
        self,
        hidden_states: torch.Tensor,
        *layer_inputs,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = False,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """`residual_block` on `hidden_states` with the attention branch bound to this forward's mask, positions and
        cache. `layer_inputs` are what the mechanism's stack gives this layer besides its input (`layer_inputs` of
        `DecoderStackMixin`); they are positional because reentrant activation checkpointing passes gradients to
        positional inputs only."""
        past_key_values = take_cache(past_key_values, kwargs)

        def attention(x: torch.Tensor, input_norm: bool = True) -> torch.Tensor:
            return self.attention_branch(
                x,
                input_norm=input_norm,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past_key_values,
                use_cache=use_cache,
                position_embeddings=position_embeddings,
                **kwargs,
            )

        return self.residual_block(hidden_states, attention, *layer_inputs)

    def residual_block(self, h: torch.Tensor, attention, *layer_inputs) -> torch.Tensor:
        """The stock block: `h + F_attn(h)`, then `h + F_mlp(h)` (`attention` is `F_attn` with this forward's
        keywords bound). A mechanism that changes the block overrides this."""
        h = h + attention(h)
        return h + self.mlp_branch(h)


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


@dataclasses.dataclass
class StackRun:
    """One forward through a decoder stack: what every layer takes besides its input (the mask and rotary position
    embeddings of its attention type, the position ids, the cache and the stock keywords), the hidden states recorded
    for `output_hidden_states` (None when not asked), and `saved`, where a mechanism keeps, by name, what later layers
    of the same forward read (earlier layers' outputs, say)."""

    model: nn.Module
    masks: dict
    position_embeddings: dict
    position_ids: torch.Tensor
    cache: Cache | None
    use_cache: bool
    attention_mask: torch.Tensor | None  # as the forward was given it (the 2-d padding mask, or None)
    kwargs: dict
    hidden: list | None = None
    saved: dict = dataclasses.field(default_factory=dict)
    # the model's layers and their attention types, looked up once a forward (a decoded token's layers run in a few
    # milliseconds, where asking the config for the types costs tens of microseconds a layer)
    layers: list = dataclasses.field(init=False)
    kinds: list = dataclasses.field(init=False)

    def __post_init__(self):
        self.layers, self.kinds = list(self.model.stack_layers), self.model.layer_types

    def layer(self, i: int, x, *layer_inputs, cache="run", masks=None, position_embeddings=None, **overrides):
        """Layer `i` on `x` (and the mechanism's `layer_inputs`), with the mask and position embeddings of its type
        (from `masks` / `position_embeddings` when given) and the run's cache (`cache`, when given instead)."""
        cache = self.cache if cache == "run" else cache
        kind = self.kinds[i]
        return self.layers[i](
            x,
            *layer_inputs,
            attention_mask=(masks or self.masks)[kind],
            position_embeddings=(position_embeddings or self.position_embeddings)[kind],
            position_ids=self.position_ids,
            use_cache=bool(self.use_cache) and cache is not None,
            **{CACHE_KWARG: cache},  # the name the stock layer's checkpointing clears
            **{**self.kwargs, **overrides},
        )

    def record(self, hidden_states: torch.Tensor) -> None:
        """Record a hidden state for `output_hidden_states` (nothing when not asked)."""
        if self.hidden is not None:
            self.hidden.append(hidden_states)


class DecoderStackMixin(FreezeBaseMixin):
    """The stock decoder stack of `family` (embeddings, `decoder_layer_class` layers, final norm, rotary embedding)
    with the stock attribute names, so stock checkpoints load with no weight missing, and its forward, written once:
    the stock preamble (`prepare_inputs`), the layers in order (`run_layers`), the final norm and the stock output
    class, with `output_hidden_states` selected as the stock models select it.

    A mechanism fills in the hooks it needs: `check_forward` (keywords or settings it refuses), `enter_layers` (what
    the first layer reads, from the embeddings: hyper-connections' K streams), `layer_inputs` (what layer `i` takes
    besides its input: the sentinel's U-Net skip), `after_layer` (what the next layer reads, from a layer's output:
    depth-weighted averages), `read_state` (the hidden state a layer's output stands for, recorded and normed at the
    end: hyper-connections' read-out), `leave_layers` (the final norm's output from the last layer's: the stock final
    norm of `read_state`, or a read-out that normalises itself), `around_layers` (a context around the loop),
    `build_mechanism` (its
    model-level parameters), `new_cache` / `check_cache`; or replaces `run_layers` whole (latent's two passes)."""

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

    # -- the forward ---------------------------------------------------------------------------------------------

    @cache_name_deprecation
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ):
        """As the stock model; `hidden_states` (when asked for) are what `read_state` makes of each layer's output."""
        self.check_forward(kwargs)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        inputs_embeds, cache, position_ids, masks, position_embeddings = self.prepare_inputs(
            input_ids, inputs_embeds, attention_mask, position_ids, past_key_values, use_cache, kwargs
        )
        run = StackRun(
            self, masks, position_embeddings, position_ids, cache, use_cache, attention_mask, kwargs,
            hidden=[] if output_hidden_states else None,
        )  # fmt: skip
        with self.around_layers(attention_mask):
            state = self.run_layers(inputs_embeds, run)
        hidden_states = self.leave_layers(state)
        if run.hidden is not None:
            run.hidden[-1] = hidden_states
        return self.family.output_class(
            last_hidden_state=hidden_states,
            hidden_states=select_hidden_states(run.hidden, output_hidden_states),
            **{CACHE_KWARG: cache if use_cache else None},
        )

    def run_layers(self, inputs_embeds: torch.Tensor, run: StackRun):
        """Every layer in order, each reading what `after_layer` made of the one before; returns what the last one
        made (`leave_layers` takes it). Records the embeddings and, when asked, each layer's hidden state
        (`read_state`)."""
        state = self.enter_layers(inputs_embeds)
        run.record(inputs_embeds)
        for i in range(self.config.num_hidden_layers):
            state = self.after_layer(i, run.layer(i, state, *self.layer_inputs(i, run)), run)
            if run.hidden is not None:
                run.record(self.read_state(state))
        return state

    def check_forward(self, kwargs: dict) -> None:
        """Refuse (ValueError) a keyword of the forward, or a setting changed on the built model, that the mechanism
        cannot honour; take out of `kwargs` what no layer takes."""

    def enter_layers(self, inputs_embeds: torch.Tensor):
        """What the first layer reads, from the embeddings (and the family's position embeddings)."""
        return inputs_embeds

    def layer_inputs(self, i: int, run: StackRun) -> tuple:
        """What layer `i` takes besides its input, positionally (`DecoderLayerRolesMixin.residual_block`)."""
        return ()

    def after_layer(self, i: int, output, run: StackRun):
        """What the layer after layer `i` reads, from layer `i`'s output."""
        return output

    def read_state(self, state) -> torch.Tensor:
        """The hidden state `[batch, seq, hidden]` a layer's output stands for: what `output_hidden_states` records and
        what the final norm takes after the last layer."""
        return state

    def leave_layers(self, state) -> torch.Tensor:
        """The normalised last hidden state, from what the last layer made: the stock final norm of `read_state`."""
        return self.final_norm(self.read_state(state))

    def around_layers(self, attention_mask):
        """A context the layers of a forward run in."""
        return contextlib.nullcontext()

    def prepare_inputs(
        self, input_ids, inputs_embeds, attention_mask, position_ids, past_key_values, use_cache, kwargs
    ):
        """The stock forward's preamble: embeddings, the cache, position ids, the mask and the rotary position
        embeddings of each layer type, as `(hidden_states, past_key_values, position_ids, masks,
        position_embeddings)`; layer `i` takes `masks[t]` and `position_embeddings[t]` for its type
        `t = layer_types[i]`. `hidden_states` is what the first layer reads: the embeddings, plus the absolute
        position embeddings (and GPT-2's token type embeddings) and the embedding dropout where the family has them.
        The family's `extra_inputs` are taken out of `kwargs`, and the cache if it came as `cache` (transformers >=
        5.24)."""
        token_type_ids = kwargs.pop("token_type_ids", None) if self.family.embeds_token_types else None
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
            inputs_embeds = inputs_embeds + getattr(self, names.positions)(position_ids).to(inputs_embeds.device)
        if token_type_ids is not None:
            inputs_embeds = inputs_embeds + getattr(self, names.embed)(token_type_ids)
        if names.dropout is not None:
            inputs_embeds = getattr(self, names.dropout)(inputs_embeds)
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
