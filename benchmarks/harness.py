"""Measurement harness shared by the benchmarks: step time, bytes saved for backward and peak resident memory, each
configuration in its own subprocess so that its peak memory is its own.

A benchmark script calls `run_worker(script, args)` from its main process; the script, started again with those
arguments, builds its model and calls `measure_steps(step, saved_bytes_fn, steps)` and `emit(result)`.
`run_worker` runs it twice: once with the default allocator (timed), once with large blocks served by mmap, so freed
tensors leave the process and resident memory follows the live tensors (that allocator is slower; only its peak
memory is used).
"""

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

# SmolLM2-135M's shape (random weights: a step's cost does not depend on the values)
SMOLLM2_SHAPE = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    vocab_size=49152,
    max_position_embeddings=2048,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)


def proc_status_bytes(key: str) -> int:
    """A memory figure of this process from /proc/self/status (`VmHWM` peak, `VmRSS` current)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def saved_activation_bytes(forward: Callable[[], "object"]) -> int:
    """Bytes autograd keeps for backward during `forward()` (which returns the loss; it is backpropagated and the
    graph freed), each storage counted once."""
    import torch

    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    loss.backward()
    return sum(saved.values())


def measure_steps(step: Callable[[], None], steps: int, warmup: int = 1) -> dict:
    """Median time of `steps` calls of `step` after `warmup`, and the peak resident memory above the memory held
    before them."""
    for _ in range(warmup):
        step()
    base = proc_status_bytes("VmRSS")
    reset_peak_rss()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {
        "step_s": statistics.median(times),
        "peak_rss_mb": max(0, proc_status_bytes("VmHWM") - base) / 2**20,
    }


def emit(result: dict) -> None:
    print(json.dumps(result))


def run_worker(script: str, args: list[str], threads: int = 2, memory: bool = True) -> dict:
    """Run `script args` in a subprocess on `threads` threads and return what it emitted; with `memory`, run it a
    second time under the mmap allocator and take `peak_rss_mb` from that run."""
    results = []
    for extra in ({}, {"MALLOC_MMAP_THRESHOLD_": "65536"})[: 2 if memory else 1]:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), **extra}
        out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env)
        if out.returncode:
            raise RuntimeError(f"{script} {' '.join(args)} failed:\n{out.stderr[-3000:]}")
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if memory:
        results[0]["peak_rss_mb"] = results[1]["peak_rss_mb"]
    return results[0]


def against_stock(run_stock: Callable[[], dict], runs: Callable[[], list], key: str = "step_s", lower: bool = True):
    """Measure the stock model first and last around `runs()` (the configurations) and take the better of the two as
    the reference (a disturbed machine only slows). Returns `(reference, first, last, rows)`."""
    first = run_stock()
    rows = runs()
    last = run_stock()
    pick = min if lower else max
    return pick(first, last, key=lambda r: r[key]), first, last, rows


def print_step_table(reference: dict, rows: list[tuple[str, dict]], label: str = "model", name: str = "stock") -> None:
    """The markdown table of step time and peak memory, each with its ratio to `reference`."""
    print(f"| {label} | step (s) | step ratio | peak RSS (MB) | RSS ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for row_name, r in [(name, reference), *rows]:
        print(
            f"| {row_name} | {r['step_s']:.2f} | {r['step_s'] / reference['step_s']:.2f}x | {r['peak_rss_mb']:.0f} | "
            f"{r['peak_rss_mb'] / max(reference['peak_rss_mb'], 1):.2f}x |"
        )


def generation_speed(model, prompt, new_tokens: int = 32, repeats: int = 3) -> float:
    """Greedy tokens/s of `model.generate` with the KV cache (exactly `new_tokens` new tokens), best of `repeats`."""
    import torch

    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            model.generate(prompt, **kwargs)
            times.append(time.perf_counter() - start)
    return new_tokens / min(times)


def measure_training(model, steps: int, **inputs) -> dict:
    """`measure_steps` of forward (`model(**inputs).loss`) + backward + AdamW on the parameters that train."""
    import torch

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    model.train()

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(**inputs).loss.backward()
        optimizer.step()

    return measure_steps(step, steps)


def run_once(cmd: list[str], out_dir, report_only: bool = False) -> dict | None:
    """A resumable run: unless `out_dir/results.json` exists, run `cmd` (which writes it), then add the wall time in
    minutes to it. Returns the results, or None when they are absent and `report_only` forbids the run."""
    from pathlib import Path

    summary_file = Path(out_dir) / "results.json"
    if not summary_file.exists():
        if report_only:
            return None
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        summary = json.loads(summary_file.read_text())
        summary["minutes"] = (time.perf_counter() - start) / 60
        summary_file.write_text(json.dumps(summary, indent=2))
    return json.loads(summary_file.read_text())
