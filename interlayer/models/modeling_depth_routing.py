"""Depth routing on the decoder families of decoder_families.py (Llama, Qwen3, Qwen2, Mistral, Phi-3, OLMo 2, Gemma 2,
Gemma 3 text, GPT-2): what a block reads is no longer only the running residual stream.

Shapes and names:
    L   layers                  x_0        [B, T, C]  the embedding output (what the first block reads)
    B   batch, T tokens         x_i        [B, T, C]  the output of block i (the residual stream after it), i = 1..L
    C   hidden size             y_i        [B, T, C]  what block i + 1 reads (y_0 = x_0); the final norm reads y_L
    s   a sublayer (attention or MLP) of a block, f_s its branch, h_s its residual input, o_s = f_s(.) its output

The forms (`depth_form`), each chosen when the model is built, with what makes it the stock model at conversion:

    dwa                 DenseFormer (Pagliardini et al. 2024; epfml/DenseFormer's `denseformer` package): after block
                        i with i % dwa_period == 0, y_i = sum_j alpha_ij x_j over j <= i, j = i (mod dwa_dilation);
                        after the other blocks y_i = x_i. alpha_ii = 1, the rest 0.
    mudd                MUDDFormer (Xiao et al. 2025; Caiyun-AI/MUDDFormer, its PyTorch model): after block i, per
                        token, A = W2_i GELU(W1_i RMSNorm(x_i)) + a_i [ways, i + 1] and X^w = sum_j A[w, j] x_j
                        for the ways q, k, v, r of block i + 1, which computes h = X^r + Attn(queries from
                        norm_q(X^q), keys from norm_k(X^k), values from norm_v(X^v)), then h + MLP(h); after block L
                        only the r way (what the final norm reads). W2 = 0, a_i one-hot on x_i; norm_k, norm_v copies
                        of the block's norm.
    attention_residual  Delta attention residuals (wdlctc/delta-attention-residuals-code, its `delta` and `delta_block`
                        modes, after Kimi's attention residuals): each sublayer reads h_s + g_s r_s, r_s = sum_j
                        softmax_j(w_s . RMSNorm_s(v_j)) v_j over the sources v_j (the embedding and every earlier
                        sublayer output, or with attention_residual_block_size n the embedding and the deltas of the
                        completed blocks of n layers), while the residual stream stays h_{s+1} = h_s + o_s; g_s = 0.
                        The `full` variant (Kimi's) feeds each sublayer the mixture alone, with no residual, and mixes
                        the sources into the final norm's input too; it cannot start as the stock model.
    value_residual      ResFormer (Zhou et al. 2025; Zcchill/Value-Residual-Learning): the attention of layer n > 0
                        uses values l1_n v_n + l2_n v_1 (v_1: the first layer's values of the same tokens, mixed
                        before the cache stores them). (l1, l2) = (1, 0); the paper's fixed (0.5, 0.5) as an option.
    laurel              LAuReL (Menghani et al. 2025), around each sublayer: rw alpha f(h) + beta h, (1, 1); lr
                        f(h) + h + B A h, B = 0 (A column-orthogonal, the paper's init; with `laurel_norm`,
                        RMSNorm(B A h) as Gemma 3n's `Gemma3nTextLaurelBlock`); pa f(h) + h + B A sum_j gamma_j
                        h_{s-j} over the sublayer's last `laurel_previous` residual inputs, B = 0, gamma = (1, 0, ..).

Every form works per token: a decoded token needs the outputs (or values) of the earlier blocks at its own position
only, which the forward computes anyway, so the stock key/value cache is all the cache there is. The attention
residuals' sources are a list the stack keeps and hands each layer (a stacked copy per sublayer would hold L^2 / 2
hidden states for the backward pass); LAuReL's previous activations, a few, pass between the blocks as a stacked state
`[1 + k, B, T, C]`: the residual stream, then the residual inputs the later sublayers read. The equations as written
here are the specification; `tests/mechanisms/test_depth_routing.py` holds independent references.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
import functools
from collections.abc import Callable

import torch
from torch import nn
from transformers import initialization as init
from transformers.generation import GenerationMixin

from .decoder_common import CausalLMMixin, DecoderLayerRolesMixin, DecoderStackMixin, FreezeBaseMixin, StackRun
from .zoo_common import StatsAccumulator, register_for_auto_classes

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

from .configuration_depth_routing import (
    Gemma2DepthRoutingConfig,
    Gemma3TextDepthRoutingConfig,
    GPT2DepthRoutingConfig,
    LlamaDepthRoutingConfig,
    MistralDepthRoutingConfig,
    Olmo2DepthRoutingConfig,
    Phi3DepthRoutingConfig,
    Qwen2DepthRoutingConfig,
    Qwen3DepthRoutingConfig,
)
from .decoder_families import GEMMA2, GEMMA3_TEXT, GPT2, LLAMA, MISTRAL, OLMO2, PHI3, QWEN2, QWEN3

# --- end generated imports ---


# ---- small pieces ---------------------------------------------------------------------------------------------------


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """`x` in float32, or in its own dtype where that is wider (float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def rms_normed(x: torch.Tensor, eps: float, weight: torch.Tensor | None = None) -> torch.Tensor:
    """`x / sqrt(mean(x^2) + eps)` (times `weight`) over the last dimension, computed in at least float32, in `x`'s
    dtype."""
    out = at_least_fp32(x) * inverse_rms(x, eps).unsqueeze(-1)
    return (out if weight is None else out * at_least_fp32(weight)).type_as(x)


def inverse_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """`1 / sqrt(mean(x^2) + eps)` over the last dimension, in at least float32: `rms_normed(x)` is `x` times it."""
    wide = at_least_fp32(x)
    return torch.rsqrt(wide.pow(2).mean(-1) + eps)


STACK_AT_MOST = 1 << 16
"""The elements of one source up to which the sums stack their sources without autograd: decoding (a token or a few
per row), where one product over the stacked sources replaces one operation per source, a few operations per decoded
token instead of hundreds. Above it (a full-sequence evaluation, a prompt) the copy of every earlier output per layer
or sublayer costs more than the operations it saves: measured at the SmolLM2-135M shape, 8 x 128 tokens, no grad,
1 thread, the attention residuals took 13.1 s stacked and 5.9 s one source at a time (stock 4.7 s), MUDD 8.7 s and
5.5 s, DenseFormer 6.3 s and 4.7 s."""


def stacked_without_autograd(sources: list[torch.Tensor]) -> torch.Tensor | None:
    """The sources stacked into one tensor `[n, ...]` where autograd keeps nothing and each source is small
    (`STACK_AT_MOST`: decoding), else None: the sums then go one source at a time. In training, stacked once per layer
    or sublayer, the copies would be kept for the backward pass, L^2 / 2 hidden states for L layers where the sources
    themselves are L; where gradients are recorded the stacked copy is kept whenever anything it multiplies requires
    a gradient (a weight, if no source), so grad mode decides, not the sources."""
    if torch.is_grad_enabled() or sources[0].numel() > STACK_AT_MOST:
        return None
    return torch.stack(sources)


def weighted_sum(
    weights: torch.Tensor, sources: list[torch.Tensor], stacked: torch.Tensor | None = None
) -> torch.Tensor:
    """`sum_j weights[j] * sources[j]`, `weights[j]` broadcasting against each source: over `stacked`, the sources
    stacked (`stacked_without_autograd`), or one source at a time."""
    stacked = stacked if stacked is not None else stacked_without_autograd(sources)
    if stacked is not None:
        return (weights.reshape(weights.shape + (1,) * (stacked.dim() - weights.dim())) * stacked).sum(0)
    total = weights[0] * sources[0]
    for weight, source in zip(weights[1:], sources[1:]):
        total = torch.addcmul(total, weight, source)
    return total


def token_mean(x: torch.Tensor, token_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of `x` [B, T, ...] over its tokens, the real ones only where `token_mask` [B, T] is given."""
    if token_mask is None:
        return x.float().mean((0, 1))
    weights = token_mask.to(torch.float32).reshape(*token_mask.shape, *([1] * (x.dim() - 2)))
    return (x.float() * weights).sum((0, 1)) / weights.sum().clamp_min(1.0)


def norm_eps(config) -> float:
    return getattr(config, "rms_norm_eps", None) or getattr(config, "layer_norm_epsilon", None) or 1e-6


def column_orthogonal(rank: int, width: int) -> torch.Tensor:
    """LAuReL's init of `A` (its section 3.3): `A[i, j] = 1 / sqrt(rank * width)` where `i % rank == j`, as the
    [rank, width] weight `A` is applied with (`h A^T`)."""
    weight = torch.zeros(rank, width)
    columns = torch.arange(width)
    weight[columns % rank, columns] = (rank * width) ** -0.5
    return weight


# ---- the attention projections of a layer ------------------------------------------------------------------------


@dataclasses.dataclass
class TapCall:
    """What a layer gives its attention projections for one attention call: the (normed) inputs the key and the value
    projections read instead of the query's (MUDD's multiway inputs), and a function of the values that replaces them
    (the value residual's mix)."""

    key_input: torch.Tensor | None = None
    value_input: torch.Tensor | None = None
    value_mix: Callable[[torch.Tensor], torch.Tensor] | None = None


class ProjectionTaps:
    """Where a layer's attention projects its queries, keys and values, as its family declares it (`Heads.qkv`: three
    modules, or one fused module whose outputs are `[queries | keys | values]`), and forward hooks there that do what
    the layer's `TapCall` says while it is set (`DepthRoutingLayerMixin.tap_call`, one attention call): the key and
    value projections read other inputs (a separate module: its input replaced; a fused one: its key and value
    outputs recomputed from them), and the values are mixed.

    The hooks sit on the modules found at those paths when the layer runs, so a PEFT adapter that wraps a projection
    (LoRA on `v_proj`) is inside what is tapped, and merging the adapter keeps the function; a module something
    replaced keeps hooks that do nothing."""

    def __init__(self, layer: nn.Module):
        heads = layer.family.heads
        self.paths = heads.qkv
        self.fused = len(self.paths) == 1
        q, k, v = heads.widths_of(layer.get_submodule(heads.attention))
        self.slices = {"key": slice(q, q + k), "value": slice(q + k, q + k + v)}
        self.ensure(layer)

    def roles(self) -> dict[str, str]:
        """`{path: role}`: the fused module does both, else the key and the value module theirs."""
        return {self.paths[0]: "fused"} if self.fused else {self.paths[1]: "key", self.paths[2]: "value"}

    def ensure(self, layer: nn.Module) -> None:
        """Hook the modules at the paths (once; again when something replaced one)."""
        for path, role in self.roles().items():
            module = layer.get_submodule(path)
            if module.__dict__.get("_depth_tap"):
                continue
            if role == "fused":
                module.register_forward_hook(functools.partial(self._fused, layer, path))
            else:
                module.register_forward_pre_hook(functools.partial(self._input, layer, path, role))
                if role == "value":
                    module.register_forward_hook(functools.partial(self._value, layer, path))
            module.__dict__["_depth_tap"] = True  # a plain attribute, not a submodule or a buffer

    def _active(self, layer, path, module) -> TapCall | None:
        call = layer.tap_call
        return call if call is not None and layer.get_submodule(path) is module else None

    def _input(self, layer, path, role, module, args):
        call = self._active(layer, path, module)
        replaced = None if call is None else getattr(call, f"{role}_input")
        return None if replaced is None else (replaced, *args[1:])

    def _value(self, layer, path, module, args, output):
        call = self._active(layer, path, module)
        return None if call is None or call.value_mix is None else call.value_mix(output)

    def _fused(self, layer, path, module, args, output):
        call = self._active(layer, path, module)
        if call is None:
            return None
        parts = {"key": output[..., self.slices["key"]], "value": output[..., self.slices["value"]]}
        for role in parts:
            replaced = getattr(call, f"{role}_input")
            if replaced is not None:  # the module's own forward: no hook runs again
                parts[role] = module.forward(replaced)[..., self.slices[role]]
        if call.value_mix is not None:
            parts["value"] = call.value_mix(parts["value"])
        return torch.cat((output[..., : self.slices["key"].start], parts["key"], parts["value"]), dim=-1)

    def values(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The values the layer's attention computes from its (normed) input `x` (the hooks idle)."""
        module = layer.get_submodule(self.paths[-1])
        out = module(x)
        return out[..., self.slices["value"]] if self.fused else out


# ---- the model-level routers --------------------------------------------------------------------------------------


class DepthWeightedAverage(nn.Module):
    """DenseFormer's depth-weighted averages (`depth_form="dwa"`): row i - 1 of `weight` [L, L + 1] weighs `x_0 ..
    x_i` into `y_i`, for the blocks i the period gives an average; `sources[i - 1]` are the j the dilation allows
    (the `denseformer` package's and the paper's semantics: every block's output is a source, averaged or not)."""

    def __init__(self, config):
        super().__init__()
        layers, k, p = config.num_hidden_layers, config.dwa_dilation, config.dwa_period
        self.weight = nn.Parameter(torch.empty(layers, layers + 1))
        self.sources = {i - 1: list(range(i % k, i + 1, k)) for i in range(1, layers + 1) if i % p == 0}

    def forward(self, i: int, history: list[torch.Tensor], token_mask: torch.Tensor | None = None) -> torch.Tensor:
        sources = self.sources.get(i)
        if sources is None:
            return history[-1]
        weights = self.weight[i, sources].to(history[-1].dtype)
        return weighted_sum(weights, [history[j] for j in sources])


class DenseWeightGenerator(nn.Module):
    """The weights MUDD mixes the outputs with after one block: `W2 GELU(W1 RMSNorm(x)) + a`, `W1` = `weight_in` [C,
    H], `W2` = `weight_out` [H, ways * sources], `a` = `static` [ways, sources]."""

    def __init__(self, width: int, hidden: int, ways: int, sources: int, eps: float):
        super().__init__()
        self.weight_in = nn.Parameter(torch.empty(width, hidden))
        self.weight_out = nn.Parameter(torch.empty(hidden, ways * sources))
        self.static = nn.Parameter(torch.empty(ways, sources))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, T, ways, sources]` for the block output `x` [B, T, C]."""
        hidden = nn.functional.gelu(rms_normed(x, self.eps) @ self.weight_in.to(x.dtype))
        static = self.static.to(x.dtype)
        return (hidden @ self.weight_out.to(x.dtype)).unflatten(-1, static.shape) + static


class MultiwayDenseConnections(nn.Module):
    """MUDDFormer's multiway dynamic dense connections (`depth_form="mudd"`): after block i (0-based here), the
    weights `A = W2_i GELU(W1_i RMSNorm(x_{i+1})) + a_i` over `x_0 .. x_{i+1}` for each way (the parameter-free
    RMSNorm of the reference), `W1_i` [C, H_i], `W2_i` [H_i, ways * (i + 2)], `a_i` [ways, i + 2], with `H_i =
    mudd_hidden_expand * ways * (i + 2)` (times 4 after the last block with `mudd_expand_last`, which makes the residual
    way alone). Per layer, so the generators of different depths differ in width as the reference's do."""

    def __init__(self, config):
        super().__init__()
        layers, width = config.num_hidden_layers, config.hidden_size
        self.ways = list(config.mudd_ways)
        generators = []
        for i in range(layers):
            last = i == layers - 1
            count = 1 if last else len(self.ways)
            hidden = config.mudd_hidden_expand * count * (i + 2) * (4 if last and config.mudd_expand_last else 1)
            generators.append(DenseWeightGenerator(width, hidden, count, i + 2, norm_eps(config)))
        self.generators = nn.ModuleList(generators)
        self.stats = StatsAccumulator()

    def forward(self, i: int, history: list[torch.Tensor], token_mask: torch.Tensor | None = None) -> dict:
        weights = self.generators[i](history[-1])  # [B, T, ways, i + 2]
        ways = ["r"] if weights.shape[-2] == 1 else self.ways
        means = token_mean(weights, token_mask)
        for w, way in enumerate(ways):
            self.stats.add(f"depth/L{i}/{way}_weights", means[w])
        per_source = weights.movedim(-1, 0).unsqueeze(-1)  # [i + 2, B, T, ways, 1]
        stacked = stacked_without_autograd(history)
        return {way: weighted_sum(per_source[..., w, :], history, stacked) for w, way in enumerate(ways)}


class FinalAttentionResidual(nn.Module):
    """The full (Kimi) attention residuals' last mixture: the final norm reads `sum_j softmax_j(w . RMSNorm(v_j))
    v_j` over every source, with its own query `query` and key-norm weight `key_norm`."""

    def __init__(self, config):
        super().__init__()
        self.query = nn.Parameter(torch.empty(config.hidden_size))
        self.key_norm = nn.Parameter(torch.empty(config.hidden_size))

    def forward(self, sources: list[torch.Tensor], scales: list[torch.Tensor]) -> torch.Tensor:
        return depth_attention(sources, scales, self.query, self.key_norm)[0]


def depth_attention(
    sources: list[torch.Tensor], scales: list[torch.Tensor], query: torch.Tensor, key_norm: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(sum_j softmax_j(query . RMSNorm(v_j) / sqrt(C)) v_j, the softmax weights [n, B, T])` over `sources` (n
    tensors [B, T, C]), `scales[j]` = `inverse_rms(v_j)` (each source's, computed once for every sublayer that reads
    it): `query . (v_j * scale_j * key_norm) = scale_j (v_j . (key_norm * query))`; logits and softmax in at least
    float32."""
    dtype = sources[0].dtype
    direction = (query * key_norm).to(dtype) * sources[0].shape[-1] ** -0.5
    stacked = stacked_without_autograd(sources)
    if stacked is None:
        logits = torch.stack([at_least_fp32(v @ direction) * scale for v, scale in zip(sources, scales)])
    else:
        logits = at_least_fp32(stacked @ direction) * torch.stack(scales)  # [n, B, T]
    weights = logits.softmax(0).to(dtype)
    return weighted_sum(weights.unsqueeze(-1), sources, stacked), weights


class LaurelLowRank(nn.Module):
    """LAuReL's low-rank term `B A h` (`A` = `left` [rank, C], `B` = `right` [C, rank]), RMS-normalised with
    `laurel_norm` as Gemma 3n's block does it (`x * (mean(x^2) + eps)^-1/2 * w`, in at least float32). Its weights are
    plain parameters, not `nn.Linear`s, so that transformers' generic init never overwrites them."""

    def __init__(self, config):
        super().__init__()
        self.left = nn.Parameter(torch.empty(config.laurel_rank, config.hidden_size))
        self.right = nn.Parameter(torch.empty(config.hidden_size, config.laurel_rank))
        self.norm_weight = nn.Parameter(torch.empty(config.hidden_size)) if config.laurel_norm else None
        self.eps = norm_eps(config)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = nn.functional.linear(nn.functional.linear(h, self.left), self.right)
        if self.norm_weight is None:
            return out
        wide = at_least_fp32(out)
        normed = wide * torch.pow(wide.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        return (normed * at_least_fp32(self.norm_weight)).type_as(out)


# ---- the layer ---------------------------------------------------------------------------------------------------


class NormCopy(nn.Module):
    """A copy of a stock norm's parameters (the same names and shapes, made here, so that DeepSpeed's zero.Init
    partitions them), with which the stock norm's own forward runs (`torch.func.functional_call`): the family's norm,
    whatever its convention (Gemma's `1 + w`), with weights of its own."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        for name, parameter in norm.named_parameters(recurse=False):
            setattr(self, name, nn.Parameter(torch.empty_like(parameter)))
        self.__dict__["source"] = norm  # the stock norm it starts as a copy of: a plain attribute, not a submodule

    def forward(self, norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(norm, dict(self.named_parameters()), (x,))


SUBLAYERS = ("attn", "mlp")


class DepthRoutingLayerMixin(DecoderLayerRolesMixin):
    """A stock decoder layer with its form's per-layer part (put before the stock class): LAuReL's terms around its
    sublayers, the attention residuals' queries, key norms and gates, the value residual's mix of its attention's
    values, or MUDD's key and value inputs (read through copies of the block's attention norm)."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.layer_idx = layer_idx
        self.form = config.depth_form
        self.eps = norm_eps(config)
        self.laurel_form = config.laurel_form
        self.residual_variant = config.attention_residual_variant
        self.residual_blocks = config.attention_residual_block_size
        self.tap_call = None  # what the projection taps do during one attention call
        self.taps = ProjectionTaps(self) if self.form in ("mudd", "value_residual") else None
        if self.form == "value_residual" and layer_idx > 0:
            self.depth_value_weights = nn.Parameter(torch.empty(2))  # (l1, l2)
        elif self.form == "mudd" and layer_idx > 0:
            before = self.family.attention_branch.before
            self.depth_key_norms = nn.ModuleList(NormCopy(getattr(self, name)) for name in before)
            self.depth_value_norms = nn.ModuleList(NormCopy(getattr(self, name)) for name in before)
        elif self.form == "attention_residual":
            self.depth_queries = nn.Parameter(torch.empty(2, config.hidden_size))  # [attn, mlp]
            self.depth_key_norms = nn.Parameter(torch.empty(2, config.hidden_size))
            if config.attention_residual_variant == "delta":
                self.depth_gates = nn.Parameter(torch.empty(2))
            self.stats = StatsAccumulator()  # the softmax weights over the sources
        elif self.form == "laurel":
            if config.laurel_form == "rw":
                self.depth_laurel_weights = nn.Parameter(torch.empty(2, 2))  # [attn, mlp] x [alpha, beta]
            else:
                self.depth_laurel_attn = LaurelLowRank(config)
                self.depth_laurel_mlp = LaurelLowRank(config)
            if config.laurel_form == "pa":
                self.depth_laurel_previous = nn.Parameter(torch.empty(2, config.laurel_previous))  # gamma

    def residual_block(self, h: torch.Tensor, attention, *layer_inputs) -> torch.Tensor:
        if self.form == "value_residual" and layer_inputs:
            l1, l2 = self.depth_value_weights.to(h.dtype)
            first = layer_inputs[0]
            return self.tapped_block(h, attention, TapCall(value_mix=lambda v: l1 * v + l2 * first))
        if self.form == "mudd" and layer_inputs:
            query, key, value = layer_inputs
            call = TapCall(key_input=self.normed(self.depth_key_norms, key))
            call.value_input = self.normed(self.depth_value_norms, value)
            return self.tapped_block(h, attention, call, query)
        if self.form == "attention_residual":
            return self.attention_residual_block(h, attention, *layer_inputs)
        if self.form == "laurel":
            return self.laurel_block(h, attention)
        return super().residual_block(h, attention)

    def normed(self, copies: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
        """`x` through the block's attention norms, with the weights of `copies`."""
        for name, weights in zip(self.family.attention_branch.before, copies):
            x = weights(getattr(self, name), x)
        return x

    def branches(self, attention):
        return dict(zip(SUBLAYERS, (attention, self.mlp_branch)))

    def tapped_block(self, h: torch.Tensor, attention, call: TapCall, query: torch.Tensor | None = None):
        """The stock block with the projections tapped as `call` says during its attention, whose queries read
        `query` (`h`, the residual stream, when None)."""
        self.taps.ensure(self)
        self.tap_call = call
        try:
            h = h + attention(h if query is None else query)
        finally:
            self.tap_call = None
        return h + self.mlp_branch(h)

    def attention_residual_block(self, h: torch.Tensor, attention, *sources_and_scales) -> torch.Tensor:
        """`h` the residual stream (in the full variant, the sum of the sources), then the sources and their
        `inverse_rms` (n each). Each sublayer reads `h + g r` (delta) or `r` (full); without blocks, the attention
        sublayer's output is a source of the MLP sublayer, and the layer returns `[h, o_attn, o_mlp]` stacked (the
        model keeps both outputs as sources of the later layers); with blocks it returns `h` (the model adds the
        completed block's delta)."""
        n = len(sources_and_scales) // 2
        sources, scales = list(sources_and_scales[:n]), list(sources_and_scales[n:])
        outputs = []
        for s, (name, branch) in enumerate(self.branches(attention).items()):
            mixed, weights = depth_attention(sources, scales, self.depth_queries[s], self.depth_key_norms[s])
            self.stats.add(f"depth/L{self.layer_idx}/{name}_weights", weights.float().mean((1, 2)))
            if self.residual_variant == "delta":
                out = branch(h + self.depth_gates[s].to(h.dtype) * mixed)
            else:
                out = branch(mixed)
            h = h + out
            outputs.append(out)
            if not self.residual_blocks:
                sources, scales = sources + [out], scales + [inverse_rms(out, self.eps)]
        return h if self.residual_blocks else torch.stack((h, *outputs))

    def laurel_block(self, state: torch.Tensor, attention) -> torch.Tensor:
        """LAuReL around each sublayer; with previous activations, `state` [1 + k, B, T, C] holds the residual stream
        and the residual inputs of the k sublayers before (oldest last), and the block returns it moved on by two."""
        form = self.laurel_form
        if form == "rw":
            h = state
            for n, branch in enumerate(self.branches(attention).values()):
                alpha, beta = self.depth_laurel_weights[n].to(h.dtype)
                h = beta * h + alpha * branch(h)
            return h
        if form == "lr":
            h = state
            for n, branch in enumerate(self.branches(attention).values()):
                h = h + branch(h) + self.low_rank(n)(h)
            return h
        h, previous = state[0], state[1:]
        for n, branch in enumerate(self.branches(attention).values()):
            window = torch.cat((h[None], previous[: previous.shape[0] - 1]))  # h_s, h_{s-1}, ..
            gammas = self.depth_laurel_previous[n].to(h.dtype)
            mixed = torch.einsum("j,jbtc->btc", gammas, window)
            h, previous = h + branch(h) + self.low_rank(n)(mixed), window
        return torch.cat((h[None], previous))

    def low_rank(self, n: int) -> LaurelLowRank:
        return self.depth_laurel_attn if n == 0 else self.depth_laurel_mlp

    def first_values(self, x: torch.Tensor) -> torch.Tensor:
        """The values this layer's attention computes from its input `x` (the value residual's `v_1`, of the first
        layer)."""
        return self.taps.values(self, self.family.attention_branch.normed(self, x))


# ---- the models ---------------------------------------------------------------------------------------------------


class DepthRoutingPreTrainedMixin(FreezeBaseMixin):
    """Init, statistics and card text shared by every depth-routing model (put before the stock class)."""

    mechanism_name = "Depth routing"
    mechanism_param_prefix = "depth_"

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        config = self.config
        noise = 0.0 if config.identity_init else float(config.depth_init_std)

        def start(parameter, value):
            init.copy_(parameter, value + noise * torch.randn_like(value))

        if isinstance(module, DepthWeightedAverage):
            identity = torch.zeros_like(module.weight)
            identity[torch.arange(identity.shape[0]), torch.arange(1, identity.shape[0] + 1)] = 1.0
            start(module.weight, identity)
        elif isinstance(module, DenseWeightGenerator):
            init.normal_(module.weight_in, std=module.weight_in.shape[0] ** -0.5)  # the reference's N(0, 1/C)
            start(module.weight_out, torch.zeros_like(module.weight_out))
            one_hot = torch.zeros_like(module.static)
            one_hot[:, -1] = 1.0  # on the newest output
            start(module.static, one_hot)
        elif isinstance(module, NormCopy):  # after the stock norm (loaded, or initialised before it)
            for name, parameter in module.named_parameters():
                init.copy_(parameter, module.source.get_parameter(name))
        elif isinstance(module, FinalAttentionResidual):
            start(module.query, torch.zeros_like(module.query))
            init.ones_(module.key_norm)
        elif isinstance(module, LaurelLowRank):
            init.copy_(module.left, column_orthogonal(*module.left.shape))
            start(module.right, torch.zeros_like(module.right))
            if module.norm_weight is not None:
                init.ones_(module.norm_weight)
        elif isinstance(module, DepthRoutingLayerMixin):
            self._init_layer(module, start)

    def _init_layer(self, layer, start) -> None:
        config = self.config
        if hasattr(layer, "depth_value_weights"):
            half = config.value_residual_mix == "half"
            start(layer.depth_value_weights, torch.tensor([0.5, 0.5] if half else [1.0, 0.0]))
        if hasattr(layer, "depth_queries"):
            start(layer.depth_queries, torch.zeros_like(layer.depth_queries))
            init.ones_(layer.depth_key_norms)
            if hasattr(layer, "depth_gates"):
                gate = 0.0 if config.identity_init else float(config.attention_residual_gate_init)
                start(layer.depth_gates, torch.full_like(layer.depth_gates, gate))
        if hasattr(layer, "depth_laurel_weights"):
            start(layer.depth_laurel_weights, torch.ones(2, 2))
        if hasattr(layer, "depth_laurel_previous"):
            gammas = torch.zeros_like(layer.depth_laurel_previous)
            gammas[:, 0] = 1.0  # the sublayer's own input: lr's term, which B = 0 silences
            start(layer.depth_laurel_previous, gammas)

    @torch.no_grad()
    def mechanism_state(self) -> dict[str, float]:
        """The form's static weights: DenseFormer's averages (`depth/L{i}/weights_{j}`, over `x_j`), the attention
        residuals' gates, the value residual's `(l1, l2)` and LAuReL's weights (`rw`), its previous activations'
        gammas (`pa`) and the size of its low-rank terms, `|B A|_F` (`lr`, `pa`), per layer."""
        state: dict[str, float] = {}
        for module in self.modules():
            if isinstance(module, DepthWeightedAverage):
                for i, sources in module.sources.items():
                    for j in sources:
                        state[f"depth/L{i}/weights_{j}"] = module.weight[i, j].item()
            elif isinstance(module, DepthRoutingLayerMixin):
                state.update(self._layer_state(module))
        return state

    @staticmethod
    def _layer_state(layer) -> dict[str, float]:
        i, state = layer.layer_idx, {}
        if hasattr(layer, "depth_gates"):
            state.update({f"depth/L{i}/{n}_gate": g for n, g in zip(SUBLAYERS, layer.depth_gates.float().tolist())})
        if hasattr(layer, "depth_value_weights"):
            state[f"depth/L{i}/l1"], state[f"depth/L{i}/l2"] = layer.depth_value_weights.float().tolist()
        if hasattr(layer, "depth_laurel_weights"):
            for n, (alpha, beta) in zip(SUBLAYERS, layer.depth_laurel_weights.float().tolist()):
                state[f"depth/L{i}/{n}_alpha"], state[f"depth/L{i}/{n}_beta"] = alpha, beta
        if hasattr(layer, "depth_laurel_previous"):
            for n, gammas in zip(SUBLAYERS, layer.depth_laurel_previous.float().tolist()):
                state.update({f"depth/L{i}/{n}_gamma_{j}": g for j, g in enumerate(gammas)})
        for n in SUBLAYERS:
            term = getattr(layer, f"depth_laurel_{n}", None)
            if term is not None:
                state[f"depth/L{i}/{n}_lowrank_norm"] = (term.right @ term.left).norm().item()
        return state

    def mechanism_summary(self) -> str:
        c = self.config
        frozen = "Only the depth-routing parameters train (`freeze_base`). " if c.freeze_base else ""
        return (
            f"Depth routing (interlayer), `depth_form={c.depth_form!r}`: each block reads a learned combination of "
            "earlier layers' outputs or values, or a learned augmentation of its residual (docs/depth_routing.md). "
            f"Stock weight names; the mechanism's tensors are named `depth_*`. {frozen}"
        )


class DepthRoutingModelMixin(DepthRoutingPreTrainedMixin, DecoderStackMixin):
    """The decoder stack with the form's model-level part: what the next layer reads made from the earlier outputs
    (`depth_router`: DWA, MUDD), the first layer's values handed to the later layers (value residual), or the stacked
    state the layers pass on (attention residuals, LAuReL's previous activations)."""

    def build_mechanism(self, config) -> None:
        self.form = config.depth_form
        routers = {"dwa": DepthWeightedAverage, "mudd": MultiwayDenseConnections}
        self.depth_router = routers[self.form](config) if self.form in routers else None
        full = self.form == "attention_residual" and config.attention_residual_variant == "full"
        self.depth_final = FinalAttentionResidual(config) if full else None
        # layers that pass a stacked state: [residual stream, what later sublayers read]
        self.stacked = self.form == "laurel" and config.laurel_form == "pa"
        self.attention_residual = self.form == "attention_residual"

    def check_forward(self, kwargs: dict) -> None:
        if self.config.depth_form != self.form:
            raise ValueError(
                f"`depth_form={self.config.depth_form!r}` was set on a built {type(self).__name__}, which runs "
                f"depth_form={self.form!r} (chosen when the model is built). Load it with the option instead: "
                f"from_pretrained(..., depth_form={self.config.depth_form!r})."
            )

    def enter_layers(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        if not self.stacked:
            return inputs_embeds
        # LAuReL's previous activations: the stream, then the k residual inputs before it (none yet: zeros)
        previous = inputs_embeds.new_zeros((self.config.laurel_previous, *inputs_embeds.shape))
        return torch.cat((inputs_embeds[None], previous))

    def read_state(self, state: torch.Tensor) -> torch.Tensor:
        return state[0] if self.stacked else state

    def run_layers(self, inputs_embeds: torch.Tensor, run: StackRun) -> torch.Tensor:
        run.saved["history"] = [inputs_embeds]  # x_0, then each block's output
        if self.attention_residual:  # the sources (x_0, then each sublayer's output or block's delta), their scales
            run.saved["sources"] = [inputs_embeds]
            run.saved["scales"] = [inverse_rms(inputs_embeds, norm_eps(self.config))]
            run.saved["block_start"] = inputs_embeds
        out = super().run_layers(inputs_embeds, run)
        if self.depth_final is None:
            return out
        return self.depth_final(run.saved["sources"], run.saved["scales"])

    def leave_layers(self, state: torch.Tensor) -> torch.Tensor:
        """The stock final norm of the final attention residual's output (already a hidden state), else of
        `read_state`."""
        return self.final_norm(state) if self.depth_final is not None else super().leave_layers(state)

    def layer_inputs(self, i: int, run: StackRun) -> tuple:
        if self.form == "value_residual" and i > 0:
            if "first_values" not in run.saved:
                run.saved["first_values"] = self.stack_layers[0].first_values(run.saved["history"][0])
            return (run.saved["first_values"],)
        if self.form == "mudd" and i > 0:
            ways = run.saved["ways"]
            return (ways["q"], ways["k"], ways["v"])
        if self.attention_residual:
            return (*run.saved["sources"], *run.saved["scales"])
        return ()

    def after_layer(self, i: int, output: torch.Tensor, run: StackRun) -> torch.Tensor:
        if self.attention_residual:
            return self.add_sources(i, output, run)
        if self.depth_router is None:
            return output
        history = run.saved["history"]
        history.append(output)
        token_mask = run.attention_mask if isinstance(run.attention_mask, torch.Tensor) else None
        token_mask = (
            token_mask[:, -output.shape[1] :].bool() if token_mask is not None and token_mask.dim() == 2 else None
        )
        if self.form == "dwa":
            return self.depth_router(i, history, token_mask)
        ways = self.depth_router(i, history, token_mask)
        residual = ways.get("r", output)
        run.saved["ways"] = {way: ways.get(way, residual) for way in ("q", "k", "v")}
        return residual

    def add_sources(self, i: int, output: torch.Tensor, run: StackRun) -> torch.Tensor:
        """The attention residuals' sources after layer `i`: its sublayers' outputs (`output` [h, o_attn, o_mlp]), or,
        with blocks, the delta of a block that layer `i` completes; returns the residual stream."""
        eps, blocks = norm_eps(self.config), self.config.attention_residual_block_size
        if not blocks:
            h, new = output[0], list(output[1:])
        elif (i + 1) % blocks == 0:
            h, new = output, [output - run.saved["block_start"]]
            run.saved["block_start"] = output
        else:
            return output
        run.saved["sources"] = run.saved["sources"] + new
        run.saved["scales"] = run.saved["scales"] + [inverse_rms(source, eps) for source in new]
        return h


class DepthRoutingForCausalLMMixin(DepthRoutingPreTrainedMixin, CausalLMMixin):
    """The stock causal-LM head on a depth-routing decoder."""


__all__ = [
    "DenseWeightGenerator",
    "DepthWeightedAverage",
    "FinalAttentionResidual",
    "LaurelLowRank",
    "MultiwayDenseConnections",
    "ProjectionTaps",
    "depth_attention",
]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
# each class has an `__init__` of its own, so that DeepSpeed's zero.Init partitions the mixin's parameters too
class LlamaDepthRoutingDecoderLayer(DepthRoutingLayerMixin, LlamaDecoderLayer):
    family = LLAMA

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class LlamaDepthRoutingModel(DepthRoutingModelMixin, LlamaModel):
    config_class = LlamaDepthRoutingConfig
    family = LLAMA
    decoder_layer_class = LlamaDepthRoutingDecoderLayer
    _no_split_modules = ["LlamaDepthRoutingDecoderLayer"]
    _can_record_outputs = {"attentions": LlamaAttention}

    def __init__(self, config):
        super().__init__(config)


class LlamaDepthRoutingForCausalLM(DepthRoutingForCausalLMMixin, LlamaForCausalLM, GenerationMixin):
    config_class = LlamaDepthRoutingConfig
    family = LLAMA
    base_class = LlamaDepthRoutingModel
    _no_split_modules = ["LlamaDepthRoutingDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    LlamaDepthRoutingConfig, AutoModel=LlamaDepthRoutingModel, AutoModelForCausalLM=LlamaDepthRoutingForCausalLM
)


class Qwen3DepthRoutingDecoderLayer(DepthRoutingLayerMixin, Qwen3DecoderLayer):
    family = QWEN3

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen3DepthRoutingModel(DepthRoutingModelMixin, Qwen3Model):
    config_class = Qwen3DepthRoutingConfig
    family = QWEN3
    decoder_layer_class = Qwen3DepthRoutingDecoderLayer
    _no_split_modules = ["Qwen3DepthRoutingDecoderLayer"]
    _can_record_outputs = {"attentions": Qwen3Attention}

    def __init__(self, config):
        super().__init__(config)


class Qwen3DepthRoutingForCausalLM(DepthRoutingForCausalLMMixin, Qwen3ForCausalLM, GenerationMixin):
    config_class = Qwen3DepthRoutingConfig
    family = QWEN3
    base_class = Qwen3DepthRoutingModel
    _no_split_modules = ["Qwen3DepthRoutingDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Qwen3DepthRoutingConfig, AutoModel=Qwen3DepthRoutingModel, AutoModelForCausalLM=Qwen3DepthRoutingForCausalLM
)


class Qwen2DepthRoutingDecoderLayer(DepthRoutingLayerMixin, Qwen2DecoderLayer):
    family = QWEN2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Qwen2DepthRoutingModel(DepthRoutingModelMixin, Qwen2Model):
    config_class = Qwen2DepthRoutingConfig
    family = QWEN2
    decoder_layer_class = Qwen2DepthRoutingDecoderLayer
    _no_split_modules = ["Qwen2DepthRoutingDecoderLayer"]
    _can_record_outputs = {"attentions": Qwen2Attention}

    def __init__(self, config):
        super().__init__(config)


class Qwen2DepthRoutingForCausalLM(DepthRoutingForCausalLMMixin, Qwen2ForCausalLM, GenerationMixin):
    config_class = Qwen2DepthRoutingConfig
    family = QWEN2
    base_class = Qwen2DepthRoutingModel
    _no_split_modules = ["Qwen2DepthRoutingDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Qwen2DepthRoutingConfig, AutoModel=Qwen2DepthRoutingModel, AutoModelForCausalLM=Qwen2DepthRoutingForCausalLM
)


class MistralDepthRoutingDecoderLayer(DepthRoutingLayerMixin, MistralDecoderLayer):
    family = MISTRAL

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class MistralDepthRoutingModel(DepthRoutingModelMixin, MistralModel):
    config_class = MistralDepthRoutingConfig
    family = MISTRAL
    decoder_layer_class = MistralDepthRoutingDecoderLayer
    _no_split_modules = ["MistralDepthRoutingDecoderLayer"]
    _can_record_outputs = {"attentions": MistralAttention}

    def __init__(self, config):
        super().__init__(config)


class MistralDepthRoutingForCausalLM(DepthRoutingForCausalLMMixin, MistralForCausalLM, GenerationMixin):
    config_class = MistralDepthRoutingConfig
    family = MISTRAL
    base_class = MistralDepthRoutingModel
    _no_split_modules = ["MistralDepthRoutingDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    MistralDepthRoutingConfig, AutoModel=MistralDepthRoutingModel, AutoModelForCausalLM=MistralDepthRoutingForCausalLM
)


class Phi3DepthRoutingDecoderLayer(DepthRoutingLayerMixin, Phi3DecoderLayer):
    family = PHI3

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Phi3DepthRoutingModel(DepthRoutingModelMixin, Phi3Model):
    config_class = Phi3DepthRoutingConfig
    family = PHI3
    decoder_layer_class = Phi3DepthRoutingDecoderLayer
    _no_split_modules = ["Phi3DepthRoutingDecoderLayer"]
    _can_record_outputs = {"attentions": Phi3Attention}

    def __init__(self, config):
        super().__init__(config)


class Phi3DepthRoutingForCausalLM(DepthRoutingForCausalLMMixin, Phi3ForCausalLM, GenerationMixin):
    config_class = Phi3DepthRoutingConfig
    family = PHI3
    base_class = Phi3DepthRoutingModel
    _no_split_modules = ["Phi3DepthRoutingDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Phi3DepthRoutingConfig, AutoModel=Phi3DepthRoutingModel, AutoModelForCausalLM=Phi3DepthRoutingForCausalLM
)


class Olmo2DepthRoutingDecoderLayer(DepthRoutingLayerMixin, Olmo2DecoderLayer):
    family = OLMO2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Olmo2DepthRoutingModel(DepthRoutingModelMixin, Olmo2Model):
    config_class = Olmo2DepthRoutingConfig
    family = OLMO2
    decoder_layer_class = Olmo2DepthRoutingDecoderLayer
    _no_split_modules = ["Olmo2DepthRoutingDecoderLayer"]
    _can_record_outputs = {"attentions": Olmo2Attention}

    def __init__(self, config):
        super().__init__(config)


class Olmo2DepthRoutingForCausalLM(DepthRoutingForCausalLMMixin, Olmo2ForCausalLM, GenerationMixin):
    config_class = Olmo2DepthRoutingConfig
    family = OLMO2
    base_class = Olmo2DepthRoutingModel
    _no_split_modules = ["Olmo2DepthRoutingDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Olmo2DepthRoutingConfig, AutoModel=Olmo2DepthRoutingModel, AutoModelForCausalLM=Olmo2DepthRoutingForCausalLM
)


class Gemma2DepthRoutingDecoderLayer(DepthRoutingLayerMixin, Gemma2DecoderLayer):
    family = GEMMA2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Gemma2DepthRoutingModel(DepthRoutingModelMixin, Gemma2Model):
    config_class = Gemma2DepthRoutingConfig
    family = GEMMA2
    decoder_layer_class = Gemma2DepthRoutingDecoderLayer
    _no_split_modules = ["Gemma2DepthRoutingDecoderLayer"]
    _can_record_outputs = {"attentions": Gemma2Attention}

    def __init__(self, config):
        super().__init__(config)


class Gemma2DepthRoutingForCausalLM(DepthRoutingForCausalLMMixin, Gemma2ForCausalLM, GenerationMixin):
    config_class = Gemma2DepthRoutingConfig
    family = GEMMA2
    base_class = Gemma2DepthRoutingModel
    _no_split_modules = ["Gemma2DepthRoutingDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Gemma2DepthRoutingConfig, AutoModel=Gemma2DepthRoutingModel, AutoModelForCausalLM=Gemma2DepthRoutingForCausalLM
)


class Gemma3TextDepthRoutingDecoderLayer(DepthRoutingLayerMixin, Gemma3DecoderLayer):
    family = GEMMA3_TEXT

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class Gemma3TextDepthRoutingModel(DepthRoutingModelMixin, Gemma3TextModel):
    config_class = Gemma3TextDepthRoutingConfig
    family = GEMMA3_TEXT
    decoder_layer_class = Gemma3TextDepthRoutingDecoderLayer
    _no_split_modules = ["Gemma3TextDepthRoutingDecoderLayer"]
    _can_record_outputs = {"attentions": Gemma3Attention}

    def __init__(self, config):
        super().__init__(config)


class Gemma3TextDepthRoutingForCausalLM(DepthRoutingForCausalLMMixin, Gemma3ForCausalLM, GenerationMixin):
    config_class = Gemma3TextDepthRoutingConfig
    family = GEMMA3_TEXT
    base_class = Gemma3TextDepthRoutingModel
    _no_split_modules = ["Gemma3TextDepthRoutingDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    Gemma3TextDepthRoutingConfig,
    AutoModel=Gemma3TextDepthRoutingModel,
    AutoModelForCausalLM=Gemma3TextDepthRoutingForCausalLM,
)


class GPT2DepthRoutingDecoderLayer(DepthRoutingLayerMixin, GPT2Block):
    family = GPT2

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)


class GPT2DepthRoutingModel(DepthRoutingModelMixin, GPT2Model):
    config_class = GPT2DepthRoutingConfig
    family = GPT2
    decoder_layer_class = GPT2DepthRoutingDecoderLayer
    _no_split_modules = ["GPT2DepthRoutingDecoderLayer"]
    _can_record_outputs = {"attentions": GPT2Attention}

    def __init__(self, config):
        super().__init__(config)


class GPT2DepthRoutingForCausalLM(DepthRoutingForCausalLMMixin, GPT2LMHeadModel, GenerationMixin):
    config_class = GPT2DepthRoutingConfig
    family = GPT2
    base_class = GPT2DepthRoutingModel
    _no_split_modules = ["GPT2DepthRoutingDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)


register_for_auto_classes(
    GPT2DepthRoutingConfig, AutoModel=GPT2DepthRoutingModel, AutoModelForCausalLM=GPT2DepthRoutingForCausalLM
)


__all__ += [
    "GPT2DepthRoutingForCausalLM",
    "GPT2DepthRoutingModel",
    "Gemma2DepthRoutingForCausalLM",
    "Gemma2DepthRoutingModel",
    "Gemma3TextDepthRoutingForCausalLM",
    "Gemma3TextDepthRoutingModel",
    "LlamaDepthRoutingForCausalLM",
    "LlamaDepthRoutingModel",
    "MistralDepthRoutingForCausalLM",
    "MistralDepthRoutingModel",
    "Olmo2DepthRoutingForCausalLM",
    "Olmo2DepthRoutingModel",
    "Phi3DepthRoutingForCausalLM",
    "Phi3DepthRoutingModel",
    "Qwen2DepthRoutingForCausalLM",
    "Qwen2DepthRoutingModel",
    "Qwen3DepthRoutingForCausalLM",
    "Qwen3DepthRoutingModel",
]
# --- end generated classes ---
