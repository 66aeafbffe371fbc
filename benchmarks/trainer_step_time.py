"""Training step time on MuxTrainer against the hand-written loop it replaced, side by side.

The target: a step on the Trainer path within 10 % of the old loop's, at the demo's size (the
tiny preset, N = 2 sentiment fine-tuning at 48 tokens, batch 32) and at ``small``. Each setting
trains ``--steps`` steps with each code in a fresh process, the two alternating over
``--rounds`` rounds (a burst of load on a shared machine touches both alike); a run's step time
is the median over its logging windows after the first (which holds the start-up) of seconds
per step. ``--old-src`` is the ``src`` folder of a checkout of the old loop, e.g.::

    git worktree add /tmp/old-loop 40a5f03
    python3 benchmarks/trainer_step_time.py --old-src /tmp/old-loop/src \\
        --output benchmarks/results/trainer/step_time.json
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

SETTINGS = {
    "demo (tiny, N=2)": ["--preset", "tiny", "--num-instances", "2", "--max-length", "48", "--batch-size", "32"],
    "small (N=2)": ["--preset", "small", "--num-instances", "2", "--max-length", "48", "--batch-size", "32"],
}
TARGET = 1.10


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _run(src: Path, setting: list[str], steps: int, logging_steps: int, folder: Path) -> float:
    """Seconds per step of one fine-tuning run of the code in ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "muxplm", "finetune", "--task", "sentiment", *setting,
               "--max-steps", str(steps), "--logging-steps", str(logging_steps), "--eval-steps", str(10 * steps),
               "--save-steps", str(10 * steps), "--consistency-weight", "0", "--report-to", "none", "--no-progress",
               "--max-eval-examples", "32", "--output-dir", str(folder)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{src}: {done.stderr[-2000:]}")
    records = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    rates = [record["samples_per_s"] for record in records if record["kind"] == "train"][1:]
    batch = int(setting[setting.index("--batch-size") + 1])
    return statistics.median(batch / rate for rate in rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-src", required=True, type=Path, help="src folder of a checkout of the old loop")
    parser.add_argument("--steps", type=int, default=60, help="steps per run (default 60; small: a third)")
    parser.add_argument("--logging-steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    new_src = Path(__file__).resolve().parents[1] / "src"
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, setting in SETTINGS.items():
            steps = args.steps if "tiny" in setting else max(args.steps // 3, 3 * args.logging_steps // 2)
            logging = args.logging_steps if "tiny" in setting else max(args.logging_steps // 2, 1)
            times = {"old loop": [], "MuxTrainer": []}
            for round_ in range(args.rounds):
                for label, src in (("old loop", args.old_src), ("MuxTrainer", new_src)):
                    folder = Path(scratch) / f"{name}-{label}-{round_}".replace(" ", "_")
                    times[label].append(_run(src, setting, steps, logging, folder))
                    print(f"{name:18s} {label:10s} round {round_}: {times[label][-1]:.4f} s/step", flush=True)
            old, new = (statistics.median(times[label]) for label in ("old loop", "MuxTrainer"))
            results[name] = {"seconds_per_step": {"old loop": old, "MuxTrainer": new}, "ratio": new / old,
                             "runs": times, "steps": steps, "logging_steps": logging}
    print(f"\n{'setting':18s} {'old loop':>10s} {'MuxTrainer':>11s} {'ratio':>6s}  (target <= {TARGET:.2f})")
    for name, row in results.items():
        seconds = row["seconds_per_step"]
        print(f"{name:18s} {seconds['old loop']:10.4f} {seconds['MuxTrainer']:11.4f} {row['ratio']:6.3f}")
    if args.output:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({
            "machine": f"{_cpu_name()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%d"), "commit": commit, "target_ratio": TARGET, "settings": results,
        }, indent=1))
    return 0 if all(row["ratio"] <= TARGET for row in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
