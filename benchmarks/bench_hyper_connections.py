#!/usr/bin/env python
"""Speed and memory of hyper-connections (HC / mHC) as ratios to the stock Llama model, measured in the same run.

    python benchmarks/bench_hyper_connections.py                  # SmolLM2-135M shape, batch 4 x 256, K = 2 and 4
    python benchmarks/bench_hyper_connections.py --layers 8       # the 8-layer variant of the same shape
    python benchmarks/bench_hyper_connections.py --quick          # fewer steps
    python benchmarks/bench_hyper_connections.py --sinkhorn       # only the Sinkhorn projection: cost and accuracy

Training step (forward + backward + AdamW on every parameter, fp32, 2 threads): median step time and peak resident
memory above what the process held before the steps (weights, gradients and optimizer state excluded), each
configuration in its own subprocess (see `interlayer.bench`). Bytes saved for backward are not reported: the stream
recomputation replaces saved streams by handles through its own `saved_tensors_hooks`, which hide them.

When the `hyper-connections` PyPI package is installed (`pip install hyper-connections`), its HC and mHC wrapped
around the same stock layers run beside ours. Generation: greedy tokens/s with the KV cache (prompt 64, 32 new
tokens, batch 1). The stock model is measured first and last and the faster run is the reference. Random weights of
the SmolLM2-135M shape (the cost does not depend on the values). Prints markdown tables; docs/hyper_connections.md
records them.
"""

import argparse
import importlib.util
import statistics
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from interlayer.bench import SMOLLM2_SHAPE, against_stock, emit, generation_speed, measure_steps, run_worker
from interlayer.models.modeling_hyper_connections import sinkhorn_knopp

OURS = {
    "static": dict(hc_mode="static"),
    "dynamic": dict(hc_mode="dynamic"),
    "mhc": dict(hc_mode="mhc"),
    "mhc-static": dict(hc_mode="mhc", mhc_dynamic=False),
    "mhc, streams kept": dict(hc_mode="mhc", hc_recompute_streams=False),
}
PACKAGE = ("pkg-hc", "pkg-mhc")


class PackageBranch(nn.Module):
    """One sublayer of a stock Llama layer (its pre-norm included), as the package's `branch`."""

    def __init__(self, layer, sublayer: str):
        super().__init__()
        self.layer, self.sublayer = layer, sublayer

    def forward(self, x, rope=None):
        if self.sublayer == "attn":
            return self.layer.self_attn(self.layer.input_layernorm(x), rope, None)[0]
        return self.layer.mlp(self.layer.post_attention_layernorm(x))


class PackageHCModel(nn.Module):
    """The `hyper-connections` package's HC or mHC (its defaults) around the stock Llama layers, streams folded into
    the batch as the package does, with the stock embedding, final norm and LM head."""

    def __init__(self, stock, streams: int, manifold: bool):
        import hyper_connections

        super().__init__()
        make = (
            hyper_connections.mc_get_init_and_expand_reduce_stream_functions
            if manifold
            else hyper_connections.get_init_and_expand_reduce_stream_functions
        )
        init_hc, self.expand, self.reduce = make(streams)
        dim = stock.config.hidden_size
        self.stock = stock
        self.hcs = nn.ModuleList(
            init_hc(dim=dim, branch=PackageBranch(layer, sub), layer_index=2 * i + j)
            for i, layer in enumerate(stock.model.layers)
            for j, sub in enumerate(("attn", "mlp"))
        )

    def forward(self, input_ids, labels):
        base = self.stock.model
        embeds = base.embed_tokens(input_ids)
        rope = base.rotary_emb(embeds, torch.arange(input_ids.shape[1])[None])
        h = self.expand(embeds)
        for hc in self.hcs:
            h = hc(h, rope) if hc.branch.sublayer == "attn" else hc(h)
        logits = self.stock.lm_head(base.norm(self.reduce(h)))
        return self.stock.loss_function(logits=logits, labels=labels, vocab_size=logits.shape[-1])


def build(name: str, streams: int, layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    from interlayer import LlamaMHCConfig, LlamaMHCForCausalLM

    torch.manual_seed(0)
    shape = {**SMOLLM2_SHAPE, "num_hidden_layers": layers}
    if name in OURS:
        config = LlamaMHCConfig(**shape, **OURS[name], hc_streams=streams, freeze_base=False, hc_init_noise=0.01)
        return LlamaMHCForCausalLM(config)
    stock = LlamaForCausalLM(LlamaConfig(**shape))
    if name in PACKAGE:
        return PackageHCModel(stock, streams, manifold=name == "pkg-mhc")
    return stock


def worker(name: str, streams: int, layers: int, batch: int, seq: int, steps: int, generation: bool) -> dict:
    torch.set_num_threads(2)
    model = build(name, streams, layers)
    if generation:
        return {"tokens_per_s": generation_speed(model.eval(), torch.randint(100, 40000, (1, 64)))}
    ids = torch.randint(100, 40000, (batch, seq))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()

    def loss():
        if name in PACKAGE:
            return model(ids, ids)
        return model(input_ids=ids, labels=ids).loss

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()

    return measure_steps(step, steps)


def sinkhorn_exp_domain(logits, iters):
    """The projection before it was made stable: one shift by the matrix maximum, then every round in the exp
    domain (a column 100 below the maximum underflows to 0/0)."""
    m = logits.movedim((-2, -1), (0, 1)).contiguous()
    m = torch.exp(m - m.amax(dim=(0, 1), keepdim=True))
    for _ in range(iters):
        m = m / m.sum(dim=0, keepdim=True)
        m = m / m.sum(dim=1, keepdim=True)
    return m.movedim((0, 1), (-2, -1))


def sinkhorn_log_domain(logits, iters):
    """Every round in the log domain (stable too, the alternative to the shipped first-round-only log domain)."""
    m = logits.movedim((-2, -1), (0, 1)).contiguous()
    for _ in range(iters):
        m = m - torch.logsumexp(m, dim=0, keepdim=True)
        m = m - torch.logsumexp(m, dim=1, keepdim=True)
    return m.exp().movedim((0, 1), (-2, -1))


def sinkhorn_report(iters: int = 20, repeats: int = 200) -> None:
    """Median time of the projection as the model runs it (one token's matrix in generation, forward only; a training
    batch of per-token matrices, forward and the recomputing backward), and how far 20 rounds leave the columns."""
    variants = {
        "exp domain (before)": sinkhorn_exp_domain,
        "log domain, first round (shipped)": sinkhorn_knopp,
        "log domain, every round": sinkhorn_log_domain,
    }

    def timed(fn, logits, backward):
        def once():
            if backward:
                x = logits.detach().requires_grad_()
                checkpoint(fn, x, iters, use_reentrant=False).sum().backward()
            else:
                with torch.no_grad():
                    fn(logits, iters)

        for _ in range(10):
            once()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            once()
            times.append(time.perf_counter() - start)
        return 1e3 * statistics.median(times)

    g = torch.Generator().manual_seed(0)
    token, batch = torch.randn(1, 1, 4, 4, generator=g), torch.randn(4, 256, 4, 4, generator=g)
    print(f"## Sinkhorn-Knopp, K = 4, {iters} rounds, {torch.get_num_threads()} thread(s), median of {repeats}\n")
    print("| variant | one token, forward (ms) | 4 x 256 tokens, forward + backward (ms) |")
    print("| --- | ---: | ---: |")
    for name, fn in variants.items():
        print(f"| {name} | {timed(fn, token, False):.3f} | {timed(fn, batch, True):.3f} |")
    print(f"\n## Column sums after {iters} rounds (rows sum to 1), 100,000 random 4 x 4 logit matrices\n")
    print("| logits | median abs(column sum - 1) | max |")
    print("| --- | ---: | ---: |")
    for spread in (1.0, 3.0, 10.0):
        logits = spread * torch.rand(100_000, 4, 4, generator=g)
        error = (sinkhorn_knopp(logits.double(), iters).sum(-2) - 1).abs().amax(-1)
        print(f"| uniform in [0, {spread:g}) | {error.median().item():.1e} | {error.max().item():.1e} |")
    for std in (1.0, 3.0):
        logits = std * torch.randn(100_000, 4, 4, generator=g)
        error = (sinkhorn_knopp(logits.double(), iters).sum(-2) - 1).abs().amax(-1)
        print(f"| normal, std {std:g} | {error.median().item():.1e} | {error.max().item():.1e} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--streams", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--generation", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-generation", action="store_true", help="only the training-step table")
    parser.add_argument("--sinkhorn", action="store_true", help="only the Sinkhorn projection's cost and accuracy")
    args = parser.parse_args()
    if args.sinkhorn:
        sinkhorn_report()
        return
    common = ["--layers", str(args.layers), "--batch", str(args.batch), "--seq", str(args.seq)]
    if args.worker:
        emit(worker(args.worker, args.streams[0], args.layers, args.batch, args.seq, args.steps, args.generation))
        return
    steps = 3 if args.quick else args.steps
    names = list(OURS)
    generated = [n for n in OURS if n != "mhc, streams kept"]
    if importlib.util.find_spec("hyper_connections") is not None:
        names += list(PACKAGE)

    def run(name, k, generation=False):
        extra = ["--generation"] if generation else ["--steps", str(steps)]
        return run_worker(__file__, ["--worker", name, "--streams", str(k), *common, *extra], memory=not generation)

    print(f"## Training step, Llama {args.layers} layers x 576 (SmolLM2-135M shape), batch {args.batch} x {args.seq}\n")
    stock, first, last, rows = against_stock(
        lambda: run("stock", 1), lambda: [(n, k, run(n, k)) for k in args.streams for n in names]
    )
    print(f"stock step time, first and last run: {first['step_s']:.2f} s, {last['step_s']:.2f} s\n")
    print("| model | K | step (s) | step ratio | peak RSS (MB) | RSS ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, k, r in [("stock", "-", stock), *rows]:
        print(
            f"| {name} | {k} | {r['step_s']:.2f} | {r['step_s'] / stock['step_s']:.2f}x | {r['peak_rss_mb']:.0f} | "
            f"{r['peak_rss_mb'] / max(stock['peak_rss_mb'], 1):.2f}x |"
        )
    if args.no_generation:
        return
    print("\n## Greedy generation with the KV cache (prompt 64, 32 new tokens, batch 1)\n")
    print("| model | K | tokens/s | ratio |")
    print("| --- | ---: | ---: | ---: |")
    base = run("stock", 1, generation=True)
    print(f"| stock | - | {base['tokens_per_s']:.1f} | 1.00x |")
    for k in args.streams:
        for name in generated:
            r = run(name, k, generation=True)
            print(f"| {name} | {k} | {r['tokens_per_s']:.1f} | {r['tokens_per_s'] / base['tokens_per_s']:.2f}x |")


if __name__ == "__main__":
    main()
