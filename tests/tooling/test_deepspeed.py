"""DeepSpeed ZeRO-2 and ZeRO-3 on CPU (2 processes, gloo) through the stock `Trainer`, against one plain process; and
`from_pretrained` under ZeRO-3's `zero.Init` for a pruned grouped-query sentinel checkpoint.

`deepspeed_train.py` trains one class of every mechanism, and static HC, on the same 8 examples (4 SGD steps): once
in one plain process (batch 8), once under ZeRO-2 and once under ZeRO-3 (each `torch.distributed.run --nproc_per_node
2`, 4 + 4), evaluating each model without gradient after its first step and after training; the ZeRO-3 run also loads
a pruned grouped-query sentinel, a latent and a hyper-connection checkpoint under `zero.Init`.
The three launches run side by side, once for the module. Tolerances as in `test_multiprocess.py`: losses
`rtol=1e-6, atol=1e-6`, weights `rtol=1e-5, atol=5e-6`; the ranks of one run must agree exactly.

Needs the `deepspeed` extra (`pip install -e ".[deepspeed]"`; `make test` installs it).
"""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed", reason='deepspeed is not installed (pip install -e ".[deepspeed]")')

from conformance_cases import examples  # noqa: E402
from deepspeed_train import CASES, LOAD_CASE, LOADS, evaluation_logits  # noqa: E402
from distributed_runs import assert_trains, free_port, load_rank, losses, run_side_by_side  # noqa: E402

SCRIPT = Path(__file__).with_name("deepspeed_train.py")
STAGES = (2, 3)
ATTENTION_BRIDGE = next(n for n, tiny in examples(distributed=True).items() if tiny.record.name == "attention-bridge")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("deepspeed")
    names = list(CASES)
    commands = [[sys.executable, str(SCRIPT), str(root / "plain"), "0", *names]]
    for stage in STAGES:
        launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
        launch += ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
        load_case = [LOAD_CASE] if stage == 3 else []
        commands.append([*launch, str(SCRIPT), str(root / f"zero{stage}"), str(stage), *names, *load_case])
    run_side_by_side(commands, timeout=600)
    return root


# Known defect, open: under transformers 5.24 (not 5.23) ZeRO-3 ends the Marian attention-bridge run with its frozen
# sinusoidal position tables changed (decoder up to 1.3e-3, encoder 3.6e-6 against the plain run; every trained
# weight within 7e-6) and losses 1.4e-4 apart by the fourth step. Strict: the test fails once this is fixed.
MARIAN_ZERO3_524 = (
    "ZeRO-3 changes the Marian attention bridge's frozen sinusoidal position tables under transformers 5.24 "
    "(docs/multiprocess.md)"
)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("stage", STAGES)
def test_zero_trains_as_one_plain_process(runs, stage, name, request):
    """Same global batch: the same loss at every step and the same final weights (gathered from the partitions) as
    the plain Trainer in one process."""
    import transformers

    if (stage, name) == (3, ATTENTION_BRIDGE) and transformers.__version__.startswith("5.24"):
        request.applymarker(pytest.mark.xfail(strict=True, reason=MARIAN_ZERO3_524))
    one, zero = load_rank(runs, "plain", name, 0), load_rank(runs, f"zero{stage}", name, 0)
    assert (one["world_size"], one["deepspeed"]) == (1, False)
    assert (zero["world_size"], zero["deepspeed"]) == (2, True)
    assert len(losses(one)) == 4
    assert_trains(losses(one))
    torch.testing.assert_close(losses(zero), losses(one), rtol=1e-6, atol=1e-6)
    assert zero["state_dict"].keys() == one["state_dict"].keys()
    for key, value in one["state_dict"].items():
        torch.testing.assert_close(zero["state_dict"][key], value, rtol=1e-5, atol=5e-6, msg=lambda m: f"{key}: {m}")


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("stage", STAGES)
def test_zero_trained_model_evaluates_as_its_weights(runs, stage, name):
    """Evaluated without gradient in the training process after the ZeRO steps (which write the trained weights in
    place, through `.data`), having been evaluated so before training, the model computes what a fresh model given
    its final weights computes: nothing it derives from its weights (static HC's coefficients) is kept stale."""
    _, model_class, options, rows, _ = CASES[name]
    zero = load_rank(runs, f"zero{stage}", name, 0)
    fresh = model_class.from_pretrained(runs / f"zero{stage}" / name / "stock_rank0", **options)
    fresh.load_state_dict(zero["state_dict"])
    torch.testing.assert_close(zero["evaluated"], evaluation_logits(fresh, rows()))


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("stage", STAGES)
def test_zero_ranks_agree(runs, stage, name):
    rank0, rank1 = load_rank(runs, f"zero{stage}", name, 0), load_rank(runs, f"zero{stage}", name, 1)
    for key, value in rank0["state_dict"].items():
        torch.testing.assert_close(rank1["state_dict"][key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")
    assert losses(rank1).tolist() == losses(rank0).tolist()


@pytest.mark.parametrize("name", LOADS)
def test_from_pretrained_under_zero3_init_loads_as_a_plain_load(runs, name):
    """With the Trainer's ZeRO-3 config alive, transformers builds the model under `deepspeed.zero.Init` and loads the
    checkpoint into the partitions: every parameter is partitioned (the mechanism's own gates and read-outs too: each
    rank held none of it before gathering), and the gathered model has the weights and buffers and computes the
    logits of a plain load; for `sentinel_pruned_gqa`, a Llama sentinel model pruned to uneven key/value groups."""
    for rank in (0, 1):
        loads = torch.load(runs / "zero3" / LOAD_CASE / f"rank{rank}.pt", weights_only=False)[name]
        plain, zero3 = loads["plain"], loads["zero3"]
        assert not plain["zero3"] and zero3["zero3"]
        assert zero3["unpartitioned"] == [], "zero.Init left these parameters whole"
        assert plain["held"] == plain["elements"] == zero3["elements"] and zero3["held"] == 0
        assert zero3["state_dict"].keys() == plain["state_dict"].keys()
        for key, value in plain["state_dict"].items():
            torch.testing.assert_close(zero3["state_dict"][key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")
        torch.testing.assert_close(zero3["logits"], plain["logits"], rtol=0, atol=0)
