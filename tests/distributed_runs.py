"""Launching the training scripts of the multi-process tests (`tooling/*_train.py`) side by side, and reading what
each rank saved."""

import os
import socket
import subprocess
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def script_env() -> dict[str, str]:
    """The environment a launched script runs in: one thread per process, this checkout's `interlayer` importable."""
    path = [str(REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def run_side_by_side(commands, timeout):
    """Starts every command at once and waits for all; each must succeed (the failure shows the end of its output)."""
    env = script_env()
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for cmd in commands
    ]
    for cmd, proc in zip(commands, procs):
        out, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{out[-4000:]}"


def load_rank(root, run, name, rank):
    return torch.load(root / run / name / f"rank{rank}.pt", weights_only=False)


def losses(result):
    return torch.tensor([row["loss"] for row in result["log_history"] if "loss" in row], dtype=torch.float64)


# the least fall of the loss over a run that counts as training: 20 float32 roundings of a loss near ln(128) = 4.85
# (one rounding is 4.8e-7), so that a run whose loss moves by rounding alone fails
TRAINS_BY = 1e-5


def assert_trains(steps) -> None:
    """The loss fell over the run by more than `TRAINS_BY`: the parameters moved the outputs, not only the rounding."""
    steps = [float(x) for x in steps]
    assert steps[0] - steps[-1] > TRAINS_BY, f"the run does not train: losses {steps}"
