"""Behaviour shared by every interlayer mechanism: config conventions, conversion from stock checkpoints,
statistics for watching a mechanism, and saving (the model card and the staged, locked save are the interlayer
package's, `interlayer/card.py` and `interlayer/saving.py`, which saved folders do not ship: `interlayer_library`).

This file sits in the same folder as the configuration and modeling files that import it, so that
`save_pretrained` ships it with the remote code (a parent-relative import would break `trust_remote_code`).
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import contextlib
import dataclasses
import difflib
import functools
import hashlib
import inspect
import itertools
import logging
import math
import os
import re
import sys
import types
from typing import Any, ClassVar

import torch
from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import StrictDataclassError
from torch import nn
from torch.utils._python_dispatch import is_in_torch_dispatch_mode
from transformers.conversion_mapping import register_checkpoint_conversion_mapping
from transformers.core_model_loading import ConversionOps, WeightConverter, WeightRenaming
from transformers.masking_utils import create_causal_mask
from transformers.utils import logging as hf_logging

logger = hf_logging.get_logger("transformers.interlayer")


# The name of the cache keyword in the installed transformers: `cache` from 5.24 on (its models, mask functions,
# `generate()` and outputs), `past_key_values` before. The zoo's forwards keep `past_key_values` in their signatures
# and read the cache under either name (`take_cache`); what they pass to stock modules and mask functions, and put in
# their outputs, goes under `CACHE_KWARG` (the old name still works there from 5.24, with a deprecation warning).
CACHE_KWARG = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def cache_name_deprecation(forward):
    """A public forward (`past_key_values` in its signature) that warns as the installed transformers' stock forwards
    do when the cache comes as `past_key_values`: from 5.24 on, stock's own decorator with the version stock 5.24
    names (`LlamaForCausalLM.forward`), which passes the cache on as `cache` (read by `take_cache`); unchanged before.
    The zoo's own calls pass the cache under `CACHE_KWARG`."""
    if CACHE_KWARG == "past_key_values":
        return forward
    from transformers.utils.deprecation import deprecate_kwarg

    return deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")(forward)


def take_cache(past_key_values, kwargs: dict):
    """The cache a forward was given: its `past_key_values` argument, or `cache` (what transformers >= 5.24's stock
    heads, layers and `generate()` pass), taken out of `kwargs` so it is not passed on twice."""
    cache = kwargs.pop("cache", None)
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("Both `cache` and `past_key_values` were given a cache: pass one of them.")
    return past_key_values if past_key_values is not None else cache


def stock_cache_kwargs(kwargs: dict) -> dict:
    """`kwargs` for a stock module or mask function: a `past_key_values` entry put under `CACHE_KWARG`."""
    if CACHE_KWARG == "past_key_values" or "past_key_values" not in kwargs:
        return kwargs
    kwargs = dict(kwargs)
    kwargs[CACHE_KWARG] = kwargs.pop("past_key_values")
    return kwargs


def check_choice(field: str, value: Any, allowed) -> None:
    """Raise the zoo's standard error for a config field whose value is not one of `allowed`."""
    if value not in allowed:
        raise ValueError(f"`{field}` must be one of {sorted(allowed)}, got {value!r}.")


def check_range(field: str, value, low=None, high=None, *, low_open=False, allow_none=False) -> None:
    """Raise the zoo's standard error for a numeric config field outside its allowed range (NaN, infinities and
    non-numbers are outside every range)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"`{field}` must be a finite number, got {value!r}.")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if value is None or too_low or too_high:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low}"
        hi = "" if high is None else f"<= {high}"
        allowed = " and ".join(x for x in (lo, hi) if x)
        raise ValueError(f"`{field}` must be {allowed}, got {value!r}.")


class ConfigError(ValueError, StrictDataclassError):
    """A config value or option name the zoo refuses. A `ValueError` (as every config docstring promises), and also a
    `huggingface_hub` `StrictDataclassError` for code that catches the strict-dataclass errors of transformers."""


def zoo_config(cls):
    """`huggingface_hub`'s `@strict` for a zoo config, whose validation errors surface as `ConfigError` (a
    `ValueError`) carrying the validator's own message, which names the field, the value and what is allowed."""
    cls = strict(cls)
    validated_init = cls.__init__

    @functools.wraps(validated_init)
    def __init__(self, *args, **kwargs):
        try:
            validated_init(self, *args, **kwargs)
        except StrictDataclassError as err:
            if isinstance(err, ConfigError):
                raise
            cause = err.__cause__ if isinstance(err.__cause__, (ValueError, TypeError)) else err
            raise ConfigError(str(cause)) from err

    cls.__init__ = __init__
    return cls


def closest_name(name: str, candidates) -> str:
    """`"; did you mean `x`?"` for the candidate closest to a misspelt `name`, or an empty string."""
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def option_names(config_class) -> set[str]:
    """Every option a config class takes by name: its dataclass fields and `num_labels`."""
    return {f.name for f in dataclasses.fields(config_class)} | {"num_labels"}


def check_option_names(config_class, names) -> None:
    """Refuse option names `config_class` does not have, naming the closest valid one, so that a typo never runs an
    experiment with the default value."""
    valid = option_names(config_class)
    for name in names:
        if name not in valid:
            raise ConfigError(
                f"{config_class.__name__} has no option `{name}`{closest_name(name, valid)} (the mechanism's options: "
                f"{', '.join(mechanism_field_names(config_class))})."
            )


# keywords every transformers config takes that are no dataclass field (`PreTrainedConfig.__init__` pops them): never
# a misspelt mechanism option, however close to one (`attn_implementation` and `hc_implementation`)
TRANSFORMERS_KEYWORDS = frozenset({"attn_implementation", "experts_implementation"})


def refuse_misspelt_options(config_class, names) -> None:
    """Refuse a name that no field of `config_class` takes and that looks like a misspelt mechanism option (a name no
    field takes is otherwise kept by transformers as a plain attribute, or dropped by `from_pretrained`), so a typo
    never runs with the default."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    settings = mechanism_field_names(config_class)
    for name in names:
        if name in fields or name in TRANSFORMERS_KEYWORDS or name.startswith("_"):
            continue
        if difflib.get_close_matches(name, settings, n=1, cutoff=0.8):
            raise ConfigError(f"{config_class.__name__} has no option `{name}`{closest_name(name, settings)}")


def mechanism_field_names(config_class) -> list[str]:
    """The mechanism's own config fields (those declared by the zoo's `...Fields` dataclasses), in declaration order."""
    names = []
    for klass in config_class.__mro__:
        if klass.__name__.endswith("Fields") and dataclasses.is_dataclass(klass):
            names += [f.name for f in dataclasses.fields(klass) if f.name not in names]
    return names


def field_defaults(config_class) -> dict[str, Any]:
    """`{field: default}` of a config class's dataclass fields that have a default (a fresh one from a factory)."""
    defaults = {}
    for f in dataclasses.fields(config_class):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return defaults


@dataclasses.dataclass(kw_only=True)
class ZooConfigFields:
    """Fields every interlayer config has, whatever the mechanism.

    Args:
        identity_init (`bool`, defaults to `True`):
            Initialise the mechanism so that the converted model computes exactly the stock model's function
            until it is trained. A mechanism that cannot honour it raises a `ValueError` naming the setting
            that prevents it.
        base_model_name_or_path (`str`, *optional*):
            The stock checkpoint this model was converted from; recorded automatically by `from_pretrained`
            on a stock checkpoint and written into the model card. Saved (`config.json`) as its Hub id, and not
            at all for a local folder: no path of the saving machine is written.
    """

    identity_init: bool = True
    base_model_name_or_path: str | None = None

    # Reloading a saved model with an option: `reload_options` may change (they act at run time); `init_options` shape
    # a conversion's initialisation and only apply then, and any other mechanism option changes what the saved weights
    # mean: either is refused with a value other than the saved one. A mechanism extends both sets.
    reload_options: ClassVar[frozenset[str]] = frozenset({"base_model_name_or_path"})
    init_options: ClassVar[frozenset[str]] = frozenset({"identity_init"})
    # why the mechanism's models return no attention weights (`output_attentions=True` is then refused, at config
    # creation and at run time); None where they return the stock attention weights
    no_attention_weights: ClassVar[str | None] = None


STOCK_SOURCE = "<stock checkpoint>"  # replaced by the checkpoint's path or id once `from_pretrained` knows it


class ZooConfigMixin:
    """Conversion rules for configs: which stock `model_type`s a mechanism accepts, and presets.

    `from_pretrained(stock_checkpoint, **options)` applies the options before validation (so a bad value fails at
    config creation) and refuses a checkpoint whose `model_type` is not one of `stock_model_types`.
    """

    stock_model_types: ClassVar[tuple[str, ...]] = ()
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    # whether both residual branches of the converted decoder family start with a norm (`DecoderFamily.input_norms`,
    # written into the family's config classes by the class generator): False for OLMo 2, whose norms come after
    branch_input_norms: ClassVar[bool] = True

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        model_type = config_dict.get("model_type")
        allowed = (cls.model_type, *cls.stock_model_types)
        if model_type is None:
            raise ConfigError(
                f"{cls.__name__} needs the checkpoint's `model_type` (one of {list(allowed)}) in its config.json to "
                "know what it converts; this config has none. Add it, or save the checkpoint with transformers."
            )
        if model_type not in allowed:
            raise ValueError(
                f"{cls.__name__} converts checkpoints with model_type in {list(allowed)}, but this checkpoint has "
                f"model_type={model_type!r}. Use the interlayer class for that architecture "
                f"(`interlayer convert --help` lists them)."
            )
        field_names = {f.name for f in dataclasses.fields(cls)}
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in field_names}
        refuse_misspelt_options(cls, kwargs)  # transformers would drop them silently
        if model_type == cls.model_type:
            cls._check_reload_options(config_dict, options)
        config_dict = {**config_dict, **options, "model_type": cls.model_type}
        if model_type in cls.stock_model_types:
            config_dict["base_model_name_or_path"] = STOCK_SOURCE
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def _check_reload_options(cls, saved: dict[str, Any], options: dict[str, Any]) -> None:
        """Refuse, on a saved zoo model, an option other than a run-time one (`reload_options`) with a value other
        than the saved one: an init option (`init_options`) only applies when a stock checkpoint is converted (some,
        such as `identity_init`, are also part of the function the saved weights were trained in), and any other
        would change what the saved weights mean."""
        defaults = field_defaults(cls)
        for name in mechanism_field_names(cls):
            if name not in options or name in cls.reload_options:
                continue
            before = saved.get(name, defaults.get(name))
            if options[name] == before:
                continue
            takes = sorted(set(mechanism_field_names(cls)) & cls.reload_options)
            if name in cls.init_options:
                raise ConfigError(
                    f"`{name}={options[name]!r}` only applies when a stock checkpoint is converted (it sets how the "
                    f"mechanism starts); this {cls.__name__} was saved with {name}={before!r}. Reload without it, or "
                    f"convert the stock checkpoint again with it. Options a saved model takes: {takes}."
                )
            raise ConfigError(
                f"`{name}={options[name]!r}` would change what the saved weights of this {cls.__name__} mean "
                f"(saved with {name}={before!r}). Reload without it, or convert the stock checkpoint again with "
                f"it. Options a saved model takes: {takes}."
            )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """Also records which stock checkpoint a converted config came from (`base_model_name_or_path`). Drops
        transformers' warning that a `model_type` instantiates another: for a stock type this config converts, that
        is the point, and any other type is refused."""
        with _HeldRecords("transformers.configuration_utils", "to instantiate a model of type"):
            loaded = super().from_pretrained(pretrained_model_name_or_path, **kwargs)
        config = loaded[0] if isinstance(loaded, tuple) else loaded
        if config.base_model_name_or_path == STOCK_SOURCE:
            config.base_model_name_or_path = str(pretrained_model_name_or_path)
        return loaded

    def to_dict(self) -> dict[str, Any]:
        """The stock serialisation, with `base_model_name_or_path` as the source's Hub id (None for a local folder),
        so that `config.json` and anything else written from it never carries a local path."""
        output = super().to_dict()
        # the Hub-id check reads the filesystem, which a compiled forward cannot trace (a cache built inside one reads
        # the config through `to_dict`); nothing is saved from inside a compiled forward
        if "base_model_name_or_path" in output and not torch.compiler.is_compiling():
            output["base_model_name_or_path"] = hub_id(output["base_model_name_or_path"])
        return output

    def validate_option_spelling(self):
        """A keyword no field takes is kept by transformers as a plain attribute and saved into `config.json`; one
        that looks like a misspelt mechanism option is refused instead, so a typo never runs with the default."""
        refuse_misspelt_options(type(self), vars(self))

    def validate_output_attentions(self):
        """`output_attentions=True` is refused at config creation where the models return no attention weights
        (`no_attention_weights`); otherwise it needs eager attention, as for the stock config."""
        if self.output_attentions and self.no_attention_weights:
            raise ValueError(
                f"`output_attentions=True` is not supported by {type(self).__name__}: {self.no_attention_weights}. "
                "Leave `output_attentions` False."
            )
        super().validate_output_attentions()

    def validate_finite_numbers(self):
        """Every numeric mechanism option is finite: NaN or an infinity would only surface as NaN outputs later."""
        for name in mechanism_field_names(type(self)):
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"`{name}` must be a finite number, got {value!r}.")

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """A config for one of the seed's named runs (`cls.presets`), with any field overridden."""
        check_choice("preset", name, cls.presets)
        return cls(**{**cls.presets[name], **overrides})


EVAL_PREFIX = "eval/"


def _in_split(name: str, split: str | None) -> bool:
    if split is None:
        return True
    return name.startswith(EVAL_PREFIX) == (split == "eval")


@functools.cache
def _disabled_wrapper_code():
    """The code of the wrapper `torch.compiler.disable` puts around a function (the same for every function it wraps,
    recursively disabled)."""
    return torch.compiler.disable(lambda: None).__code__


def _in_torch(function) -> bool:
    """Whether `function` is torch's own: defined in torch, and not a method bound to an object of a class defined
    outside it (`torch.compiler.disable(model)` wraps the model's bound `__call__`)."""
    owner = getattr(function, "__self__", None)
    module = type(owner).__module__ if owner is not None else getattr(function, "__module__", None)
    return (module or "").startswith("torch.")


def compiling_switched_off() -> bool:
    """Whether torch's switches turn compiling off for a call made from here: `TORCH_COMPILE_DISABLE=1` (which torch
    reads at import into `torch._dynamo.config.disable`, a flag a program may also set), `TORCHDYNAMO_DISABLE=1`
    (which torch reads at every `torch.compile`), the stance `torch.compiler.set_stance("force_eager")`, or a caller
    on the stack wrapped by `torch.compiler.disable`, except where torch wraps its own functions (gradient
    checkpointing's, around the forward it recomputes, which does not mean to switch anything off for what it
    calls). torch itself honours neither of the first two for a function compiled before the switch, nor the last
    for a function compiled explicitly; with `fullgraph=True` the first makes every call fail ("found no compiled
    frames")."""
    stance = getattr(torch._dynamo.eval_frame, "_stance", None)  # torch has no public getter of the stance
    if (
        torch._dynamo.config.disable
        or os.environ.get("TORCHDYNAMO_DISABLE") == "1"
        or getattr(stance, "stance", None) == "force_eager"
    ):
        return True
    disabled, frame = _disabled_wrapper_code(), sys._getframe(1)
    while frame is not None:
        if frame.f_code is disabled and not _in_torch(frame.f_locals.get("fn")):
            return True
        frame = frame.f_back
    return False


def _keeping_saved_tensors(backend):
    """`backend` (a name or a compiler function) compiling with torch's donated buffers off: with them, the backward
    of a compiled graph frees the tensors it saved as it runs, so that a second backward through the same graph
    (`backward(retain_graph=True)` then `backward()`) or a gradient of the gradient (`create_graph=True`) fails ("This
    backward function was compiled with non-empty donated buffers"). Only the graphs compiled through this function
    are affected: the setting is read when a graph is compiled, and when a backward that keeps the graph runs
    (`_TwiceDifferentiable.backward`)."""
    compile_graph = torch._dynamo.lookup_backend(backend) if isinstance(backend, str) else backend

    def compile_keeping_saved_tensors(graph, example_inputs):
        with _without_donated_buffers():
            return compile_graph(graph, example_inputs)

    return compile_keeping_saved_tensors


def _without_donated_buffers():
    return torch._functorch.config.patch(donated_buffer=False)


class _TwiceDifferentiable(torch.autograd.Function):
    """A compiled graph called with grad as one autograd node: its backward is the graph's compiled backward, or, when
    the gradient is itself to be differentiated (`backward(create_graph=True)`, `torch.autograd.grad(...,
    create_graph=True)`: gradient penalties, Hessian-vector products), which torch cannot do through a compiled
    backward ("torch.compile with aot_autograd does not currently support double backward"), the backward of the
    eager function, recomputed from the saved inputs. Inside, the graph runs on detached copies of the inputs, the
    dimensions `dynamic_args` names (`{argument index: dims}`) marked dynamic on them."""

    @staticmethod
    def forward(ctx, graph, fn, dynamic_args, *args):
        leaves = [
            arg.detach().requires_grad_(arg.requires_grad) if isinstance(arg, torch.Tensor) else arg for arg in args
        ]
        for index, dims in dynamic_args.items():
            torch._dynamo.maybe_mark_dynamic(leaves[index], dims)
        with torch.enable_grad():
            outputs = graph(*leaves)
        ctx.single = isinstance(outputs, torch.Tensor)
        outputs = (outputs,) if ctx.single else tuple(outputs)
        ctx.fn, ctx.graph = fn, (leaves, outputs)
        ctx.others = [None if isinstance(arg, torch.Tensor) else arg for arg in args]
        ctx.save_for_backward(*(arg if isinstance(arg, torch.Tensor) else None for arg in args))
        return outputs[0].detach() if ctx.single else tuple(output.detach() for output in outputs)

    @staticmethod
    def backward(ctx, *grads):
        leaves, outputs = ctx.graph
        keep = torch._C._autograd._get_current_graph_task_keep_graph()  # backward(retain_graph=True)
        if not keep:
            del ctx.graph
        wanted = [index for index, leaf in enumerate(leaves) if _needs_grad(leaf)]
        if torch.is_grad_enabled():  # create_graph=True: the eager function's backward, differentiable
            inputs = [other if saved is None else saved for saved, other in zip(ctx.saved_tensors, ctx.others)]
            with torch.enable_grad():
                outputs = ctx.fn(*inputs)
            outputs = (outputs,) if ctx.single else tuple(outputs)
            targets, create = [inputs[index] for index in wanted], True
        else:
            targets, create = [leaves[index] for index in wanted], False
        pairs = [(output, grad) for output, grad in zip(outputs, grads) if output.requires_grad]
        # torch checks again when a compiled backward runs with the graph kept, against its global setting
        with _without_donated_buffers() if keep and not create else contextlib.nullcontext():
            computed = torch.autograd.grad(
                [output for output, _ in pairs],
                targets,
                [grad for _, grad in pairs],
                retain_graph=keep or create,
                create_graph=create,
                allow_unused=True,
            )
        result = [None] * len(leaves)
        for index, grad in zip(wanted, computed):
            result[index] = grad
        return None, None, None, *result


def _needs_grad(arg) -> bool:
    return isinstance(arg, torch.Tensor) and arg.requires_grad


class Fused:
    """`fn` computed as one compiled graph where compiling works, else eagerly: the function is compiled with
    `torch.compile(fullgraph=True)` once per kind of call in a process (`kind`: grad mode, dtypes, the shapes it is
    specialised to), at the first call of that kind (its operations fused into a few kernels, its backward too); a
    call without grad whose shapes are all fixed (`single`) is compiled by inductor as one graph called directly
    (`_inductor_graph`), which saves torch.compile's per-call machinery where it dominates (a decoded token). It
    runs as written instead where a compiled call cannot or should not run:

    - inside a graph being compiled or exported (`torch.compile` of a whole model, `torch.export`, `torch.onnx.export`),
      which traces it with the rest;
    - under a dispatch mode such as torch's `FlopCounterMode` (torch.compile refuses to run under one) and under
      `torch.jit` tracing;
    - for the rest of the process once compiling it failed (no working C++ compiler for inductor on a CPU, say: one
      warning names the reason);
    - wherever torch's own switches turn compiling off (`compiling_switched_off`: `TORCH_COMPILE_DISABLE=1`,
      `TORCHDYNAMO_DISABLE=1`, `torch._dynamo.config.disable`, the stance `force_eager`, a caller wrapped by
      `torch.compiler.disable`), silently;
    - for a kind of call whose compiled function torch stopped recompiling (its recompile limit, which one graph per
      kind does not reach unless something beyond the kind changes, such as the device: one warning for the process);
    - under a functorch transform (`vmap`, `torch.func.grad`).

    With grad, a call is one autograd node (`_TwiceDifferentiable`): its graphs keep what they save for backward
    (`_keeping_saved_tensors`), so a graph kept by `backward(retain_graph=True)` takes a second backward, and a
    gradient that is itself differentiated (`create_graph=True`) goes through the eager function's backward.

    `dynamic_dims` names the dimensions of tensor arguments that vary from call to call (`{"x": (0, 1)}`: the first
    two of argument `x`): they are compiled as symbols, every other dimension as the constant it is (`dynamic=False`
    with `torch._dynamo.maybe_mark_dynamic`), so one graph serves every token count, and a process whose inductor
    cache holds it (one compiled by another process on the machine) loads it instead of compiling. torch specialises
    a size of 1, so whether each such dimension is 1 is part of the kind; the argument is made contiguous (its strides
    are part of what torch specialises to). Without `dynamic_dims`, torch's default: static first, dynamic on a change.

    Both run the same operations, so they agree to float rounding; the tests hold the compiled one to the eager one."""

    backend = "inductor"  # what `torch.compile` compiles with
    # calls in this process that ran a compiled graph of any `Fused` function: how a test tells which path a model took
    compiled_calls: ClassVar[int] = 0

    def __init__(self, fn, dynamic_dims: dict[str, tuple[int, ...]] | None = None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        names = list(inspect.signature(fn).parameters)
        unknown = sorted(set(dynamic_dims or {}) - set(names))
        if unknown:
            raise ValueError(f"dynamic_dims names {unknown}, which are not arguments of {fn.__name__}: {names}")
        self.dynamic_dims = dynamic_dims or {}
        self._dynamic_args = {names.index(name): dims for name, dims in self.dynamic_dims.items()}
        self.graphs: dict[tuple, Any] = {}  # kind of call -> `fn` compiled for it, or None: that kind runs eagerly
        self.unavailable: str | None = None  # why compiling failed in this process
        self.recompile_limit_hit = False  # whether a kind of call runs eagerly past torch's recompile limit

    def active(self) -> bool:
        """Whether a call now runs a compiled function."""
        return self.unavailable is None and Fused.allowed()

    @staticmethod
    def allowed() -> bool:
        """Whether a call now may run a compiled function, for every `Fused` function (`active`, less the failures of
        one function). A model asks once per forward pass what its layers would ask at every call: nothing on the
        stack above its layers changes during one (`compiling_switched_off` walks that stack)."""
        return (
            not torch.compiler.is_compiling()
            and not is_in_torch_dispatch_mode()
            and not torch.jit.is_tracing()
            # vmap, grad, jacrev: torch cannot differentiate a compiled graph twice (`_TwiceDifferentiable`), and a
            # custom autograd function under them needs rules of its own; the eager function needs none
            and torch._C._functorch.peek_interpreter_stack() is None
            and not compiling_switched_off()
        )

    def single(self, args) -> bool:
        """Whether `args` fix every shape: a function with `dynamic_dims`, each of them 1 (a decoded token)."""
        dims = self._dynamic_args.items()
        return bool(dims) and all(args[index].shape[dim] == 1 for index, varying in dims for dim in varying)

    def compile(self, args=None):
        """`fn` compiled for the kind of call of `args`. Without grad, where `args` fix every shape (`single`: the
        coefficients of a decoded token), one inductor graph of exactly that call, called directly (`_inductor_graph`:
        about 50 us less per call than a compiled function on a CPU); otherwise the function compiled by
        `torch.compile`, as a function of its own: torch keeps the graphs of a compiled function on its code object
        and counts them against its recompile limit (8) there, so the kinds of one function, which can outnumber the
        limit (grad mode, and a size of 1 or not in each varying dimension), each get a copy of the code."""
        if args is not None and self.backend == "inductor" and not torch.is_grad_enabled() and self.single(args):
            graph = _inductor_graph(self.fn, args)
            if graph is not None:
                return graph
        fn = self.fn
        copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        copy.__kwdefaults__ = fn.__kwdefaults__
        dynamic = False if self.dynamic_dims else None
        return torch.compile(copy, fullgraph=True, dynamic=dynamic, backend=_keeping_saved_tensors(self.backend))

    def kind(self, args) -> tuple:
        """What torch specialises a compiled graph to, as far as it varies within a process: the grad mode; of each
        tensor argument its dtype, whether it requires grad, its shape (a dimension of `dynamic_dims` only as 1 or
        not) and its strides (those of an argument with dynamic dimensions follow from its shape: it is made
        contiguous); any other argument's value; the device of the first tensor argument (not of every one: reading
        a device costs about a microsecond)."""
        kind = [torch.is_grad_enabled(), next(arg.device for arg in args if isinstance(arg, torch.Tensor))]
        for index, arg in enumerate(args):
            if not isinstance(arg, torch.Tensor):
                kind.append(arg)
            elif index in self._dynamic_args:
                dynamic = self._dynamic_args[index]
                shape = tuple(size == 1 if dim in dynamic else size for dim, size in enumerate(arg.shape))
                kind.append((arg.dtype, arg.requires_grad, shape))
            else:
                kind.append((arg.dtype, arg.requires_grad, arg.shape, arg.stride()))
        return tuple(kind)

    def __call__(self, *args):
        return self.run(*args) if self.active() else self.fn(*args)

    def run(self, *args):
        """The call where `active()` is known to be True: the compiled function (or, for a kind of call that cannot
        run compiled, `fn`)."""
        if self._dynamic_args:
            args = list(args)
            for index in self._dynamic_args:
                args[index] = args[index].contiguous()
        kind = self.kind(args)
        if kind not in self.graphs:
            self.graphs[kind] = self.compile(args)
        graph = self.graphs[kind]
        if graph is None:
            return self.fn(*args)
        try:
            if torch.is_grad_enabled() and any(isinstance(arg, torch.Tensor) and arg.requires_grad for arg in args):
                result = _TwiceDifferentiable.apply(graph, self.fn, self._dynamic_args, *args)
            elif self.single(args):  # torch specialises a size of 1 anyway: nothing to mark
                result = graph(*args)
            else:
                marked = list(args)
                for index, dims in self._dynamic_args.items():  # on a view: the mark stays off the caller's tensor
                    marked[index] = marked[index].view_as(marked[index])
                    torch._dynamo.maybe_mark_dynamic(marked[index], dims)
                result = graph(*marked)
        except torch._dynamo.exc.FailOnRecompileLimitHit:
            # something beyond the kind changed as often as torch's recompile limit allows: this kind runs eagerly
            # from now on (calling its compiled function again would warn again, in torch's log, at every call; a
            # forward whose checkpointed recomputation comes after this switch saves other tensors in it and fails
            # with torch's checkpoint error, which one graph per kind makes as rare as the limit)
            self.graphs[kind] = None
            if not self.recompile_limit_hit:
                self.recompile_limit_hit = True
                logger.warning(f"{self.fn.__name__} runs eagerly for a kind of input: torch's recompile limit is hit")
            return self.fn(*args)
        except torch._dynamo.exc.BackendCompilerFailed as error:
            reason = getattr(error, "inner_exception", None) or error
            self.unavailable = f"{type(reason).__name__}: {(str(reason).strip().splitlines() or [''])[0]}"
            logger.warning(f"{self.fn.__name__} runs eagerly in this process: torch.compile failed: {self.unavailable}")
            return self.fn(*args)
        Fused.compiled_calls += 1
        return result


def _inductor_graph(fn, args):
    """`fn` for exactly `args` (the shapes, dtypes, strides and device of its tensors, the values of its other
    arguments), traced without grad into one functional graph and compiled by inductor, as `torch.compile` compiles
    what it traces, but called directly: no guards, no runtime wrappers, one C++ kernel and its few buffers. With every
    shape fixed, inductor leaves a small kernel unthreaded, which saves the wake-up of the threads too (a decoded
    token's mHC coefficients at K = 4, width 576: 32 us a call against 86-237 us through `torch.compile`). None where
    it cannot be built (torch's private entry points moved, a failed compilation): the caller compiles the usual way."""
    try:
        from torch._inductor.compile_fx import compile_fx_inner
        from torch._inductor.decomposition import select_decomp_table
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.utils import _pytree as pytree

        positions = [index for index, arg in enumerate(args) if isinstance(arg, torch.Tensor)]
        structure = []

        def flat(*tensors):
            full = list(args)
            for index, tensor in zip(positions, tensors):
                full[index] = tensor
            outputs, spec = pytree.tree_flatten(fn(*full))
            structure.append(spec)
            return outputs

        example = [args[index] for index in positions]
        traced = make_fx(torch.func.functionalize(flat, remove="mutations"), select_decomp_table())(*example)
        compiled = compile_fx_inner(traced, example)
    except Exception as error:  # noqa: BLE001 - any failure here only means the usual compilation runs
        logger.debug(f"{fn.__name__}: no direct inductor graph ({type(error).__name__}: {error})")
        return None
    spec = structure[-1]
    if spec == pytree.tree_structure(tuple(range(spec.num_leaves))):  # a flat tuple of tensors: no unflattening

        def call(*args):
            return tuple(compiled([args[index] for index in positions]))

    else:

        def call(*args):
            return pytree.tree_unflatten(compiled([args[index] for index in positions]), spec)

    return call


def dot_product_attention(query, key, value, keep, dropout: float, implementation: str | None) -> torch.Tensor:
    """A mechanism's own multi-head attention `softmax(q k^T / sqrt(d)) v` (`[..., heads, tokens, head_dim]`), `keep`
    a boolean mask broadcast over the scores (True: attended): torch's SDPA, or, where the model's attention
    implementation is `"eager"`, the same written out, as the stock eager attention computes it, which can be
    differentiated twice (torch's SDPA kernels on CPU have no second derivative: a gradient penalty needs eager)."""
    if implementation != "eager":
        return nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=keep, dropout_p=dropout)
    scores = query @ key.transpose(-1, -2) / math.sqrt(query.shape[-1])
    if keep is not None:
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return nn.functional.dropout(scores.softmax(-1), dropout) @ value


class StatsAccumulator(nn.Module):
    """Running sums of scalar statistics, kept on the model's device (no host sync in the forward pass).

    A mechanism calls `add(name, value)` with tensors of fixed shape during forward; `read()` averages over the
    forwards since the last reset and returns plain floats (a 1-d statistic `x` becomes `x_0`, `x_1`, ...; a 2-d
    one `x_0_0`, `x_0_1`, ...).
    Forwards in eval mode are kept apart under the prefix `eval/`. Forwards traced by torch.compile or torch.export
    record nothing: the running sums are Python-side state, and a counter that changes every step would make the
    compiled model recompile every step. Nothing here is saved with the model.
    """

    def __init__(self):
        super().__init__()
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}

    @torch.no_grad()
    def add(self, name: str, value: torch.Tensor) -> None:
        """Record `value` under `name` (under `eval/name` in eval mode); nothing in a compiled or exported forward."""
        named = self._named((name,))
        if named is not None:
            self._record(named[0], value.detach())

    def _named(self, names: tuple[str, ...]) -> tuple[str, ...] | None:
        """`names` as recorded now (under `eval/` in eval mode), or None in a compiled or exported forward, which
        records nothing."""
        if torch.compiler.is_compiling():
            return None
        return names if self.training else tuple(EVAL_PREFIX + name for name in names)

    def _record(self, name: str, value: torch.Tensor) -> None:
        value = value.float()
        if name in self._sums:
            self._sums[name] = self._sums[name] + value
            self._counts[name] += 1
        else:
            self._sums[name] = value.clone()
            self._counts[name] = 1

    def read(self, reset: bool = True, split: str | None = None) -> dict[str, float]:
        out = {}
        for name in [n for n in self._sums if _in_split(n, split)]:
            mean = (self._sums[name] / self._counts[name]).cpu()
            if split == "eval":
                name = name[len(EVAL_PREFIX) :]
            if mean.ndim == 0:
                out[name] = mean.item()
            else:
                for index, v in zip(itertools.product(*map(range, mean.shape)), mean.flatten().tolist()):
                    out[f"{name}_{'_'.join(map(str, index))}"] = v
            if reset:
                key = EVAL_PREFIX + name if split == "eval" else name
                del self._sums[key], self._counts[key]
        return out


class _HeldRecords(logging.Filter):
    """While active, holds back the records of the logger `logger_name` whose message contains `marker`;
    `release()` logs them after all. Used for what transformers writes about a conversion that is expected there."""

    def __init__(self, logger_name: str, marker: str):
        super().__init__()
        self.logger = logging.getLogger(logger_name)
        self.marker = marker
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if self.marker in str(record.msg):
            self.held.append(record)
            return False
        return True

    def __enter__(self):
        self.logger.addFilter(self)
        return self

    def __exit__(self, *exc):
        self.logger.removeFilter(self)

    def release(self) -> None:
        for record in self.held:
            self.logger.handle(record)


def has_parameter_prefix(name: str, prefix: str) -> bool:
    """Whether a component of the dotted parameter name `name` starts with the mechanism's parameter `prefix`
    (`hc_` names `model.layers.0.hc_attn.res` and `model.hc_read_out`; never a stock weight, whose components are the
    stock modules' names). The one test of which tensors are a mechanism's, as PEFT tells an adapter's by `lora_`."""
    return bool(prefix) and any(part.startswith(prefix) for part in name.split("."))


# --- what the interlayer package adds: the model card, the conversion report, staged saves -----------------------


def interlayer_library(part: str = "card"):
    """The module `interlayer.PART` when the interlayer package is imported in this process, else None: `card` (the
    model card writer, the conversion report, the stock checkpoint's license) or `saving` (staged saves under a lock,
    `interlayer/saving.py`). Saved folders do not ship them: a model loaded as remote code in a process without
    interlayer loads and runs the same, and saves in place, as transformers does, with no card written. Looked up by
    name, not registered here: remote code runs its own copy of this file, which the package's import does not reach."""
    return sys.modules.get(f"interlayer.{part}")


def is_interlayer_card(path) -> bool:
    """Whether `path` is a model card interlayer wrote (a README.md whose metadata tags it `interlayer`)."""
    if os.path.basename(path) != "README.md" or not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8", errors="replace") as f:
        head = f.read(4096)
    parts = head.split("---\n", 2)
    return head.startswith("---\n") and len(parts) == 3 and '"interlayer"' in parts[1]


class ZooModelMixin:
    """Model behaviour shared by the zoo: statistics, trainable-parameter report, model card on save (when the
    interlayer package is imported).

    A mechanism sets `mechanism_name` (card title), `mechanism_param_prefix` (the start of a name component of every
    parameter of its own, as PEFT names an adapter's with `lora_`; see `is_mechanism_parameter`) and implements
    `mechanism_summary()` (markdown for the card).
    """

    mechanism_name: ClassVar[str] = ""
    mechanism_param_prefix: ClassVar[str] = ""
    # `{old: new}` names (dotted, whole components) of modules renamed since checkpoints were saved with the old
    # names: such a checkpoint loads, bit for bit, its tensors renamed (`from_pretrained`'s `key_mapping`), and a
    # re-save writes the new names
    renamed_parameters: ClassVar[dict[str, str]] = {}
    pipeline_tag: ClassVar[str | None] = "feature-extraction"  # a base model; task heads name their pipeline
    # how far an untrained conversion with `identity_init=True` may be from the stock function, relative to the largest
    # output magnitude in float32: 0 for a mechanism that computes it bit for bit (`stock_function_words`)
    stock_function_tolerance: ClassVar[float] = 0.0

    def post_init(self):
        """The stock `post_init`, then the model's Hub tags (`hub_tags`) in `model_tags`, which transformers'
        `push_to_hub` and the `Trainer`'s draft card keep (as PEFT and TRL tag theirs)."""
        super().post_init()
        self.add_model_tags(self.hub_tags())

    def hub_tags(self) -> list[str]:
        """The tags that name the model on the Hub: `interlayer` and its mechanism (`hyper-connections`,
        `latent-back-projection`)."""
        return ["interlayer", self.mechanism_name.lower().replace(" ", "-")]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """The stock `from_pretrained`, then the mechanism's `finish_loading`. Loading a stock checkpoint (a
        conversion) also remembers the parameters' state, so that the model card can say whether the saved model is
        still the untrained conversion. A folder missing because a save into it was cut between its two renames is
        refused with what to do."""
        saving = interlayer_library("saving")
        if saving is not None and isinstance(pretrained_model_name_or_path, (str, os.PathLike)):
            saving.refuse_interrupted_swap(os.fspath(pretrained_model_name_or_path))
        return cls._load(pretrained_model_name_or_path, pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def from_stock_model(cls, stock_model, config, **kwargs):
        """Convert an already-loaded stock model in memory, as `from_pretrained` converts a stock checkpoint, without
        reading it from disk: the new model takes the stock model's weight tensors themselves (no copy, as
        `peft.get_peft_model` wraps the model it is given), in their dtype. `config` is this class's config built
        from the stock model's (`interlayer.convert` does it all)."""
        kwargs.setdefault("dtype", stock_model.dtype)
        source = getattr(stock_model, "name_or_path", None) or f"in-memory {type(stock_model).__name__}"
        config.base_model_name_or_path = source
        return cls._load(source, None, config=config, state_dict=stock_model.state_dict(), **kwargs)

    @classmethod
    def _load(cls, source, pretrained_model_name_or_path, *args, **kwargs):
        want_info = kwargs.pop("output_loading_info", False)
        renames = {rf"(?<!\w){re.escape(old)}(?!\w)": new for old, new in cls.renamed_parameters.items()}
        if renames:
            kwargs["key_mapping"] = {**renames, **(kwargs.get("key_mapping") or {})}
        with _HeldRecords("transformers.modeling_utils", "LOAD REPORT") as load_report:
            model, info = super().from_pretrained(
                pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs
            )
        if renames:  # transformers re-saves a renamed checkpoint under its old names: these keep the new ones
            model._weight_conversions = [
                c
                for c in getattr(model, "_weight_conversions", None) or []
                if not (isinstance(c, WeightRenaming) and c._original_source_patterns[0] in renames)
            ]
        model.finish_loading(info)
        model.refuse_uninitialised(info["missing_keys"])
        library = interlayer_library()
        if getattr(model.config, "base_model_name_or_path", None) == str(source):
            model.config.base_model_name_or_path = _recorded_source(source)
            model._conversion_checksums = parameter_checksums(model.named_parameters())
            if library is not None:  # one line for what the conversion added, instead of transformers' report
                library.report_conversion(model, source, info)
            else:
                load_report.release()
        else:  # a saved zoo model: transformers' report of anything missing or unused is news
            load_report.release()
        if library is not None:
            library.take_stock_license(model, source, kwargs)
        return (model, info) if want_info else model

    def finish_loading(self, info: dict) -> None:
        """What a mechanism does once `from_pretrained` has loaded the weights (`info`: transformers' loading info,
        with `missing_keys`); nothing by default."""

    def _move_missing_keys_from_meta_to_device(self, missing_keys, *args, **kwargs):
        """As transformers does it; then the mechanism's tensors a checkpoint lacks start as NaN instead of whatever
        memory held, so that one its `_init_weights` never reaches (inside a container transformers' init skips)
        shows (`refuse_uninitialised`) rather than passing as a value."""
        super()._move_missing_keys_from_meta_to_device(missing_keys, *args, **kwargs)
        parameters = dict(self.named_parameters())
        with torch.no_grad():
            for name in missing_keys:
                tensor = parameters.get(name)
                if tensor is not None and self.is_mechanism_parameter(name) and tensor.is_floating_point():
                    tensor.fill_(float("nan"))

    def refuse_uninitialised(self, missing_keys) -> None:
        """Refuse (RuntimeError) a loaded model with a mechanism tensor the checkpoint lacked and no init reached
        (still the NaN it started as): a bug in the mechanism's `_init_weights`, which would only show as NaN
        outputs later."""
        parameters = dict(self.named_parameters())
        missing = set(missing_keys)
        left = [
            name
            for name, tensor in parameters.items()
            if name in missing and tensor.is_floating_point() and tensor.numel() and torch.isnan(tensor).all()
        ]
        if left:
            raise RuntimeError(
                f"{type(self).__name__}: no initialisation reached {left} (the checkpoint lacks them and "
                f"`_init_weights` left them as they were made): initialise them in the mechanism's `_init_weights`, "
                "on a module of their own or on the module that holds them."
            )

    def is_untrained_conversion(self, state_dict: dict | None = None) -> bool:
        """True while every parameter (the stock ones and the mechanism's) still holds the value it had when this model
        was converted from a stock checkpoint in this process, compared by exact checksums of the values
        (`parameter_checksums`): any optimizer step that changes a weight makes it False, whatever the optimizer,
        the wrapping (PEFT merge, `torch.compile`) or the dtype the values are held in (a bf16 model cast to fp32
        keeps its values). `state_dict`: the tensors being saved, when they are not the parameters themselves
        (FSDP and DeepSpeed gather them for `save_pretrained`). False for a model loaded from a saved zoo folder,
        whose history is not known."""
        recorded = getattr(self, "_conversion_checksums", None)
        if recorded is None:
            return False
        tensors = dict(self.named_parameters()) if state_dict is None else state_dict
        mechanism_first = sorted(recorded, key=lambda n: not self.is_mechanism_parameter(n))
        for name in mechanism_first:  # a trained model usually differs in its (small) mechanism tensors: stop there
            tensor = tensors.get(name)
            if tensor is None or (tuple(tensor.shape), tensor_checksum(tensor)) != recorded[name]:
                return False
        return True

    def claims_stock_function(self) -> bool:
        """Whether the untrained conversion computes the stock function (`identity_init`); a mechanism with settings
        that break it even then overrides this."""
        return bool(self.config.identity_init)

    def stock_export(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """What a stock checkpoint of this model's family needs to compute what this model computes: `(changes to the
        stock config, tensors by stock name)`, or a ValueError saying why no stock checkpoint can
        (`interlayer.zoo.export_stock` builds and saves it). By default only an untrained conversion made in this
        process whose mechanism is still the identity (`claims_stock_function`) leaves, as its stock weights; a
        mechanism that can fold its trained state into stock weights overrides this."""
        name = type(self).__name__
        if not self.claims_stock_function():
            raise ValueError(
                f"{name} cannot be exported as a stock checkpoint: under its settings (identity_init="
                f"{getattr(self.config, 'identity_init', None)!r}) even the untrained conversion does not compute the "
                "stock function."
            )
        if not self.is_untrained_conversion():
            raise ValueError(
                f"{name} cannot be exported as a stock checkpoint: its {self.mechanism_name.lower()} computes "
                "something no stock class does, and only an untrained conversion made in this process is known to be "
                "the identity (this model has been trained, or was loaded from a saved folder, whose history is not "
                "known). Its stock checkpoint is the one it was converted from."
            )
        return {}, self.state_dict()

    def _sibling_auto_map(self) -> dict[str, str]:
        """`{Auto class: "module.Class"}` for the classes of this model's file that take its config class."""
        module = sys.modules[type(self).__module__]
        siblings = {}
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and getattr(value, "config_class", None) is type(self).config_class
                and getattr(value, "_auto_class", None)
                and issubclass(value, nn.Module)
            ):
                siblings[value._auto_class] = f"{module.__name__.split('.')[-1]}.{value.__name__}"
        return siblings

    @classmethod
    def is_mechanism_parameter(cls, name: str) -> bool:
        """Whether the parameter or checkpoint tensor `name` is the mechanism's (`has_parameter_prefix` with
        `mechanism_param_prefix`): freezing the base, the parameter report, a conversion's report, the learning-rate
        groups and the conformance suite all ask this."""
        return has_parameter_prefix(name, cls.mechanism_param_prefix)

    def mechanism_parameter_names(self) -> list[str]:
        return [n for n, _ in self.named_parameters() if self.is_mechanism_parameter(n)]

    def mechanism_stats(self, reset: bool = True, split: str | None = None) -> dict[str, float]:
        """Statistics gathered since the last reset, averaged over forward passes, as `{name: float}`.

        `split="train"` reads the forwards made in training mode, `split="eval"` those made in eval mode (names
        without their `eval/` prefix), `None` both. Reading resets what it read unless `reset=False`. Training and
        unsplit reads also include `mechanism_state()`."""
        out = {} if split == "eval" else dict(self.mechanism_state())
        for module in self.modules():
            if isinstance(module, StatsAccumulator):
                out.update(module.read(reset=reset, split=split))
        return out

    def mechanism_state(self) -> dict[str, float]:
        """Instantaneous values of the mechanism (for example gate parameters) that belong in every training log;
        a mechanism overrides it. Forward-pass statistics go through `StatsAccumulator` instead."""
        return {}

    def parameter_report(self) -> dict[str, int | float]:
        mech = set(self.mechanism_parameter_names())
        total = trainable = mechanism = 0
        for name, p in self.named_parameters():
            total += p.numel()
            trainable += p.numel() if p.requires_grad else 0
            mechanism += p.numel() if name in mech else 0
        return {
            "total": total,
            "trainable": trainable,
            "mechanism": mechanism,
            "mechanism_percent": 100.0 * mechanism / max(total, 1),
        }

    def save_pretrained(self, save_directory, *args, **kwargs):
        """The stock method, safe against interruption and other processes saving into the folder, then the model card.

        `auto_map` names every class of this model's file registered for an Auto class (the base model too), so any
        Auto class loads the folder with `trust_remote_code=True`. Everything is written into a hidden folder of this
        save's own beside `save_directory` that then takes its place under a lock (`interlayer.saving`), so a save
        killed at any moment, or several processes saving at once, leave one model whole, never a mix of their weight
        shards. What else the folder holds (a Trainer's checkpoints and logs, a tokenizer) is kept; the previous
        model's weight files are not. A folder that cannot be staged beside (`can_stage_beside`: a mount point, the
        working directory, a parent without write access) is written in place with a warning; a process that does
        not write (`is_main_process=False`, a rank other than 0), a distributed or tensor-parallel checkpoint, and
        remote code in a process without the interlayer package write in place, as transformers does."""
        self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **self._sibling_auto_map()}
        save_directory = os.fspath(save_directory)
        saving = interlayer_library("saving")
        if saving is None or not self._writes_alone(kwargs):
            return self.save_unstaged(save_directory, *args, **kwargs)
        if kwargs.get("push_to_hub"):  # the Hub repository is named after the folder, not after its staging name
            kwargs.setdefault("repo_id", os.path.basename(os.path.abspath(save_directory)))
        return saving.save_model_staged(self, save_directory, *args, **kwargs)

    def save_unstaged(self, save_directory, *args, card_name=None, **kwargs):
        """`save_pretrained` written straight into `save_directory` (no staging folder), then the model card, whose
        usage snippet loads `card_name` (the final folder's name; default: `save_directory`'s). For writers that stage
        the folder themselves (`interlayer.zoo.save_atomically`). Without the interlayer package in the process
        (remote code) no card is written, and a card interlayer wrote for the weights this save replaces is removed."""
        untrained = self.is_untrained_conversion(kwargs.get("state_dict"))  # before transformers empties the dict
        result = super().save_pretrained(save_directory, *args, **kwargs)
        if int(os.environ.get("LOCAL_RANK", "0")) == 0 and self.should_save_on_this_rank(
            kwargs.get("is_main_process", True)
        ):
            library = interlayer_library()
            card = os.path.join(os.fspath(save_directory), "README.md")
            if library is not None:
                library.write_model_card(self, save_directory, card_name, untrained=untrained)
            elif is_interlayer_card(card):
                os.remove(card)
        return result

    def _writes_alone(self, kwargs: dict) -> bool:
        """Whether this process alone writes the folder (the main process, not a distributed or tensor-parallel
        checkpoint, which every rank writes into), so that it can stage it."""
        return (
            self.should_save_on_this_rank(kwargs.get("is_main_process", True))
            and int(os.environ.get("LOCAL_RANK", "0")) == 0
            and not kwargs.get("distributed_checkpoint")
            and getattr(self, "_tp_size", None) is None
            and not getattr(self, "is_distributed_loading_by_transformers", False)
        )

    def _upload_modified_files(self, working_dir, repo_id, *args, **kwargs):
        """Before `push_to_hub` (or `save_pretrained(push_to_hub=True)`) uploads the folder, put this model's card back
        (transformers writes its generic card there first), its usage snippet naming the Hub repository; without the
        interlayer package in the process, transformers' card is uploaded."""
        library = interlayer_library()
        if library is not None:
            library.write_model_card(self, working_dir, repo_id, untrained=self.is_untrained_conversion())
        return super()._upload_modified_files(working_dir, repo_id, *args, **kwargs)


def refuse_output_attentions(model, kwargs: dict) -> None:
    """Refuse `output_attentions=True` for a model that returns no attention weights (its config's
    `no_attention_weights` says why), from the call (`kwargs`, out of which it is taken) or, when the call does not
    say, from the config: a flag set on the config after its creation is refused here, never ignored."""
    value = kwargs.pop("output_attentions", None)
    if value is None:
        value = model.config.output_attentions
    if value:
        raise ValueError(
            f"`output_attentions={value!r}` is not supported by {type(model).__name__}: "
            f"{model.config.no_attention_weights}. Leave `output_attentions` False, in the call and in the config."
        )


def select_hidden_states(hidden_states, output_hidden_states):
    """`hidden_states` (every hidden state of a forward, or None) as transformers 5's stock classes return them for
    `output_hidden_states`: all of them for True; for an index or a list of indices (negative ones counted from the
    end), the tensors at those positions and None at the others."""
    if hidden_states is None:
        return None
    if output_hidden_states is None or isinstance(output_hidden_states, bool):
        return tuple(hidden_states)
    selection = [output_hidden_states] if isinstance(output_hidden_states, int) else output_hidden_states
    if not isinstance(selection, (list, tuple)) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in selection
    ):
        raise ValueError(
            "`output_hidden_states` takes True or False, or an index or a list of indices of the hidden states to "
            f"return; got {output_hidden_states!r}."
        )
    count = len(hidden_states)
    selected = {i % count for i in selection if -count <= i < count}
    return tuple(state if i in selected else None for i, state in enumerate(hidden_states))


def _return_dict_unless_asked(module, args, kwargs):
    kwargs.setdefault("return_dict", True)
    return args, kwargs


def returns_dict_to_its_head(base_model: nn.Module) -> None:
    """Make the base model inside a task head return its output class unless the call asks for a tuple. The stock
    heads read their base model's output by field name and call it without `return_dict`, so `return_dict=False` in
    the config, which the two share, hands them a tuple (the stock classes of transformers 5 fail there); the head
    itself still gives the tuple the call or the config asks for."""
    base_model.register_forward_pre_hook(_return_dict_unless_asked, with_kwargs=True)


def register_for_auto_classes(config_class, **model_classes) -> None:
    """Register `config_class` and each model class for the Auto class it is given under
    (`register_for_auto_classes(Qwen3MHCConfig, AutoModel=Qwen3MHCModel, AutoModelForCausalLM=Qwen3MHCForCausalLM)`).

    This is the one declaration of a zoo model: `save_pretrained` writes it into the folder's `auto_map` (remote
    code), and the zoo's registry (`interlayer.zoo.ZOO`: Auto registration, `interlayer list`, conversion) reads it."""
    config_class.register_for_auto_class()
    for auto_class, model_class in model_classes.items():
        model_class.register_for_auto_class(auto_class)


# --- does the model compute the stock function? --------------------------------------------------------------------


def stock_function_words(model) -> str:
    """How a model whose mechanism starts as the identity computes the stock model's function: "exactly" (bit for bit),
    or, for a mechanism whose identity holds to float rounding only (`stock_function_tolerance`), "to float rounding"
    with the tolerance. The one wording of the model card, `interlayer inspect` and the docs."""
    tolerance = model.stock_function_tolerance
    if not tolerance:
        return "exactly"
    bound = f"{tolerance:.0e}".replace("e-0", "e-")
    return f"to float rounding (outputs within {bound} of their largest magnitude, in float32)"


def agrees_with_stock(model, outputs: torch.Tensor, stock_outputs: torch.Tensor) -> tuple[bool, float]:
    """Whether `outputs` are the stock model's `stock_outputs` as `stock_function_words(model)` says: equal bit for bit,
    or within `stock_function_tolerance` times the largest magnitude of `stock_outputs`. Returns `(agrees, max |diff|)`.
    """
    outputs, stock_outputs = outputs.float(), stock_outputs.float()
    if outputs.shape != stock_outputs.shape:
        return False, math.inf
    diff = (outputs - stock_outputs).abs().max().item() if outputs.numel() else 0.0
    bound = model.stock_function_tolerance * stock_outputs.abs().max().item() if outputs.numel() else 0.0
    return diff <= bound, diff


# --- exact checksums of parameter values ---------------------------------------------------------------------------

_CHECKSUM_CHUNK = 1 << 24  # elements hashed at a time: bounds the float32 copy of a 16-bit tensor


@torch.no_grad()
def tensor_checksum(tensor: torch.Tensor) -> str:
    """An exact checksum of a tensor's values: SHA-1 of their bytes as float32 (float64 stays float64, other dtypes
    as they are), so that equal values give equal checksums in any float dtype that holds them exactly (a bf16
    model cast to fp32 keeps its checksums) and any changed value changes it. Hashed in chunks on the CPU (about a
    second per GB); a sharded tensor (FSDP's DTensor) is hashed by its local shard, which never matches the whole
    tensor recorded at conversion (so a sharded model is never called untrained: the card then claims nothing)."""
    to_local = getattr(tensor, "to_local", None)
    flat = (to_local() if to_local is not None else tensor).detach().reshape(-1)
    digest = hashlib.sha1(usedforsecurity=False)
    for start in range(0, flat.numel(), _CHECKSUM_CHUNK):
        chunk = flat[start : start + _CHECKSUM_CHUNK]
        if chunk.is_floating_point() and chunk.dtype != torch.float64:
            chunk = chunk.float()
        digest.update(chunk.cpu().contiguous().view(torch.uint8).numpy())
    return digest.hexdigest()


def parameter_checksums(named_tensors) -> dict[str, tuple]:
    """`{name: (shape, tensor_checksum)}` for `(name, tensor)` pairs (`model.named_parameters()`)."""
    return {name: (tuple(t.shape), tensor_checksum(t)) for name, t in named_tensors}


# --- the card's metadata -------------------------------------------------------------------------------------------

_HUB_CACHE_FOLDER = re.compile(r"models--([^/\\]+)--([^/\\]+)")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def hub_id(source) -> str | None:
    """The Hub id of a stock checkpoint: `source` itself when it is one, the id inside a Hugging Face cache path
    (`.../models--org--name/snapshots/...`), otherwise None (a local folder's path, as `from_pretrained` records it
    with a `./` or absolute path, is never a Hub id)."""
    if not source:
        return None
    source = str(source)
    cached = _HUB_CACHE_FOLDER.search(source)
    if cached:
        return f"{cached.group(1)}/{cached.group(2)}"
    if os.path.exists(source) or not _HUB_ID.fullmatch(source):
        return None
    return source


def _recorded_source(source) -> str:
    """How a conversion records its stock checkpoint: a Hub id as it is, a local folder as a path that cannot be read
    as a Hub id (`./minilm` for `minilm`), so that the card never names a local folder as a Hub model."""
    source = str(source)
    if os.path.exists(source) and not os.path.isabs(source) and not _HUB_CACHE_FOLDER.search(source):
        return os.path.join(".", source) if not source.startswith(".") else source
    return source


class _ScalarAsVector(ConversionOps):
    """Reads a gate or temperature saved as a 0-d tensor (the layout of checkpoints written before these became
    shape `(1,)`) into its `(1,)` parameter; a `(1,)` tensor passes unchanged, and saving keeps `(1,)`."""

    def convert(self, input_dict, source_patterns, target_patterns, **kwargs):
        tensors = next(iter(input_dict.values()))
        tensor = tensors[0] if isinstance(tensors, list) else tensors
        return {target_patterns[0]: tensor.reshape(1)}

    @property
    def reverse_op(self):
        return self


def register_scalar_parameters(model_types, names) -> None:
    """Scalar parameters are stored with shape `(1,)`, never 0-d, because FSDP2 (`fully_shard`) refuses 0-d
    parameters. Registers, for each model type, the load-time conversion that still reads them from checkpoints
    saved as 0-d tensors (bit-exact: a reshape)."""
    for model_type in model_types:
        register_checkpoint_conversion_mapping(
            model_type, [WeightConverter(name, name, [_ScalarAsVector()]) for name in names], overwrite=True
        )
