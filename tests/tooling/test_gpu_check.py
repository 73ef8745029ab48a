"""benchmarks/gpu_check.py and gpu_contract.py, as far as a CPU runs them: the contract's checks on one tiny model, a
check that raises, the time budget and the tables."""

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import gpu_check
    import gpu_contract

    yield gpu_check, gpu_contract
    for name in ("gpu_check", "gpu_contract"):
        sys.modules.pop(name, None)


CHECKS = ["identity", "identity", "device parity", "training", "cached decoding", "sdpa", "flash"]


def test_the_contract_checks_run_and_pass_on_a_cpu(scripts):
    """Every check of one example runs on CPU tensors and passes, except flash attention, which says it needs CUDA."""
    _, contract = scripts
    rows = contract.Checker("LlamaDWA", "cpu").run()
    assert [row["check"] for row in rows] == CHECKS
    flash = rows.pop()
    assert flash["ok"] is None and "CUDA" in flash["note"], flash
    assert all(row["ok"] is True for row in rows), [row for row in rows if row["ok"] is not True]


def test_a_check_that_raises_is_a_failed_row_and_the_others_still_run(scripts, monkeypatch):
    _, contract = scripts

    def broken(self, folder, batch):
        raise RuntimeError("no kernel for this")

    monkeypatch.setattr(contract.Checker, "sdpa", broken)
    rows = contract.Checker("LlamaDWA", "cpu").run()
    assert [row["check"] for row in rows] == CHECKS
    sdpa = rows[CHECKS.index("sdpa")]
    assert sdpa["ok"] is False and sdpa["note"] == "RuntimeError: no kernel for this", sdpa


def test_stages_past_the_time_budget_are_recorded_as_skipped(scripts, tmp_path):
    check, _ = scripts
    code = check.main(["--quick", "--stages", "speed", "bench", "--budget-s", "0", "--out", str(tmp_path)])
    assert code == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(report["stages"]) == {"speed", "bench"}
    assert all(what.startswith("skipped: ") and "--budget-s 0" in what for what in report["stages"].values())
    assert report["speed"] == [] and report["bench"] is None
    assert "- speed: skipped: " in (tmp_path / "gpu_check.md").read_text()


def test_the_tables_show_failed_and_skipped_rows(scripts):
    check, _ = scripts
    report = {
        "device_name": "a GPU",
        "dtype_timed": "torch.bfloat16",
        "date": "today",
        "versions": {"torch": "2.11", "python": "3.12", "flash_attn": None},
        "stages": {"kernels": "ran in 3 s"},
        "contract": [],
        "correctness": [{"form": "mhc", "ok": False, "error": "CompilationError: at 3:4"}],
        "speed": [{"shape": "tiny", "model": "mhc K=4, kernels", "skipped": "failed: OutOfMemoryError"}],
        "bench": None,
    }
    table = check.markdown(report)
    assert "torch 2.11" in table and "flash_attn" not in table
    assert "| mhc | failed: CompilationError: at 3:4 |  |  |  |  |  | False |" in table
    assert "| tiny | mhc K=4, kernels | skipped: failed: OutOfMemoryError |  |  |  |" in table
