"""`interlayer bench`: every mechanism's overhead against its stock model, measured in the same run.

For each case a stock checkpoint is built from a config in a temporary folder and converted with
`interlayer.convert` (the public zoo classes, as a user gets them). Stock and converted model then take turns in
one process: stock, model, stock, model, ..., stock (stock first and last, `rounds` turns of the model), each turn
`steps` timed training steps (forward + backward + AdamW on the parameters that train), `steps` inference forwards
(no grad, eval: the cases with `forward=True`, such as `sentinel-prune-30/50/70`, which skip training) or one
greedy generation with the KV cache. Every turn of the model is divided by the mean of the two stock turns around
it, so a machine shared with other jobs disturbs both sides of a ratio alike; the record keeps every ratio, their
median and their spread (min, max). Times are taken with the default allocator. Peak memory is the resident memory
above what the process held before a training step, measured in a second, shorter subprocess whose large blocks go
straight to mmap (so freed tensors leave the process; timing under that setting would add a page fault to every
large allocation, which slowed the models with many large temporaries, the bridges, by 15% more than their stock
model). Memory traffic (`memory_traffic`) is counted, not timed: the bytes every aten operation of a training step and
of a decoded token reads and writes, for stock and model.

    interlayer bench                        # every case at its full shape, 2 threads, one subprocess per case
    interlayer bench --quick --in-process   # tiny shapes, one step (what tests/tooling/test_bench.py runs)
    interlayer bench --cases mhc hc-static --rounds 5 --compile
    interlayer bench --cases sentinel-prune-30 sentinel-prune-50 sentinel-prune-70   # pruned heads: forward, decoding
    interlayer bench --device cuda          # the same cases on a GPU (timers wait for the device)

Writes `bench.json` (the machine, the command, every turn) and `bench.md` (the table) in `--out`. The helpers below
are also what the scripts in `benchmarks/` use (each configuration in its own subprocess there).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .mechanisms import MECHANISMS

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
MINILM_SHAPE = dict(
    hidden_size=384,
    num_hidden_layers=6,
    num_attention_heads=12,
    intermediate_size=1536,
    vocab_size=30522,
    max_position_embeddings=512,
    num_labels=2,
)
# RoBERTa-large's shape, the seed's model (its bridge targets the last 4 of the 24 layers)
ROBERTA_LARGE_SHAPE = dict(
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    vocab_size=50265,
    max_position_embeddings=514,
    pad_token_id=1,
    num_labels=2,
)
GPT2_SMALL_SHAPE = dict(n_embd=384, n_layer=6, n_head=6, vocab_size=8192, n_positions=512)
# GPT-2 small itself (124M): the pruned-sentinel cases measure what removing heads saves at the real shape, where the
# LM head (768 x 50257, about a quarter of a forward's FLOPs at 256 tokens) is part of what a user runs
GPT2_124M_SHAPE = dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024)
SHAPES = {"gpt2-124m": GPT2_124M_SHAPE}  # what a case's `shape` names
MARIAN_SMALL_SHAPE = dict(
    vocab_size=8000,
    decoder_vocab_size=8000,
    d_model=256,
    encoder_layers=3,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=1024,
    decoder_ffn_dim=1024,
    max_position_embeddings=512,
    pad_token_id=7999,
    decoder_start_token_id=7999,
    eos_token_id=1,
    forced_eos_token_id=None,
)
TINY = {
    "llama": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=128,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    ),
    "bert": dict(
        hidden_size=32, num_hidden_layers=6, num_attention_heads=4, intermediate_size=64, vocab_size=128, num_labels=2
    ),
    "gpt2": dict(n_embd=32, n_layer=2, n_head=4, vocab_size=128, n_positions=128),
    "marian": {
        **MARIAN_SMALL_SHAPE,
        **dict(vocab_size=64, decoder_vocab_size=64, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64),
        **dict(encoder_layers=2, decoder_layers=2, pad_token_id=63, decoder_start_token_id=63),
    },
}
TINY["roberta"] = {**TINY["bert"], "max_position_embeddings": 130, "pad_token_id": 1}  # positions from pad + 1
FULL = {"llama": SMOLLM2_SHAPE, "bert": MINILM_SHAPE, "gpt2": GPT2_SMALL_SHAPE, "marian": MARIAN_SMALL_SHAPE}
FULL["roberta"] = ROBERTA_LARGE_SHAPE
# (batch, sequence) of a training step and (prompt length, new tokens) of a generation, per stock family
FULL_INPUTS = {"llama": ((4, 256), (64, 32)), "bert": ((8, 128), None), "gpt2": ((4, 256), (64, 32))}
FULL_INPUTS["marian"] = ((4, 64), (32, 16))
FULL_INPUTS["roberta"] = ((8, 128), None)  # a turn (2 steps) ~30-40 s on 2 idle threads (est.)
QUICK_INPUTS = {family: ((2, 12), None if family in ("bert", "roberta") else (6, 3)) for family in FULL}


# every mechanism's cases, from its record (`interlayer.mechanisms`): `{name: BenchCase}`
CASES = {name: case for record in MECHANISMS.values() for name, case in record.bench_cases.items()}


# -- measuring: memory, steps, generation --------------------------------------------------------------------------


def proc_status_bytes(key: str) -> int:
    """A memory figure of this process from /proc/self/status (`VmHWM` peak, `VmRSS` current); 0 where absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def saved_activation_bytes(forward: Callable[[], object]) -> int:
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


def check_device(device: str) -> str:
    """`device` if it names a device this machine has (`cpu`, `cuda`, `cuda:N`); else a ValueError naming it."""
    import torch

    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        raise ValueError(f"--device: got {device!r}; the devices are cpu, cuda and cuda:N")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device: {device!r} needs a GPU, and torch.cuda.is_available() is False here")
        if index and int(index) >= torch.cuda.device_count():
            raise ValueError(f"--device: {device!r}, but this machine has {torch.cuda.device_count()} GPU(s)")
    return device


def synchronize(device: str) -> None:
    """Wait for the device's queued kernels (a GPU runs them asynchronously), so a timer sees them finish."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def measure_steps(step: Callable[[], None], steps: int, warmup: int = 1, device: str = "cpu") -> dict:
    """Median time of `steps` calls of `step` after `warmup`, and the peak memory above the memory held before them:
    the process's resident memory on the CPU, the allocator's on a GPU (`peak_rss_mb` either way)."""
    import torch

    for _ in range(warmup):
        step()
    gpu = device.startswith("cuda")
    synchronize(device)
    if gpu:
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        base = proc_status_bytes("VmRSS")
        reset_peak_rss()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) if gpu else proc_status_bytes("VmHWM")
    return {"step_s": statistics.median(times), "peak_rss_mb": max(0, peak - base) / 2**20}


def training_step(model, inputs: dict) -> Callable[[], None]:
    """Forward (`model(**inputs).loss`) + backward + AdamW on the parameters that train, as one callable."""
    import torch

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    model.train()

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(**inputs).loss.backward()
        optimizer.step()

    return step


# `--compile`: the whole model (`torch.compile(model)`), or block by block (accelerate's `compile_regions`: each
# repeated block, a decoder layer, compiled on its own and one compilation serving them all, the rest apart)
COMPILE_MODES = ("model", "regional")


def flop_counter():
    """`torch.utils.flop_counter.FlopCounterMode` counting the matrix products and attention, not the element-wise
    operations (which are memory-bound, and what a measured ratio adds on top of these). torch counts the fused
    attention kernels of CUDA only; the CPU kernel (what `sdpa` runs here) gets the same formula, dense (a causal
    mask's skipped half counted, on both sides of a ratio alike)."""
    import torch
    from torch.utils import flop_counter

    def forward(query, key, value, *args, out_shape=None, **kwargs):  # FlopCounterMode passes shapes
        return flop_counter.sdpa_flop_count(query, key, value)

    def backward(grad_out, query, key, value, *args, out_shape=None, **kwargs):
        return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)

    aten = torch.ops.aten
    cpu = {
        aten._scaled_dot_product_flash_attention_for_cpu: forward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: backward,
    }
    return flop_counter.FlopCounterMode(display=False, custom_mapping=cpu)


def counted_backward(model, inputs: dict, counter):
    """`counter` (a context) around one forward + backward (`model(**inputs).loss`) in train mode, gradients cleared
    after, the optimizer excluded; returns the counter."""
    model.train()
    with counter:
        model(**inputs).loss.backward()
    for p in model.parameters():
        p.grad = None
    return counter


def training_flops(model, inputs: dict) -> int:
    """Floating-point operations of one forward + backward (`model(**inputs).loss`), as `flop_counter` counts them."""
    return counted_backward(model, inputs, flop_counter()).get_total_flops()


def tensor_bytes(tensor) -> int:
    """Bytes a kernel touches reading or writing `tensor`: a broadcast dimension (stride 0) is read once."""
    size = tensor.element_size()
    for length, stride in zip(tensor.shape, tensor.stride()):
        size *= length if stride else 1
    return size


def memory_traffic():
    """A context whose `.bytes` sums, over every aten operation run inside it (forward and backward), the bytes of its
    tensor arguments and results, and whose `.ops` counts those operations (a GPU launches a kernel for each), views
    excluded (they move nothing and launch nothing): the memory traffic of the eager operations,
    each read from and written to memory in full. Fusion (a compiled graph, a GPU kernel) keeps some of it in
    registers, so this is an upper bound; the difference between a model and its stock model is what a memory-bound
    device pays for the mechanism when nothing is fused."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Traffic(TorchDispatchMode):
        bytes = 0
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not func.is_view:
                tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
                self.bytes += sum(tensor_bytes(t) for t in tensors if t.layout == torch.strided)
                self.ops += 1
            return out

    return Traffic()


def training_bytes(model, inputs: dict) -> int:
    """`memory_traffic` of one forward + backward (`model(**inputs).loss`), the optimizer excluded."""
    return counted_backward(model, inputs, memory_traffic()).bytes


def decoding_traffic(model, prompt, new_tokens: int = 4) -> dict:
    """`memory_traffic` of one decoded token with the KV cache, `{"bytes": ..., "ops": ...}`: greedy generation of
    `1 + new_tokens` tokens minus that of 1 (the prompt's forward), over `new_tokens`."""
    import torch

    def generated(n):
        kwargs = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        with torch.no_grad(), memory_traffic() as traffic:
            model.generate(prompt, **kwargs)
        return traffic

    model.eval()
    more, one = generated(1 + new_tokens), generated(1)
    return {"bytes": (more.bytes - one.bytes) / new_tokens, "ops": (more.ops - one.ops) / new_tokens}


def attention_modules(model) -> list[str]:
    """Names of the outermost modules whose class name ends in `Attention` (one per layer: GPT-2's `h.3.attn`)."""
    names = [name for name, m in model.named_modules() if name and type(m).__name__.endswith("Attention")]
    return [n for n in names if not any(n.startswith(outer + ".") for outer in names)]


def forward_flops(model, input_ids) -> dict:
    """Floating-point operations (as `flop_counter` counts them) of one inference forward (`inference_forward`):
    `total`, and `attention`, those inside the attention modules (`attention_modules`: the query, key, value and output
    projections and the attention's score and value products)."""
    import torch

    with torch.no_grad(), flop_counter() as counter:  # no_grad outside: torch's module tracker needs it so
        inference_forward(model, input_ids)()
    counts = counter.get_flop_counts()
    root = type(model).__name__
    attention = sum(sum(counts.get(f"{root}.{name}", {}).values()) for name in attention_modules(model))
    return {"total": counter.get_total_flops(), "attention": attention}


def inference_forward(model, input_ids) -> Callable[[], None]:
    """One forward of `model` in eval mode without gradients or cache (all the logits), as a callable."""
    import torch

    model.eval()

    def forward():
        with torch.no_grad():
            model(input_ids=input_ids, use_cache=False)

    return forward


def measure_training(model, steps: int, **inputs) -> dict:
    """`measure_steps` of `training_step(model, inputs)`."""
    return measure_steps(training_step(model, inputs), steps)


def generation_seconds(model, prompt, new_tokens: int, compiled: bool = False) -> float:
    """Seconds of one greedy `model.generate` with the KV cache, exactly `new_tokens` new tokens; `compiled`: with a
    static cache and the decoding step compiled by `generate` itself (transformers' auto-compilation, which it
    enables on CPU only when asked)."""
    import torch

    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    if compiled:
        from transformers import CompileConfig

        config = CompileConfig(fullgraph=False, mode="default")
        config._compile_all_devices = True  # transformers' own switch for compiling on CPU
        kwargs.update(cache_implementation="static", compile_config=config)
    device = str(prompt.device)
    with torch.no_grad():
        synchronize(device)
        start = time.perf_counter()
        model.generate(prompt, **kwargs)
        synchronize(device)
        return time.perf_counter() - start


def generation_speed(model, prompt, new_tokens: int = 32, repeats: int = 3) -> float:
    """Greedy tokens/s of `model.generate` with the KV cache (exactly `new_tokens` new tokens), best of `repeats`."""
    return new_tokens / min(generation_seconds(model, prompt, new_tokens) for _ in range(repeats))


# -- subprocess workers (benchmarks/) --------------------------------------------------------------------------------


def emit(result: dict) -> None:
    print(json.dumps(result))


# large blocks straight from mmap, so that freed tensors leave the process and its peak resident memory follows the
# live tensors; only for memory figures (a page fault per large allocation would slow the timed steps)
MMAP_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
TURN_DONE = "interlayer-bench: turn done"  # what a worker writes on stderr after each finished turn


def run_python(args: list[str], threads: int = 2, env: dict | None = None, progress=None) -> dict:
    """Run `python ARGS` in a subprocess on `threads` threads (and `env`) and return what it emitted (its last stdout
    line, JSON); each `TURN_DONE` line it writes on stderr advances `progress`."""
    worker = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": str(threads), **(env or {})},
    )
    errors = []
    for line in worker.stderr:
        if line.strip() == TURN_DONE:
            if progress is not None:
                progress.update(1)
        else:
            errors.append(line)
    output = worker.stdout.read()
    if worker.wait():
        raise RuntimeError(f"python {' '.join(args)} failed:\n{''.join(errors)[-3000:]}")
    return json.loads(output.strip().splitlines()[-1])


def run_worker(script: str, args: list[str], threads: int = 2, memory: bool = True) -> dict:
    """Run `script args` in a subprocess on `threads` threads and return what it emitted (its last stdout line, JSON);
    with `memory`, run it a second time under `MMAP_ENV` and take `peak_rss_mb` from that run."""
    result = run_python([script, *args], threads)
    if memory:
        result["peak_rss_mb"] = run_python([script, *args], threads, MMAP_ENV)["peak_rss_mb"]
    return result


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


def run_once(cmd: list[str], out_dir, report_only: bool = False) -> dict | None:
    """A resumable run: unless `out_dir/results.json` exists, run `cmd` (which writes it), then add the wall time in
    minutes to it. Returns the results, or None when they are absent and `report_only` forbids the run."""
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


# -- the zoo harness --------------------------------------------------------------------------------------------------


def build_stock(family: str, shape: dict, folder: str):
    """A stock model of `family` with random weights (seed 0), saved in `folder`."""
    import torch
    import transformers

    classes = {
        "llama": ("LlamaConfig", "LlamaForCausalLM"),
        "bert": ("BertConfig", "BertForSequenceClassification"),
        "roberta": ("RobertaConfig", "RobertaForSequenceClassification"),
        "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
        "marian": ("MarianConfig", "MarianMTModel"),
    }
    config_name, model_name = classes[family]
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**shape))
    model.save_pretrained(folder)
    return model


def case_inputs(family: str, vocab: int, batch: int, seq: int) -> dict:
    """Random training inputs of `family` (labels included), seed 0."""
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, vocab - 2, (batch, seq), generator=g)
    if family in ("bert", "roberta"):
        return {"input_ids": ids, "labels": torch.arange(batch) % 2}
    if family == "marian":
        return {"input_ids": ids, "labels": torch.randint(2, vocab - 2, (batch, seq), generator=g)}
    return {"input_ids": ids, "labels": ids}


def _stats(model_turns: list[float], stock_turns: list[float], higher_is_better: bool = False) -> dict:
    """Each model turn over the mean of the stock turns before and after it: every ratio, median, min and max."""
    ratios = [m / ((a + b) / 2) for m, a, b in zip(model_turns, stock_turns, stock_turns[1:])]
    if higher_is_better:
        ratios = [1 / r for r in ratios]
    return {
        "stock": stock_turns,
        "model": model_turns,
        "ratios": ratios,
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
    }


def measure_case(
    name: str,
    quick: bool,
    rounds: int,
    steps: int,
    compile: str | None,
    progress=None,
    layers: int | None = None,
    memory_only: bool = False,
    device: str = "cpu",
) -> dict:
    """Build the stock model and its converted model of `CASES[name]` and measure them in turns (see the module);
    `compile` (`COMPILE_MODES`, or None for eager only) adds compiled turns, stock and model compiled the same way;
    `layers` replaces the number of decoder layers of the Llama cases (the SmolLM2-135M shape has 30). With
    `memory_only`, only the peak resident memory of one training step of each (stock, model, stock), for a process
    whose large allocations go straight to mmap (so that freed tensors leave it). `device`: where both models and
    their inputs live (`check_device`); FLOPs and memory traffic are counted on the CPU, after the timings."""
    import torch

    from .zoo import convert

    case = CASES[name]
    shape = TINY[case.family] if quick else (SHAPES[case.shape] if case.shape else FULL[case.family])
    if layers is not None and case.family == "llama":
        shape = {**shape, "num_hidden_layers": layers}
    (batch, seq), generation = (QUICK_INPUTS if quick else FULL_INPUTS)[case.family]
    options = case.quick_options if quick and case.quick_options else case.options
    with tempfile.TemporaryDirectory() as folder:
        stock = build_stock(case.family, shape, folder)
        model, _ = convert(folder, mechanism=case.mechanism, task=case.task, preset=case.preset, **options)
    if case.prune_fraction is not None:
        from .sentinel import prune_by_strategy

        prune_by_strategy(model, case.prune_fraction, "magnitude")
    vocab = shape["vocab_size"]
    inputs = case_inputs(case.family, vocab, batch, seq)
    if memory_only:
        steppers = {"stock": training_step(stock, inputs), "model": training_step(model, inputs)}
        return {"case": name, "peak_rss_mb": _timed_turns(steppers, rounds=1, steps=1)["peak_rss_mb"]}
    prompt = None
    if generation is not None:
        prompt_length, new_tokens = generation
        prompt = torch.randint(2, vocab - 2, (1, prompt_length), generator=torch.Generator().manual_seed(1))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    record = {
        "case": name,
        "mechanism": case.mechanism,
        "stock_class": type(stock).__name__,
        "class": type(model).__name__,
        "preset": case.preset,
        "options": options,
        "shape": shape,
        "train_batch": [batch, seq],
        "trainable_parameters": trainable,
    }
    text = stock.config.get_text_config()
    value_bytes = next(stock.parameters()).element_size()
    record["per_token_layer"] = {
        "hidden_size": text.hidden_size,
        "layers": text.num_hidden_layers,
        "bytes": value_bytes,
    }
    counted_on = (inputs, prompt)  # the counts (after the timings) take the CPU copies
    if device != "cpu":
        stock, model = stock.to(device), model.to(device)
        inputs = {key: value.to(device) for key, value in inputs.items()}
        prompt = prompt.to(device) if prompt is not None else None
    if case.prune_fraction is not None:
        heads = model.config.num_hidden_layers * model.config.num_attention_heads
        pruned = sum(len(v) for v in model.config.pruned_heads.values())
        record["heads"] = {"stock": heads, "model": heads - pruned, "pruned_fraction": case.prune_fraction}
    if case.forward:
        flops = {"stock": forward_flops(stock, inputs["input_ids"]), "model": forward_flops(model, inputs["input_ids"])}
        flops["attention_removed"] = 1 - flops["model"]["attention"] / flops["stock"]["attention"]
        record["forward_flops"] = flops
    if prompt is not None:
        record.update(measure_decoding(stock, model, prompt, new_tokens, rounds, compile, progress))
    modes = [("eager", stock, model, inputs)]
    if compile == "model":
        modes.append(("compiled", torch.compile(stock), torch.compile(model), inputs))
    elif compile == "regional":
        # a training step's cache would differ between layers (its layer index): dynamo would compile each layer
        regional_inputs = {**inputs, "use_cache": False} if prompt is not None else inputs
        from accelerate.utils import compile_regions

        modes.append(("compiled", compile_regions(stock), compile_regions(model), regional_inputs))
    for mode, stock_m, model_m, mode_inputs in modes:
        if case.train:
            steppers = {"stock": training_step(stock_m, mode_inputs), "model": training_step(model_m, mode_inputs)}
            record[f"train_{mode}"] = _timed_turns(steppers, rounds, steps, progress, device)
        if case.forward:
            ids = mode_inputs["input_ids"]
            steppers = {"stock": inference_forward(stock_m, ids), "model": inference_forward(model_m, ids)}
            record[f"forward_{mode}"] = _timed_turns(steppers, rounds, steps, progress, device)
    if compile is not None:
        record["compile"] = compile
    record.update(_counts(stock.cpu(), model.cpu(), *counted_on, train=case.train))
    return record


def _counts(stock, model, inputs, prompt, train: bool) -> dict:
    """The FLOPs and memory traffic of a training step (`train`) and of a decoded token (a `prompt`), stock's and the
    model's, counted on the CPU. Counted after the timings: a dispatch mode over `generate` leaves the process slower
    at decoding the model afterwards (measured: mHC's decoded token from 1.18x to 1.30x of stock's; the cause is not
    found), and a count is the same whenever it runs."""
    record = {}
    if train:
        record["train_flops"] = {"stock": training_flops(stock, inputs), "model": training_flops(model, inputs)}
        record["train_bytes"] = {"stock": training_bytes(stock, inputs), "model": training_bytes(model, inputs)}
    if prompt is not None:
        traffic = {"stock": decoding_traffic(stock, prompt), "model": decoding_traffic(model, prompt)}
        record["decode_bytes"] = {who: counted["bytes"] for who, counted in traffic.items()}
        record["decode_ops"] = {who: counted["ops"] for who, counted in traffic.items()}
    return record


def measure_decoding(stock, model, prompt, new_tokens: int, rounds: int, compile: str | None, progress=None) -> dict:
    """`decode_eager` (and with `compile`, `decode_compiled`: the decoding step compiled by `generate` with a static
    cache, whichever way the training steps are compiled): the time per generated token of the model over stock's, in
    turns, and the seconds of the first generation (compilation included)."""
    record = {}
    models = {"stock": stock.eval(), "model": model.eval()}
    for mode in ("eager", "compiled")[: 1 + (compile is not None)]:
        compiled = mode == "compiled"
        try:
            first = {who: generation_seconds(m, prompt, new_tokens, compiled) for who, m in models.items()}
        except Exception as error:  # a model whose cache has no static form (latent): say why, measure the rest
            record[f"decode_{mode}"] = {"not_measured": f"{type(error).__name__}: {error}"[:300]}
            if progress is not None:
                progress.update(1 + 2 * rounds)
            continue
        turns = {"stock": [], "model": []}
        for who in ["stock", *(["model", "stock"] * rounds)]:
            turns[who].append(generation_seconds(models[who], prompt, new_tokens, compiled) / new_tokens)
            if progress is not None:
                progress.update(1)
        stats = _stats(turns["model"], turns["stock"])
        record[f"decode_{mode}"] = {**stats, "prompt": prompt.shape[1], "new": new_tokens, "first_call_s": first}
    return record


def _timed_turns(steppers: dict, rounds: int, steps: int, progress=None, device: str = "cpu") -> dict:
    """`steppers["stock"]` and `steppers["model"]` in turns (stock first and last), `steps` calls a turn after one
    warm-up call each (and compilation): `_stats` of the turns' median times, their median peak memory and the
    seconds of each warm-up call (`first_call_s`: with compilation, the time to compile)."""
    first = {}
    for who, step in steppers.items():
        start = time.perf_counter()
        step()
        synchronize(device)
        first[who] = time.perf_counter() - start
    turns = {"stock": [], "model": []}
    memory = {"stock": [], "model": []}
    for who in ["stock", *(["model", "stock"] * rounds)]:
        r = measure_steps(steppers[who], steps, warmup=0, device=device)
        turns[who].append(r["step_s"])
        memory[who].append(r["peak_rss_mb"])
        if progress is not None:
            progress.update(1)
    return {
        **_stats(turns["model"], turns["stock"]),
        "peak_rss_mb": {who: statistics.median(v) for who, v in memory.items()},
        "first_call_s": first,
    }


def turns_per_case(name: str, quick: bool, rounds: int, compile: str | None) -> int:
    case = CASES[name]
    generation = (QUICK_INPUTS if quick else FULL_INPUTS)[case.family][1]
    return (1 + 2 * rounds) * (case.train + case.forward + (generation is not None)) * (1 + (compile is not None))


def machine(device: str = "cpu") -> dict:
    import torch
    import transformers

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "load_average": load,
        "device": device if device == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _fmt(stats: dict | None) -> str:
    if stats is None or "median" not in stats:
        return "-"
    return f"{stats['median']:.2f}x ({stats['min']:.2f}-{stats['max']:.2f})"


def markdown_table(records: list[dict]) -> str:
    """One row per case that trains: the FLOPs of a training step (matrix products and attention) over stock's, the
    median ratio to stock (and its spread over the rounds) of the training step's time, its peak memory and the time
    per generated token (eager and compiled). Then, for the cases that time inference forwards, `forward_table`."""
    lines = [
        "| case | class | FLOPs ratio | step ratio | compiled step ratio | stock step (s) | peak RSS ratio "
        "| time per token ratio | compiled time per token ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    forward = [r for r in records if "forward_eager" in r]
    for r in records:
        if "train_eager" not in r:
            continue
        train = r["train_eager"]
        memory = train["peak_rss_mb"]
        rss = f"{memory['model'] / memory['stock']:.2f}x" if memory["stock"] > 0 else "-"
        flops = r["train_flops"]
        lines.append(
            f"| {r['case']} | {r['class']} | {flops['model'] / flops['stock']:.2f}x | {_fmt(train)} | "
            f"{_fmt(r.get('train_compiled'))} | {statistics.median(train['stock']):.3f} | {rss} | "
            f"{_fmt(r.get('decode_eager'))} | {_fmt(r.get('decode_compiled'))} |"
        )
    if len(lines) == 2:
        lines = []
    tables = ["\n".join(lines) + "\n" if lines else "", forward_table(forward), traffic_table(records)]
    return "\n".join(t for t in tables if t)


def traffic_table(records: list[dict]) -> str:
    """One row per case with counted memory traffic (`memory_traffic`): the bytes of a training step (forward and
    backward) and of a decoded token over stock's, the extra bytes per token and layer in hidden vectors (one vector:
    hidden size x bytes per value), what a memory-bound device pays for the mechanism unfused, and the operations
    (kernel launches on a GPU) per decoded token, model and stock."""
    rows = [r for r in records if "train_bytes" in r or "decode_bytes" in r]
    if not rows:
        return ""
    lines = [
        "| case | class | training bytes ratio | extra vectors per token and layer (training) | decoding bytes ratio "
        "| extra vectors per decoded token and layer | operations per decoded token (stock) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        shape = r["per_token_layer"]
        vector = shape["hidden_size"] * shape["bytes"] * shape["layers"]
        cells = []
        for key, tokens in (("train_bytes", r["train_batch"][0] * r["train_batch"][1]), ("decode_bytes", 1)):
            counted = r.get(key)
            if counted is None:
                cells += ["-", "-"]
                continue
            extra = (counted["model"] - counted["stock"]) / (tokens * vector)
            cells += [f"{counted['model'] / counted['stock']:.2f}x", f"{extra:.1f}"]
        ops = r.get("decode_ops")
        cells.append(f"{ops['model']:.0f} ({ops['stock']:.0f})" if ops else "-")
        lines.append(f"| {r['case']} | {r['class']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def forward_table(records: list[dict]) -> str:
    """One row per case that times inference forwards: the heads left (of stock's), the share of the attention
    modules' FLOPs removed, the forward's FLOPs over stock's, the median ratio to stock (min-max) of the forward's
    time and of the time per generated token (eager and compiled)."""
    if not records:
        return ""
    lines = [
        "| case | class | heads | attention FLOPs removed | forward FLOPs ratio | forward ratio | compiled forward "
        "ratio | stock forward (s) | time per token ratio | compiled time per token ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in records:
        flops, heads = r["forward_flops"], r.get("heads")
        left = f"{heads['model']}/{heads['stock']}" if heads else "-"
        lines.append(
            f"| {r['case']} | {r['class']} | {left} | "
            f"{flops['attention_removed']:.0%} | {flops['model']['total'] / flops['stock']['total']:.2f}x | "
            f"{_fmt(r['forward_eager'])} | {_fmt(r.get('forward_compiled'))} | "
            f"{statistics.median(r['forward_eager']['stock']):.3f} | {_fmt(r.get('decode_eager'))} | "
            f"{_fmt(r.get('decode_compiled'))} |"
        )
    return "\n".join(lines) + "\n"


def quiet_transformers() -> None:
    """No loading bars and conversion notices between the progress bar's lines."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


class _TurnReporter:
    """The worker's side of the progress bar: one line on stderr per finished turn."""

    def update(self, n: int = 1) -> None:
        for _ in range(n):
            print(TURN_DONE, file=sys.stderr, flush=True)


def _worker_main(argv: list[str]) -> int:
    quiet_transformers()
    name, quick, rounds, steps = argv[0], argv[1] == "1", int(argv[2]), int(argv[3])
    compile = argv[4] if argv[4] != "-" else None
    layers = int(argv[5]) if argv[5] != "-" else None
    device, memory_only = argv[6], argv[7] == "memory"
    reporter = None if memory_only else _TurnReporter()
    print(json.dumps(measure_case(name, quick, rounds, steps, compile, reporter, layers, memory_only, device)))
    return 0


def run_bench(
    cases: list[str] | None = None,
    out: str | Path = "bench",
    quick: bool = False,
    rounds: int | None = None,
    steps: int | None = None,
    compile: str | None = None,
    threads: int = 2,
    in_process: bool = False,
    command: str | None = None,
    layers: int | None = None,
    device: str = "cpu",
) -> dict:
    """Measure `cases` (default: all) on `device`, eager and, with `compile` (`COMPILE_MODES`), compiled; write
    `out/bench.json` and `out/bench.md`, return the record."""
    from tqdm.auto import tqdm

    cases = list(cases or CASES)
    for name in cases:
        if name not in CASES:
            raise ValueError(f"--cases: unknown case {name!r}; the cases are {', '.join(CASES)}")
    rounds = rounds if rounds is not None else (1 if quick else 3)
    steps = steps if steps is not None else (1 if quick else 2)
    if rounds < 1 or steps < 1:
        raise ValueError(f"--rounds and --steps must be >= 1, got rounds={rounds}, steps={steps}")
    check_device(device)
    if compile is not None and compile not in COMPILE_MODES:
        raise ValueError(f"--compile must be one of {', '.join(COMPILE_MODES)}, got {compile!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    if in_process:
        quiet_transformers()
    total = sum(turns_per_case(n, quick, rounds, compile) for n in cases)
    with tqdm(total=total, desc="interlayer bench", unit="turn") as progress:
        for name in cases:
            progress.set_postfix_str(name)
            if in_process:
                import torch

                previous = torch.get_num_threads()
                torch.set_num_threads(threads)
                try:
                    records.append(measure_case(name, quick, rounds, steps, compile, progress, layers, device=device))
                finally:
                    torch.set_num_threads(previous)
                continue
            args = [name, "1" if quick else "0", str(rounds), str(steps), compile or "-", str(layers or "-")]
            worker = ["-m", "interlayer.bench", *args, device]
            record = run_python([*worker, "time"], threads, progress=progress)
            if CASES[name].train and device == "cpu":  # a GPU's allocator measures its peak in the timed run
                memory = run_python([*worker, "memory"], threads, MMAP_ENV)
                record["train_eager"]["peak_rss_mb"] = memory["peak_rss_mb"]
            records.append(record)
            write_record(out, records, command, threads, quick, rounds, steps, device)  # what is done survives a stop
    return write_record(out, records, command, threads, quick, rounds, steps, device)


QUICK_CAVEAT = (
    "Smoke test (--quick): tiny shapes and one step per turn check that every case runs; the ratios are not "
    "overhead figures (at these shapes fixed costs dominate: peak memory and step ratios of 10x or more are usual). "
    "For figures, run without --quick."
)


def write_record(
    out: Path, records: list[dict], command, threads: int, quick: bool, rounds: int, steps: int, device: str = "cpu"
) -> dict:
    """Write `bench.json` and `bench.md` for the cases measured so far; returns the record."""
    record = {
        "command": command or "interlayer bench " + " ".join(sys.argv[2:]),
        "machine": {**machine(device), "threads": threads},
        "quick": quick,
        **({"caveat": QUICK_CAVEAT} if quick else {}),
        "rounds": rounds,
        "steps": steps,
        "cases": records,
    }
    (out / "bench.json").write_text(json.dumps(record, indent=2))
    m = record["machine"]
    header = (
        f"Measured {m['date']} on {m['cpu']} ({m['cores']} cores, {threads} threads), torch {m['torch']}, "
        f"transformers {m['transformers']}, load average {m['load_average']}, on {m['device']}; "
        f"`{record['command']}`. Ratios: each "
        f"turn of the model over the mean of the stock turns around it, median (min-max) over {rounds} rounds of "
        f"{steps} step(s).\n\n"
    )
    caveat = f"**{QUICK_CAVEAT}**\n\n" if quick else ""
    (out / "bench.md").write_text(caveat + header + markdown_table(records))
    return record


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
