"""The no-grad mHC boundary as C++ functions on a CPU (hyper_connections_cpu.py) against its equation: the read
against `_mhc_read`, the write against `_write`."""

import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from batches import lm_batch
from stock_checkpoints import build_stock_llama

from interlayer import LlamaMHCForCausalLM
from interlayer.models import hyper_connections_cpu as cpu
from interlayer.models import hyper_connections_fast as hc_module


def parameters(k: int, width: int, seed: int = 0, spread: float = 1.0):
    """A hyper-connection's fp32 parameters of the input-dependent mHC (`weight`, `pre`, `post`, `res`, `scale`),
    random, the static logits times `spread`."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(k * (k + 2), k * width, generator=g) * 0.05
    pre, post = torch.randn(k, generator=g) * spread, torch.randn(k, generator=g) * spread
    return weight, pre, post, torch.randn(k, k, generator=g) * 2 * spread, torch.rand(3, generator=g)


def both(streams, params, k, iters=20, variant="seed", eps=1e-6):
    """`(x, mixed, pre, post, res)` of the C++ read (its coefficients split) and of `_mhc_read`."""
    form = ("mhc", variant, eps, 2.0)
    with torch.no_grad():
        x, mixed, coefficients = cpu.mhc_read(streams, cpu.read_plan(*params, k, iters, form))
        got = (x, mixed, *cpu.split_coefficients(coefficients, k))
        return got, hc_module._mhc_read(streams, *params, k, iters, form)


@pytest.mark.parametrize("variant", ["seed", "deepseek_v4"])
@pytest.mark.parametrize(
    ("k", "width", "lead", "iters"),
    [
        (4, 576, (1, 1), 20),
        (2, 40, (2, 3), 20),
        (1, 16, (1, 1), 20),
        (3, 24, (1, 5), 1),
        (8, 33, (8, 1), 7),
        (4, 64, (3, 37), 20),
    ],
)
def test_the_cpu_read_is_the_equation(variant, k, width, lead, iters):
    """Every output (`x`, the mixed streams, `H_pre`, `H_post`, `H_res`) equals `_mhc_read`'s, for both formulas, at
    K = 1..8, widths that are and are not a multiple of its 16 partial sums, one token to a prompt's 111 (shared among
    torch's threads) and 1 or more normalisation rounds."""
    streams = torch.randn(*lead, k, width, generator=torch.Generator().manual_seed(1))
    got, want = both(streams, parameters(k, width), k, iters, variant)
    for name, g, w in zip(("x", "mixed", "pre", "post", "res"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        torch.testing.assert_close(g, w, msg=name)


@pytest.mark.parametrize("variant", ["seed", "deepseek_v4"])
def test_the_cpu_read_takes_strided_streams_and_extreme_logits(variant):
    """Streams that are not contiguous (a transposed view; the first layer's K views of the embeddings, stride 0)
    read as their contiguous copy does, and static logits of magnitude 200 (where a plain exponential overflows) give
    the equation's finite coefficients."""
    k, width = 4, 48
    base = torch.randn(1, 1, width, k).transpose(-1, -2)
    embeddings = torch.randn(1, 2, 1, width).expand(1, 2, k, width)
    for streams, spread in ((base, 1.0), (embeddings, 1.0), (base.contiguous(), 100.0)):
        got, want = both(streams, parameters(k, width, spread=spread), k, variant=variant)
        assert all(torch.isfinite(g).all() for g in got)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


def test_the_cpu_read_leaves_what_it_does_not_run():
    """None (the compiled function runs instead) for bf16 streams and for a parameter that is not fp32."""
    k, width = 4, 32
    params = parameters(k, width)
    form = ("mhc", "seed", 1e-6, 2.0)
    streams = torch.randn(1, 1, k, width)
    plan = cpu.read_plan(*params, k, 20, form)
    assert cpu.mhc_read(streams, plan) is not None
    assert cpu.mhc_read(streams.bfloat16(), plan) is None
    assert cpu.read_plan(params[0].bfloat16(), *params[1:], k, 20, form) is None
    assert cpu.mhc_read(streams, None) is None


@pytest.mark.parametrize(("lead", "threads"), [((1, 1), 2), ((2, 9), 2), ((2, 9), 1)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_the_cpu_write_is_the_equation_bit_for_bit(lead, threads, out_dtype):
    """The C++ write into the read's mixed streams gives `_write`'s streams bit for bit (a product and a sum, each
    rounded, as `torch.addcmul`), for one token and for a prompt on one or two threads; a bf16 sublayer output is
    written by `torch.addcmul` itself, as `_write` does."""
    k, width = 4, 40
    streams = torch.randn(*lead, k, width, generator=torch.Generator().manual_seed(2))
    out = torch.randn(*lead, width, generator=torch.Generator().manual_seed(3)).to(out_dtype)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            plan = cpu.read_plan(*parameters(k, width), k, 20, ("mhc", "seed", 1e-6, 2.0))
            _, mixed, coefficients = cpu.mhc_read(streams, plan)
        post = cpu.split_coefficients(coefficients, k)[1]
        want = hc_module._write(mixed.clone(), post, out)
        got = cpu.mhc_write(mixed, coefficients, out)
    finally:
        torch.set_num_threads(before)
    assert got.data_ptr() == mixed.data_ptr()  # written in place: no new K-wide tensor
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_cpu_write_broadcasts_an_output_of_fewer_tokens_as_the_equation():
    """A sublayer output that broadcasts over the tokens (`[1, D]` for `[2, 9, K, D]` streams) is written by
    `torch.addcmul`, as `_write` computes it, never read past its end by the C++ write."""
    k, width = 4, 40
    streams = torch.randn(2, 9, k, width, generator=torch.Generator().manual_seed(2))
    out = torch.randn(1, width, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        _, mixed, coefficients = cpu.mhc_read(
            streams, cpu.read_plan(*parameters(k, width), k, 20, ("mhc", "seed", 1e-6, 2.0))
        )
    want = hc_module._write(mixed.clone(), cpu.split_coefficients(coefficients, k)[1], out)
    torch.testing.assert_close(cpu.mhc_write(mixed, coefficients, out), want, rtol=0, atol=0)


@pytest.fixture(scope="module")
def stock_llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stock-llama")
    build_stock_llama(folder)
    return folder


def greedy(folder, tokens=4, **options):
    """Cached greedy decoding of a converted model (default mHC) whose hyper-connection parameters are all random."""
    model = LlamaMHCForCausalLM.from_pretrained(folder, **options).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "hc_" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    prompt = lm_batch(lengths=(6,))["input_ids"]
    with torch.no_grad():
        return model.generate(
            prompt, max_new_tokens=tokens, do_sample=False, output_scores=True, return_dict_in_generate=True
        ), model.config


def counted(functions, calls: list):
    """The C++ functions `(read, write)` of `cpu.load()`, each appending its name to `calls` when called."""
    return tuple((lambda f, name: lambda *args: calls.append(name) or f(*args))(f, n) for f, n in zip(functions, "rw"))


def test_decoding_reads_and_writes_through_the_cpu_functions(stock_llama, monkeypatch):
    """Cached greedy decoding on a CPU reads and writes every sublayer's streams with the C++ functions, the prompt's
    (6 tokens) and each new token's, and gives the tokens and scores of the eager equation (`hc_fused=False`)."""
    functions, reason = cpu.load()
    assert functions is not None, reason
    calls = []
    monkeypatch.setattr(cpu, "load", lambda: (counted(functions, calls), None))
    eager, _ = greedy(stock_llama, hc_fused=False)
    assert not calls
    fast, config = greedy(stock_llama)
    boundaries = 2 * config.num_hidden_layers * 4  # the prompt and 3 tokens (the 4th is not read again)
    assert calls == ["r", "w"] * boundaries
    torch.testing.assert_close(fast.sequences, eager.sequences)
    torch.testing.assert_close(torch.stack(fast.scores), torch.stack(eager.scores))


def test_a_generate_call_checks_the_cpu_read_once_a_sublayer(stock_llama, monkeypatch):
    """Within one `generate()` call each sublayer checks its parameters for the C++ read once (`read_plan`, kept for
    the call), not at every token; a parameter replaced between two calls reaches the second (its tokens and scores
    are the eager equation's with the new parameter)."""
    plans = []
    build = cpu.read_plan
    monkeypatch.setattr(hc_module, "cpu_read_plan", lambda *args: plans.append(1) or build(*args))
    fast, config = greedy(stock_llama)
    assert len(plans) == 2 * config.num_hidden_layers  # four forwards (the prompt and 3 tokens), one check each
    model = LlamaMHCForCausalLM.from_pretrained(stock_llama).eval()
    eager = LlamaMHCForCausalLM.from_pretrained(stock_llama, hc_fused=False).eval()
    prompt = lm_batch(lengths=(6,))["input_ids"]
    options = dict(max_new_tokens=4, do_sample=False, output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        model.generate(prompt, **options)
        for m in (model, eager):  # a new parameter object, as `load_state_dict(..., assign=True)` makes
            projection = m.model.layers[0].hc_attn.dynamic_proj
            weight = 0.5 * torch.randn(projection.weight.shape, generator=torch.Generator().manual_seed(1))
            projection.weight = torch.nn.Parameter(weight)
        got, want = model.generate(prompt, **options), eager.generate(prompt, **options)
    torch.testing.assert_close(torch.stack(got.scores), torch.stack(want.scores))
    torch.testing.assert_close(got.sequences, want.sequences)


def test_decoding_runs_where_the_cpu_functions_cannot_be_built(stock_llama, monkeypatch, caplog):
    """Where the C++ functions cannot be built (no compiler, inductor's code cache moved), one warning names the
    reason and decoding runs the compiled function, with the eager equation's tokens and scores."""
    from torch._inductor import codecache

    def fails(*args, **kwargs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    monkeypatch.setattr(codecache.CppPythonBindingsCodeCache, "load_pybinding", fails)
    cpu.load.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="transformers.interlayer"):
            fast, _ = greedy(stock_llama)
        eager, _ = greedy(stock_llama, hc_fused=False)
    finally:
        cpu.load.cache_clear()
    warned = [r.getMessage() for r in caplog.records if "C++ functions cannot be built" in r.getMessage()]
    assert warned == [
        "the mHC boundary's C++ functions cannot be built (RuntimeError: InvalidCxxCompiler: No working C++ compiler "
        "found); its compiled read runs instead"
    ]
    torch.testing.assert_close(fast.sequences, eager.sequences)
    torch.testing.assert_close(torch.stack(fast.scores), torch.stack(eager.scores))


def test_a_saved_model_reads_through_the_cpu_function_of_its_remote_code(stock_llama, tmp_path):
    """A saved mHC model carries hyper_connections_cpu.py: in a process where interlayer cannot be imported, its
    remote code reads and writes a few tokens' streams with the C++ functions it ships, with the logits of the model
    it was saved from."""
    model = LlamaMHCForCausalLM.from_pretrained(stock_llama).eval()
    model.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "hyper_connections_cpu.py").exists()
    input_ids = lm_batch(lengths=(4,))["input_ids"]
    with torch.no_grad():
        torch.save((input_ids, model(input_ids).logits), tmp_path / "expected.pt")
    script = f"""
        import sys
        sys.modules["interlayer"] = None  # not importable in this process
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({str(tmp_path / "saved")!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        cpu = sys.modules[type(model).__module__.rsplit(".", 1)[0] + ".hyper_connections_cpu"]
        (read, write), reason = cpu.load()
        calls = []
        cpu.load = lambda: ((lambda *a: calls.append("r") or read(*a), lambda *a: calls.append("w") or write(*a)), None)
        input_ids, expected = torch.load({str(tmp_path / "expected.pt")!r})
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids).logits, expected)
        assert calls == ["r", "w"] * 2 * model.config.num_hidden_layers, calls
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
