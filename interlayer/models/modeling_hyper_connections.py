"""Hyper-connections (HC) on the decoder families of families.py (seed 002): Llama, Qwen3, Qwen2, Mistral, Phi-3,
OLMo 2, Gemma 2, Gemma 3 text, GPT-2, in the forms the HC and mHC papers and four 2026 model families define.

Shapes:
    B   batch                      h         [B, T, K, C]  the K residual streams of every token
    T   sequence                   x, F(x)   [B, T, C]     a sublayer's input (the read-in) and its output
    K   streams (`hc_streams`)     H_pre     [K] static, [B, T, K] input-dependent: read-in weights
    C   hidden size                H_post    [K] static, [B, T, K] input-dependent: write weights
                                   H_res     [K, K] static, [B, T, K, K] input-dependent: mixing, [output, input]

The residual stream of a stock decoder becomes K full-width streams `h`. Around every attention and MLP branch `F`
(as the family declares it: its norms and dropout included), `HyperConnection` computes

    x  = H_pre h                   x = sum_k H_pre[k] h_k                              read-in
    h' = H_res h + H_post^T F(x)   h'_i = sum_j H_res[i, j] h_j + H_post[i] F(x)      mix and write

with, per `hc_mode`, the coefficients made of the learned `pre` [K], `post` [K], `res` [K, K] and, when
input-dependent, scales `s_pre`, `s_post`, `s_res` and a projection `Linear` (`dynamic_proj`):

    static       H_pre = pre,  H_post = post,  H_res = res                                    (HC paper)
    dynamic      H_pre[k] = pre[k] + s_pre tanh(z_k[0]),  H_post[k] = post[k] + s_post tanh(z_k[1]),
                 H_res[:, k] = res[:, k] + s_res tanh(z_k[2:]),  z_k = Linear(RMSNorm(h_k)) per stream k
                 (HC paper; no tanh with `hc_dynamic_tanh=False`)
    mhc          H_pre = sigmoid(pre + s_pre z[:K]),  H_post = 2 sigmoid(post + s_post z[K:2K]),
                 H_res = Sinkhorn-Knopp(exp(res + s_res z[2K:])),  z = Linear(RMSNorm(flatten(h)))
                 (mHC paper; z = 0 with `mhc_dynamic=False`)
    independent  H_pre = sigmoid(pre + s_pre z[:K]) + eps,  H_post = M sigmoid(post + s_post z[K:]) + eps,
                 no H_res (h' = h + H_post^T F(x)),  z = Linear(RMSNorm(flatten(h)))
                 (Tencent Hy4, transformers' `HYV4HyperConnection`; eps `hc_eps`, M `hc_magnitude`; no `res`)

and `mhc_variant="deepseek_v4"` computes DeepSeek-V4's formula instead (`H_pre = sigmoid(.) + eps`,
`H_post = 2 sigmoid(.)`, `H_res = comb^T` with `comb` a row softmax followed by alternating eps-guarded column and row
normalisations; GLM-5.3's mHC is the same with the mean as read-out). `hc_mode="gated"` is Qwen3.8's gated residual
(`GatedResidual`, transformers' `Qwen4ExpTextGatedResidual`), which reads the streams through the norm the branch
starts with instead of a linear read-in:

    gated        n_k = G_k * N(h_k)   (N the branch's own input norm, G [K, C] learned gains)
                 gate = sigmoid(W_up silu(W_down flatten(n) / K)),  x = mean_k(gate_k * n_k)
                 h'_k = h_k + 2 sigmoid(W_inject flatten(n) / K)_k F'(x)   (F' the branch without N)

Coefficients, the Sinkhorn projection and the gated read are computed in fp32, also under bf16 autocast and with
bf16 or fp16 weights (whose hyper-connection parameters `from_pretrained` keeps in fp32, as transformers keeps the
native modules'). The embedding output is copied into every stream, and after the last layer a read-out
(`hc_read_out`) collapses them: learned weights `sum_k r_k h_k` (starting at the mean), the mean, DeepSeek-V4's and
Hy4's input-dependent weights (`DynamicReadOut`), each into the stock final norm, or Qwen3.8's gated read of the
finally-normed streams (`GatedResidual` without a write).

`HyperConnection.forward` and `GatedResidual.forward` are these lines as written, and the specification:
`hc_implementation="fast"` (the default) builds the layers' hyper-connections as `FastHyperConnection` and
`FastGatedResidual` instead, whose `forward` comes from hyper_connections_fast.py: the same function with hand-written
backward passes, stream recomputation, fused coefficients and the statistics that `mechanism_stats()` reports, tested
against this file's equation. Both files take Sinkhorn-Knopp, DeepSeek-V4's normalisation, the constraints, the gated
read and the coefficients' RMSNorm from hyper_connections_maths.py.

With `identity_init=True` the streams stay equal until trained (read-in sums to 1, every stream receives `F(x)`, the
rows of `H_res` sum to 1), so the converted model computes the stock function in every mode: exactly in the gated
residual (K a power of two, the default one-hot read), to float rounding in the others (DeepSeek-V4's and Hy4's to
about their eps per sublayer: their normalisations and `+ eps` terms).
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import contextlib
import math

import torch
from torch import nn
from transformers import initialization as init
from transformers.generation import GenerationMixin

from .decoder_common import CausalLMMixin, DecoderLayerRolesMixin, DecoderStackMixin, FreezeBaseMixin
from .hyper_connections_fast import (
    DeferredStatsAccumulator,
    FastGatedResidualMixin,
    FastHyperConnectionMixin,
    ForwardPassMachinery,
    RunningMaxAccumulator,
)
from .hyper_connections_maths import (
    constrain,
    deepseek_comb,
    dynamic_read_out_weights,
    gated_read,
    read_in_shares,
    rms_norm,
    sinkhorn_knopp,
)
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
# the dtype every hyper-connection parameter is built in, whatever the model's, as transformers builds the native
# modules' (`_keep_in_fp32_modules_strict` keeps them so when a checkpoint is loaded in bf16 or fp16)
FP32 = torch.float32
SUBLAYERS = ("attn", "mlp")


class HyperConnection(nn.Module):
    """`h' = H_res h + H_post^T F(H_pre h)` around one sublayer `F` (attention or MLP) of one decoder layer, with its
    read-in, write and mixing coefficients (`h' = h + H_post^T F(H_pre h)` in independent HC, which has no mixing):
    the equation as the seed and Hy4 write it, and the specification that `FastHyperConnection` (the default,
    `hc_implementation="fast"`) is tested against."""

    reads_input_norm = False  # the branch applies its input norm (`forward` leaves `input_norm` alone)

    def __init__(self, config, layer_idx: int, sublayer: str):
        super().__init__()
        k = config.hc_streams
        self.layer_idx, self.sublayer = layer_idx, sublayer
        self.mode = config.hc_mode
        self.streams = k
        self.sinkhorn_iters = config.sinkhorn_iters
        self.variant = config.mhc_variant if self.mode == "mhc" else None
        self.eps, self.magnitude = float(config.hc_eps), float(config.hc_magnitude)
        self.mixes = self.mode != "independent"  # Hy4's form writes into the streams unmixed: no `res`
        self.pre = nn.Parameter(torch.empty(k, dtype=FP32))
        self.post = nn.Parameter(torch.empty(k, dtype=FP32))
        if self.mixes:
            self.res = nn.Parameter(torch.empty(k, k, dtype=FP32))
        self.dynamic = self.mode in ("dynamic", "independent") or (self.mode == "mhc" and config.mhc_dynamic)
        self.dynamic_tanh = self.mode == "dynamic" and config.hc_dynamic_tanh
        if self.dynamic:
            if self.mode == "dynamic":  # per stream: RMSNorm(h_k) -> (pre_k, post_k, res[:, k])
                self.dynamic_proj = nn.Linear(config.hidden_size, k + 2, bias=False, dtype=FP32)
            else:  # all streams at once: RMSNorm(flatten(h)) -> (pre, post[, res])
                outputs = k * (k + 2) if self.mixes else 2 * k
                self.dynamic_proj = nn.Linear(k * config.hidden_size, outputs, bias=False, dtype=FP32)
            self.dynamic_scale = nn.Parameter(torch.empty(3 if self.mixes else 2, dtype=FP32))  # s_pre, s_post[, s_res]

    @torch.no_grad()
    def reset_parameters(self, config) -> None:
        """Raw coefficients per `config` (see `HyperConnectionFields.identity_init`), through
        `transformers.initialization` so that loaded values are kept."""
        k = self.streams
        if config.identity_init:
            pre = read_in_shares(k, config.read_in_focus, self.layer_idx)
            post, res = torch.ones(k), torch.eye(k)
            if self.mode == "mhc":
                # DeepSeek's read-in adds eps after the sigmoid; the raw mixing is symmetric, so comb^T = comb
                target = pre - (self.eps if self.variant == "deepseek_v4" else 0.0)
                pre, post, res = torch.logit(target), torch.zeros(k), MHC_RES_DIAGONAL * torch.eye(k)
            elif self.mode == "independent":  # Hy4's read-in and write add eps after their sigmoids
                write = torch.tensor((1.0 - self.eps) / self.magnitude, dtype=torch.float64)
                pre, post = torch.logit(pre - self.eps), torch.logit(write).expand(k)
        elif self.variant == "deepseek_v4":  # DeepSeek-V4's init of its biases
            pre, post, res = torch.zeros(k), torch.zeros(k), torch.zeros(k, k)
        elif self.mode == "independent":  # Hy4's: a read-in of 1/K per stream, a write of M/2 + eps
            pre, post, res = torch.full((k,), -math.log(max(k - 1, 1))), torch.zeros(k), None
        else:
            pre, post, res = torch.full((k,), 1.0 / k), torch.ones(k), torch.eye(k)
        pre, post = pre.float(), post.float()
        if config.hc_init_noise > 0:
            pre, post = (t + config.hc_init_noise * torch.randn_like(t) for t in (pre, post))
            if self.mixes:
                res = res + config.hc_init_noise * torch.randn_like(res)
        init.copy_(self.pre, pre)
        init.copy_(self.post, post)
        if self.mixes:
            init.copy_(self.res, res)
        if self.dynamic:
            if self.mode == "independent" and not config.identity_init:  # Hy4 draws its projection
                init.normal_(self.dynamic_proj.weight, mean=0.0, std=config.initializer_range)
            else:
                init.zeros_(self.dynamic_proj.weight)
            init.constant_(self.dynamic_scale, float(config.hc_dynamic_scale_init))

    def coefficients(self, h: torch.Tensor):
        """`(H_pre, H_post, H_res)` for streams `h` `[B, T, K, C]` (shapes in the module docstring; `H_res` None in
        independent HC), computed in fp32 (whatever the dtype of the streams and the parameters) and returned in the
        streams' dtype."""
        k = self.streams
        with torch.autocast(device_type=h.device.type, enabled=False):
            pre, post = self.pre.float(), self.post.float()
            res = self.res.float() if self.mixes else None
            if self.dynamic:
                scale, weight = self.dynamic_scale.float(), self.dynamic_proj.weight.float()
            if self.mode == "dynamic":  # per stream k: z[k] = Linear(RMSNorm(h_k)), [B, T, K, K + 2]
                z = nn.functional.linear(rms_norm(h.float()), weight)
                if self.dynamic_tanh:
                    z = torch.tanh(z)
                pre = pre + scale[0] * z[..., 0]
                post = post + scale[1] * z[..., 1]
                res = res + scale[2] * z[..., 2:].mT  # stream k's part is column k of H_res
            elif self.dynamic:  # mHC and Hy4, all streams at once: z = Linear(RMSNorm(flatten(h))), [B, T, *]
                z = nn.functional.linear(rms_norm(h.float().flatten(-2)), weight)
                pre = pre + scale[0] * z[..., :k]
                post = post + scale[1] * z[..., k : 2 * k]
                if self.mixes:
                    res = res + scale[2] * z[..., 2 * k :].unflatten(-1, (k, k))
            if self.mode in ("mhc", "independent"):  # the constraints of mHC (and its variants) and of Hy4
                pre, post, res = constrain(
                    pre, post, res, self.mode, self.variant, self.sinkhorn_iters, self.eps, self.magnitude
                )
        return pre.to(h.dtype), post.to(h.dtype), None if res is None else res.to(h.dtype)

    def forward(self, h: torch.Tensor, branch, input_norm=None) -> torch.Tensor:
        """`h' = H_res h + H_post^T F(H_pre h)` for streams `h` `[B, T, K, C]`, with `branch` the sublayer `F` (its
        input norm included: `input_norm`, which the gated residual applies itself, is not used here)."""
        H_pre, H_post, H_res = self.coefficients(h)
        x = torch.einsum("...k,...kc->...c", H_pre, h)  # read-in
        y = branch(x)  # F(x)
        mixed = h if H_res is None else torch.einsum("...ij,...jc->...ic", H_res, h)  # mix
        return mixed + H_post.unsqueeze(-1) * y.unsqueeze(-2)  # write


class GatedResidual(nn.Module):
    """Qwen3.8's gated residual around one sublayer (`hc_mode="gated"`; transformers' `Qwen4ExpTextGatedResidual`):
    every stream normalised by the branch's own input norm `N` times a learned gain `G` [K, C] (together Qwen's
    `hc_norm`), read through a low-rank per-channel sigmoid gate, written back with `2 sigmoid` weights, no mixing:

        n_k = G_k * N(h_k),  (x, w) = gated_read(n),  h'_k = h_k + w_k F'(x)

    with `F'` the branch without its input norm. As the read-out after the last layer (`sublayer="read_out"`, no
    write, `N` the stock final norm) it is Qwen3.8's `hyper_connection_mixer`. The equation as written, and the
    specification that `FastGatedResidual` (the default, `hc_implementation="fast"`) is tested against.

    Keeping the stock norm and learning a gain on top of it (rather than Qwen's single `hc_norm` weight `w` with
    `N(h) (1 + w)`) keeps every stock weight in use and the conversion exact: with a zero up-projection the gate is
    0.5, with `G` = 2 K on stream `l mod K` and 0 elsewhere the read is `N(h)` bit for bit (K a power of two), and
    with a zero injection projection the write is `2 sigmoid(0)` = 1. `interlayer.native` converts to and from
    Qwen's layout (`1 + w = m G`, `m` the stock norm's multiplier)."""

    reads_input_norm = True  # it normalises every stream with the branch's input norm itself

    def __init__(self, config, layer_idx: int, sublayer: str):
        super().__init__()
        k, width = config.hc_streams, config.hidden_size
        self.layer_idx, self.sublayer, self.streams = layer_idx, sublayer, k
        self.norm_gain = nn.Parameter(torch.empty(k, width, dtype=FP32))
        self.read_down = nn.Linear(k * width, config.hc_lowrank, bias=False, dtype=FP32)
        self.read_up = nn.Linear(config.hc_lowrank, k * width, bias=False, dtype=FP32)
        self.writes = sublayer != "read_out"
        if self.writes:
            self.inject = nn.Linear(k * width, k, bias=False, dtype=FP32)

    @torch.no_grad()
    def reset_parameters(self, config) -> None:
        """Qwen3.8's init, or with `identity_init` the exact start (see the class), through
        `transformers.initialization` so that loaded values are kept. `hc_init_noise` perturbs the gains and the up-
        and injection projections."""
        k, noise, std = self.streams, float(config.hc_init_noise), config.initializer_range
        init.normal_(self.read_down.weight, mean=0.0, std=std)  # drawn in both: the up-projection learns through it
        if config.identity_init:
            # the read-out starts on the stream the last layer focused on, as a layer after it would
            shares = read_in_shares(k, config.read_in_focus, self.layer_idx)
            gain = (2 * k * shares).float().unsqueeze(-1).expand_as(self.norm_gain)
            init.copy_(self.norm_gain, gain + noise * torch.randn(self.norm_gain.shape) if noise else gain)
            for proj in (self.read_up, self.inject) if self.writes else (self.read_up,):
                init.normal_(proj.weight, mean=0.0, std=noise) if noise else init.zeros_(proj.weight)
        else:
            init.ones_(self.norm_gain)
            for proj in (self.read_up, self.inject) if self.writes else (self.read_up,):
                init.normal_(proj.weight, mean=0.0, std=std)

    def weights(self) -> tuple:
        """The gains and the projections' weights, in fp32 (`gated_read`'s order; no injection in the read-out)."""
        inject = self.inject.weight.float() if self.writes else None
        return self.norm_gain.float(), self.read_down.weight.float(), self.read_up.weight.float(), inject

    def read(self, h: torch.Tensor, input_norm) -> tuple:
        """`(x, write, gate)` of `gated_read` for streams `h` `[B, T, K, C]` in fp32, `input_norm` applied to every
        stream under the caller's autocast (as the stock layer applies it)."""
        normed = input_norm(h)
        with torch.autocast(device_type=h.device.type, enabled=False):
            gain, down, up, inject = self.weights()
            return gated_read(normed.float() * gain, down, up, inject)

    def forward(self, h: torch.Tensor, branch, input_norm) -> torch.Tensor:
        """`h'_k = h_k + w_k F'(x)` for streams `h` `[B, T, K, C]`, with `branch` the sublayer (called without its
        input norm) and `input_norm` the norm it starts with."""
        x, write, _ = self.read(h, input_norm)
        y = branch(x.to(h.dtype), input_norm=False)
        return h + write.to(h.dtype).unsqueeze(-1) * y.unsqueeze(-2)


class DynamicReadOut(nn.Module):
    """DeepSeek-V4's and Hy4's read-out after the last layer (`hc_read_out="dynamic"`; transformers'
    `DeepseekV4HyperHead`, `HYV4HyperHead`): `sum_k pre_k h_k` with `pre = sigmoid(Linear(RMSNorm(flatten(h))) * s +
    b) + eps`, computed in fp32."""

    def __init__(self, config):
        super().__init__()
        k = config.hc_streams
        self.streams, self.eps = k, float(config.hc_eps)
        self.weight = nn.Parameter(torch.empty(k, k * config.hidden_size, dtype=FP32))
        self.base = nn.Parameter(torch.empty(k, dtype=FP32))
        self.scale = nn.Parameter(torch.empty(1, dtype=FP32))

    @torch.no_grad()
    def reset_parameters(self, config) -> None:
        """With `identity_init` the mean (`sigmoid(b) + eps = 1/K`, a zero projection); else DeepSeek-V4's init
        (`mhc_variant="deepseek_v4"`: biases 0, scale 1) or Hy4's (biases `-log(K - 1)`, scale 0.01)."""
        k = self.streams
        if config.identity_init:
            init.zeros_(self.weight)
            init.copy_(self.base, torch.logit(torch.full((k,), 1.0 / k, dtype=torch.float64) - self.eps).float())
            init.constant_(self.scale, float(config.hc_dynamic_scale_init))
            return
        init.normal_(self.weight, mean=0.0, std=config.initializer_range)
        deepseek = config.hc_mode == "mhc" and config.mhc_variant == "deepseek_v4"
        init.constant_(self.base, 0.0 if deepseek else -math.log(max(k - 1, 1)))
        init.constant_(self.scale, 1.0 if deepseek else float(config.hc_dynamic_scale_init))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=h.device.type, enabled=False):
            pre = dynamic_read_out_weights(h, self.weight, self.base, self.scale, self.eps)
            return (pre.unsqueeze(-1) * h.float()).sum(-2).to(h.dtype)


class FastHyperConnection(FastHyperConnectionMixin, HyperConnection):
    """`HyperConnection` with the `coefficients` and `forward` of hyper_connections_fast.py (`hc_implementation="fast"`,
    the default): the same parameters and, to float rounding, the same function, with hand-written backward passes,
    the stream recomputation, fused coefficients and the statistics of `mechanism_stats()`."""


class FastGatedResidual(FastGatedResidualMixin, GatedResidual):
    """`GatedResidual` with the `forward` of hyper_connections_fast.py (`hc_implementation="fast"`, the default): the
    same parameters and function, its read recomputed in backward instead of kept, the stream recomputation, and the
    statistics of `mechanism_stats()`."""


def hyper_connection_class(config) -> type[nn.Module]:
    """The class of a layer's hyper-connections, chosen when the layer is built: the equation (`HyperConnection`,
    `GatedResidual`) for `hc_implementation="eager"`, else its fast implementation."""
    eager = config.hc_implementation == "eager"
    if config.hc_mode == "gated":
        return GatedResidual if eager else FastGatedResidual
    return HyperConnection if eager else FastHyperConnection


class HCDecoderLayerMixin(DecoderLayerRolesMixin):
    """A stock decoder layer whose two residual connections are hyper-connections around its family's branches
    `F_attn` and `F_mlp` (put before the stock class); it reads and returns streams `[B, T, K, C]`."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        hyper_connection = hyper_connection_class(config)
        self.hc_attn = hyper_connection(config, layer_idx, "attn")
        self.hc_mlp = hyper_connection(config, layer_idx, "mlp")

    def residual_block(self, streams: torch.Tensor, attention) -> torch.Tensor:
        """`h' = H_res h + H_post^T F(H_pre h)` around `F_attn`, then around `F_mlp` (each given the norm its branch
        starts with, which the gated residual applies to every stream itself)."""
        norm = self.hc_attn.reads_input_norm  # not looked up for a hyper-connection that leaves it to its branch
        streams = self.hc_attn(streams, attention, self.input_norm("attn") if norm else None)
        return self.hc_mlp(streams, self.mlp_branch, self.input_norm("mlp") if norm else None)


class HCPreTrainedMixin(FreezeBaseMixin):
    """Init, freezing, statistics and card text shared by every hyper-connection model (put before the stock class)."""

    mechanism_name = "Hyper-connections"
    mechanism_param_prefix = "hc_"
    # the parameters of every form, kept in fp32 when `from_pretrained` loads in bf16 or fp16, as transformers keeps
    # the native modules' (`_keep_in_fp32_modules_strict` of DeepSeek-V4 and Hy4): their small updates survive
    _keep_in_fp32_modules_strict = ["hc_attn", "hc_mlp", "hc_read_out", "hc_head", "hc_mixer"]

    @property
    def dtype(self) -> torch.dtype:
        """The stock weights' dtype (what the model is loaded and saved in; the hyper-connection parameters are fp32
        in any), as transformers' reads the first parameter, which may be the fp32 `hc_read_out`."""
        named = self.named_parameters()
        return next(p.dtype for n, p in named if p.is_floating_point() and not self.is_mechanism_parameter(n))

    @property
    def stock_function_tolerance(self) -> float:
        """0 (bit for bit) for the gated residual read one-hot at K a power of two, whose gains and gates are powers
        of two; else the float rounding of computed coefficients (read-in weights summing to 1, Sinkhorn rows,
        DeepSeek's and Hy4's eps) and of the streams mixed in another order than the stock residual sums
        (docs/hyper_connections.md): 1e-4, and for DeepSeek-V4's and Hy4's formulas, whose `hc_eps` moves each of the
        2 L sublayers' outputs by about K `hc_eps` (relative), 2 L K `hc_eps` where that is more (2.4e-4 for a
        30-layer model at K = 4)."""
        c, k = self.config, self.config.hc_streams
        exact = c.hc_mode == "gated" and c.read_out == "gated" and c.read_in_focus == 1.0 and k & (k - 1) == 0
        if exact:
            return 0.0
        with_eps = c.hc_mode == "independent" or (c.hc_mode == "mhc" and c.mhc_variant == "deepseek_v4")
        return max(1e-4, 2 * c.num_hidden_layers * k * c.hc_eps) if with_eps else 1e-4

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, (HyperConnection, GatedResidual, DynamicReadOut)):
            module.reset_parameters(self.config)
        elif isinstance(module, HCModelMixin) and self.config.read_out == "learned":
            init.constant_(module.hc_read_out, 1.0 / self.config.hc_streams)

    @property
    def hyper_connections(self) -> list[nn.Module]:
        """The hyper-connections around the sublayers, in order (`HyperConnection` or `GatedResidual`)."""
        return [
            m for m in self.modules() if isinstance(m, (HyperConnection, GatedResidual)) and m.sublayer != "read_out"
        ]

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
            "independent": f"independent hyper-connections (Hy4: sigmoid read-in, {c.hc_magnitude:g}*sigmoid write, "
            "input-dependent, no mixing)",
            "gated": f"gated residuals (Qwen3.8: the streams normalised by each branch's input norm, a rank-"
            f"{c.hc_lowrank} per-channel read gate, 2*sigmoid writes, no mixing)",
        }[c.hc_mode]
        read_out = {
            "learned": "a learned read-out",
            "mean": "the mean as read-out",
            "dynamic": "an input-dependent read-out",
            "gated": "a gated read-out in place of the final norm",
        }[c.read_out]
        frozen = "Only the hyper-connection parameters train (`freeze_base`). " if c.freeze_base else ""
        return (
            f"{c.hc_streams} residual streams of full width with {mode} around every attention and MLP sublayer, and "
            f"{read_out} (interlayer, seed 002): `h' = H_res h + H_post^T F(H_pre h)`. Stock weight names; the "
            f"mechanism's tensors are named `hc_*`. {frozen}Log `mechanism_stats()` (or use "
            "`interlayer.callbacks.MechanismStatsCallback`) to watch the coefficients and the composite residual gain "
            "across depth."
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
    """The decoder stack with K residual streams: stock embeddings, layers, rotary embedding and final norm, and the
    read-out of `hc_read_out` after the last layer (`hc_read_out` weights, `hc_head`, `hc_mixer` or none)."""

    def build_mechanism(self, config) -> None:
        if config.read_out == "learned":
            self.hc_read_out = nn.Parameter(torch.empty(config.hc_streams, dtype=FP32))
        elif config.read_out == "dynamic":
            self.hc_head = DynamicReadOut(config)
        elif config.read_out == "gated":  # once a forward: the equation, also with the fast hyper-connections
            self.hc_mixer = GatedResidual(config, config.num_hidden_layers, "read_out")
        self.hc_machinery = None
        if config.hc_implementation == "fast":  # what the fast hyper-connections run around the layers of a forward
            self.hc_coefficient_stats = DeferredStatsAccumulator()  # every sublayer's, recorded once a forward
            self.hc_gain_stats = RunningMaxAccumulator()
            self.hc_machinery = ForwardPassMachinery()
            for hc in self.hyper_connections:
                hc.machinery = self.hc_machinery

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
        """The hidden state the streams stand for, recorded after each layer and, but with the gated read-out, what the
        final norm takes: `sum_k r_k h_k` (learned), `DynamicReadOut`'s, or the mean (also with the gated read-out,
        which normalises the streams before it reads them)."""
        read_out = self.config.read_out
        if read_out == "learned":
            return (streams * self.hc_read_out.to(streams.dtype).unsqueeze(-1)).sum(dim=-2)
        if read_out == "dynamic":
            return self.hc_head(streams)
        return streams.mean(-2)

    def leave_layers(self, streams: torch.Tensor) -> torch.Tensor:
        """The stock final norm of `read_state`; the gated read-out instead reads the finally-normed streams."""
        if self.config.read_out != "gated":
            return super().leave_layers(streams)
        return self.hc_mixer.read(streams, self.final_norm)[0].to(streams.dtype)

    def around_layers(self, attention_mask):
        """The fast implementation's stream recomputation and composite-gain tracking around the layers of an eager
        forward (`ForwardPassMachinery`); nothing for the equation (`hc_implementation="eager"`) and in compiled and
        exported forwards, which cannot trace their Python-side state."""
        if self.hc_machinery is None or torch.compiler.is_compiling():
            return contextlib.nullcontext()
        return self.hc_machinery.around_layers(self, attention_mask)


class HCForCausalLMMixin(HCPreTrainedMixin, CausalLMMixin):
    """The stock causal-LM head on top of the hyper-connection decoder; stock forward and `generate()`."""

    def generate(self, *args, **kwargs):
        """Stock `generate()`; the fast hyper-connections compute their static coefficients once for the call
        (`ForwardPassMachinery.reusing_static_maps`), not once per decoded token."""
        machinery = self.base_model.hc_machinery
        with machinery.reusing_static_maps() if machinery is not None else contextlib.nullcontext():
            return super().generate(*args, **kwargs)


__all__ = ["DynamicReadOut", "GatedResidual", "HyperConnection", "deepseek_comb", "sinkhorn_knopp"]


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
