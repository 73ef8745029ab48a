"""Configurations of the cross-layer bridge models (seed 000): BERT, RoBERTa, XLM-R, ELECTRA, DeBERTa-v2, ModernBERT.
The options (`BridgeFields`) and what every family's config shares (`BridgeConfigMixin`) are written here; the
families' config classes at the end by `python -m interlayer.generate_classes --fix`."""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
from typing import ClassVar, Literal

from .zoo_common import ZooConfigFields, ZooConfigMixin, check_choice, check_range, zoo_config

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers import BertConfig, DebertaV2Config, ElectraConfig, ModernBertConfig, RobertaConfig, XLMRobertaConfig

# --- end generated imports ---

SEED_ROUTE_LAST_N = 4  # the seed's target layers: the last 4


@dataclasses.dataclass(kw_only=True)
class BridgeFields(ZooConfigFields):
    r"""
    The cross-layer bridge options, shared by every encoder family. Defaults are the seed's.

    Routing (seed section 1):
        route_last_n (`int`, *optional*): the last N layers are targets (`j >= L - N` and `j > 0`); at most
            `num_hidden_layers`. Defaults to the seed's 4, or to `num_hidden_layers` in a shallower model (every
            layer but the first is then a target), so that every stock checkpoint converts with the default.
        route_topk (`int`, defaults to 1): source layers kept per target and example (capped at the number of
            earlier layers).
        route_dim (`int`, defaults to 128): router projection size d_r.
        route_pool (`"mean"` or `"cls"`, defaults to `"mean"`): masked mean or first-token summary.
        route_temp (`float`, defaults to 0.7): router temperature tau.
        route_estimator (`"straight_through"` or `"topk_softmax"`, defaults to `"straight_through"`): how the
            router is trained. `"topk_softmax"` is the seed: softmax over the kept logits, which is identically 1 at
            `route_topk=1`, so the router gets no gradient. `"straight_through"` multiplies each kept weight by
            p_i / sg(p_i), p the softmax over all earlier layers: the same forward value, and a gradient that
            reaches every earlier layer's logit.
        route_placement (`"post_norm"` or `"pre_norm"`, defaults to `"post_norm"`): where the route weights scale
            the routed sources. `"pre_norm"` is the seed: they mix the messages before the LayerNorm, which divides
            the weight out at `route_topk=1`, so no estimator can train the router there. `"post_norm"` normalises
            each source's blended messages and mixes them with the route weights before the projection. Both give
            the same forward value at `route_topk=1`; at `route_topk > 1` they differ.

    Paths:
        bridge_mode (`"hybrid"`, `"qkv"` or `"hdim"`, defaults to `"hybrid"`): which messages are built.
        qkv_kv_weights (`"source"` or `"target"`, defaults to `"source"`): key/value projections of the QKV bridge
            come from each source layer (seed) or from the target layer.
        qkv_value_proj (`bool`, defaults to `False`): an extra per-target `Linear(d_head, d_head)` on the values.
        hdim_dim (`int`, defaults to 24): HDIM projection size D.
        hdim_scorer (`"4term"`, `"bilinear"` or `"cosine"`, defaults to `"4term"`): pair scorer.
        hdim_scorer_hidden (`int`, defaults to 96): hidden width of the 4-term scorer MLP.
        hdim_value_fusion (`"concat_hadam"`, `"concat_only"` or `"concat_diff_hadam"`, defaults to
            `"concat_hadam"`): value MLP input `[ctx, H, ctx*H]`, `[ctx, H]` or `[ctx, H, ctx-H, ctx*H]`.
        hdim_value_hidden (`int`, *optional*): value MLP width; default `2 * max(128, hidden_size // 2)`.
        hdim_value_act (`"relu"` or `"gelu"`, defaults to `"relu"`): activation of the value MLP.
        hdim_value_residual (`float`, defaults to 0.0): adds `r * (ctx - H)` to the message (seed H18: 0.1).
        hdim_proj_norm (`bool`, defaults to `False`): LayerNorm on the D-dimensional projections.
        hdim_share_proj (`bool`, defaults to `False`): one projection for target and source tokens (seed H10).
        hdim_token_temp (`float`, *optional*): learnable per-target temperature on the alignment logits,
            initialised to this value.
        hdim_entropy_reg (`float`, defaults to 0.0): weight of the mean alignment entropy added to the loss.
        hdim_pair_mask (`"none"` or `"cross_segment"`, defaults to `"none"`): allow only pairs whose tokens lie in
            different segments.
        hdim_segments (`"auto"`, `"token_type_ids"` or `"separator"`, defaults to `"auto"`): where segments come
            from; `"auto"` uses `token_type_ids` when they are given and not all zero, else separator positions.
        hdim_mask_special_tokens (`bool`, defaults to `False`): CLS/SEP tokens are never sources.
        hdim_chunk_size (`int`, defaults to 32): target tokens scored at once, so the pairwise tensors never exceed
            `B x chunk x S x hidden`; results are identical for every chunk size (an exported graph, which cannot
            hold a number of chunks that depends on the length, scores every target token at once).
        hdim_recompute (`bool`, defaults to `True`): in training, recompute the 4-term scorer's pairwise
            activations in backward instead of storing them (only the `B x S x S` logits are kept).
        hdim_fused (`bool`, defaults to `True`): score each chunk of the 4-term scorer with one function compiled by
            `torch.compile(fullgraph=True)` (`hdim_pair_logits`: the pair features, the broadcast per-token terms,
            ReLU and the last layer fused around the first layer's matrix products, forward and backward): about
            20% less time for the scorer, once a compilation per kind of call is paid in a process (seconds; a kind:
            the grad mode, a batch of one example or more, a chunk of one target token or more; lengths are
            symbols). Same results to rounding. A kept graph takes a second backward (`retain_graph=True`) and a
            gradient can be differentiated again (`create_graph=True`, through the eager function, as torch cannot
            differentiate a compiled backward). Computed eagerly where a compiled call cannot run: inside a model
            compiled or exported as a whole (traced with it), under a dispatch mode such as `FlopCounterMode`, once
            compiling failed in the process (one warning), and, silently, wherever torch's switches turn compiling
            off (`TORCH_COMPILE_DISABLE=1`, `TORCHDYNAMO_DISABLE=1`, `torch._dynamo.config.disable`, a caller wrapped
            by `torch.compiler.disable`, the stance `force_eager`). Only for a plain `nn.Linear` scorer: a wrapped
            one (a PEFT adapter, a quantised layer) is called on the full pair features. `False` computes the same
            function eagerly, with no compilation.

    Blending and injection (seed section 4):
        gate_init_attn (`float`, defaults to 0.15): the QKV bridge's gate value at init.
        gate_init_hdim (`float`, defaults to 0.05): the HDIM bridge's gate value at init.
        gate_activation (`"identity"` or `"softplus"`, defaults to `"identity"`): softplus keeps gates positive.
        gate_placement (`"pre_norm"` or `"post_norm"`, defaults to `"pre_norm"`): the seed gates the messages
            before the LayerNorm, where only their ratio survives the normalisation; `"post_norm"` normalises each
            message and then gates it, so a gate's magnitude is the message's scale.
        bridge_dropout (`float`, defaults to 0.1): dropout after the projection.
        identity_init (`bool`, defaults to `True`): the projection starts at zero, so the model is the stock model;
            `False` uses the seed's N(0, 1e-3).

    Head:
        classifier_head (`"stock"` or `"seed"`, defaults to `"stock"`): the family's own head (loads stock head
            weights) or the seed's `LN -> Linear -> ReLU -> Dropout -> Linear` on the first token.
        sep_token_id (`int`, *optional*): the separator token for separator segments and special-token masks;
            defaults to the family's tokenizer id.
        cls_token_id (`int`, *optional*): the first special token for special-token masks; defaults to the
            family's tokenizer id.
    """

    reload_options: ClassVar[frozenset[str]] = ZooConfigFields.reload_options | {
        "route_topk",
        "route_temp",
        "route_estimator",
        "hdim_chunk_size",
        "hdim_recompute",
        "hdim_fused",
        "hdim_entropy_reg",
        "hdim_pair_mask",
        "hdim_segments",
        "hdim_mask_special_tokens",
        "bridge_dropout",
        "sep_token_id",
        "cls_token_id",
    }
    init_options: ClassVar[frozenset[str]] = ZooConfigFields.init_options | {"gate_init_attn", "gate_init_hdim"}

    bridge_mode: Literal["hybrid", "qkv", "hdim"] = "hybrid"
    route_last_n: int | None = None
    route_topk: int = 1
    route_dim: int = 128
    route_pool: Literal["mean", "cls"] = "mean"
    route_temp: float | int = 0.7
    route_estimator: Literal["straight_through", "topk_softmax"] = "straight_through"
    route_placement: Literal["post_norm", "pre_norm"] = "post_norm"
    qkv_kv_weights: Literal["source", "target"] = "source"
    qkv_value_proj: bool = False
    hdim_dim: int = 24
    hdim_scorer: Literal["4term", "bilinear", "cosine"] = "4term"
    hdim_scorer_hidden: int = 96
    hdim_value_fusion: Literal["concat_hadam", "concat_only", "concat_diff_hadam"] = "concat_hadam"
    hdim_value_hidden: int | None = None
    hdim_value_act: Literal["relu", "gelu"] = "relu"
    hdim_value_residual: float | int = 0.0
    hdim_proj_norm: bool = False
    hdim_share_proj: bool = False
    hdim_token_temp: float | int | None = None
    hdim_entropy_reg: float | int = 0.0
    hdim_pair_mask: Literal["none", "cross_segment"] = "none"
    hdim_segments: Literal["auto", "token_type_ids", "separator"] = "auto"
    hdim_mask_special_tokens: bool = False
    hdim_chunk_size: int = 32
    hdim_recompute: bool = True
    hdim_fused: bool = True
    gate_init_attn: float | int = 0.15
    gate_init_hdim: float | int = 0.05
    gate_activation: Literal["identity", "softplus"] = "identity"
    gate_placement: Literal["pre_norm", "post_norm"] = "pre_norm"
    bridge_dropout: float | int = 0.1
    classifier_head: Literal["stock", "seed"] = "stock"
    sep_token_id: int | None = None
    cls_token_id: int | None = None

    no_attention_weights: ClassVar[str] = (
        "bridged layers return no attention weights; read the bridge's usage with `model.mechanism_stats()`"
    )

    def validate_bridge(self):
        if self.num_hidden_layers < 2:
            raise ValueError(f"`num_hidden_layers` must be >= 2 for cross-layer bridges, got {self.num_hidden_layers}.")
        check_range("route_last_n", self.route_last_n, 1, self.num_hidden_layers)
        check_range("route_topk", self.route_topk, 1)
        check_range("route_dim", self.route_dim, 1)
        check_range("route_temp", self.route_temp, 0, low_open=True)
        check_range("hdim_dim", self.hdim_dim, 1)
        check_range("hdim_scorer_hidden", self.hdim_scorer_hidden, 1)
        check_range("hdim_value_hidden", self.hdim_value_hidden, 1, allow_none=True)
        check_range("hdim_token_temp", self.hdim_token_temp, 0, low_open=True, allow_none=True)
        check_range("hdim_entropy_reg", self.hdim_entropy_reg, 0)
        check_range("hdim_chunk_size", self.hdim_chunk_size, 1)
        check_range("bridge_dropout", self.bridge_dropout, 0, 1)
        if self.gate_activation == "softplus":
            check_range("gate_init_attn", self.gate_init_attn, 0, low_open=True)
            check_range("gate_init_hdim", self.gate_init_hdim, 0, low_open=True)
        if self.route_estimator == "straight_through" and self.route_placement == "pre_norm" and self.route_topk == 1:
            raise ValueError(
                "`route_estimator='straight_through'` cannot train the router with `route_placement='pre_norm'` at "
                "`route_topk=1`: the LayerNorm after the mix divides the single route weight out. Pass "
                "`route_placement='post_norm'`, or `route_estimator='topk_softmax'` for the seed's untrained router."
            )
        if getattr(self, "is_decoder", False):
            raise ValueError("Cross-layer bridges are encoder-only: `is_decoder` must be False.")
        if self.identity_init and self.classifier_head == "seed":
            raise ValueError(
                "`identity_init=True` cannot hold with `classifier_head='seed'`: the seed's head replaces the stock "
                "head, so the model cannot compute the stock function. Pass `identity_init=False` or "
                "`classifier_head='stock'`."
            )

    @property
    def bridge_norm_eps(self) -> float:
        """The epsilon of the bridge's LayerNorms: the family's own."""
        return getattr(self, self.norm_eps_field)

    @property
    def bridge_attention_dropout(self) -> float:
        """The attention dropout of the QKV bridge: the family's own."""
        return getattr(self, self.attention_dropout_field)

    @property
    def bridge_target_layers(self) -> list[int]:
        """Target layers j >= L - route_last_n and j > 0 (seed section 1)."""
        first = max(1, self.num_hidden_layers - self.route_last_n)
        return list(range(first, self.num_hidden_layers))


# The seed's headline runs (its results tables) as named presets; see docs/bridges.md. H3, H14 and H27 vary the HDIM
# gate, which the seed's placement (before the LayerNorm) cancels in HDIM-only mode: they place it after the norm.
BRIDGE_PRESETS: dict[str, dict] = {
    "H9": dict(bridge_mode="hdim", hdim_value_fusion="concat_only"),
    "A8": dict(bridge_mode="hybrid", route_pool="cls"),
    "A3": dict(bridge_mode="qkv"),
    "H3": dict(bridge_mode="hdim", gate_init_hdim=0.10, gate_placement="post_norm"),
    "H27": dict(bridge_mode="hdim", gate_activation="softplus", gate_placement="post_norm"),
    "H13": dict(bridge_mode="hdim", hdim_scorer="cosine", hdim_value_fusion="concat_only"),
    "H8": dict(bridge_mode="hdim", hdim_scorer="bilinear"),
    "H10": dict(bridge_mode="hdim", hdim_share_proj=True),
    "H23": dict(bridge_mode="hdim", hdim_pair_mask="cross_segment", hdim_value_fusion="concat_diff_hadam"),
    "H18": dict(bridge_mode="hdim", hdim_value_residual=0.1),
    "H1": dict(bridge_mode="hdim", hdim_dim=32, hdim_scorer_hidden=128),
    "H6": dict(bridge_mode="hdim", route_last_n=6),
    "H7": dict(bridge_mode="hdim", route_temp=0.5),
    "H14": dict(bridge_mode="hdim", gate_init_hdim=0.10, bridge_dropout=0.05, gate_placement="post_norm"),
    "H15": dict(bridge_mode="hdim", route_last_n=3),
    "H16": dict(bridge_mode="hdim", hdim_entropy_reg=1e-3),
    "H21": dict(bridge_mode="hdim", hdim_pair_mask="cross_segment"),
    "H28": dict(bridge_mode="hdim", hdim_value_act="gelu"),
    "hybrid": dict(bridge_mode="hybrid"),
    "hybrid_topk2": dict(bridge_mode="hybrid", route_topk=2),
}


class BridgeConfigMixin(ZooConfigMixin):
    """What a family's config takes from its declaration (`encoder_families.EncoderFamily`, written into each class by
    `python -m interlayer.generate_classes --fix`): the field names of its norm epsilon and attention dropout, and its
    tokenizer's separator and first-token ids. Fills in the defaults that depend on the stock config (`route_last_n`,
    the token ids)."""

    presets = BRIDGE_PRESETS
    norm_eps_field: ClassVar[str]
    attention_dropout_field: ClassVar[str]
    default_sep_token_id: ClassVar[int]
    default_cls_token_id: ClassVar[int]

    def validate_head_size(self):
        head_size = getattr(self, "attention_head_size", None)
        if head_size is not None and head_size * self.num_attention_heads != self.hidden_size:
            raise ValueError(
                f"`attention_head_size` must be hidden_size / num_attention_heads "
                f"({self.hidden_size // self.num_attention_heads}) for cross-layer bridges on "
                f"{self.stock_model_types[0]}, got {head_size}: the QKV message (heads x head size wide) is added to "
                "the hidden states."
            )

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.route_last_n is None:
            self.route_last_n = min(SEED_ROUTE_LAST_N, self.num_hidden_layers)
        if self.sep_token_id is None:
            self.sep_token_id = self.default_sep_token_id
        if self.cls_token_id is None:
            self.cls_token_id = self.default_cls_token_id


def bridge_preset(name: str) -> dict:
    """The options of a named preset, to pass as `Model.from_pretrained(stock, **bridge_preset("H9"))`."""
    check_choice("preset", name, BRIDGE_PRESETS)
    return dict(BRIDGE_PRESETS[name])


__all__ = ["BridgeFields", "BRIDGE_PRESETS", "bridge_preset"]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
@zoo_config
class BertBridgeConfig(BridgeConfigMixin, BertConfig, BridgeFields):
    r"""Configuration of [`BertBridgeModel`]: every [`BertConfig`] field plus the bridge fields of [`BridgeFields`].
    Converts checkpoints of model_type `bert`."""

    model_type = "bert_bridge"
    stock_model_types = ("bert",)
    default_sep_token_id = 102
    default_cls_token_id = 101
    norm_eps_field = "layer_norm_eps"
    attention_dropout_field = "attention_probs_dropout_prob"


@zoo_config
class RobertaBridgeConfig(BridgeConfigMixin, RobertaConfig, BridgeFields):
    r"""Configuration of [`RobertaBridgeModel`]: every [`RobertaConfig`] field plus the bridge fields of
    [`BridgeFields`]. Converts checkpoints of model_type `roberta`."""

    model_type = "roberta_bridge"
    stock_model_types = ("roberta",)
    default_sep_token_id = 2
    default_cls_token_id = 0
    norm_eps_field = "layer_norm_eps"
    attention_dropout_field = "attention_probs_dropout_prob"


@zoo_config
class XLMRobertaBridgeConfig(BridgeConfigMixin, XLMRobertaConfig, BridgeFields):
    r"""Configuration of [`XLMRobertaBridgeModel`]: every [`XLMRobertaConfig`] field plus the bridge fields of
    [`BridgeFields`]. Converts checkpoints of model_type `xlm-roberta`."""

    model_type = "xlm-roberta_bridge"
    stock_model_types = ("xlm-roberta",)
    default_sep_token_id = 2
    default_cls_token_id = 0
    norm_eps_field = "layer_norm_eps"
    attention_dropout_field = "attention_probs_dropout_prob"


@zoo_config
class ElectraBridgeConfig(BridgeConfigMixin, ElectraConfig, BridgeFields):
    r"""Configuration of [`ElectraBridgeModel`]: every [`ElectraConfig`] field plus the bridge fields of
    [`BridgeFields`]. Converts checkpoints of model_type `electra` (the discriminator)."""

    model_type = "electra_bridge"
    stock_model_types = ("electra",)
    default_sep_token_id = 102
    default_cls_token_id = 101
    norm_eps_field = "layer_norm_eps"
    attention_dropout_field = "attention_probs_dropout_prob"


@zoo_config
class DebertaV2BridgeConfig(BridgeConfigMixin, DebertaV2Config, BridgeFields):
    r"""Configuration of [`DebertaV2BridgeModel`]: every [`DebertaV2Config`] field plus the bridge fields of
    [`BridgeFields`]. Converts checkpoints of model_type `deberta-v2` (DeBERTa-v2 and v3)."""

    model_type = "deberta-v2_bridge"
    stock_model_types = ("deberta-v2",)
    default_sep_token_id = 2
    default_cls_token_id = 1
    norm_eps_field = "layer_norm_eps"
    attention_dropout_field = "attention_probs_dropout_prob"


@zoo_config
class ModernBertBridgeConfig(BridgeConfigMixin, ModernBertConfig, BridgeFields):
    r"""Configuration of [`ModernBertBridgeModel`]: every [`ModernBertConfig`] field plus the bridge fields of
    [`BridgeFields`]. Converts checkpoints of model_type `modernbert`."""

    model_type = "modernbert_bridge"
    stock_model_types = ("modernbert",)
    default_sep_token_id = 50282
    default_cls_token_id = 50281
    norm_eps_field = "norm_eps"
    attention_dropout_field = "attention_dropout"


__all__ += [
    "BertBridgeConfig",
    "RobertaBridgeConfig",
    "XLMRobertaBridgeConfig",
    "ElectraBridgeConfig",
    "DebertaV2BridgeConfig",
    "ModernBertBridgeConfig",
]
# --- end generated classes ---
