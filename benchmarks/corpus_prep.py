"""Pre-training on a large text file: time and peak memory to the end of step 1, small file against
large, and again over the large one from the prepared cache.

Runs, each a fresh ``muxplm pretrain --stage retrieval --preset tiny --num-instances 2
--train-file F --max-steps 1`` process in a new output folder, its whole process tree's memory
(proportional set size: shared pages counted once) sampled every 0.1 s:

1. ``small``: a SMALL_MB file, empty cache;
2. ``large``: a LARGE_MB file, empty cache (the preparation: read, tokenize, pack, cache);
3. ``large-again``: the large file again, another output folder, the same cache.

Targets: peak memory of ``large`` at most 1.25x ``small``'s; ``large-again`` to the end of its
first step in at most 2x ``small``'s time. Also the preparation throughput (MB of text per second
per core). The text is the built-in corpus repeated to size. Prints a table and writes JSON::

    python3 benchmarks/corpus_prep.py --output benchmarks/results/corpus/prep.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def write_text(path: Path, megabytes: float) -> None:
    from muxplm.data import load_pretraining_corpus

    corpus = "\n".join(load_pretraining_corpus()["text"]) + "\n"
    target = int(megabytes * 1e6)
    with open(path, "w") as handle:
        written = 0
        while written < target:
            chunk = corpus[: target - written]
            handle.write(chunk)
            written += len(chunk.encode())


def run(train_file: Path, output_dir: Path, cache_dir: Path) -> dict:
    command = [sys.executable, "-m", "muxplm", "pretrain", "--stage", "retrieval", "--preset", "tiny",
               "--num-instances", "2", "--train-file", str(train_file), "--max-steps", "1", "--output-dir",
               str(output_dir), "--cache-dir", str(cache_dir), "--no-progress"]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    watched = psutil.Process(process.pid)
    while process.poll() is None:
        try:
            tree = [watched, *watched.children(recursive=True)]
            # Proportional set size: forked workers share their parent's pages, so their resident
            # sizes would count those pages twice.
            peak = max(peak, sum(p.memory_full_info().pss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.1)
    seconds = time.perf_counter() - start
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {process.stderr.read().decode()[-2000:]}")
    return {"seconds": seconds, "peak_memory_mb": peak / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-mb", type=float, default=20)
    parser.add_argument("--large-mb", type=float, default=400)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    from muxplm.bench.throughput import environment

    with tempfile.TemporaryDirectory(prefix="muxplm-corpus-") as scratch:
        root = Path(scratch)
        small, large = root / "small.txt", root / "large.txt"
        write_text(small, args.small_mb)
        write_text(large, args.large_mb)
        runs = {
            "small": run(small, root / "run-small", root / "cache-small"),
            "large": run(large, root / "run-large", root / "cache-large"),
            "large-again": run(large, root / "run-large-again", root / "cache-large"),
        }
    cores = len(os.sched_getaffinity(0))
    preparation = runs["large"]["seconds"] - runs["large-again"]["seconds"]
    report = {
        "command": f"python3 benchmarks/corpus_prep.py --small-mb {args.small_mb:g} --large-mb {args.large_mb:g}",
        "environment": environment("cpu"),
        "runs": runs,
        "peak_memory_large_over_small": runs["large"]["peak_memory_mb"] / runs["small"]["peak_memory_mb"],
        "again_seconds_over_small": runs["large-again"]["seconds"] / runs["small"]["seconds"],
        "preparation_mb_per_s_per_core": args.large_mb / max(preparation, 1e-9) / cores,
        "targets": {"peak_memory_large_over_small": "<= 1.25", "again_seconds_over_small": "<= 2"},
    }
    report["targets_met"] = {"peak_memory_large_over_small": report["peak_memory_large_over_small"] <= 1.25,
                             "again_seconds_over_small": report["again_seconds_over_small"] <= 2}
    for name, value in runs.items():
        print(f"{name:12s} {value['seconds']:8.1f} s   peak {value['peak_memory_mb']:8.0f} MB")
    print(f"peak memory large / small = {report['peak_memory_large_over_small']:.2f} (target <= 1.25)")
    print(f"time large-again / small  = {report['again_seconds_over_small']:.2f} (target <= 2)")
    print(f"preparation: {report['preparation_mb_per_s_per_core']:.2f} MB of text per second per core")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
