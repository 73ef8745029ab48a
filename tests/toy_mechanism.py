"""A throwaway mechanism, registered by the test that needs it (`register()`): LayerScale (Touvron et al., "Going deeper
with image transformers", 2021), `h + gamma * F(h)` around each residual branch with a learned per-channel `gamma`
that starts at 1, where it computes the stock layer bit for bit. On the Llama family only, its classes written by hand
as a contributor's first try would be; its record names this module as its modeling and configuration file."""

import dataclasses

import torch
from torch import nn
from transformers import LlamaConfig
from transformers import initialization as init
from transformers.generation import GenerationMixin
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaModel

from interlayer.mechanisms import BenchCase, ConfigError, Example, register_mechanism
from interlayer.models.decoder_common import CausalLMMixin, DecoderLayerRolesMixin, DecoderStackMixin, FreezeBaseMixin
from interlayer.models.decoder_families import LLAMA
from interlayer.models.zoo_common import (
    ZooConfigFields,
    ZooConfigMixin,
    check_range,
    register_for_auto_classes,
    zoo_config,
)


@dataclasses.dataclass(kw_only=True)
class LayerScaleFields(ZooConfigFields):
    r"""
    Args:
        layer_scale_init (`float`, defaults to 0.5): every gamma's value at conversion with `identity_init=False`.
        freeze_base (`bool`, defaults to `False`): only the gammas train.
    """

    layer_scale_init: float = 0.5
    freeze_base: bool = False

    def validate_layer_scale_init(self):
        check_range("layer_scale_init", self.layer_scale_init, 0.0)


@zoo_config
class LlamaLayerScaleConfig(ZooConfigMixin, LlamaConfig, LayerScaleFields):
    model_type = "llama_layerscale"
    stock_model_types = ("llama",)


class LlamaLayerScaleDecoderLayer(DecoderLayerRolesMixin, LlamaDecoderLayer):
    family = LLAMA

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.layerscale_attn = nn.Parameter(torch.empty(config.hidden_size))
        self.layerscale_mlp = nn.Parameter(torch.empty(config.hidden_size))

    def residual_block(self, h, attention):
        h = h + self.layerscale_attn * attention(h)
        return h + self.layerscale_mlp * self.mlp_branch(h)


class LayerScalePreTrainedMixin(FreezeBaseMixin):
    mechanism_name = "LayerScale"
    mechanism_param_prefix = "layerscale_"

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, LlamaLayerScaleDecoderLayer):
            value = 1.0 if self.config.identity_init else self.config.layer_scale_init
            init.constant_(module.layerscale_attn, value)
            init.constant_(module.layerscale_mlp, value)

    def mechanism_summary(self) -> str:
        return "LayerScale: `h + gamma * F(h)` around each residual branch, per-channel gammas."


class LlamaLayerScaleModel(LayerScalePreTrainedMixin, DecoderStackMixin, LlamaModel):
    config_class = LlamaLayerScaleConfig
    family = LLAMA
    decoder_layer_class = LlamaLayerScaleDecoderLayer
    _no_split_modules = ["LlamaLayerScaleDecoderLayer"]
    _can_record_outputs = {"attentions": LlamaAttention}

    def __init__(self, config):
        super().__init__(config)


class LlamaLayerScaleForCausalLM(LayerScalePreTrainedMixin, CausalLMMixin, LlamaForCausalLM, GenerationMixin):
    config_class = LlamaLayerScaleConfig
    family = LLAMA
    base_class = LlamaLayerScaleModel
    _no_split_modules = ["LlamaLayerScaleDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    LlamaLayerScaleConfig, AutoModel=LlamaLayerScaleModel, AutoModelForCausalLM=LlamaLayerScaleForCausalLM
)


def register():
    """Add the toy's record to `interlayer.mechanisms.MECHANISMS` (the caller restores the registry)."""
    return register_mechanism(
        name="layer-scale",
        configuration=__name__,
        modeling=__name__,
        parameter_prefix="layerscale_",
        statistics_prefix="layerscale/",
        docs_page="layer_scale.md",
        bench_cases={"layer-scale": BenchCase("llama")},
        examples=(Example("LlamaLayerScale", "llama", dict(identity_init=False), distributed=True),),
        config_errors=(ConfigError(dict(layer_scale_init=-1.0), r"layer_scale_init.*>= 0.*got -1.0"),),
    )
