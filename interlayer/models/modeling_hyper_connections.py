"""Hyper-connections (HC) and manifold-constrained hyper-connections (mHC) for the decoder families of families.py
(seed 002): Llama, Qwen3, Qwen2, Mistral, Phi-3, OLMo 2, Gemma 2, Gemma 3 text, GPT-2.

Shapes:
    B   batch                      h         [B, T, K, C]  the K residual streams of every token
    T   sequence                   x, F(x)   [B, T, C]     a sublayer's input (the read-in) and its output
    K   streams (`hc_streams`)     H_pre     [K] static, [B, T, K] input-dependent: read-in weights
    C   hidden size                H_post    [K] static, [B, T, K] input-dependent: write weights
                                   H_res     [K, K] static, [B, T, K, K] input-dependent: mixing, [output, input]

The residual stream of a stock decoder becomes K full-width streams `h`. Around every attention and MLP branch `F`
(as the family declares it: its norms and dropout included):

    x  = H_pre h                   x = sum_k H_pre[k] h_k                              read-in
    h' = H_res h + H_post^T F(x)   h'_i = sum_j H_res[i, j] h_j + H_post[i] F(x)      mix and write

with, per `hc_mode`, the coefficients made of the learned `pre` [K], `post` [K], `res` [K, K] and, when
input-dependent, scales `s_pre`, `s_post`, `s_res` and a projection `Linear` (`dynamic_proj`):

    static    H_pre = pre,  H_post = post,  H_res = res                                    (HC paper)
    dynamic   H_pre[k] = pre[k] + s_pre tanh(z_k[0]),  H_post[k] = post[k] + s_post tanh(z_k[1]),
              H_res[:, k] = res[:, k] + s_res tanh(z_k[2:]),  z_k = Linear(RMSNorm(h_k)) per stream k
              (HC paper; no tanh with `hc_dynamic_tanh=False`)
    mhc       H_pre = sigmoid(pre + s_pre z[:K]),  H_post = 2 sigmoid(post + s_post z[K:2K]),
              H_res = Sinkhorn-Knopp(exp(res + s_res z[2K:])),  z = Linear(RMSNorm(flatten(h)))
              (mHC paper; z = 0 with `mhc_dynamic=False`)

and `mhc_variant="deepseek_v4"` computes DeepSeek-V4's formula instead (`H_pre = sigmoid(.) + eps`,
`H_post = 2 sigmoid(.)`, `H_res = comb^T` with `comb` a row softmax followed by alternating eps-guarded column and row
normalisations). Coefficients and the Sinkhorn projection are computed in fp32, also under bf16 autocast and with
bf16 or fp16 weights. The embedding output is copied into every stream, and a learned read-out `sum_k r_k h_k`
(starting at the mean) feeds the stock final norm.

`HyperConnection.forward` is these lines as written, and the specification: `hc_implementation="fast"` (the default)
builds the layers' hyper-connections as `FastHyperConnection` instead, whose `coefficients` and `forward` come from
hyper_connections_fast.py: the same function with hand-written backward passes, stream recomputation, fused
coefficients and the statistics that `mechanism_stats()` reports, tested against this file's equation. Both files
take Sinkhorn-Knopp, DeepSeek-V4's normalisation and the coefficients' RMSNorm from hyper_connections_maths.py.

With `identity_init=True` the streams stay equal until trained (read-in sums to 1, every stream receives `F(x)`, the
rows of `H_res` sum to 1), so the converted model computes the stock function in every mode (DeepSeek-V4's variant
to about 1e-6 per sublayer: its normalisations divide by the sum plus eps).
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import contextlib

import torch
from torch import nn
from transformers import initialization as init
from transformers.generation import GenerationMixin

from .decoder_common import CausalLMMixin, DecoderLayerRolesMixin, DecoderStackMixin, FreezeBaseMixin
from .hyper_connections_fast import FastHyperConnectionMixin, ForwardPassMachinery, RunningMaxAccumulator
from .hyper_connections_maths import MHC_EPS, deepseek_comb, mhc_mixing, rms_norm, sinkhorn_knopp
from .zoo_common import register_for_auto_classes

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers.models.gemma2.modeling_gemma2 import (
    Gemma2Attention,
    Gemma2DecoderLayer,
    Gemma2ForCausalLM,
    Gemma2Model,
)
from transformers.models.gemma3.modeling_gemma3 import (
    Gemma3Attention,
    Gemma3DecoderLayer,
    Gemma3ForCausalLM,
    Gemma3TextModel,
)
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, GPT2Block, GPT2LMHeadModel, GPT2Model
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaModel
from transformers.models.mistral.modeling_mistral import (
    MistralAttention,
    MistralDecoderLayer,
    MistralForCausalLM,
    MistralModel,
)
from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention, Olmo2DecoderLayer, Olmo2ForCausalLM, Olmo2Model
from transformers.models.phi3.modeling_phi3 import Phi3Attention, Phi3DecoderLayer, Phi3ForCausalLM, Phi3Model
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2DecoderLayer, Qwen2ForCausalLM, Qwen2Model
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3DecoderLayer, Qwen3ForCausalLM, Qwen3Model

from .configuration_hyper_connections import (
    Gemma2MHCConfig,
    Gemma3TextMHCConfig,
    GPT2MHCConfig,
    LlamaMHCConfig,
    MistralMHCConfig,
    Olmo2MHCConfig,
    Phi3MHCConfig,
    Qwen2MHCConfig,
    Qwen3MHCConfig,
)
from .decoder_families import GEMMA2, GEMMA3_TEXT, GPT2, LLAMA, MISTRAL, OLMO2, PHI3, QWEN2, QWEN3

# --- end generated imports ---

MHC_RES_DIAGONAL = 4.0  # raw diagonal of H_res at identity_init in mHC mode (about 0.95 on the diagonal at K=4)
SUBLAYERS = ("attn", "mlp")


class HyperConnection(nn.Module):
    """`h' = H_res h + H_post^T F(H_pre h)` around one sublayer `F` (attention or MLP) of one decoder layer, with its
    read-in, write and mixing coefficients: the equation as the seed writes it, and the specification that
    `FastHyperConnection` (the default, `hc_implementation="fast"`) is tested against."""

    def __init__(self, config, layer_idx: int, sublayer: str):
        super().__init__()
        k = config.hc_streams
        self.layer_idx, self.sublayer = layer_idx, sublayer
        self.mode = config.hc_mode
        self.streams = k
        self.sinkhorn_iters = config.sinkhorn_iters
        self.variant = config.mhc_variant if self.mode == "mhc" else None
        self.pre = nn.Parameter(torch.empty(k))
        self.post = nn.Parameter(torch.empty(k))
        self.res = nn.Parameter(torch.empty(k, k))
        self.dynamic = self.mode == "dynamic" or (self.mode == "mhc" and config.mhc_dynamic)
        self.dynamic_tanh = self.mode == "dynamic" and config.hc_dynamic_tanh
        if self.dynamic:
            if self.mode == "dynamic":  # per stream: RMSNorm(h_k) -> (pre_k, post_k, res[:, k])
                self.dynamic_proj = nn.Linear(config.hidden_size, k + 2, bias=False)
            else:  # all streams at once: RMSNorm(flatten(h)) -> (pre, post, res)
                self.dynamic_proj = nn.Linear(k * config.hidden_size, k * (k + 2), bias=False)
            self.dynamic_scale = nn.Parameter(torch.empty(3))  # s_pre, s_post, s_res

    @torch.no_grad()
    def reset_parameters(self, config) -> None:
        """Raw coefficients per `config` (see `HyperConnectionFields.identity_init`), through
        `transformers.initialization` so that loaded values are kept."""
        k = self.streams
        if config.identity_init:
            focus = config.read_in_focus
            pre = torch.full((k,), (1.0 - focus) / k)
            pre[self.layer_idx % k] += focus
            post, res = torch.ones(k), torch.eye(k)
            if self.mode == "mhc":
                # DeepSeek's read-in adds MHC_EPS after the sigmoid; the raw mixing is symmetric, so comb^T = comb
                target = pre.double() - (MHC_EPS if self.variant == "deepseek_v4" else 0.0)
                pre, post, res = torch.logit(target).float(), torch.zeros(k), MHC_RES_DIAGONAL * torch.eye(k)
        elif self.variant == "deepseek_v4":  # DeepSeek-V4's init of its biases
            pre, post, res = torch.zeros(k), torch.zeros(k), torch.zeros(k, k)
        else:
            pre, post, res = torch.full((k,), 1.0 / k), torch.ones(k), torch.eye(k)
        if config.hc_init_noise > 0:
            pre, post, res = (t + config.hc_init_noise * torch.randn_like(t) for t in (pre, post, res))
        init.copy_(self.pre, pre)
        init.copy_(self.post, post)
        init.copy_(self.res, res)
        if self.dynamic:
            init.zeros_(self.dynamic_proj.weight)
            init.constant_(self.dynamic_scale, float(config.hc_dynamic_scale_init))

    def coefficients(self, h: torch.Tensor):
        """`(H_pre, H_post, H_res)` for streams `h` `[B, T, K, C]` (shapes in the module docstring), computed in fp32
        (whatever the dtype of the streams and the parameters) and returned in the streams' dtype."""
        k = self.streams
        with torch.autocast(device_type=h.device.type, enabled=False):
            pre, post, res = self.pre.float(), self.post.float(), self.res.float()
            if self.dynamic:
                s_pre, s_post, s_res = self.dynamic_scale.float()
                weight = self.dynamic_proj.weight.float()
            if self.mode == "dynamic":  # per stream k: z[k] = Linear(RMSNorm(h_k)), [B, T, K, K + 2]
                z = nn.functional.linear(rms_norm(h.float()), weight)
                if self.dynamic_tanh:
                    z = torch.tanh(z)
                pre = pre + s_pre * z[..., 0]
                post = post + s_post * z[..., 1]
                res = res + s_res * z[..., 2:].mT  # stream k's part is column k of H_res
            elif self.dynamic:  # mHC, all streams at once: z = Linear(RMSNorm(flatten(h))), [B, T, K(K + 2)]
                z = nn.functional.linear(rms_norm(h.float().flatten(-2)), weight)
                pre = pre + s_pre * z[..., :k]
                post = post + s_post * z[..., k : 2 * k]
                res = res + s_res * z[..., 2 * k :].unflatten(-1, (k, k))
            if self.mode == "mhc":  # the manifold constraints
                pre = torch.sigmoid(pre) + (MHC_EPS if self.variant == "deepseek_v4" else 0.0)
                post = 2.0 * torch.sigmoid(post)
                res = mhc_mixing(res, self.sinkhorn_iters, self.variant)
        return pre.to(h.dtype), post.to(h.dtype), res.to(h.dtype)

    def forward(self, h: torch.Tensor, branch) -> torch.Tensor:
        """`h' = H_res h + H_post^T F(H_pre h)` for streams `h` `[B, T, K, C]`, with `branch` the sublayer `F`."""
        H_pre, H_post, H_res = self.coefficients(h)
        x = torch.einsum("...k,...kc->...c", H_pre, h)  # read-in
        y = branch(x)  # F(x)
        return torch.einsum("...ij,...jc->...ic", H_res, h) + H_post.unsqueeze(-1) * y.unsqueeze(-2)  # mix and write


class FastHyperConnection(FastHyperConnectionMixin, HyperConnection):
    """`HyperConnection` with the `coefficients` and `forward` of hyper_connections_fast.py (`hc_implementation="fast"`,
    the default): the same parameters and, to float rounding, the same function, with hand-written backward passes,
    the stream recomputation, fused coefficients and the statistics of `mechanism_stats()`."""


def hyper_connection_class(config) -> type[HyperConnection]:
    """The class of a layer's hyper-connections, chosen when the layer is built: `HyperConnection` (the equation) for
    `hc_implementation="eager"`, else `FastHyperConnection`."""
    return HyperConnection if config.hc_implementation == "eager" else FastHyperConnection


class HCDecoderLayerMixin(DecoderLayerRolesMixin):
    """A stock decoder layer whose two residual connections are hyper-connections around its family's branches
    `F_attn` and `F_mlp` (put before the stock class); it reads and returns streams `[B, T, K, C]`."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        hyper_connection = hyper_connection_class(config)
        self.hc_attn = hyper_connection(config, layer_idx, "attn")
        self.hc_mlp = hyper_connection(config, layer_idx, "mlp")

    def residual_block(self, streams: torch.Tensor, attention) -> torch.Tensor:
        """`h' = H_res h + H_post^T F(H_pre h)` around `F_attn`, then around `F_mlp`."""
        return self.hc_mlp(self.hc_attn(streams, attention), self.mlp_branch)


class HCPreTrainedMixin(FreezeBaseMixin):
    """Init, freezing, statistics and card text shared by every hyper-connection model (put before the stock class)."""

    mechanism_name = "Hyper-connections"
    mechanism_param_prefix = "hc_"
    # the identity init holds to float rounding only: the coefficients (read-in weights summing to 1, Sinkhorn rows) are
    # computed, not stored, and the streams are mixed in another order than the stock residual sums (docs/matrix.md)
    stock_function_tolerance = 1e-4

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, HyperConnection):
            module.reset_parameters(self.config)
        elif isinstance(module, HCModelMixin):
            init.constant_(module.hc_read_out, 1.0 / self.config.hc_streams)

    @property
    def hyper_connections(self) -> list[HyperConnection]:
        return [m for m in self.modules() if isinstance(m, HyperConnection)]

    def mechanism_summary(self) -> str:
        c = self.config
        mode = {
            "static": "static hyper-connections (HC paper)",
            "dynamic": "dynamic hyper-connections (HC paper" + (", tanh" if c.hc_dynamic_tanh else ", no tanh") + ")",
            "mhc": "manifold-constrained hyper-connections (mHC: sigmoid read-in, 2*sigmoid write, "
            f"Sinkhorn-Knopp mixing with {c.sinkhorn_iters} iterations"
            + (", DeepSeek-V4's formula" if c.mhc_variant == "deepseek_v4" else "")
            + (", input-dependent" if c.mhc_dynamic else ", static")
            + ")",
        }[c.hc_mode]
        frozen = "Only the hyper-connection parameters train (`freeze_base`). " if c.freeze_base else ""
        return (
            f"{c.hc_streams} residual streams of full width with {mode} around every attention and MLP sublayer "
            "(interlayer, seed 002): `h' = H_res h + H_post^T F(H_pre h)`. Stock weight names; the mechanism's tensors "
            f"are named `hc_*`. {frozen}Log `mechanism_stats()` (or use `interlayer.callbacks.MechanismStatsCallback`) "
            "to watch the coefficients and the composite residual gain across depth."
        )

    def mechanism_stats(self, reset: bool = True, split: str | None = None) -> dict[str, float]:
        """Per layer and sublayer the mean `pre_k`, `post_k` and `res_i_j` since the last read, the largest absolute
        row and column sums of `H_res`, and the composite residual gain across depth: the largest absolute row and
        column sums of `H_res^(L) ... H_res^(1)` built from those means (`hc/amax_gain_row`, `hc/amax_gain_col`),
        and the worst case (`hc/amax_gain_row_worst`, `hc/amax_gain_col_worst`): the same sums of every token's own
        composite, at every depth (after each sublayer), maximised over depth, over the tokens the attention mask
        keeps and over the forwards since the last read. These are recorded by the fast implementation (the default), in
        eager forwards; the eager one (`hc_implementation="eager"`) and forwards under torch.compile / torch.export
        record none."""
        out = super().mechanism_stats(reset=reset, split=split)
        k = self.config.hc_streams
        for prefix in ("", "eval/") if split is None else ("",):
            composite = torch.eye(k, dtype=torch.float64)
            for hc in self.hyper_connections:
                name = f"{prefix}hc/L{hc.layer_idx}/{hc.sublayer}/res"
                if f"{name}_0_0" not in out:
                    break
                res = torch.tensor([[out[f"{name}_{i}_{j}"] for j in range(k)] for i in range(k)], dtype=torch.float64)
                out[f"{name}_row_sum_max"] = res.abs().sum(1).max().item()
                out[f"{name}_col_sum_max"] = res.abs().sum(0).max().item()
                composite = res @ composite
            else:
                out[f"{prefix}hc/amax_gain_row"] = composite.abs().sum(1).max().item()
                out[f"{prefix}hc/amax_gain_col"] = composite.abs().sum(0).max().item()
        return out


class HCModelMixin(HCPreTrainedMixin, DecoderStackMixin):
    """The decoder stack with K residual streams: stock embeddings, layers, rotary embedding and final norm."""

    def build_mechanism(self, config) -> None:
        self.hc_read_out = nn.Parameter(torch.empty(config.hc_streams))
        self.hc_machinery = None
        if config.hc_implementation == "fast":  # what the fast hyper-connections run around the layers of a forward
            self.hc_gain_stats = RunningMaxAccumulator()
            self.hc_machinery = ForwardPassMachinery()
            for hc in self.hyper_connections:
                hc.machinery = self.hc_machinery

    def read_out(self, streams: torch.Tensor) -> torch.Tensor:
        return (streams * self.hc_read_out.to(streams.dtype).unsqueeze(-1)).sum(dim=-2)

    def check_forward(self, kwargs: dict) -> None:
        built = "eager" if self.hc_machinery is None else "fast"
        if self.config.hc_implementation != built:
            raise ValueError(
                f"`hc_implementation={self.config.hc_implementation!r}` was set on a built {type(self).__name__}, "
                f"whose hyper-connections are {built!r} (chosen when the model is built). Load it with the option "
                f"instead: from_pretrained(..., hc_implementation={self.config.hc_implementation!r})."
            )

    def enter_layers(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        """Every stream starts as the embedding: `h` `[B, T, K, C]`."""
        return inputs_embeds.unsqueeze(-2).expand(*inputs_embeds.shape[:-1], self.config.hc_streams, -1)

    def read_state(self, streams: torch.Tensor) -> torch.Tensor:
        """The read-out of the streams, `sum_k r_k h_k`: the hidden state recorded after each layer, and what the final
        norm takes."""
        return self.read_out(streams)

    def around_layers(self, attention_mask):
        """The fast implementation's stream recomputation and composite-gain tracking around the layers of an eager
        forward (`ForwardPassMachinery`); nothing for the equation (`hc_implementation="eager"`) and in compiled and
        exported forwards, which cannot trace their Python-side state."""
        if self.hc_machinery is None or torch.compiler.is_compiling():
            return contextlib.nullcontext()
        return self.hc_machinery.around_layers(self, attention_mask)


class HCForCausalLMMixin(HCPreTrainedMixin, CausalLMMixin):
    """The stock causal-LM head on top of the hyper-connection decoder; stock forward and `generate()`."""


__all__ = ["HyperConnection", "deepseek_comb", "sinkhorn_knopp"]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
# each class has an `__init__` of its own, so that DeepSpeed's zero.Init partitions the mixin's parameters too
class LlamaMHCDecoderLayer(HCDecoderLayerMixin, LlamaDecoderLayer):
    family = LLAMA

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class LlamaMHCModel(HCModelMixin, LlamaModel):
    config_class = LlamaMHCConfig
    family = LLAMA
    decoder_layer_class = LlamaMHCDecoderLayer
    _no_split_modules = ["LlamaMHCDecoderLayer"]
    _can_record_outputs = {"attentions": LlamaAttention}

    def __init__(self, config):
        super().__init__(config)


class LlamaMHCForCausalLM(HCForCausalLMMixin, LlamaForCausalLM, GenerationMixin):
    config_class = LlamaMHCConfig
    family = LLAMA
    base_class = LlamaMHCModel
    _no_split_modules = ["LlamaMHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(LlamaMHCConfig, AutoModel=LlamaMHCModel, AutoModelForCausalLM=LlamaMHCForCausalLM)


class Qwen3MHCDecoderLayer(HCDecoderLayerMixin, Qwen3DecoderLayer):
    family = QWEN3

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen3MHCModel(HCModelMixin, Qwen3Model):
    config_class = Qwen3MHCConfig
    family = QWEN3
    decoder_layer_class = Qwen3MHCDecoderLayer
    _no_split_modules = ["Qwen3MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Qwen3Attention}

    def __init__(self, config):
        super().__init__(config)


class Qwen3MHCForCausalLM(HCForCausalLMMixin, Qwen3ForCausalLM, GenerationMixin):
    config_class = Qwen3MHCConfig
    family = QWEN3
    base_class = Qwen3MHCModel
    _no_split_modules = ["Qwen3MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Qwen3MHCConfig, AutoModel=Qwen3MHCModel, AutoModelForCausalLM=Qwen3MHCForCausalLM)


class Qwen2MHCDecoderLayer(HCDecoderLayerMixin, Qwen2DecoderLayer):
    family = QWEN2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen2MHCModel(HCModelMixin, Qwen2Model):
    config_class = Qwen2MHCConfig
    family = QWEN2
    decoder_layer_class = Qwen2MHCDecoderLayer
    _no_split_modules = ["Qwen2MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Qwen2Attention}

    def __init__(self, config):
        super().__init__(config)


class Qwen2MHCForCausalLM(HCForCausalLMMixin, Qwen2ForCausalLM, GenerationMixin):
    config_class = Qwen2MHCConfig
    family = QWEN2
    base_class = Qwen2MHCModel
    _no_split_modules = ["Qwen2MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Qwen2MHCConfig, AutoModel=Qwen2MHCModel, AutoModelForCausalLM=Qwen2MHCForCausalLM)


class MistralMHCDecoderLayer(HCDecoderLayerMixin, MistralDecoderLayer):
    family = MISTRAL

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class MistralMHCModel(HCModelMixin, MistralModel):
    config_class = MistralMHCConfig
    family = MISTRAL
    decoder_layer_class = MistralMHCDecoderLayer
    _no_split_modules = ["MistralMHCDecoderLayer"]
    _can_record_outputs = {"attentions": MistralAttention}

    def __init__(self, config):
        super().__init__(config)


class MistralMHCForCausalLM(HCForCausalLMMixin, MistralForCausalLM, GenerationMixin):
    config_class = MistralMHCConfig
    family = MISTRAL
    base_class = MistralMHCModel
    _no_split_modules = ["MistralMHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(MistralMHCConfig, AutoModel=MistralMHCModel, AutoModelForCausalLM=MistralMHCForCausalLM)


class Phi3MHCDecoderLayer(HCDecoderLayerMixin, Phi3DecoderLayer):
    family = PHI3

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Phi3MHCModel(HCModelMixin, Phi3Model):
    config_class = Phi3MHCConfig
    family = PHI3
    decoder_layer_class = Phi3MHCDecoderLayer
    _no_split_modules = ["Phi3MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Phi3Attention}

    def __init__(self, config):
        super().__init__(config)


class Phi3MHCForCausalLM(HCForCausalLMMixin, Phi3ForCausalLM, GenerationMixin):
    config_class = Phi3MHCConfig
    family = PHI3
    base_class = Phi3MHCModel
    _no_split_modules = ["Phi3MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Phi3MHCConfig, AutoModel=Phi3MHCModel, AutoModelForCausalLM=Phi3MHCForCausalLM)


class Olmo2MHCDecoderLayer(HCDecoderLayerMixin, Olmo2DecoderLayer):
    family = OLMO2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Olmo2MHCModel(HCModelMixin, Olmo2Model):
    config_class = Olmo2MHCConfig
    family = OLMO2
    decoder_layer_class = Olmo2MHCDecoderLayer
    _no_split_modules = ["Olmo2MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Olmo2Attention}

    def __init__(self, config):
        super().__init__(config)


class Olmo2MHCForCausalLM(HCForCausalLMMixin, Olmo2ForCausalLM, GenerationMixin):
    config_class = Olmo2MHCConfig
    family = OLMO2
    base_class = Olmo2MHCModel
    _no_split_modules = ["Olmo2MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Olmo2MHCConfig, AutoModel=Olmo2MHCModel, AutoModelForCausalLM=Olmo2MHCForCausalLM)


class Gemma2MHCDecoderLayer(HCDecoderLayerMixin, Gemma2DecoderLayer):
    family = GEMMA2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Gemma2MHCModel(HCModelMixin, Gemma2Model):
    config_class = Gemma2MHCConfig
    family = GEMMA2
    decoder_layer_class = Gemma2MHCDecoderLayer
    _no_split_modules = ["Gemma2MHCDecoderLayer"]
    _can_record_outputs = {"attentions": Gemma2Attention}

    def __init__(self, config):
        super().__init__(config)


class Gemma2MHCForCausalLM(HCForCausalLMMixin, Gemma2ForCausalLM, GenerationMixin):
    config_class = Gemma2MHCConfig
    family = GEMMA2
    base_class = Gemma2MHCModel
    _no_split_modules = ["Gemma2MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(Gemma2MHCConfig, AutoModel=Gemma2MHCModel, AutoModelForCausalLM=Gemma2MHCForCausalLM)


class Gemma3TextMHCDecoderLayer(HCDecoderLayerMixin, Gemma3DecoderLayer):
    family = GEMMA3_TEXT

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Gemma3TextMHCModel(HCModelMixin, Gemma3TextModel):
    config_class = Gemma3TextMHCConfig
    family = GEMMA3_TEXT
    decoder_layer_class = Gemma3TextMHCDecoderLayer
    _no_split_modules = ["Gemma3TextMHCDecoderLayer"]
    _can_record_outputs = {"attentions": Gemma3Attention}

    def __init__(self, config):
        super().__init__(config)


class Gemma3TextMHCForCausalLM(HCForCausalLMMixin, Gemma3ForCausalLM, GenerationMixin):
    config_class = Gemma3TextMHCConfig
    family = GEMMA3_TEXT
    base_class = Gemma3TextMHCModel
    _no_split_modules = ["Gemma3TextMHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Gemma3TextMHCConfig, AutoModel=Gemma3TextMHCModel, AutoModelForCausalLM=Gemma3TextMHCForCausalLM
)


class GPT2MHCDecoderLayer(HCDecoderLayerMixin, GPT2Block):
    family = GPT2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class GPT2MHCModel(HCModelMixin, GPT2Model):
    config_class = GPT2MHCConfig
    family = GPT2
    decoder_layer_class = GPT2MHCDecoderLayer
    _no_split_modules = ["GPT2MHCDecoderLayer"]
    _can_record_outputs = {"attentions": GPT2Attention}

    def __init__(self, config):
        super().__init__(config)


class GPT2MHCForCausalLM(HCForCausalLMMixin, GPT2LMHeadModel, GenerationMixin):
    config_class = GPT2MHCConfig
    family = GPT2
    base_class = GPT2MHCModel
    _no_split_modules = ["GPT2MHCDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(GPT2MHCConfig, AutoModel=GPT2MHCModel, AutoModelForCausalLM=GPT2MHCForCausalLM)


__all__ += [
    "GPT2MHCForCausalLM",
    "GPT2MHCModel",
    "Gemma2MHCForCausalLM",
    "Gemma2MHCModel",
    "Gemma3TextMHCForCausalLM",
    "Gemma3TextMHCModel",
    "LlamaMHCForCausalLM",
    "LlamaMHCModel",
    "MistralMHCForCausalLM",
    "MistralMHCModel",
    "Olmo2MHCForCausalLM",
    "Olmo2MHCModel",
    "Phi3MHCForCausalLM",
    "Phi3MHCModel",
    "Qwen2MHCForCausalLM",
    "Qwen2MHCModel",
    "Qwen3MHCForCausalLM",
    "Qwen3MHCModel",
]
# --- end generated classes ---
