"""Data-parallel training on CPU (2 processes, gloo) through the stock `Trainer`, against one process.

`multiprocess_train.py` trains every case on the same 8 examples, one step per epoch, 4 epochs: once in one process
(batch 8) and once under `torch.distributed.run --nproc_per_node 2` (4 + 4, the same global batch, see its
docstring). The two launches run side by side, once for the whole module. Each rank saves its loss log, state dict
and callback states.

Tolerances: losses `rtol=1e-6, atol=1e-6` (measured differences <= 1e-6, float32 rounding of the reduction order);
weights after 4 AdamW steps `rtol=1e-5, atol=5e-6` (measured <= 1.2e-6). The ranks of one run must agree exactly.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conformance_cases import examples
from distributed_runs import assert_trains, free_port, load_rank, losses, run_side_by_side, script_env
from multiprocess_train import CASES

SCRIPT = Path(__file__).with_name("multiprocess_train.py")
# the cases of the mechanisms' records (the sentinel's training tools are the others)
MECHANISM_CASES = [name for name in CASES if name in examples()]
LATENT = next(name for name, tiny in examples(distributed=True).items() if tiny.record.name == "latent")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("multiprocess")
    names = list(CASES)
    one = [sys.executable, str(SCRIPT), str(root / "one"), *names]
    two = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(SCRIPT),
        str(root / "two"),
        *names,
    ]
    run_side_by_side([one, two], timeout=300)
    return root


@pytest.mark.parametrize("name", CASES)
def test_two_processes_match_one(runs, name):
    """Same global batch: the same loss at every step and the same final weights and buffers (gates, masks)."""
    one, two = load_rank(runs, "one", name, 0), load_rank(runs, "two", name, 0)
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert len(losses(one)) == 4
    assert_trains(losses(one))
    torch.testing.assert_close(losses(two), losses(one), rtol=1e-6, atol=1e-6)
    assert two["state_dict"].keys() == one["state_dict"].keys()
    for key, value in one["state_dict"].items():
        torch.testing.assert_close(two["state_dict"][key], value, rtol=1e-5, atol=5e-6, msg=lambda m: f"{key}: {m}")


@pytest.mark.parametrize("name", CASES)
def test_ranks_agree(runs, name):
    """Both ranks end with identical weights, buffers (gate logits, head masks), callback state (controller, growth)
    and loss logs, mechanism statistics included."""
    rank0, rank1 = load_rank(runs, "two", name, 0), load_rank(runs, "two", name, 1)
    for key, value in rank0["state_dict"].items():
        torch.testing.assert_close(rank1["state_dict"][key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")
    assert rank1["callbacks"] == rank0["callbacks"]
    logs0 = [row for row in rank0["log_history"] if "loss" in row]
    logs1 = [row for row in rank1["log_history"] if "loss" in row]
    assert logs1 == logs0


def test_accelerate_launch_multi_gpu_runs_two_cpu_processes(runs, tmp_path):
    """docs/multiprocess.md's accelerate form: `accelerate launch --multi_gpu --num_processes 2` with `use_cpu=True,
    ddp_backend="gloo"` in the script starts two CPU processes, which end where `torch.distributed.run`'s ended."""
    env = script_env()
    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    accelerate += ["--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port())]
    result = subprocess.run(
        [*accelerate, str(SCRIPT), str(tmp_path), LATENT], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "find_unused_parameters=True was specified" not in result.stderr
    for rank in (0, 1):
        launched, reference = (
            load_rank(tmp_path, ".", LATENT, rank),
            load_rank(runs, "two", LATENT, rank),
        )
        assert launched["world_size"] == 2
        torch.testing.assert_close(losses(launched), losses(reference), rtol=0, atol=0)


def test_mean_tensor_over_ranks(runs):
    """The helper the callbacks use to agree across ranks: rank r contributes [r + 1, 2] with weight r + 1."""
    for rank in (0, 1):
        result = torch.load(runs / "two" / f"mean_over_ranks_rank{rank}.pt")
        torch.testing.assert_close(result, torch.tensor([5 / 3, 2.0]))
    torch.testing.assert_close(torch.load(runs / "one" / "mean_over_ranks_rank0.pt"), torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("name", MECHANISM_CASES)
def test_mechanism_stats_are_logged_for_the_whole_batch(runs, name):
    """`MechanismStatsCallback` averages the statistics over the ranks, so the two-process log carries those of the
    one-process run: to float rounding for means over examples (hyper-connection and attention-bridge statistics,
    <= 4e-7 relative measured), to <= 2.8e-3 relative measured for norms of a whole micro-batch (the bridges'
    `inject_norm`, the latent `adjustment_ratio`), whose mean over two halves is not the whole's."""
    one, two = load_rank(runs, "one", name, 0), load_rank(runs, "two", name, 0)
    rows_one = [row for row in one["log_history"] if "loss" in row]
    rows_two = [row for row in two["log_history"] if "loss" in row]
    stats = sorted(k for k in rows_one[0] if "/" in k)
    assert stats, f"{name} logs no statistics"
    for a, b in zip(rows_one, rows_two):
        torch.testing.assert_close(
            torch.tensor([b[k] for k in stats]), torch.tensor([a[k] for k in stats]), rtol=5e-3, atol=1e-6
        )
