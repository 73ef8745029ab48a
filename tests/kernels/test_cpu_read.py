"""The mHC read as one C++ function on a CPU (hyper_connections_cpu.py) against its equation, `_mhc_read`."""

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
    form = ("mhc", variant, eps, 2.0)
    with torch.no_grad():
        return cpu.mhc_read(streams, *params, k, iters, form), hc_module._mhc_read(streams, *params, k, iters, form)


@pytest.mark.parametrize("variant", ["seed", "deepseek_v4"])
@pytest.mark.parametrize(
    ("k", "width", "lead", "iters"),
    [(4, 576, (1, 1), 20), (2, 40, (2, 3), 20), (1, 16, (1, 1), 20), (3, 24, (1, 5), 1), (8, 33, (8, 1), 7)],
)
def test_the_cpu_read_is_the_equation(variant, k, width, lead, iters):
    """Every output (`x`, the mixed streams, `H_pre`, `H_post`, `H_res`) equals `_mhc_read`'s, for both formulas, at
    K = 1..8, widths that are and are not a multiple of its 16 partial sums, one to `MAX_TOKENS` tokens and 1 or more
    normalisation rounds."""
    streams = torch.randn(*lead, k, width, generator=torch.Generator().manual_seed(1))
    got, want = both(streams, parameters(k, width), k, iters, variant)
    assert got is not None
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
    """None (the compiled function runs instead) for bf16 streams, for more than `MAX_TOKENS` tokens and for a
    parameter that is not fp32."""
    k, width = 4, 32
    params = parameters(k, width)
    form = ("mhc", "seed", 1e-6, 2.0)
    streams = torch.randn(1, 1, k, width)
    assert cpu.mhc_read(streams, *params, k, 20, form) is not None
    assert cpu.mhc_read(streams.bfloat16(), *params, k, 20, form) is None
    assert cpu.mhc_read(torch.randn(1, cpu.MAX_TOKENS + 1, k, width), *params, k, 20, form) is None
    assert cpu.mhc_read(streams, params[0].bfloat16(), *params[1:], k, 20, form) is None


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


def test_decoding_reads_through_the_cpu_function(stock_llama, monkeypatch):
    """Cached greedy decoding on a CPU reads every sublayer's streams with the C++ function, the prompt's (6 tokens)
    and each new token's, and gives the tokens and scores of the eager equation (`hc_fused=False`)."""
    kernel, reason = cpu.load()
    assert kernel is not None, reason
    calls = []
    monkeypatch.setattr(cpu, "load", lambda: ((lambda *args: calls.append(1) or kernel(*args)), None))
    eager, _ = greedy(stock_llama, hc_fused=False)
    assert not calls
    fast, config = greedy(stock_llama)
    assert len(calls) == 2 * config.num_hidden_layers * 4  # the prompt and 3 tokens (the 4th is not read again)
    torch.testing.assert_close(fast.sequences, eager.sequences)
    torch.testing.assert_close(torch.stack(fast.scores), torch.stack(eager.scores))


def test_decoding_runs_where_the_cpu_function_cannot_be_built(stock_llama, monkeypatch, caplog):
    """Where the C++ function cannot be built (no compiler, inductor's code cache moved), one warning names the reason
    and decoding runs the compiled function, with the eager equation's tokens and scores."""
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
    warned = [r.getMessage() for r in caplog.records if "C++ function cannot be built" in r.getMessage()]
    assert warned == [
        "the mHC read's C++ function cannot be built (RuntimeError: InvalidCxxCompiler: No working C++ compiler "
        "found); its compiled function runs instead"
    ]
    torch.testing.assert_close(fast.sequences, eager.sequences)
    torch.testing.assert_close(torch.stack(fast.scores), torch.stack(eager.scores))


def test_a_saved_model_reads_through_the_cpu_function_of_its_remote_code(stock_llama, tmp_path):
    """A saved mHC model carries hyper_connections_cpu.py: in a process where interlayer cannot be imported, its
    remote code reads a few tokens' streams with the C++ function it ships, with the logits of the model it was saved
    from."""
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
        kernel, reason = cpu.load()
        assert kernel is not None, reason
        calls = []
        cpu.load = lambda: ((lambda *args: calls.append(1) or kernel(*args)), None)
        input_ids, expected = torch.load({str(tmp_path / "expected.pt")!r})
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids).logits, expected)
        assert len(calls) == 2 * model.config.num_hidden_layers, len(calls)
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
