"""`interlayer bench --quick`: one harness for the zoo writes a sane JSON record and markdown table (no timed
assertion: only that every figure is there, positive and consistent with the turns it was computed from)."""

import json
import statistics

import pytest

from interlayer.bench import CASES, TINY, write_record
from interlayer.cli import main

# 1 thread: the suite's processes share the cores, and the default 2 threads beside another busy process
# oversubscribe them (this module took 5.7 minutes so in a run of the suite on 2 cores, 1.8 minutes alone)
QUICK = ("--quick", "--threads", "1")
FAMILY_CASES = ["hc-static", "bridge-H9", "sentinel", "attention-bridge"]  # one case per stock family


def table_rows(markdown: str, header: str) -> list[str]:
    """The rows (header first, no separator) of the one table of `markdown` whose header contains `header`."""
    blocks = [block.splitlines() for block in markdown.split("\n\n") if block.startswith("| ")]
    (table,) = [b for b in blocks if header in b[0]]
    return [line for line in table if "---" not in line]


def check_phases(r, phases, rounds):
    """Each phase's turns are positive and its ratios, median and spread are computed from them."""
    for phase in phases:
        p = r[phase]
        assert len(p["stock"]) == rounds + 1 and len(p["model"]) == len(p["ratios"]) == rounds
        assert all(t > 0 for t in p["stock"] + p["model"])
        expected = [m / ((a + b) / 2) for m, a, b in zip(p["model"], p["stock"], p["stock"][1:])]
        assert p["ratios"] == pytest.approx(expected)
        assert p["median"] == pytest.approx(statistics.median(expected))
        assert p["min"] <= p["median"] <= p["max"]


def check_record(record, cases, rounds):
    assert [r["case"] for r in record["cases"]] == cases
    assert record["rounds"] == rounds and record["machine"]["threads"] == 1 and record["machine"]["torch"]
    for r in record["cases"]:
        assert r["mechanism"] == CASES[r["case"]].mechanism
        case = CASES[r["case"]]
        phases = ["train_eager"] * case.train + ["forward_eager"] * case.forward
        phases += ["decode_eager"] if case.family != "bert" else []
        assert sorted(k for k in r if k.endswith("_eager")) == sorted(phases), r["case"]
        check_phases(r, phases, rounds)


def test_quick_bench_writes_json_and_markdown_for_every_family(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["bench", *QUICK, "--in-process", "--rounds", "2", "--cases", *FAMILY_CASES, "--out", str(out)]) == 0
    record = json.loads((out / "bench.json").read_text())
    check_record(record, FAMILY_CASES, rounds=2)
    assert (
        record["command"]
        == f"interlayer bench --quick --threads 1 --in-process --rounds 2 --cases {' '.join(FAMILY_CASES)} --out {out}"
    )
    classes = {r["case"]: r["class"] for r in record["cases"]}
    assert classes == {
        "hc-static": "LlamaMHCForCausalLM",
        "bridge-H9": "BertBridgeForSequenceClassification",
        "sentinel": "GPT2SentinelLMHeadModel",
        "attention-bridge": "MarianAttentionBridgeForConditionalGeneration",
    }
    table = (out / "bench.md").read_text()
    rows = table_rows(table, "| step ratio |")
    assert len(rows) == 1 + len(FAMILY_CASES)
    for r, row in zip(record["cases"], rows[1:]):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:2] == [r["case"], r["class"]]
        flops = r["train_flops"]
        assert flops["stock"] > 0 and flops["model"] > 0
        assert cells[2] == f"{flops['model'] / flops['stock']:.2f}x"
        assert cells[3].startswith(f"{r['train_eager']['median']:.2f}x")
        assert (
            cells[7] == "-" if r["case"] == "bridge-H9" else cells[7].startswith(f"{r['decode_eager']['median']:.2f}x")
        )
    assert table in capsys.readouterr().out


def test_quick_bench_says_its_ratios_are_a_smoke_test_not_figures(tmp_path, capsys):
    """Tiny shapes give ratios such as 97x peak memory: the record, the markdown and the printed table say that
    they are a smoke test; a full run's record carries no such caveat."""
    out = tmp_path / "bench"
    assert main(["bench", *QUICK, "--in-process", "--cases", "hc-static", "--out", str(out)]) == 0
    record = json.loads((out / "bench.json").read_text())
    assert "Smoke test" in record["caveat"] and "not overhead figures" in record["caveat"]
    table = (out / "bench.md").read_text()
    assert table.startswith(f"**{record['caveat']}**")
    assert record["caveat"] in capsys.readouterr().out
    full = write_record(tmp_path, record["cases"], "interlayer bench", 2, quick=False, rounds=1, steps=1)
    assert "caveat" not in full and "Smoke test" not in (tmp_path / "bench.md").read_text()


PRUNE_CASES = ["sentinel-prune-30", "sentinel-prune-70"]


def test_pruned_sentinel_cases_time_the_forward_against_the_attention_flops_removed(tmp_path):
    """GPT-2 with a fraction of its heads pruned: no training turns, inference forwards and decoding against stock,
    the heads left, the attention FLOPs removed (every GPT-2 head costs the same, so their share) and the forward's
    FLOPs ratio, in a second table."""
    out = tmp_path / "bench"
    assert main(["bench", *QUICK, "--in-process", "--cases", *PRUNE_CASES, "--out", str(out)]) == 0
    record = json.loads((out / "bench.json").read_text())
    check_record(record, PRUNE_CASES, rounds=1)
    table = (out / "bench.md").read_text()
    assert "| step ratio |" not in table  # no case trains, so no training table
    rows = table_rows(table, "| forward ratio |")
    assert len(rows) == 1 + len(PRUNE_CASES) and "| attention FLOPs removed | forward FLOPs ratio |" in rows[0]
    for r, row in zip(record["cases"], rows[1:]):
        assert "train_flops" not in r and r["class"] == "GPT2SentinelLMHeadModel"
        shape, (batch, seq) = r["shape"], r["train_batch"]
        heads = r["heads"]
        assert heads["stock"] == shape["n_layer"] * shape["n_head"]
        assert heads["model"] == heads["stock"] - round(CASES[r["case"]].prune_fraction * heads["stock"])
        flops = r["forward_flops"]
        # stock attention per layer: the q, k, v and output projections and the score and value products (dense)
        width = shape["n_embd"]
        layer = 2 * batch * seq * 4 * width * width + 4 * batch * seq * seq * width
        assert flops["stock"]["attention"] == shape["n_layer"] * layer
        assert flops["attention_removed"] == pytest.approx(1 - heads["model"] / heads["stock"])
        assert flops["attention_removed"] == pytest.approx(
            1 - flops["model"]["attention"] / flops["stock"]["attention"]
        )
        # only the attention changes: the rest of the forward costs stock and pruned model the same
        assert flops["stock"]["total"] - flops["model"]["total"] == (
            flops["stock"]["attention"] - flops["model"]["attention"]
        )
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:3] == [r["case"], r["class"], f"{heads['model']}/{heads['stock']}"]
        assert cells[3] == f"{flops['attention_removed']:.0%}"
        assert cells[4] == f"{flops['model']['total'] / flops['stock']['total']:.2f}x"
        assert cells[5].startswith(f"{r['forward_eager']['median']:.2f}x") and cells[6] == "-"
        assert cells[8].startswith(f"{r['decode_eager']['median']:.2f}x")


def test_compiled_training_and_the_reason_a_cache_without_a_static_form_is_not_decoded_compiled(tmp_path):
    """`--compile` adds the compiled training step (the whole model compiled, stock alike); a model whose cache has no
    static form (latent) gets the reason instead of compiled decoding figures, and its other phases are still
    measured. Compiled decoding, which `generate` compiles whatever `--compile` says, is the next test's."""
    out = tmp_path / "bench"
    assert main(["bench", *QUICK, "--in-process", "--compile", "--cases", "latent", "--out", str(out)]) == 0
    record = json.loads((out / "bench.json").read_text())
    check_record(record, ["latent"], rounds=1)
    (latent,) = record["cases"]
    assert latent["compile"] == "model"
    check_phases(latent, ["train_compiled"], rounds=1)
    assert "StaticCache" in latent["decode_compiled"]["not_measured"]
    cells = compiled_cells(out)
    assert cells["latent"][4].startswith(f"{latent['train_compiled']['median']:.2f}x")
    assert cells["latent"][8] == "-"


def compiled_cells(out) -> dict[str, list[str]]:
    """The cells of each case's row of bench.md's table with compiled turns."""
    rows = table_rows((out / "bench.md").read_text(), "| step ratio |")
    return {row.split("|")[1].strip(): [c.strip() for c in row.strip("|").split("|")] for row in rows[1:]}


def test_regional_compilation_compiles_each_repeated_block_once_for_all(tmp_path):
    """`--compile regional` compiles every decoder layer of stock and model on its own (accelerate's
    `compile_regions`): the record has the compiled training step, its first call's seconds (the compilation) and
    the compiled decoding (a static cache, compiled by `generate`), and the number of graphs compiled does not grow
    with the number of layers."""
    import torch
    from accelerate.utils import compile_regions
    from torch._dynamo.utils import counters

    from interlayer.bench import build_stock, case_inputs, training_step
    from interlayer.zoo import convert

    out = tmp_path / "bench"
    arguments = [*QUICK, "--in-process", "--compile", "regional", "--cases", "hc-static", "--out", str(out)]
    assert main(["bench", *arguments]) == 0
    (hc,) = json.loads((out / "bench.json").read_text())["cases"]
    assert hc["compile"] == "regional"
    check_phases(hc, ["train_compiled", "decode_compiled"], rounds=1)
    assert all(hc["train_compiled"]["first_call_s"][who] > 0 for who in ("stock", "model"))
    cells = compiled_cells(out)
    assert cells["hc-static"][4].startswith(f"{hc['train_compiled']['median']:.2f}x")
    assert cells["hc-static"][8].startswith(f"{hc['decode_compiled']['median']:.2f}x")

    graphs = {}
    for layers in (2, 4):
        folder = str(tmp_path / f"stock{layers}")
        build_stock("llama", {**TINY["llama"], "num_hidden_layers": layers}, folder)
        # static HC, the cheapest to compile: what dynamo guarded on was Python-side state that every mode has
        model, _ = convert(folder, mechanism="hyper-connections", hc_mode="static", freeze_base=False)
        torch._dynamo.reset()
        counters.clear()
        inputs = {**case_inputs("llama", 128, 2, 12), "use_cache": False}
        training_step(compile_regions(model), inputs)()
        graphs[layers] = counters["stats"]["unique_graphs"]
    assert graphs[2] == graphs[4] > 0


def test_bench_runs_a_case_in_its_own_process(tmp_path):
    """The default: each case in a subprocess with its own memory (its peak resident memory is measured)."""
    out = tmp_path / "bench"
    assert main(["bench", *QUICK, "--cases", "hc-static", "--out", str(out)]) == 0
    record = json.loads((out / "bench.json").read_text())
    check_record(record, ["hc-static"], rounds=1)
    assert record["cases"][0]["train_eager"]["peak_rss_mb"]["model"] > 0


def test_bench_refuses_an_unknown_case(tmp_path, capsys):
    assert main(["bench", *QUICK, "--cases", "mhc", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown case 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "bench.json").exists()


def test_memory_traffic_counts_what_each_operation_reads_and_writes():
    """Every aten operation's tensor arguments and results, a broadcast dimension read once, views free; forward and
    backward both counted."""
    import torch

    from interlayer.bench import memory_traffic

    a, b = torch.ones(4, 8), torch.ones(8)
    with memory_traffic() as traffic:
        a + b  # reads 4 x 8 and 8 values, writes 4 x 8
    assert traffic.bytes == 4 * (32 + 8 + 32) and traffic.ops == 1
    with memory_traffic() as traffic:
        a.view(8, 4).t()
        b.expand(4, 8) * 2.0  # the expanded operand is read as its 8 values
    assert traffic.bytes == 4 * (8 + 32) and traffic.ops == 1
    w = torch.ones(4, 8, requires_grad=True)
    with memory_traffic() as forward_only:
        (w * 3.0).sum()
    with memory_traffic() as both:
        (w * 3.0).sum().backward()
    assert both.bytes > forward_only.bytes


def test_traffic_of_hyper_connections_is_their_k_streams(tmp_path):
    """The record counts each training step's and decoded token's bytes for stock and model, and the table shows
    them: K = 4 residual streams move more bytes than stock's one, a pruned GPT-2 fewer when decoding."""
    out = tmp_path / "bench"
    cases = ["hc-static", "sentinel-prune-70"]
    assert main(["bench", *QUICK, "--in-process", "--cases", *cases, "--out", str(out)]) == 0
    hc, pruned = json.loads((out / "bench.json").read_text())["cases"]
    assert hc["train_bytes"]["model"] > hc["train_bytes"]["stock"] > 0
    assert hc["decode_bytes"]["model"] > hc["decode_bytes"]["stock"] > 0
    assert "train_bytes" not in pruned and 0 < pruned["decode_bytes"]["model"] < pruned["decode_bytes"]["stock"]
    assert hc["decode_ops"]["model"] > hc["decode_ops"]["stock"] > 0  # the streams' read-in, write and mixing
    rows = table_rows((out / "bench.md").read_text(), "| training bytes ratio |")
    cells = {row.split("|")[1].strip(): [c.strip() for c in row.strip("|").split("|")] for row in rows[1:]}
    shape = hc["per_token_layer"]
    (batch, seq), vector = hc["train_batch"], shape["hidden_size"] * shape["bytes"] * shape["layers"]
    extra = (hc["train_bytes"]["model"] - hc["train_bytes"]["stock"]) / (batch * seq * vector)
    assert cells["hc-static"][2:4] == [
        f"{hc['train_bytes']['model'] / hc['train_bytes']['stock']:.2f}x",
        f"{extra:.1f}",
    ]
    assert cells["sentinel-prune-70"][2:4] == ["-", "-"]
    assert cells["hc-static"][6] == f"{hc['decode_ops']['model']:.0f} ({hc['decode_ops']['stock']:.0f})"


@pytest.mark.parametrize(
    "device, message",
    [("tpu", "the devices are cpu, cuda and cuda:N"), ("cpu:1", "the devices are"), ("cuda:x", "the devices are")],
)
def test_bench_refuses_a_device_it_cannot_use(tmp_path, capsys, device, message):
    assert main(["bench", *QUICK, "--cases", "mhc", "--device", device, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--device: got {device!r}" in err and message in err
    assert not (tmp_path / "bench.json").exists()


def test_bench_on_cuda_without_a_gpu_says_so(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: `--device cuda` runs")
    assert main(["bench", *QUICK, "--cases", "mhc", "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "--device: 'cuda' needs a GPU, and torch.cuda.is_available() is False here" in capsys.readouterr().err


def test_the_counts_run_after_every_timed_turn(monkeypatch):
    """The FLOPs and memory-traffic counts (dispatch modes over a training step and over `generate`) come after the
    timed training steps and decoding: a dispatch mode over `generate` left the process slower at decoding mHC
    afterwards (1.18x to 1.30x of stock per token)."""
    from interlayer import bench

    calls = []
    for name in ("training_flops", "training_bytes", "decoding_traffic", "generation_seconds", "_timed_turns"):
        original = getattr(bench, name)

        def spy(*args, name=name, original=original, **kwargs):
            calls.append(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(bench, name, spy)
    record = bench.measure_case("mhc", quick=True, rounds=1, steps=1, compile=None)
    timed = [i for i, name in enumerate(calls) if name in ("generation_seconds", "_timed_turns")]
    counted = [i for i, name in enumerate(calls) if name not in ("generation_seconds", "_timed_turns")]
    assert timed and counted and max(timed) < min(counted), calls
    assert record["decode_bytes"]["model"] > 0 and record["train_flops"]["model"] > 0
