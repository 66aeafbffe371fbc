"""``muxplm bench ...`` and ``muxplm analyze ...`` sub-commands."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..choices import BENCH_HEADS as HEADS
from ..choices import BENCH_VARIANTS as VARIANTS
from ..choices import CLOCKS, DEMUX_TYPES, DTYPE_NAMES, MUX_TYPES, QUANTIZE_CHOICES, SIZE_PRESETS

# The flags that pick models of the benchmark grid; --model times given checkpoints instead.
GRID_OPTIONS = ("sizes", "instances", "mux", "demux", "heads", "variants", "no_transformers")


def _csv(kind=str):
    def parse(text: str):
        try:
            return [kind(item) for item in text.split(",") if item.strip()]
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"bad list {text!r}: {error}") from None
    return parse


def _default_device() -> str:
    from ..devices import default_device

    return default_device()


def add_command(subparsers, name: str, help: str) -> None:
    """The parser of command ``name`` (``muxplm.cli.COMMANDS`` lists which are this module's)."""
    {"bench": _add_bench, "analyze": _add_analyze, "reproduce": _add_reproduce}[name](subparsers, name, help)


def _add_bench(subparsers, name: str, help: str) -> None:
    bench = subparsers.add_parser(name, help=help, description="Inference benchmarks of MUX models.")
    bench_sub = bench.add_subparsers(dest="bench_command", metavar="BENCHMARK", required=True)

    tp = bench_sub.add_parser(
        "throughput",
        help="samples/s of MUX models vs the N=1 model and transformers.BertModel",
        description="Paper protocol: batch x seq on the device, warm-up, then TRIALS trials of BATCHES "
        "mini-batches in inference mode, models timed round robin. Prints a table and the target checks; "
        "writes JSON (+ a PNG next to it) with --output. With --model: the given fine-tuned checkpoints "
        "instead of the grid, side by side, each in every --runtime and --quantize precision.",
    )
    tp.add_argument("--model", dest="models", action="append", metavar="DIR",
                    help="a fine-tuned checkpoint to time instead of the grid (repeatable); speed-ups are over "
                    "the first one")
    tp.add_argument("--quantize", type=_csv(), default=None,
                    help=f"with --model: comma list of precisions from {','.join(QUANTIZE_CHOICES)} to time every "
                    "model in, e.g. none,int8 (default: none; int8: CPU only)")
    tp.add_argument("--runtime", dest="runtimes", type=_csv(), default=None,
                    help="with --model: comma list of torch,onnx to time every model in (default: torch; onnx: its "
                    "graph exported and checked against PyTorch, in ONNX Runtime on the CPU)")
    _add_model_grid(tp)
    tp.add_argument("--heads", type=_csv(), default=list(HEADS), help=f"subset of {','.join(HEADS)}")
    tp.add_argument("--variants", type=_csv(), default=["default"],
                    help=f"complementary speed-ups to stack, from {','.join(VARIANTS)} (default: default)")
    tp.add_argument("--no-transformers", action="store_true", help="skip the transformers.BertModel reference")
    tp.add_argument("--batch-size", type=int, default=128, metavar="N", help="instances per batch (default: 128)")
    tp.add_argument("--seq-len", type=int, default=128, metavar="N", help="tokens per instance (default: 128)")
    tp.add_argument("--warmup", type=int, default=3, metavar="N", help="warm-up batches per model (default: 3)")
    tp.add_argument("--trials", type=int, default=3, metavar="N",
                    help="timed trials per model, round robin over the models (default: 3)")
    tp.add_argument("--batches", type=int, default=200, metavar="N", help="mini-batches per trial (default: 200)")
    tp.add_argument("--clock", choices=CLOCKS, default="wall",
                    help="wall: elapsed time (paper); process: CPU seconds of this process (shared CPU machines)")
    tp.add_argument("--threads", type=int, metavar="N", help="torch CPU threads (default: torch's choice)")
    tp.add_argument("--output", metavar="FILE", help="results JSON path; the plot goes next to it as .png")
    tp.set_defaults(func=_run_throughput, grid_defaults={name: tp.get_default(name) for name in GRID_OPTIONS})

    pf = bench_sub.add_parser("profile", help="per-stage time of one forward pass and the top operators")
    _add_model_grid(pf)
    pf.add_argument("--head", choices=HEADS, default="sentence", help="the head profiled (default: sentence)")
    pf.add_argument("--batch-size", type=int, default=128, metavar="N", help="instances per batch (default: 128)")
    pf.add_argument("--seq-len", type=int, default=128, metavar="N", help="tokens per instance (default: 128)")
    pf.add_argument("--repeats", type=int, default=3, metavar="N",
                    help="timed forward passes per model (default: 3)")
    pf.add_argument("--operators", action="store_true", help="also print torch.profiler's operator table")
    pf.add_argument("--clock", choices=CLOCKS, default="wall", help="wall or process (CPU seconds, CPU only)")
    pf.add_argument("--threads", type=int, metavar="N", help="torch CPU threads (default: torch's choice)")
    pf.add_argument("--output", metavar="FILE", help="write the breakdown as JSON")
    pf.set_defaults(func=_run_profile)


def _add_analyze(subparsers, name: str, help: str) -> None:
    analyze = subparsers.add_parser(name, help=help, description="Analyses of trained MUX models and of results files.")
    an_sub = analyze.add_subparsers(dest="analyze_command", metavar="ANALYSIS", required=True)

    mx = an_sub.add_parser("muxology", help="per-layer mean |activation| and attention entropy, MUX vs plain")
    mx.add_argument("models", nargs="*", help="checkpoint dirs (MUX or plain BERT); default: fresh presets")
    mx.add_argument("--preset", default="tiny", choices=tuple(SIZE_PRESETS),
                    help="size of the freshly initialised models when no dirs are given (default: tiny)")
    mx.add_argument("--instances", type=_csv(int), default=[1, 2, 5, 10], metavar="N,N,...",
                    help="N of the fresh models (default: 1,2,5,10)")
    mx.add_argument("--text-file", action="append", metavar="FILE",
                    help="held-out text (one sentence per line); repeatable")
    mx.add_argument("--num-sentences", type=int, default=300, metavar="N", help="sentences read (default: 300)")
    mx.add_argument("--max-length", type=int, default=64, metavar="N", help="tokens per sentence (default: 64)")
    mx.add_argument("--batch-size", type=int, default=30, metavar="N", help="sentences per batch (default: 30)")
    mx.add_argument("--tokenizer", metavar="DIR", help="tokenizer folder (default: the data module's default tokenizer)")
    mx.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    mx.add_argument("--output", required=True, metavar="FILE",
                    help="results JSON path; the figure goes next to it as .png")
    mx.set_defaults(func=_run_muxology)

    pa = an_sub.add_parser("pareto", help="score vs throughput with the Pareto frontier")
    pa.add_argument("results", help="JSON list of {name, size, num_instances, score, throughput}")
    pa.add_argument("--output", required=True, metavar="FILE", help="figure path (.png); the frontier JSON goes next to it")
    pa.add_argument("--title", default="score vs throughput", help="figure title (default: score vs throughput)")
    pa.set_defaults(func=_run_pareto)

    for name, help_text in (("ensemble", "gain of ensembling over plain multiplexed inference"),
                            ("lottery", "best minus worst composition seed")):
        sub = an_sub.add_parser(name, help=help_text)
        sub.add_argument("results", nargs="+", help="per-seed evaluation JSON files (or directories of them)")
        sub.add_argument("--output", metavar="FILE", help="write <output>.md and <output>.json")
        sub.set_defaults(func=_run_table, table=name)


def _add_reproduce(subparsers, name: str, help: str) -> None:
    rp = subparsers.add_parser(
        name, help=help,
        description="Every model through retrieval priming (N>1), MLM/ELECTRA pre-training and fine-tuning on "
        "the offline data with the same budget; multi-seed scores, side-by-side throughput, retention and the "
        "paper's targets. Writes results.json, table.md, points.json, pareto.png, lottery.md, ensemble.md.",
    )
    preset = rp.add_mutually_exclusive_group()
    for name, text in (("quick", "<= 30 min on a 2-core CPU (default)"), ("full", "the CPU recipe, hours"),
                       ("gpu", "the full recipe on a GPU, every fine-tuning 3x as long (4,500 steps)"),
                       ("convert", "pretrained MiniLM converted with `muxplm convert` at N = 2, 5, 10 "
                                   "against plain MiniLM (default models of that preset)")):
        preset.add_argument(f"--{name}", dest="preset", action="store_const", const=name, help=text)
    rp.add_argument("--stable", action="store_true",
                    help="with --full (implied) or --gpu: each input's first layer run on it alone and composition "
                    "consistency on sentence tasks, predictions that barely change with the companions, at a lower "
                    "speed-up")
    rp.add_argument("--output-dir", default="runs/reproduce", metavar="DIR",
                    help="where the results go (default: runs/reproduce)")
    rp.add_argument("--runs-dir", default=None, metavar="DIR", help="where the checkpoints go (default: OUTPUT_DIR/runs)")
    rp.add_argument("--models", type=_csv(), default=None,
                    help="comma list of models or groups: paper (every system of the paper at N = 2 / 5 / 10 and "
                    "the small size), default, convert (default: the preset's list)")
    rp.add_argument("--tasks", type=_csv(), default=None, help="comma list (default: sentiment,trec,pos,ner)")
    rp.add_argument("--seeds", type=int, default=None, metavar="N",
                    help="composition seeds per evaluation (default: the preset's)")
    rp.add_argument("--device", default=None,
                    help="override the preset's device (cpu, cuda); with --merge, where the rows are timed")
    rp.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override a recipe value, e.g. --set pretrain.max_steps=50 (repeatable); with --merge, "
                    "only the timing's: throughput.trials, .batches, .warmup, .statistic (mean or median)")
    rp.add_argument("--progress", action="store_true", help="show training progress bars")
    rp.add_argument("--merge", nargs="+", metavar="RESULTS_DIR", default=None,
                    help="instead of training: one table from these runs' results folders (shards of one "
                    "reproduction run apart, same recipe and code), every row timed again side "
                    "by side, into --output-dir")
    rp.add_argument("--threads", type=int, metavar="N", help="torch CPU threads (default: torch's choice); with --models and a "
                    "shared --runs-dir, shards can run side by side and a last run over all models collects them")
    rp.set_defaults(func=_run_reproduce, preset=None)


def _add_model_grid(parser) -> None:
    parser.add_argument("--sizes", type=_csv(), default=None,
                        help="subset of tiny,small,base,large (default: all on cuda, tiny,small on cpu)")
    parser.add_argument("--instances", type=_csv(int), default=[1, 2, 5, 10], metavar="N,N,...",
                        help="N of the MUX models (default: 1,2,5,10)")
    parser.add_argument("--mux", type=_csv(), default=["gaussian_hadamard", "contextual"], metavar="NAME,...",
                        help=f"multiplexers, from {','.join(MUX_TYPES)} (default: gaussian_hadamard,contextual)")
    parser.add_argument("--demux", type=_csv(), default=["rsa", "prefix"], metavar="NAME,...",
                        help=f"demultiplexers, from {','.join(DEMUX_TYPES)} (default: rsa,prefix)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", choices=DTYPE_NAMES, default="float32",
                        help="weights and activations (default: float32)")


def _grid(args, variants=("default",), with_transformers=True):
    from .throughput import build_specs

    _set_threads(args)
    device = args.device or _default_device()
    sizes = args.sizes or (["tiny", "small", "base", "large"] if device.startswith("cuda") else ["tiny", "small"])
    specs = build_specs(sizes, args.instances, args.mux, args.demux, variants, with_transformers)
    return specs, device


def _set_threads(args) -> None:
    import torch

    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)


def _run_throughput(args) -> int:
    from .throughput import format_table, plot_throughput, run_throughput

    if args.models:
        return _time_checkpoints(args)
    if args.quantize is not None or args.runtimes is not None:
        raise ValueError("--quantize and --runtime go with --model; the grid's int8 models are chosen with "
                         "--variants int8")
    specs, device = _grid(args, args.variants, not args.no_transformers)
    report = run_throughput(
        specs, args.heads, batch_size=args.batch_size, seq_len=args.seq_len, warmup=args.warmup,
        trials=args.trials, batches=args.batches, device=device, dtype=args.dtype, clock=args.clock,
    )
    print(format_table(report))
    print("\nTargets:")
    for check in report["checks"]:
        print("  " + check["message"])
    if args.output:
        _write_json(args.output, report)
        print(f"wrote {args.output}")
        if not any(r["num_instances"] > 1 for r in report["results"]):
            return 0  # nothing to plot against N
        print(f"wrote {plot_throughput(report, os.path.splitext(args.output)[0] + '.png')}")
        if len(args.variants) > 1:  # do stacked speed-ups multiply? plot them against the plain model
            png = plot_throughput(report, os.path.splitext(args.output)[0] + "-vs-default.png", against="default_n1")
            print(f"wrote {png}")
    return 0


def _time_checkpoints(args) -> int:
    from .throughput import checkpoint_labels, environment, format_checkpoint_table, time_checkpoints

    grid_flags = [f"--{name.replace('_', '-')}" for name, default in args.grid_defaults.items()
                  if getattr(args, name) != default]
    if grid_flags:
        raise ValueError(f"{', '.join(grid_flags)} pick models of the grid; --model times the given checkpoints instead")
    _set_threads(args)
    device = args.device or _default_device()
    quantize, runtimes = args.quantize or ["none"], args.runtimes or ["torch"]
    settings = dict(batch_size=args.batch_size, seq_length=args.seq_len, batches=args.batches, trials=args.trials,
                    warmup=args.warmup, clock=args.clock, device=device, dtype=args.dtype)
    results = time_checkpoints(checkpoint_labels(args.models), quantize=quantize, runtimes=runtimes, **settings)
    print(format_checkpoint_table(results))
    if args.output:
        report = dict(environment=environment(device), settings=dict(settings, quantize=quantize, runtimes=runtimes),
                      results=[dict(label=label, **row) for label, row in results.items()])
        _write_json(args.output, report)
        print(f"wrote {args.output}")
    return 0


def _run_profile(args) -> int:
    from .profile import profile_specs

    specs, device = _grid(args, with_transformers=True)
    results = profile_specs(
        specs, args.head, batch_size=args.batch_size, seq_len=args.seq_len, repeats=args.repeats,
        device=device, dtype=args.dtype, clock=args.clock, operators=args.operators,
    )
    if args.output:
        _write_json(args.output, results)
    return 0


def _run_muxology(args) -> int:
    from .analysis import muxology, muxology_models, plot_muxology, read_sentences

    sentences = read_sentences(args.text_file, args.num_sentences)
    models = muxology_models(args.models, preset=args.preset, instances=args.instances)
    report = muxology(
        models, sentences, tokenizer=args.tokenizer, max_length=args.max_length,
        batch_size=args.batch_size, device=args.device or _default_device(),
    )
    _write_json(args.output, report)
    png = plot_muxology(report, os.path.splitext(args.output)[0] + ".png")
    for entry in report["models"]:
        acts = " ".join(f"{x:.3f}" for x in entry["mean_abs_activation"])
        ents = " ".join(f"{x:.3f}" for x in entry["attention_entropy"])
        print(f"{entry['name']}: |act| per layer {acts}; entropy per layer {ents}")
    print(f"wrote {args.output} and {png}")
    return 0


def _run_pareto(args) -> int:
    from .analysis import load_records, pareto_frontier, plot_pareto

    records = load_records([args.results])
    frontier = pareto_frontier(records)
    plot_pareto(records, args.output, title=args.title)
    _write_json(os.path.splitext(args.output)[0] + ".json", {"points": records, "frontier": frontier})
    print("Pareto frontier (highest throughput first):")
    for point in frontier:
        print(f"  {point['name']}: score {point['score']:.2f}, {point['throughput']:.1f} samples/s")
    print(f"wrote {args.output}")
    return 0


def _run_table(args) -> int:
    from .analysis import ensemble_table, load_records, lottery_table, table_markdown

    records = load_records(args.results)
    rows = ensemble_table(records) if args.table == "ensemble" else lottery_table(records)
    markdown = table_markdown(rows)
    print(markdown)
    if args.output:
        base = os.path.splitext(args.output)[0]
        with open(base + ".md", "w") as handle:
            handle.write(markdown + "\n")
        _write_json(base + ".json", rows)
        print(f"wrote {base}.md and {base}.json")
    return 0


def _run_reproduce(args) -> int:
    import torch

    from .reproduce import merge_reproductions, report_text, run_reproduction

    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = _recipe_overrides(args.set)
    if args.merge:
        timing = {}
        for name, value in overrides.items():
            section, _, key = name.partition(".")
            if section != "throughput" or not key:
                raise ValueError(f"--set {name}=... with --merge: a merge sets only throughput.KEY (its timing)")
            timing[key] = value
        results = merge_reproductions(args.merge, args.output_dir, device=args.device, timing=timing)
        print(report_text(results))
        print(f"wrote the merged results.json, table.md, points.json, pareto.png, lottery.md, ensemble.md to "
              f"{args.output_dir}")
        return 0
    preset = _reproduction_preset(args.preset, args.stable)
    results = run_reproduction(args.output_dir, preset, models=args.models, tasks=args.tasks,
                               seeds=args.seeds, device=args.device, overrides=overrides,
                               runs_dir=args.runs_dir, progress=args.progress)
    print(report_text(results))
    print(f"wrote results.json, table.md, points.json, pareto.png, lottery.md, ensemble.md to {args.output_dir}")
    return 0


def _recipe_overrides(items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as a dict, each value read as JSON where it parses (else a string)."""
    overrides = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set takes KEY=VALUE, got {item!r}")
        try:
            overrides[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[name.strip()] = value
    return overrides


def _reproduction_preset(preset: str | None, stable: bool) -> str:
    """The preset name for ``--quick`` / ``--full`` / ``--gpu`` / ``--convert`` and ``--stable``."""
    from ..training.recipes import STABLE_PRESETS

    if not stable:
        return preset or "quick"
    if (preset or "full") not in STABLE_PRESETS:
        raise SystemExit(f"--stable applies to {' or '.join('--' + name for name in STABLE_PRESETS)}, "
                         f"not --{preset}")
    return STABLE_PRESETS[preset or "full"]


def _write_json(path: str, data) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(data, handle, indent=1)
