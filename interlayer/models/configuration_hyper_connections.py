"""Configuration of hyper-connections (seed 002) on the decoder families of families.py (Llama, Qwen3, Qwen2,
Mistral, Phi-3, OLMo 2, Gemma 2, Gemma 3 text, GPT-2): the seed's static, dynamic and manifold-constrained forms,
DeepSeek-V4's and GLM-5.3's mHC, Hy4's independent hyper-connections and Qwen3.8's gated residual."""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
from typing import ClassVar, Literal

from .zoo_common import ZooConfigFields, ZooConfigMixin, check_choice, check_range, zoo_config

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers import (
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Olmo2Config,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

# --- end generated imports ---

HC_MODES = ("static", "dynamic", "mhc", "independent", "gated")
MHC_VARIANTS = ("seed", "deepseek_v4")
HC_IMPLEMENTATIONS = ("fast", "eager")
HC_READ_OUTS = ("learned", "mean", "dynamic", "gated")
# the read-out a mode has when `hc_read_out` is not given: that of the model that defines the form
DEFAULT_READ_OUT = {"independent": "dynamic", "gated": "gated"}


@dataclasses.dataclass(kw_only=True)
class HyperConnectionFields(ZooConfigFields):
    r"""
    Hyper-connection options (seed 002). The residual stream becomes `hc_streams` full-width streams
    `h = (h_1 .. h_K)`; every attention and MLP sublayer reads, writes and mixes them:
    `h' = H_res h + H_post^T F(H_pre h)`.

    Args:
        hc_streams (`int`, defaults to 4): number of residual streams K (each of the full hidden size, so stock
            weights fit). The embedding is copied into every stream; a learned read-out (starting at the mean)
            collapses them before the final norm.
        hc_mode (`str`, defaults to `"mhc"`): `"static"` (HC paper, static coefficients), `"dynamic"` (HC paper,
            `w = s * tanh(Linear(norm(h_k))) + w` per stream), `"mhc"` (manifold-constrained: `H_pre = sigmoid`,
            `H_post = 2 sigmoid`, `H_res = Sinkhorn-Knopp(exp(.))`), `"independent"` (Tencent Hy4's independent
            hyper-connections, transformers' `HYV4HyperConnection`: `H_pre = sigmoid + hc_eps`, `H_post =
            hc_magnitude * sigmoid + hc_eps` from the RMS-normalised flattened streams, no mixing: `h' = h + H_post^T
            F(H_pre h)`) or `"gated"` (Qwen3.8's gated residual, transformers' `Qwen4ExpTextGatedResidual`: every
            stream normalised by the branch's own input norm times a learned per-stream gain, read through a low-rank
            per-channel sigmoid gate, `x = mean_k(gate_k * n_k)`, written with `2 sigmoid` weights, no mixing; not
            for OLMo 2, whose branches have no input norm). The forms side by side: docs/hyper_connections.md.
        mhc_dynamic (`bool`, defaults to `True`): in `"mhc"` mode, add the input-dependent part computed from the
            RMS-normalised flattened streams (mHC paper); `False` keeps mHC static.
        mhc_variant (`str`, defaults to `"seed"`): the mHC formula in `"mhc"` mode. `"seed"`: the seed's constraints
            above, `H_res` the Sinkhorn-Knopp projection of the raw `res` (columns then rows, rows last).
            `"deepseek_v4"`: DeepSeek-V4's published code (TileKernels `tile_kernels/torch/mhc.py`, transformers'
            `deepseek_v4`): `H_pre = sigmoid + hc_eps`, `H_post = 2 sigmoid` and a mixing matrix `comb` = row
            softmax + `hc_eps`, then columns, then `sinkhorn_iters - 1` rounds of rows then columns, each divided by
            its sum + `hc_eps`; the streams are multiplied by `comb` transposed (`H_res = comb^T`), so `res` and the
            last K*K outputs of the projection are `comb`'s logits indexed [input stream, output stream], as DeepSeek
            lays them out. It cannot start as the exact identity: the `hc_eps` in the denominators scales the
            residual by about 1 - `hc_eps` per sublayer (see docs/hyper_connections.md). GLM-5.3's mHC
            (`Glm5NextTextHyperConnection`) is this formula with `hc_read_out="mean"`.
        hc_dynamic_tanh (`bool`, defaults to `True`): in `"dynamic"` mode, squash the input-dependent part with tanh
            (the HC paper reports that leaving it out is sometimes better).
        hc_dynamic_scale_init (`float`, defaults to 0.01): initial value of the learned scales `s` of the
            input-dependent parts (their projections start at zero, so the coefficients start static).
        sinkhorn_iters (`int`, defaults to 20): Sinkhorn-Knopp iterations for `H_res` in `"mhc"` mode (in the seed
            variant each one normalises columns then rows, so rows sum to 1 to rounding and columns approximately: at
            20 rounds off by up to 6.6e-2 for logits of standard deviation 3; DeepSeek-V4 uses 20 as well).
        hc_read_in_focus (`float`, *optional*): share of each sublayer's read-in placed on stream `l mod K` (the rest
            spread evenly), which breaks the symmetry between streams without changing the function. Defaults to 1
            (one-hot, the HC paper) in `"static"`/`"dynamic"` mode and 0.5 in `"mhc"` and `"independent"` mode,
            where a sigmoid cannot reach 0 or 1. In `"gated"` mode it shapes the per-stream norm gains (`2 K` times
            each stream's read-in share, the read gate being 0.5) and defaults to 1, with which the conversion is
            exact in float32 for K a power of two.
        hc_eps (`float`, defaults to 1e-6): the eps of DeepSeek-V4's and Hy4's formulas (their `hc_eps`): added to
            the read-in sigmoid (`mhc_variant="deepseek_v4"`, `"independent"` mode and the `"dynamic"` read-out),
            to Hy4's write, and to DeepSeek's softmax and to every denominator of its normalisation.
        hc_magnitude (`float`, defaults to 2.0): in `"independent"` mode, the write's magnitude: `H_post =
            hc_magnitude * sigmoid(.) + hc_eps` (Hy4's `hc_magnitude`; DeepSeek and the mHC paper fix it at 2).
        hc_lowrank (`int`, defaults to 320): in `"gated"` mode, the rank of the read gate's projection
            `K*hidden -> hc_lowrank -> K*hidden` (Qwen3.8's `hc_lowrank`): `2 K hidden hc_lowrank` parameters per
            sublayer.
        hc_read_out (`str`, *optional*): how the K streams are collapsed after the last layer. `"learned"`: `sum_k
            r_k h_k` with learned weights starting at the mean, then the stock final norm (the seed's). `"mean"`: the
            unweighted mean, then the stock final norm (GLM-5.3's `Glm5NextTextHyperHead`). `"dynamic"`: `sum_k pre_k
            h_k` with `pre = sigmoid(Linear(RMSNorm(flatten(h))) * s + b) + hc_eps`, then the stock final norm
            (DeepSeek-V4's `DeepseekV4HyperHead`, Hy4's `HYV4HyperHead`). `"gated"`: the gated residual's read in
            place of the final norm, which it applies to every stream (Qwen3.8's `hyper_connection_mixer`). Defaults
            to `"dynamic"` in `"independent"` mode, `"gated"` in `"gated"` mode and `"learned"` otherwise.
        hc_init_noise (`float`, defaults to 0.0): standard deviation of Gaussian noise added to the raw static
            coefficients at initialisation (the seed's symmetry breaking; in `"gated"` mode to the norm gains and the
            read gate's and injection's projections); anything above 0 breaks the equality with the stock model.
        freeze_base (`bool`, defaults to `True`): train only the hyper-connection parameters, as the seed does.
        hc_recompute_streams (`bool`, defaults to `True`): in training, keep the K-wide streams for backward only at
            every ~sqrt(2L)-th sublayer and recompute the others in backward (bit for bit); saves memory for a little
            time. Not used with gradient checkpointing, which already keeps only each layer's input, nor under
            `torch.compile` / `torch.export`, which cannot trace it (the streams are kept; same gradients).
        hc_fused (`bool`, defaults to `True`): in `"mhc"` mode with `mhc_dynamic`, compute the coefficients of every
            sublayer with one function compiled by `torch.compile(fullgraph=True)` (the projection, the normalisation,
            the sigmoids, the Sinkhorn-Knopp rounds and their backward fused into a few kernels): 3x fewer microseconds
            for the coefficients of a decoded token, once a compilation per grad mode is paid in a process (seconds; the
            number of tokens is a symbol, so a new batch or length compiles nothing, and a single token has a graph of
            its own). Without grad, the coefficients and the read-in and mixing product are one such function, and a
            decoded token at batch 1 runs it as one inductor graph called directly; fp32 streams on a CPU (a prompt
            or a decoded step) instead take the boundary's read and write as two C++ functions shared among torch's
            threads (hyper_connections_cpu.py, built once per machine by inductor's C++ code cache; where they cannot
            be built, one warning). Same results to rounding. A kept graph takes a second backward
            (`retain_graph=True`) and a gradient can be differentiated again (`create_graph=True`, through the eager
            function, as torch cannot differentiate a compiled backward). Computed eagerly where a compiled call
            cannot run: inside a model compiled or exported as a whole (traced with it), under a dispatch mode such as
            `FlopCounterMode`, and once compiling failed in the process (no C++ compiler for inductor: one warning),
            and, silently, wherever torch's switches turn compiling off (`TORCH_COMPILE_DISABLE=1`,
            `TORCHDYNAMO_DISABLE=1`, `torch._dynamo.config.disable`, a caller wrapped by `torch.compiler.disable`, the
            stance `force_eager`). Ignored in the other modes, where a compiled call costs more than the eager
            operations, and at `hc_streams=1` (one stream has nothing to mix).
        hc_implementation (`str`, defaults to `"fast"`): how the hyper-connections compute their equation.
            `"eager"`: `HyperConnection.forward` of modeling_hyper_connections.py, the equation as written (the
            specification), with no statistics recorded (nothing for `mechanism_stats()` or `interlayer inspect` to
            show) and `hc_recompute_streams` and `hc_fused` ignored. `"fast"`:
            hyper_connections_fast.py, the same function to float rounding with hand-written backward passes, the
            stream recomputation, `hc_fused`, and the statistics and composite-gain tracking of `mechanism_stats()`.
            Chosen when the model is built: to change it, load the model again with the option.
        hc_kernels (`bool`, defaults to `True`): with `hc_implementation="fast"`, run the boundary of every sublayer
            whose streams are on a CUDA device with the Triton kernels of hyper_connections_kernels.py (read-in,
            write and mix, and the coefficients with their Sinkhorn rounds, forward and backward; Liger-Kernel's for
            the projection and DeepSeek-V4's coefficients), in training, inference and under `torch.compile`. Where
            they cannot run (Triton not installed: `pip install 'interlayer[gpu]'`, a CPU, another dtype than fp32,
            bf16 and fp16) the PyTorch implementation runs, with a warning once where a GPU was meant. `False`: the
            PyTorch implementation everywhere (what the kernels are measured against).
        identity_init (`bool`, defaults to `True`): choose raw coefficients whose constrained values make the model
            compute the stock function (read-in sums to 1, write 1, mixing rows sum to 1, read-out the mean; in
            `"gated"` mode read gates 0.5 from a zero up-projection, writes `2 sigmoid(0) = 1` from a zero injection
            projection and norm gains twice the read-in share). `False` uses the seed's raw initialisation (read-in
            1/K, write 1, mixing identity), which in `"mhc"` mode writes every sublayer output scaled by `2 *
            sigmoid(1)` (about 1.46) into the streams; with `mhc_variant="deepseek_v4"`, DeepSeek-V4's (raw
            coefficients 0: read-in 0.5 + `hc_eps` per stream, write 1, mixing uniform 1/K); in `"independent"` mode
            Hy4's (read-in biases `-log(K - 1)`, write biases 0, projection drawn with the config's
            `initializer_range`); in `"gated"` mode Qwen3.8's (norm gains 1, projections drawn with
            `initializer_range`).
    """

    reload_options: ClassVar[frozenset[str]] = ZooConfigFields.reload_options | {
        "freeze_base",
        "hc_recompute_streams",
        "hc_fused",
        "hc_implementation",
        "hc_kernels",
        "sinkhorn_iters",
    }
    init_options: ClassVar[frozenset[str]] = ZooConfigFields.init_options | {
        "hc_dynamic_scale_init",
        "hc_read_in_focus",
        "hc_init_noise",
    }

    hc_streams: int = 4
    hc_mode: Literal["static", "dynamic", "mhc", "independent", "gated"] = "mhc"
    mhc_dynamic: bool = True
    mhc_variant: Literal["seed", "deepseek_v4"] = "seed"
    hc_dynamic_tanh: bool = True
    hc_dynamic_scale_init: float | int = 0.01
    sinkhorn_iters: int = 20
    hc_read_in_focus: float | int | None = None
    hc_eps: float | int = 1e-6
    hc_magnitude: float | int = 2.0
    hc_lowrank: int = 320
    hc_read_out: Literal["learned", "mean", "dynamic", "gated"] | None = None
    hc_init_noise: float | int = 0.0
    freeze_base: bool = True
    hc_recompute_streams: bool = True
    hc_fused: bool = True
    hc_implementation: Literal["fast", "eager"] = "fast"
    hc_kernels: bool = True

    def validate_hyper_connections(self):
        check_range("num_hidden_layers", self.num_hidden_layers, 1)
        check_range("hc_streams", self.hc_streams, 1)
        check_choice("hc_mode", self.hc_mode, HC_MODES)
        check_choice("mhc_variant", self.mhc_variant, MHC_VARIANTS)
        check_choice("hc_implementation", self.hc_implementation, HC_IMPLEMENTATIONS)
        check_range("sinkhorn_iters", self.sinkhorn_iters, 1)
        check_range("hc_read_in_focus", self.hc_read_in_focus, 0, 1, allow_none=True)
        check_range("hc_init_noise", self.hc_init_noise, 0)
        # the eps guards a sigmoid and DeepSeek's denominators; the identity init subtracts it from read-in shares
        check_range("hc_eps", self.hc_eps, 0, 1e-2)
        check_range("hc_magnitude", self.hc_magnitude, 0, low_open=True)
        check_range("hc_lowrank", self.hc_lowrank, 1)
        if self.hc_read_out is not None:
            check_choice("hc_read_out", self.hc_read_out, HC_READ_OUTS)
        if self.hc_mode == "gated" and not self.branch_input_norms:
            family = (self.stock_model_types or (self.model_type,))[0]
            raise ValueError(
                f"`hc_mode='gated'` is not available on the {family} family: the gated residual normalises every "
                f"stream with the norm each residual branch starts with, in its place, and the {family} branches start "
                f"with none (their norms follow the sublayer). Use hc_mode in {list(HC_MODES[:4])}."
            )
        if self.hc_mode in ("mhc", "independent") and self.identity_init:
            if self.hc_streams == 1 and self.hc_mode == "mhc" and self.mhc_variant == "seed":
                raise ValueError(
                    "`identity_init=True` with `hc_mode='mhc'` needs `hc_streams` >= 2: with one stream the read-in "
                    "is sigmoid(w), which never equals 1. Use hc_streams >= 2, another hc_mode, "
                    "mhc_variant='deepseek_v4' (whose read-in sigmoid(w) + hc_eps reaches 1) or identity_init=False."
                )
            if self.read_in_focus == 1:
                raise ValueError(
                    f"`hc_read_in_focus` must be < 1 with `hc_mode={self.hc_mode!r}` and `identity_init=True` (a "
                    f"sigmoid read-in cannot be one-hot), got {self.hc_read_in_focus!r}."
                )
            if self.hc_mode == "independent" and self.hc_magnitude <= 1 - self.hc_eps:
                raise ValueError(
                    "`identity_init=True` with `hc_mode='independent'` needs `hc_magnitude` > 1 - hc_eps (the write "
                    f"`hc_magnitude * sigmoid + hc_eps` must reach 1), got {self.hc_magnitude!r}."
                )

    @property
    def read_in_focus(self) -> float:
        """`hc_read_in_focus` with its mode-dependent default resolved."""
        if self.hc_read_in_focus is not None:
            return float(self.hc_read_in_focus)
        return 0.5 if self.hc_mode in ("mhc", "independent") else 1.0

    @property
    def read_out(self) -> str:
        """`hc_read_out` with its mode-dependent default resolved."""
        return self.hc_read_out or DEFAULT_READ_OUT.get(self.hc_mode, "learned")


__all__ = ["HC_IMPLEMENTATIONS", "HC_MODES", "HC_READ_OUTS", "MHC_VARIANTS", "HyperConnectionFields"]


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
@zoo_config
class LlamaMHCConfig(ZooConfigMixin, LlamaConfig, HyperConnectionFields):
    r"""Configuration of [`LlamaMHCModel`]: every [`LlamaConfig`] field plus the options of [`HyperConnectionFields`].
    Converts checkpoints of model_type `llama` (SmolLM2, Llama 2/3, ...)."""

    model_type = "llama_mhc"
    stock_model_types = ("llama",)


@zoo_config
class Qwen3MHCConfig(ZooConfigMixin, Qwen3Config, HyperConnectionFields):
    r"""Configuration of [`Qwen3MHCModel`]: every [`Qwen3Config`] field plus the options of [`HyperConnectionFields`].
    Converts checkpoints of model_type `qwen3`."""

    model_type = "qwen3_mhc"
    stock_model_types = ("qwen3",)


@zoo_config
class Qwen2MHCConfig(ZooConfigMixin, Qwen2Config, HyperConnectionFields):
    r"""Configuration of [`Qwen2MHCModel`]: every [`Qwen2Config`] field plus the options of [`HyperConnectionFields`].
    Converts checkpoints of model_type `qwen2` (Qwen2, Qwen2.5)."""

    model_type = "qwen2_mhc"
    stock_model_types = ("qwen2",)


@zoo_config
class MistralMHCConfig(ZooConfigMixin, MistralConfig, HyperConnectionFields):
    r"""Configuration of [`MistralMHCModel`]: every [`MistralConfig`] field plus the options of
    [`HyperConnectionFields`]. Converts checkpoints of model_type `mistral`."""

    model_type = "mistral_mhc"
    stock_model_types = ("mistral",)


@zoo_config
class Phi3MHCConfig(ZooConfigMixin, Phi3Config, HyperConnectionFields):
    r"""Configuration of [`Phi3MHCModel`]: every [`Phi3Config`] field plus the options of [`HyperConnectionFields`].
    Converts checkpoints of model_type `phi3` (Phi-3, Phi-3.5, Phi-4 mini)."""

    model_type = "phi3_mhc"
    stock_model_types = ("phi3",)


@zoo_config
class Olmo2MHCConfig(ZooConfigMixin, Olmo2Config, HyperConnectionFields):
    r"""Configuration of [`Olmo2MHCModel`]: every [`Olmo2Config`] field plus the options of [`HyperConnectionFields`].
    Converts checkpoints of model_type `olmo2`."""

    model_type = "olmo2_mhc"
    stock_model_types = ("olmo2",)
    branch_input_norms = False


@zoo_config
class Gemma2MHCConfig(ZooConfigMixin, Gemma2Config, HyperConnectionFields):
    r"""Configuration of [`Gemma2MHCModel`]: every [`Gemma2Config`] field plus the options of [`HyperConnectionFields`].
    Converts checkpoints of model_type `gemma2`."""

    model_type = "gemma2_mhc"
    stock_model_types = ("gemma2",)


@zoo_config
class Gemma3TextMHCConfig(ZooConfigMixin, Gemma3TextConfig, HyperConnectionFields):
    r"""Configuration of [`Gemma3TextMHCModel`]: every [`Gemma3TextConfig`] field plus the options of
    [`HyperConnectionFields`]. Converts checkpoints of model_type `gemma3_text` (text-only Gemma 3, such as
    gemma-3-1b)."""

    model_type = "gemma3_text_mhc"
    stock_model_types = ("gemma3_text",)


@zoo_config
class GPT2MHCConfig(ZooConfigMixin, GPT2Config, HyperConnectionFields):
    r"""Configuration of [`GPT2MHCModel`]: every [`GPT2Config`] field plus the options of [`HyperConnectionFields`].
    Converts checkpoints of model_type `gpt2` (GPT-2, DistilGPT-2)."""

    model_type = "gpt2_mhc"
    stock_model_types = ("gpt2",)


__all__ += [
    "LlamaMHCConfig",
    "Qwen3MHCConfig",
    "Qwen2MHCConfig",
    "MistralMHCConfig",
    "Phi3MHCConfig",
    "Olmo2MHCConfig",
    "Gemma2MHCConfig",
    "Gemma3TextMHCConfig",
    "GPT2MHCConfig",
]
# --- end generated classes ---
