"""The hyper-connection kernels (hyper_connections_triton.py) and their dispatch (hyper_connections_kernels.py).

The kernels run on CPU tensors under Triton's interpreter, which Triton switches on when a kernel is defined, from
`TRITON_INTERPRET=1` in the environment: the kernel tests (interpreted_kernels.py) run in a process of their own with
that variable set. Setting it in this process instead would leak into every later test of the same pytest-xdist worker
(and would not take effect where Triton's kernels were already defined, e.g. by a compiled test importing them), and
the operators hyper_connections_triton.py registers with `torch.library` cannot be registered twice in one process.
"""

import importlib.util
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from batches import lm_batch
from stock_checkpoints import build_stock_llama
from transformers import logging as hf_logging
from transformers.testing_utils import CaptureLogger

from interlayer import LlamaMHCForCausalLM
from interlayer.models import hyper_connections_kernels as dispatch
from interlayer.models.hyper_connections_maths import rms_norm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("liger_kernel") is None,
    reason="Triton or Liger-Kernel is not installed (pip install 'interlayer[gpu]'): the kernels cannot run",
)
def test_kernels_equal_the_eager_equation_under_the_interpreter():
    """Every kernel and a model dispatched to them against the eager equation (interpreted_kernels.py), run by pytest
    in a process with `TRITON_INTERPRET=1`."""
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    command.append(os.path.join(HERE, "interpreted_kernels.py"))
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " skipped" not in result.stdout, result.stdout[-2000:]


@pytest.fixture
def zoo_warnings():
    """The zoo's logger at WARNING for the test: an earlier test in the same process (an in-process `interlayer
    bench`, which sets transformers' verbosity to errors) may have raised it. `setLevel` also clears the logging
    module's cache of `isEnabledFor` answers."""
    logger = logging.getLogger("transformers.interlayer")
    level = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(level)


def test_dispatch_takes_the_pytorch_implementation_where_the_kernels_cannot_run(tmp_path, monkeypatch, zoo_warnings):
    """CPU streams and `hc_kernels=False` take the PyTorch implementation without a word; on a kernel device (the meta
    device stands in for CUDA here), a dtype the kernels do not take falls back with a warning, said once per
    process."""
    build_stock_llama(str(tmp_path))
    hc = LlamaMHCForCausalLM.from_pretrained(tmp_path, hc_mode="mhc").hyper_connections[0]
    assert dispatch.kernels_for(hc, torch.zeros(1, 4, 8)) is None
    monkeypatch.setattr(dispatch, "DEVICES", ("meta",))
    monkeypatch.setattr(dispatch, "_logged", set())
    streams = torch.zeros(1, 4, 8, dtype=torch.float64, device="meta")
    with CaptureLogger(hf_logging.get_logger("transformers.interlayer")) as captured:
        assert dispatch.kernels_for(hc, streams) is None
        assert dispatch.kernels_for(hc, streams) is None
    assert captured.out.count("streams of dtype torch.float64") == 1, captured.out
    assert "the PyTorch implementation runs instead" in captured.out
    monkeypatch.setattr(hc, "use_kernels", False)
    assert dispatch.kernels_for(hc, torch.zeros(1, 4, 8, device="meta")) is None


@pytest.mark.parametrize(
    "options, reason",
    [
        (dict(hc_mode="independent"), "hc_mode='independent'"),
        (dict(hc_mode="mhc", mhc_variant="deepseek_v4", hc_eps=1e-4), "hc_eps=0.0001"),
    ],
)
def test_forms_without_kernels_take_the_pytorch_implementation(tmp_path, monkeypatch, zoo_warnings, options, reason):
    """A form the kernels do not compute (Hy4's independent HC, DeepSeek-V4's formula at another `hc_eps`) runs the
    PyTorch implementation on a kernel device, and says why once (Qwen3.8's gated residual is a module of its own,
    which never asks for them)."""
    build_stock_llama(str(tmp_path))
    model = LlamaMHCForCausalLM.from_pretrained(tmp_path, **options)
    monkeypatch.setattr(dispatch, "DEVICES", ("meta",))
    monkeypatch.setattr(dispatch, "_logged", set())
    with CaptureLogger(hf_logging.get_logger("transformers.interlayer")) as captured:
        for hc in model.hyper_connections:
            assert dispatch.kernels_for(hc, torch.zeros(1, 4, 8, device="meta")) is None
    assert captured.out.count(reason) == 1, captured.out


def test_a_saved_model_loads_and_runs_where_triton_is_not_installed(tmp_path):
    """A saved (static) mHC model's remote code imports, loads and computes its logits in a process where neither
    Triton, Liger-Kernel nor interlayer can be imported; where its streams would take the kernels (CPU counted as a
    kernel device), it says once why the PyTorch implementation runs instead, and computes the same logits."""
    build_stock_llama(str(tmp_path / "stock"))
    model = LlamaMHCForCausalLM.from_pretrained(tmp_path / "stock", hc_mode="mhc", mhc_dynamic=False).eval()
    model.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "hyper_connections_triton.py").exists()  # the kernels travel with the model
    input_ids = lm_batch(lengths=(4,))["input_ids"]
    with torch.no_grad():
        torch.save((input_ids, model(input_ids).logits), tmp_path / "expected.pt")
    script = f"""
        import sys
        for name in ("triton", "liger_kernel", "interlayer"):
            sys.modules[name] = None  # not importable in this process
        import torch
        from transformers import AutoModelForCausalLM
        from transformers import logging as hf_logging
        from transformers.testing_utils import CaptureLogger
        model = AutoModelForCausalLM.from_pretrained({str(tmp_path / "saved")!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        package = type(model).__module__.rsplit(".", 1)[0]
        dispatch = sys.modules[package + ".hyper_connections_kernels"]
        input_ids, expected = torch.load({str(tmp_path / "expected.pt")!r})
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids).logits, expected)
            dispatch.DEVICES = ("cuda", "cpu")
            with CaptureLogger(hf_logging.get_logger("transformers.interlayer")) as captured:
                for _ in range(2):
                    torch.testing.assert_close(model(input_ids).logits, expected)
        assert captured.out.count("pip install 'interlayer[gpu]'") == 1, captured.out
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize(
    "precision, dtype, liger",
    [("highest", torch.float32, False), ("high", torch.float32, True), ("highest", torch.bfloat16, True)],
)
def test_fp32_coefficients_are_projected_exactly_unless_torch_allows_tf32(precision, dtype, liger):
    """The input-dependent coefficients' `RMSNorm(x) W` of fp32 streams is PyTorch's exact product while torch keeps
    fp32 products exact (its default); Liger-Kernel's projection, which multiplies fp32 in TF32 on Ampere and newer
    (relative errors up to 2.8e-3 in dynamic HC's logits on an H200), runs for lower precisions, and where the user
    allowed TF32."""
    g = torch.Generator().manual_seed(0)
    x, weight = torch.randn(5, 12, generator=g).to(dtype), torch.randn(12, 3, generator=g).to(dtype)
    called = []

    def liger_mm_norm(x, phi):
        called.append(x)
        return torch.full((x.shape[0], phi.shape[1]), 7.0), None

    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        got = dispatch.Kernels.project({"mm_norm": liger_mm_norm}, x, weight)
    finally:
        torch.set_float32_matmul_precision(saved)
    assert bool(called) == liger
    expected = torch.full((5, 3), 7.0) if liger else rms_norm(x.double()) @ weight.double()
    torch.testing.assert_close(got, expected.float())
