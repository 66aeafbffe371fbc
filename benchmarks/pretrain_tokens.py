"""Pre-training tokens per second on the Trainer path, and what the paper's runs would cost at that rate.

Each N runs ``muxplm pretrain --stage mlm`` on a fresh model of ``--size`` for ``--steps`` steps
of ``--batch-size`` sequences of ``--length`` tokens (the built-in corpus, cycled), in a fresh
process; its rate is the median over the logging windows after the first (which holds the
start-up) of sequences per second, times the length. From the rate it states the GPU-hours of
the paper's pre-training of that size (1M steps of 256 x 512 tokens, and 10k priming steps) on
``--devices`` such devices, assuming the rate scales with the number of devices::

    python3 benchmarks/pretrain_tokens.py --size base --length 512 --batch-size 8 --steps 6 \\
        --output benchmarks/results/pretrain/tokens-cpu.json                      # this CPU
    python3 benchmarks/pretrain_tokens.py --size base --length 512 --batch-size 64 --steps 40 \\
        --device cuda --precision bf16 --output benchmarks/results/gpu/pretrain-tokens-base-bf16.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAPER_TOKENS = {"mlm": 1_000_000 * 256 * 512, "priming": 10_000 * 256 * 512}


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    return platform.processor() or platform.machine()


def tokens_per_second(size: str, instances: int, length: int, batch: int, steps: int, precision: str,
                      folder: Path) -> float:
    logging = max(1, steps // 4)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "muxplm", "pretrain", "--stage", "mlm", "--preset", size, "--num-instances",
               str(instances), "--max-length", str(length), "--batch-size", str(batch), "--max-steps", str(steps),
               "--logging-steps", str(logging), "--eval-steps", str(10 * steps), "--save-steps", str(10 * steps),
               "--mixed-precision", precision, "--report-to", "none", "--no-progress", "--output-dir", str(folder)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    records = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    rates = [record["samples_per_s"] for record in records if record["kind"] == "train"][1:]
    return statistics.median(rates) * length


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="base")
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=8, help="sequences a step (instances)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", default="no", help="--mixed-precision of the runs (bf16 on a GPU)")
    parser.add_argument("--devices", type=int, default=8, help="devices the paper's runs are costed on")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for n in args.instances:
            rate = tokens_per_second(args.size, n, args.length, args.batch_size, args.steps, args.precision,
                                     Path(scratch) / f"n{n}")
            hours = {stage: tokens / (rate * args.devices) / 3600 for stage, tokens in PAPER_TOKENS.items()}
            rows[f"N={n}"] = {"tokens_per_s": rate, "paper_hours": hours,
                              "paper_device_hours": {stage: h * args.devices for stage, h in hours.items()}}
            print(f"{args.size} N={n}: {rate:,.0f} tokens/s per device; the paper's MLM stage on {args.devices}: "
                  f"{hours['mlm']:,.1f} h ({hours['mlm'] * args.devices:,.0f} device-hours)", flush=True)
    if args.output:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({
            "device": _device_name(args.device), "date": time.strftime("%Y-%m-%d"), "commit": commit,
            "settings": {k: v for k, v in vars(args).items() if k != "output"}, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
