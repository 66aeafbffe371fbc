"""File-to-file throughput of ``muxplm predict``, side by side with the model's own speed, in one run.

On one checkpoint (by default a random MUX-BERT of the tiny preset at N = 2, two labels) and the
built-in sentiment texts (a real length distribution, repeated to ``--lines``), it measures:

1. ``predict``, JSONL in and out, in one process, against the same model's speed without it:
   ``muxplm bench throughput --model`` (:func:`muxplm.bench.throughput.time_checkpoints`) at the
   same batch over the file's length distribution (each padded length of the passes ``predict``
   runs, as many batches as it has passes of that length) and at the file's mean padded length;
   and the very passes ``predict`` runs (the file's texts tokenized beforehand, sorted and grouped
   as ``predict`` groups them, nothing read or written). The target: ``predict`` keeps >= 85 % of
   ``bench throughput`` over the file's length distribution.
2. Length grouping against none (``--no-length-grouping``), as a ratio of texts/s.
3. Peak RSS of ``muxplm predict`` (a process of its own) on ``--rss-lines`` lines against a tenth of them.
4. ``--workers 2`` (one thread each) against ``--workers 1`` (all threads), on the larger file,
   start-up included.
5. Ray Data with 2 local workers against ``--workers 2``, where Ray is installed, likewise.
6. ``--deterministic`` against the seeded default, on ``--deterministic-lines`` lines.

Every figure is measured in this run, on this machine; the JSON records the machine, the date,
the commit and the load average before and after (other work on the machine slows every figure)::

    python3 benchmarks/predict_throughput.py --small  # about 3 minutes on 2 cores
    python3 benchmarks/predict_throughput.py --lines 200000 --rss-lines 2000000 --model runs/my-task
    # one part only: the throughput of a fine-tuned model; the memory check on 2M lines
    python3 benchmarks/predict_throughput.py --model runs/my-task --lines 8607 --parts throughput
    python3 benchmarks/predict_throughput.py --rss-lines 2000000 --parts rss
    # --deterministic against the seeded default on a fine-tuned model
    python3 benchmarks/predict_throughput.py --model runs/my-task --parts deterministic
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "predict"
PARTS = ("throughput", "rss", "workers", "ray", "deterministic")


def build_model(folder: Path, layers: int) -> Path:
    import torch

    from muxplm import MuxBertConfig, MuxBertForSequenceClassification

    torch.manual_seed(0)
    config = MuxBertConfig.from_preset("tiny", num_hidden_layers=layers, num_instances=2, num_labels=2,
                                       id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1})
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    return folder


def write_lines(path: Path, texts: list[str], lines: int) -> Path:
    """``lines`` JSONL rows cycling through ``texts`` (ids make every row distinct)."""
    with open(path, "w", encoding="utf-8") as out:
        for index in range(lines):
            out.write(json.dumps({"id": index, "text": texts[index % len(texts)]}) + "\n")
    return path


def forward_only(model: Path, texts: list[str], *, part_size: int, threads: int) -> dict:
    """Texts/s of the forward passes ``predict`` runs on ``texts``, alone: tokenized beforehand
    (that rate too), sorted by length within parts, grouped by the same composition seeds."""
    import torch

    from muxplm.inference import forward_batches
    from muxplm.serving import Predictor

    torch.set_num_threads(threads)
    predictor = Predictor.from_pretrained(model)
    started = time.perf_counter()
    encoded = predictor.encode(texts, truncate=True)
    tokenizing = time.perf_counter() - started
    passes_per_part = -(-part_size // predictor.batch_size)
    lengths = []
    started = time.perf_counter()
    for index, start in enumerate(range(0, len(encoded), part_size)):
        part = sorted(encoded[start : start + part_size], key=len)
        lengths += [max(map(len, part[i : i + predictor.batch_size])) for i in range(0, len(part), predictor.batch_size)]
        forward_batches(predictor.run, part, batch_size=predictor.batch_size, composition_seed=0,
                        first_pass=index * passes_per_part)
    seconds = time.perf_counter() - started
    return {"texts_per_s": round(len(encoded) / seconds, 1), "mean_padded_length": round(statistics.mean(lengths), 1),
            "batch_size": predictor.batch_size, "tokenizing_texts_per_s": round(len(encoded) / tokenizing, 1),
            "pass_lengths": lengths}


def bench_throughput(model: Path, *, batch_size: int, seq_length: int, threads: int) -> dict:
    """``muxplm bench throughput --model MODEL --batch-size B --seq-len L`` at the file's mean padded length."""
    import torch

    from muxplm.bench.throughput import time_checkpoints

    torch.set_num_threads(threads)
    row = time_checkpoints({"model": str(model)}, batch_size=batch_size, seq_length=seq_length, batches=40,
                           trials=1, warmup=2)["model"]
    return {"samples_per_s": round(row["samples_per_s"], 1), "seq_length": seq_length, "batch_size": batch_size}


def bench_over_lengths(model: Path, lengths: list[int], *, batch_size: int, threads: int) -> dict:
    """``muxplm bench throughput --model MODEL --batch-size B`` over the file's length distribution:
    at each padded length of the passes ``predict`` runs, as many batches as there are passes of that
    length (after one untimed), their times summed. Rows of one length, no tokens; only the mix of
    lengths is the file's."""
    import collections

    import torch

    from muxplm.bench.throughput import time_checkpoints
    from muxplm.training.models import classifier_class

    torch.set_num_threads(threads)
    loaded = classifier_class(str(model)).from_pretrained(str(model)).eval()
    seconds = 0.0
    for length, passes in sorted(collections.Counter(lengths).items()):
        row = time_checkpoints({"model": loaded}, batch_size=batch_size, seq_length=length, batches=passes,
                               trials=1, warmup=1)["model"]
        seconds += passes * batch_size / row["samples_per_s"]
    return {"samples_per_s": round(len(lengths) * batch_size / seconds, 1), "passes": len(lengths),
            "distinct_lengths": len(set(lengths)), "batch_size": batch_size}


def predict(model: Path, source: Path, output: Path, **options) -> dict:
    from muxplm.predict import LabelSettings, predict_files
    from muxplm.predict.sources import Columns

    settings = LabelSettings(group_by_length=options.pop("group_by_length", True), on_bad_row="truncate",
                             part_size=options.pop("part_size", 8192),
                             deterministic=options.pop("deterministic", False))
    summary = predict_files(model, [str(source)], output, columns=Columns(id="id"), settings=settings, overwrite=True,
                            progress=False, **options)
    return {"texts_per_s": summary["texts_per_s"], "seconds": summary["seconds"],
            "texts_per_s_with_start_up": round(summary["rows"] / summary["seconds"], 1),
            "workers": summary["workers"], "threads_per_worker": summary["threads_per_worker"]}


def peak_rss_mb(model: Path, source: Path, output: Path, threads: int, part_size: int) -> dict:
    """Peak resident memory of ``muxplm predict`` in a process of its own (Linux ``ru_maxrss``)."""
    command = [sys.executable, "-m", "muxplm", "predict", str(model), "--input", str(source), "--output", str(output),
               "--id-column", "id", "--threads", str(threads), "--no-progress", "--overwrite", "--on-bad-row", "truncate",
               "--part-size", str(part_size)]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if status:
        raise RuntimeError(f"{' '.join(command)} failed")
    return {"peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "seconds": round(time.perf_counter() - started, 1)}


def predict_with_ray(model: Path, source: Path, output: Path, *, workers: int, threads: int, part_size: int) -> dict:
    from muxplm.integrations.ray import predict_with_ray as run
    from muxplm.predict import LabelSettings
    from muxplm.predict.sources import Columns

    started = time.perf_counter()
    summary = run(model, [str(source)], str(output), columns=Columns(id="id"), workers=workers, threads=threads,
                  overwrite=True, settings=LabelSettings(on_bad_row="truncate", part_size=part_size))
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 1), "texts_per_s_with_start_up": round(summary["rows"] / seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a fine-tuned sequence classifier (default: a random tiny MUX-BERT)")
    parser.add_argument("--layers", type=int, default=4, help="layers of the default model (default: 4, the tiny preset)")
    parser.add_argument("--lines", type=int, default=200_000, help="lines of the throughput file")
    parser.add_argument("--rss-lines", type=int, default=2_000_000,
                        help="lines of the larger file of the RSS check, also labelled by workers and Ray")
    parser.add_argument("--part-size", type=int, default=8192, help="predict's --part-size")
    parser.add_argument("--rss-part-size", type=int, default=None,
                        help="predict's --part-size on the larger files (default: --part-size); memory grows with "
                        "the parts in flight, so the smaller file should hold several, and workers share parts")
    parser.add_argument("--deterministic-lines", type=int, default=3000,
                        help="lines labelled with and without --deterministic (default: 3,000)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of predict, of the passes alone, of bench throughput and of predict without length "
                        "grouping, in turn; their medians are compared (default: 3)")
    parser.add_argument("--small", action="store_true",
                        help="a run of minutes: the sentiment texts once; 20,000 lines in parts of 512 for the RSS "
                        "check, and for workers and Ray")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"the measurements to make, comma-separated from {','.join(PARTS)} (default: all)")
    parser.add_argument("--output", type=Path, help="the JSON (default: benchmarks/results/predict/throughput[-small].json)")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if not parts <= set(PARTS):
        parser.error(f"--parts: {', '.join(sorted(parts - set(PARTS)))} is not one of {', '.join(PARTS)}")
    if args.small:
        args.lines, args.rss_lines, args.rss_part_size = 8607, 20_000, 512
    args.rss_part_size = args.rss_part_size or args.part_size

    from muxplm.bench.throughput import environment
    from muxplm.data.tasks import load_sentiment
    from muxplm.predict.run import available_cpus

    cpus = available_cpus()
    load_before = os.getloadavg()
    texts = list(load_sentiment()["train"]["text"])
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="muxplm-predict-bench-") as scratch:
        scratch = Path(scratch)
        model = args.model or build_model(scratch / "model", args.layers)
        source = write_lines(scratch / "in.jsonl", texts, args.lines) if "throughput" in parts else None

        if "throughput" in parts:
            # Round robin, so that a drift of the machine's speed touches every measurement alike.
            trials: dict[str, list[dict]] = {"predict": [], "forward_passes_alone": [], "bench_throughput": [],
                                             "bench_throughput_over_lengths": [], "no_length_grouping": []}
            for _ in range(args.repeats):
                trials["predict"].append(predict(model, source, scratch / "out.jsonl", workers=1, threads=cpus))
                passes = forward_only(model, [texts[i % len(texts)] for i in range(args.lines)],
                                      part_size=args.part_size, threads=cpus)
                lengths = passes.pop("pass_lengths")
                trials["forward_passes_alone"].append(passes)
                trials["bench_throughput"].append(bench_throughput(model, batch_size=passes["batch_size"], threads=cpus,
                                                                   seq_length=round(passes["mean_padded_length"])))
                trials["bench_throughput_over_lengths"].append(
                    bench_over_lengths(model, lengths, batch_size=passes["batch_size"], threads=cpus))
                trials["no_length_grouping"].append(predict(model, source, scratch / "ungrouped.jsonl", workers=1,
                                                            threads=cpus, group_by_length=False))
            for name, runs in trials.items():
                rate = "samples_per_s" if name.startswith("bench_throughput") else "texts_per_s"
                results[name] = dict(runs[0], **{rate: statistics.median(run[rate] for run in runs)},
                                     trials=[run[rate] for run in runs])
            results["predict_share_of_forward_passes"] = round(
                results["predict"]["texts_per_s"] / results["forward_passes_alone"]["texts_per_s"], 3)
            results["predict_share_of_bench_throughput"] = round(
                results["predict"]["texts_per_s"] / results["bench_throughput"]["samples_per_s"], 3)
            results["predict_share_of_bench_throughput_over_lengths"] = round(
                results["predict"]["texts_per_s"] / results["bench_throughput_over_lengths"]["samples_per_s"], 3)
            passes = results["forward_passes_alone"]
            results["tokenizing_share_of_forward_time"] = round(
                passes["texts_per_s"] / passes["tokenizing_texts_per_s"], 3)
            results["length_grouping_speedup"] = round(
                results["predict"]["texts_per_s"] / results["no_length_grouping"]["texts_per_s"], 3)

        many = write_lines(scratch / "many.jsonl", texts, args.rss_lines) if parts & {"rss", "workers", "ray"} else None
        if "rss" in parts:
            few = write_lines(scratch / "few.jsonl", texts, args.rss_lines // 10)
            results["rss"] = {"lines": [args.rss_lines // 10, args.rss_lines], "part_size": args.rss_part_size,
                              "fewer": peak_rss_mb(model, few, scratch / "few.out.jsonl", cpus, args.rss_part_size),
                              "more": peak_rss_mb(model, many, scratch / "many.out.jsonl", cpus, args.rss_part_size)}
            rss = results["rss"]
            rss["ratio"] = round(rss["more"]["peak_rss_mb"] / rss["fewer"]["peak_rss_mb"], 3)

        # On the larger file: worker processes and Ray actors pay seconds of start-up each.
        larger = dict(part_size=args.rss_part_size)
        if "workers" in parts or "ray" in parts:
            results["workers"] = {"lines": args.rss_lines, "part_size": args.rss_part_size,
                                  "1": predict(model, many, scratch / "one.jsonl", workers=1, threads=cpus, **larger),
                                  "2": predict(model, many, scratch / "two.jsonl", workers=2,
                                               threads=max(1, cpus // 2), **larger)}
            results["workers"]["2_over_1"] = round(results["workers"]["2"]["texts_per_s_with_start_up"]
                                                   / results["workers"]["1"]["texts_per_s_with_start_up"], 3)
        if "ray" in parts:
            try:
                import ray  # noqa: F401
            except ImportError:
                results["ray"] = "not installed: pip install 'muxplm[ray]'"
            else:
                results["ray"] = {"lines": args.rss_lines, "part_size": args.rss_part_size,
                                  "2": predict_with_ray(model, many, scratch / "ray.jsonl", workers=2,
                                                        threads=max(1, cpus // 2), **larger)}
                results["ray"]["over_workers_2"] = round(results["ray"]["2"]["texts_per_s_with_start_up"]
                                                         / results["workers"]["2"]["texts_per_s_with_start_up"], 3)

        if "deterministic" in parts:
            few = write_lines(scratch / "deterministic.jsonl", texts, args.deterministic_lines)
            seeded = predict(model, few, scratch / "seeded.out.jsonl", workers=1, threads=cpus)
            alone = predict(model, few, scratch / "deterministic.out.jsonl", workers=1, threads=cpus,
                            deterministic=True)
            results["deterministic"] = {"lines": args.deterministic_lines, "seeded": seeded, "deterministic": alone,
                                        "slowdown": round(seeded["texts_per_s"] / alone["texts_per_s"], 2)}

    report = {"environment": environment(), "load_average_before_after": [load_before[0], os.getloadavg()[0]],
              "command": " ".join(["python3", "benchmarks/predict_throughput.py", *(argv or sys.argv[1:])]),
              "settings": {"model": str(args.model) if args.model else f"random MUX-BERT, tiny preset, {args.layers} "
                           "layers, N=2, 2 labels", "texts": "built-in sentiment train texts, repeated",
                           "lines": args.lines, "rss_lines": args.rss_lines, "part_size": args.part_size,
                           "rss_part_size": args.rss_part_size, "repeats": args.repeats,
                           "deterministic_lines": args.deterministic_lines,
                           "cpus": cpus, "parts": sorted(parts)},
              "results": results}
    output = args.output or RESULTS / f"throughput{'-small' if args.small else ''}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(results, indent=1))
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
