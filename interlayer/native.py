"""The hyper-connection forms against the transformers modules that define them: a form's parameters converted to and
from the layout of DeepSeek-V4's, GLM-5.3's, Hy4's and Qwen3.8's own modules (transformers 5.24:
`DeepseekV4HyperConnection` / `DeepseekV4HyperHead`, `Glm5NextTextHyperConnection` / `Glm5NextTextHyperHead`,
`HYV4HyperConnection` / `HYV4HyperHead`, `Qwen4ExpTextGatedResidual`), so that a sublayer can be run through the
module that defines its form (the parity tests do) and weights can move between the two.

    to_native(module, native=None, input_norm=None)       the native module holding `module`'s parameters (fp32)
    from_native(module, native_module, input_norm=None)   `module`'s parameters set from a native module's

`module` is one of a converted model's hyper-connections (`HyperConnection`, `GatedResidual`) or read-outs
(`DynamicReadOut`, the gated `hc_mixer`); `native` names the model type whose module to build where several define
the form (`NATIVE_MODEL_TYPES`). The layouts (docs/hyper_connections.md, "The native modules"):

- mHC, DeepSeek-V4's variant (`mhc_variant="deepseek_v4"`; GLM-5.3's is the same module, with `base` and `scale` kept
  in fp32): `fn` = `dynamic_proj.weight` [K(K+2), K*C], `base` = `(pre, post, res)` flattened ([K(K+2)], `res` in
  DeepSeek's [input, output] layout), `scale` = `dynamic_scale` [3]; a static sublayer (`mhc_dynamic=False`) is `fn` 0.
- independent HC (Hy4): `fn` = `dynamic_proj.weight` [2K, K*C], `base` = `(pre, post)` [2K], `scale` =
  `dynamic_scale` [2].
- the dynamic read-out: `hc_fn` = `weight` [K, K*C], `hc_base` = `base` [K], `hc_scale` = `scale` [1].
- the gated residual: `input_mix_weight_down`, `input_mix_weight_up` and `block_inject_weight` are `read_down`,
  `read_up` and `inject`; Qwen's `hc_norm` (`RMSNorm(h_k) (1 + w_k)`, one weight per stream and channel, eps the
  stock norm's) is the stock input norm `N` (multiplier `m` per channel: its weight, or `1 + weight` in Gemma's
  convention) times the gains `G`, so `w = (m G).flatten() - 1`, and back `G = (1 + w) / m`. Only an RMS input norm
  has Qwen's layout (not GPT-2's LayerNorm).

Every module computes its coefficients with an RMS eps: ours are computed with `COEFFICIENT_EPS` (1e-6), so the native
config gets `rms_norm_eps=1e-6`, except the gated residual's, which is the stock norm's.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

from .models.hyper_connections_maths import COEFFICIENT_EPS
from .models.modeling_hyper_connections import DynamicReadOut, GatedResidual, HyperConnection

# the model types whose transformers module defines each form, the first the default of `to_native`
NATIVE_MODEL_TYPES = {
    "deepseek_v4": ("deepseek_v4", "glm5_next"),
    "independent": ("hy_v4",),
    "gated": ("qwen4_exp",),
    "dynamic_read_out": ("deepseek_v4", "hy_v4"),
}
# per model type: (module, config class, sublayer class, read-out class)
_NATIVE = {
    "deepseek_v4": ("deepseek_v4", "DeepseekV4Config", "DeepseekV4HyperConnection", "DeepseekV4HyperHead"),
    "glm5_next": ("glm5_next", "Glm5NextTextConfig", "Glm5NextTextHyperConnection", "Glm5NextTextHyperHead"),
    "hy_v4": ("hy_v4", "HYV4Config", "HYV4HyperConnection", "HYV4HyperHead"),
    "qwen4_exp": ("qwen4_exp", "Qwen4ExpTextConfig", "Qwen4ExpTextGatedResidual", "Qwen4ExpTextGatedResidual"),
}


def _form(module: nn.Module) -> str:
    """The key of `NATIVE_MODEL_TYPES` for `module`'s form; a ValueError for a form no transformers module defines."""
    if isinstance(module, GatedResidual):
        return "gated"
    if isinstance(module, HyperConnection) and module.mode == "independent":
        return "independent"
    if isinstance(module, HyperConnection) and module.variant == "deepseek_v4":
        return "deepseek_v4"
    if isinstance(module, DynamicReadOut):
        return "dynamic_read_out"
    raise ValueError(
        f"{type(module).__name__} in mode {getattr(module, 'mode', None)!r} has no module in transformers that defines "
        "its form: only DeepSeek-V4's and GLM-5.3's mHC (mhc_variant='deepseek_v4'), Hy4's independent HC, Qwen3.8's "
        "gated residual and the dynamic read-out have one."
    )


def _native_class(native: str, read_out: bool):
    module, config_class, sublayer, head = _NATIVE[native]
    loaded = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    configs = importlib.import_module(f"transformers.models.{module}.configuration_{module}")
    return getattr(loaded, head if read_out else sublayer), getattr(configs, config_class)


def _rms_multiplier(input_norm: nn.Module, width: int) -> tuple[torch.Tensor, float]:
    """`(m, eps)` of an RMS norm `N(h) = m h / rms(h)`: its per-channel multiplier (its weight, or `1 + weight` in
    Gemma's convention), read off its output on a constant vector of RMS 1024 (where its eps is lost to rounding and
    the normalisation is exact: `m` bit for bit), and its eps. A ValueError where `N` is not an RMS norm (GPT-2's
    LayerNorm centres its input)."""
    eps = float(getattr(input_norm, "variance_epsilon", getattr(input_norm, "eps", 0.0)))
    check = 3.0 * torch.randn(2, width, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        m = input_norm(torch.full((width,), 1024.0)).float()
        rms_norm = m * check * torch.rsqrt(check.square().mean(-1, keepdim=True) + eps)
        if not torch.allclose(input_norm(check).float(), rms_norm, rtol=1e-4, atol=1e-5):
            raise ValueError(
                "Qwen3.8's gated residual normalises with an RMS norm; this family's input norm "
                f"({type(input_norm).__name__}) is not one, so its gated residual has no `Qwen4ExpTextGatedResidual` "
                "layout."
            )
    return m, eps


def to_native(module: nn.Module, native: str | None = None, input_norm: nn.Module | None = None) -> nn.Module:
    """The transformers module that defines `module`'s form (of model type `native`, by default the first of
    `NATIVE_MODEL_TYPES`), in fp32, holding `module`'s parameters in its layout (module docstring). `input_norm`: for
    the gated residual, the norm its branch starts with (`layer.input_norm(sublayer)`; the final norm for
    `hc_mixer`)."""
    form = _form(module)
    native = native or NATIVE_MODEL_TYPES[form][0]
    if native not in NATIVE_MODEL_TYPES[form]:
        raise ValueError(f"`native` must be one of {list(NATIVE_MODEL_TYPES[form])} for this form, got {native!r}.")
    read_out = isinstance(module, DynamicReadOut) or (isinstance(module, GatedResidual) and not module.writes)
    native_class, config_class = _native_class(native, read_out)
    k = module.streams
    with torch.no_grad():
        if form == "gated":
            width = module.norm_gain.shape[-1]
            m, eps = _rms_multiplier(input_norm, width)
            config = config_class(
                hidden_size=width, hc_count=k, hc_lowrank=module.read_down.out_features, rms_norm_eps=eps
            )
            target = native_class(config, use_combine=module.writes)
            state = {
                "hc_norm.weight": (m * module.norm_gain.float()).flatten() - 1.0,
                "input_mix_weight_down.weight": module.read_down.weight,
                "input_mix_weight_up.weight": module.read_up.weight,
            }
            if module.writes:
                state["block_inject_weight.weight"] = module.inject.weight
        else:
            width = (module.weight.shape[-1] if read_out else module.dynamic_proj.in_features) // k
            fields = dict(hidden_size=width, hc_mult=k, hc_eps=module.eps, rms_norm_eps=COEFFICIENT_EPS)
            if form == "independent":
                fields["hc_magnitude"] = module.magnitude
            elif not read_out:
                fields["hc_sinkhorn_iters"] = module.sinkhorn_iters
            target = native_class(config_class(**fields))
            if read_out:
                state = {"hc_fn": module.weight, "hc_base": module.base, "hc_scale": module.scale}
            else:
                base = [module.pre, module.post] + ([module.res.flatten()] if module.mixes else [])
                fn = module.dynamic_proj.weight if module.dynamic else torch.zeros_like(target.fn)
                scale = module.dynamic_scale if module.dynamic else torch.zeros_like(target.scale)
                state = {"fn": fn, "base": torch.cat(base), "scale": scale}
        target.load_state_dict({name: t.float() for name, t in state.items()})
    return target.float()


def from_native(module: nn.Module, native_module: nn.Module, input_norm: nn.Module | None = None) -> None:
    """Set `module`'s parameters from `native_module`'s (the inverse of `to_native`, in `module`'s dtypes). A static mHC
    sublayer takes a native module only with `fn` 0 (it has no input-dependent part); the gated residual's gains are
    `(1 + w) / m`, which needs every channel of the stock norm's multiplier `m` nonzero."""
    form = _form(module)
    state = {name: t.detach().float() for name, t in native_module.state_dict().items()}
    with torch.no_grad():
        if form == "gated":
            m, _ = _rms_multiplier(input_norm, module.norm_gain.shape[-1])
            if (m == 0).any():
                raise ValueError("the stock norm's multiplier has zeros: no gain G gives Qwen's hc_norm weight there")
            module.norm_gain.copy_((1.0 + state["hc_norm.weight"]).view_as(module.norm_gain) / m)
            module.read_down.weight.copy_(state["input_mix_weight_down.weight"])
            module.read_up.weight.copy_(state["input_mix_weight_up.weight"])
            if module.writes:
                module.inject.weight.copy_(state["block_inject_weight.weight"])
        elif isinstance(module, DynamicReadOut):
            module.weight.copy_(state["hc_fn"])
            module.base.copy_(state["hc_base"])
            module.scale.copy_(state["hc_scale"])
        else:
            k = module.streams
            base = state["base"]
            module.pre.copy_(base[:k])
            module.post.copy_(base[k : 2 * k])
            if module.mixes:
                module.res.copy_(base[2 * k :].view(k, k))
            if module.dynamic:
                module.dynamic_proj.weight.copy_(state["fn"])
                module.dynamic_scale.copy_(state["scale"])
            elif state["fn"].any():
                raise ValueError(
                    "a static mHC sublayer (mhc_dynamic=False) cannot hold a native module whose `fn` is not 0"
                )


__all__ = ["NATIVE_MODEL_TYPES", "from_native", "to_native"]
