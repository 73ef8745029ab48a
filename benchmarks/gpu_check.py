#!/usr/bin/env python
"""The GPU check: the contract and the hyper-connection kernels on a device, and their cost against stock, in one
command, offline, sized for one GPU in under 8 minutes.

    make gpu-check                                           # = python benchmarks/gpu_check.py --out runs/gpu_check
    python benchmarks/gpu_check.py --quick                   # tiny shapes, 2 steps: what a CPU can run of it

Four stages, in this order (`--stages` picks some), each written to the output as it finishes a row:

1. `contract`: the conformance suite's core checks on the device for one or more tiny models of every mechanism
   (benchmarks/gpu_contract.py: identity in fp32 and bf16, CPU-device parity of a training step's outputs and
   gradients, a bf16 training run, cached decoding, sdpa against eager, flash attention where installed).
2. `kernels`: for every form of hyper-connection (static HC, dynamic HC, input-dependent and static mHC, DeepSeek-V4's
   mHC), a tiny Llama with random hyper-connection parameters, fp32 and bf16: the logits and every parameter's
   gradient of a training step, and the logits without grad, of the default implementation (on CUDA: the kernels,
   which it checks were dispatched: a check fails where they were not) against `hc_implementation="eager"`, the
   equation, in fp32, as relative errors `max|a - b| / max|b|` per tensor (for a gradient, over `max|b|` plus a tenth
   of the model's largest gradient; the worst gradient is named): at most 1e-4 in fp32; in bf16 at most twice the
   bf16 equation's own error (plus 1e-3), since bf16 rounding alone moves both.
3. `speed`: at the SmolLM2-135M shape and a Llama of Qwen3-0.6B's shape (`--quick`: the tiny one), random weights, bf16
   on CUDA (fp32 on a CPU): the median training step (forward + backward + AdamW, batch 4 x 256) and the greedy
   decoding time per token (prompt 32, 32 new tokens, batch 1) of stock, and of static HC and mHC at K = 4 with the
   kernels and without them (`hc_kernels=False`), as ratios to stock measured in the same process.
4. `bench`: `interlayer bench --device <device> --cases hc-static mhc` (fp32, SmolLM2's shape), whose table adds the
   memory-traffic counts, in `--out`/bench.

`--budget-s` bounds the whole: a stage (or a timed model) that would start later is recorded as skipped, and the
bench is stopped then. A check or a configuration that raises is a row that says so, and the others still run.
Writes gpu_check.json (the device, the versions, every figure) and gpu_check.md (the tables) in `--out`, and exits
with 1 when a correctness check fails. Without CUDA the kernels are not dispatched (the CPU runs the PyTorch
implementation), so the correctness step checks that implementation and says so; the figures are the CPU's.
"""

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import transformers
from gpu_contract import (
    EXAMPLES,
    ROOT,
    contract_rows,
    relative_error,
    worst_gradient,
)  # first: it puts the checkout on the path

from interlayer import LlamaMHCForCausalLM
from interlayer.bench import SMOLLM2_SHAPE, build_stock, case_inputs, measure_steps, synchronize, training_step
from interlayer.models import hyper_connections_kernels as dispatch

FORMS = {
    "hc-static": dict(hc_mode="static"),
    "hc-dynamic": dict(hc_mode="dynamic"),
    "mhc": dict(hc_mode="mhc"),
    "mhc-static": dict(hc_mode="mhc", mhc_dynamic=False),
    "mhc-deepseek-v4": dict(hc_mode="mhc", mhc_variant="deepseek_v4"),
}
FP32_TOLERANCE = 1e-4
BF16_SLACK = 1e-3
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=256,
    max_position_embeddings=256,
    tie_word_embeddings=True,
)
QWEN3_06B_SHAPE = dict(  # Qwen3-0.6B's sizes as a Llama (no q/k norm): what its step costs, not its function
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
TIMED = {
    "hc-static K=4": dict(hc_mode="static", hc_streams=4),
    "mhc K=4": dict(hc_mode="mhc", hc_streams=4),
}


def randomised(folder: str, device: str, dtype, **options):
    model = LlamaMHCForCausalLM.from_pretrained(folder, **options)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "hc_" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.to(device=device, dtype=dtype)


def run(folder: str, device: str, dtype, input_ids, **options) -> tuple:
    """A training step's logits and gradients, the logits without grad, and the model."""
    model = randomised(folder, device, dtype, **options).train()
    logits = model(input_ids).logits
    cotangent = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1)).to(logits)
    (logits * cotangent).sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        no_grad = model.eval()(input_ids).logits
    return logits.detach(), grads, no_grad, model


def errors(got: tuple, reference: tuple) -> dict:
    (logits, grads, no_grad, _), (ref_logits, ref_grads, ref_no_grad, _) = got, reference
    worst, worst_error = worst_gradient(grads, ref_grads)
    return {
        "logits": relative_error(logits, ref_logits),
        "logits_no_grad": relative_error(no_grad, ref_no_grad),
        "worst_grad": worst_error,
    }, worst


def check_form(folder: str, device: str, options: dict) -> list[dict]:
    """The default implementation (the kernels, where they are dispatched) against the equation in fp32: in fp32 its
    relative errors are at most `FP32_TOLERANCE`; in bf16 at most twice the bf16 equation's own, plus
    `BF16_SLACK`."""
    input_ids = case_inputs("llama", TINY["vocab_size"], 2, 33)["input_ids"].to(device)
    reference = run(folder, device, torch.float32, input_ids, hc_implementation="eager", **options)
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        fast = run(folder, device, dtype, input_ids, **options)
        got, worst = errors(fast, reference)
        if dtype == torch.float32:
            ok = max(got.values()) <= FP32_TOLERANCE
            bound = dict.fromkeys(got, FP32_TOLERANCE)
        else:
            eager = errors(run(folder, device, dtype, input_ids, hc_implementation="eager", **options), reference)[0]
            bound = {k: 2 * v + BF16_SLACK for k, v in eager.items()}
            ok = all(got[k] <= bound[k] for k in got)
        kernels = dispatch.kernels_for(fast[3].hyper_connections[0], torch.empty(0, device=device, dtype=dtype))
        ok = ok and (kernels is not None or device == "cpu")
        rows.append(
            {
                "dtype": str(dtype),
                "kernels": kernels is not None,
                **got,
                "worst_grad_of": worst,
                "bound": bound,
                "ok": ok,
            }
        )
    return rows


def decode_seconds_per_token(model, prompt, new_tokens: int) -> float:
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    device = str(prompt.device)
    times = []
    with torch.no_grad():
        model.generate(prompt, **kwargs)  # warm-up
        for _ in range(3):
            synchronize(device)
            start = time.perf_counter()
            model.generate(prompt, **kwargs)
            synchronize(device)
            times.append((time.perf_counter() - start) / new_tokens)
    return statistics.median(times)


def time_shape(name: str, shape: dict, device: str, dtype, quick: bool, add, deadline: float = float("inf")) -> None:
    """Stock, then each timed form with and without the kernels, then stock again: step and decoding ratios to the
    first stock run as each row is added (`add(row)`), to the faster of the two stock runs once both ran. A
    configuration that would start after `deadline` (a `time.perf_counter()`) is left out, and said so."""
    batch, seq, steps, new_tokens = (2, 16, 2, 4) if quick else (4, 256, 10, 32)
    with tempfile.TemporaryDirectory() as folder:
        build_stock("llama", shape, folder)
        inputs = {k: v.to(device) for k, v in case_inputs("llama", shape["vocab_size"], batch, seq).items()}
        prompt = inputs["input_ids"][:1, :32]
        configurations = [("stock", None)]
        for form, options in TIMED.items():
            configurations += [
                (f"{form}, kernels", dict(options)),
                (f"{form}, no kernels", {**options, "hc_kernels": False}),
            ]
        configurations.append(("stock", None))
        rows = []
        for label, options in configurations:
            if time.perf_counter() > deadline:
                add({"shape": name, "model": label, "skipped": "over the check's time budget"})
                continue
            try:
                if options is None:
                    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
                else:
                    model = LlamaMHCForCausalLM.from_pretrained(folder, **options)
                model = model.to(device=device, dtype=dtype)
                step = measure_steps(training_step(model, inputs), steps, warmup=2, device=device)
                decode = decode_seconds_per_token(model.eval(), prompt, new_tokens)
            except Exception as err:  # a configuration that fails is a row, and the others still run
                add({"shape": name, "model": label, "skipped": f"failed: {type(err).__name__}: {err}"[:400]})
                continue
            row = {"shape": name, "model": label, "step_s": step["step_s"], "decode_s_per_token": decode}
            rows.append(row)
            stock = [r for r in rows if r["model"] == "stock"] or [row]
            row["step_ratio"] = row["step_s"] / min(r["step_s"] for r in stock)
            row["decode_ratio"] = row["decode_s_per_token"] / min(r["decode_s_per_token"] for r in stock)
            add(row)
            del model
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    stock = [r for r in rows if r["model"] == "stock"]
    for row in rows if stock else []:
        row["step_ratio"] = row["step_s"] / min(r["step_s"] for r in stock)
        row["decode_ratio"] = row["decode_s_per_token"] / min(r["decode_s_per_token"] for r in stock)


def _figure(value) -> str:
    return "-" if value is None else f"{value:.1e}" if isinstance(value, float) else str(value)


def _table(title: str, header: list[str], rows: list[dict], cells) -> list[str]:
    """A markdown table under `title`: a line of `cells(row)` per row, padded to the header's width."""
    lines = [title, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        values = cells(row)
        lines.append("| " + " | ".join(values + [""] * (len(header) - len(values))) + " |")
    return lines + [""]


def _contract_cells(row: dict) -> list[str]:
    note = row["note"].replace("|", "/").replace("\n", " ")
    return [
        row["example"],
        row["check"],
        row["dtype"],
        _figure(row["error"]),
        _figure(row["bound"]),
        str(row["ok"]),
        note,
    ]


def _kernel_cells(row: dict) -> list[str]:
    if "error" in row:
        return [row["form"], f"failed: {row['error'][:300]}", "", "", "", "", "", "False"]
    worst = f"{row['worst_grad']:.1e} ({row.get('worst_grad_of', '?')})"
    figures = [f"{row['logits']:.1e}", f"{row['logits_no_grad']:.1e}", worst, f"{row['bound']['worst_grad']:.1e}"]
    return [row["form"], row["dtype"], str(row["kernels"]), *figures, str(row["ok"])]


def _speed_cells(row: dict) -> list[str]:
    if "skipped" in row:
        return [row["shape"], row["model"], f"skipped: {row['skipped']}"]
    step, decode = f"{1e3 * row['step_s']:.2f}", f"{1e3 * row['decode_s_per_token']:.2f}"
    return [row["shape"], row["model"], step, f"{row['step_ratio']:.2f}x", decode, f"{row['decode_ratio']:.2f}x"]


def markdown(report: dict) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in report["versions"].items() if k != "python" and v)
    lines = [f"GPU check on {report['device_name']} ({report['dtype_timed']}), {report['date']}; {versions}", ""]
    lines += [f"- {stage}: {what}" for stage, what in report["stages"].items()] + [""]
    if report["contract"]:
        title = (
            "The conformance suite's core checks on the device (benchmarks/gpu_contract.py says what each compares):"
        )
        header = ["example", "check", "dtype", "error", "bound", "ok", "note"]
        lines += _table(title, header, report["contract"], _contract_cells)
    if report["correctness"]:
        title = "Relative errors against the equation in fp32 (`ok`: within the bound gpu_check.json records):"
        header = ["form", "dtype", "kernels ran", "logits", "no grad", "worst gradient", "its bound", "ok"]
        lines += _table(title, header, report["correctness"], _kernel_cells)
    if report["speed"]:
        title = "Against the faster of the two stock runs (first and last) of the same process:"
        header = ["shape", "model", "step (ms)", "step / stock", "decode (ms/token)", "decode / stock"]
        lines += _table(title, header, report["speed"], _speed_cells)
    if report["bench"]:
        bench = report["bench"]
        lines += [f"`{bench['command']}`: {'ran' if bench['ok'] else 'failed'} (its table: bench/bench.md)", ""]
    return "\n".join(lines)


STAGES = ("contract", "kernels", "speed", "bench")


def bench_stage(device: str, out: str, seconds: float, quick: bool) -> dict:
    """`interlayer bench` on the device, static HC and mHC (its own subprocesses), within `seconds`: its figures are in
    `out`/bench/bench.json and bench.md."""
    folder = os.path.join(out, "bench")
    command = [sys.executable, "-m", "interlayer", "bench", "--device", device, "--cases", "hc-static", "mhc"]
    command += ["--out", folder] + (["--quick", "--in-process"] if quick else ["--rounds", "2"])
    try:
        path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        done = subprocess.run(command, timeout=max(seconds, 1), capture_output=True, text=True, env=env)
    except subprocess.TimeoutExpired:
        return {"command": " ".join(command[1:]), "ok": False, "note": f"stopped after {seconds:.0f} s"}
    return {"command": " ".join(command[1:]), "ok": done.returncode == 0, "note": done.stderr[-2000:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/gpu_check", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--quick", action="store_true", help="tiny shapes and 2 steps (a CPU can run it)")
    parser.add_argument(
        "--stages", nargs="+", choices=STAGES, default=list(STAGES), help="what to run (default: all, in this order)"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=480.0,
        help="seconds the check may take: a stage or a timed model that would start later is skipped and recorded as "
        "such, and the bench is stopped then (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype_timed = torch.bfloat16 if device == "cuda" else torch.float32
    kernels, why_not = dispatch.load()
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "triton": _version("triton"),
            "liger_kernel": _version("liger_kernel"),
            "flash_attn": _version("flash_attn"),
            "python": sys.version,
        },
        "kernels_importable": kernels is not None,
        "kernels_not_importable_because": why_not,
        "dtype_timed": str(dtype_timed),
        "stages": {},
        "contract": [],
        "correctness": [],
        "speed": [],
        "bench": None,
    }
    os.makedirs(args.out, exist_ok=True)

    def save():
        with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(args.out, "gpu_check.md"), "w") as f:
            f.write(markdown(report))

    def record(key):
        def add(row):
            print(row, flush=True)
            report[key].append(row)
            save()

        return add

    if device == "cpu":
        print("no CUDA device: the kernels are not dispatched here; checking the PyTorch implementation, CPU figures")
    for stage in STAGES:
        elapsed = time.perf_counter() - started
        if stage not in args.stages:
            continue
        if elapsed > args.budget_s:
            report["stages"][stage] = f"skipped: {elapsed:.0f} s had passed, over --budget-s {args.budget_s:.0f}"
            save()
            continue
        if stage == "contract":
            contract_rows(device, EXAMPLES[:2] if args.quick else EXAMPLES, progress=record("contract"))
        elif stage == "kernels":
            with tempfile.TemporaryDirectory() as folder:
                build_stock("llama", TINY, folder)
                for form, options in FORMS.items():
                    try:
                        for row in check_form(folder, device, options):
                            record("correctness")({"form": form, **row})
                    except Exception as err:  # a form that fails is a row, and the others still run
                        record("correctness")({"form": form, "ok": False, "error": f"{type(err).__name__}: {err}"})
        elif stage == "speed":
            shapes = (
                {"tiny": TINY} if args.quick else {"smollm2-135m": SMOLLM2_SHAPE, "qwen3-0.6b-sized": QWEN3_06B_SHAPE}
            )
            for name, shape in shapes.items():
                time_shape(name, shape, device, dtype_timed, args.quick, record("speed"), started + args.budget_s)
        else:
            report["bench"] = bench_stage(device, args.out, args.budget_s - elapsed, args.quick)
        report["stages"][stage] = f"ran in {time.perf_counter() - started - elapsed:.0f} s"
        save()
    print(markdown(report))
    rows = report["contract"] + report["correctness"]
    return 0 if all(row["ok"] is not False for row in rows) else 1


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
