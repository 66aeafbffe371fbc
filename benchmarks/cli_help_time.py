"""Seconds to every ``muxplm`` help screen, each in a fresh process as a user types it.

The target: every help screen under 1 s. Each screen is ``python3 -m muxplm WORDS --help``, timed
from the start of the process to its end, the median of ``--repeats`` runs (screens round robin,
so that a burst of load on a shared machine touches every screen alike). For context it times
the interpreter alone and the imports the help screens avoid (``import torch``, ``import
transformers``). ``--src`` times another checkout's ``src`` folder instead of the installed
package (an earlier commit, for a before/after table). Prints a table and writes JSON::

    python3 benchmarks/cli_help_time.py --output benchmarks/results/cli/help_time.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Every help screen: the top level, each command and each sub-command.
SCREENS = (
    (), ("data",), ("data", "fetch"), ("pretrain",), ("finetune",), ("convert",), ("evaluate",), ("demo",),
    ("bench",), ("bench", "throughput"), ("bench", "profile"), ("analyze",), ("analyze", "muxology"),
    ("analyze", "pareto"), ("analyze", "ensemble"), ("analyze", "lottery"), ("reproduce",), ("serve",),
    ("export",), ("export", "onnx"), ("serve-bench",),
)
# What a help screen should not cost, for comparison.
REFERENCES = {"python3 -c pass": ["-c", "pass"], "import muxplm": ["-c", "import muxplm"],
              "import transformers": ["-c", "import transformers"], "import torch": ["-c", "import torch"]}
TARGET_S = 1.0


def _seconds(arguments: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *arguments], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"python3 {' '.join(arguments)} failed: {done.stderr[-2000:]}")
    return elapsed


def measure(repeats: int, src: str | None = None, note: str | None = None) -> dict:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(src).resolve()), env.get("PYTHONPATH")]))
    runs = {**{f"muxplm {' '.join(words)} --help".replace("  ", " "): ["-m", "muxplm", *words, "--help"]
               for words in SCREENS}, **REFERENCES}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):  # round robin over the screens
        for name, arguments in runs.items():
            times[name].append(_seconds(arguments, env))
    screens = {name: statistics.median(values) for name, values in times.items() if name.startswith("muxplm ")}
    return {
        "environment": {"python": platform.python_version(), "machine": platform.machine(), "cpu": _cpu_model(),
                        "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0], "src": src or "installed",
                        "commit": _commit(Path(src) if src else Path(__file__).parent), "note": note},
        "repeats": repeats, "statistic": "median", "target_s": TARGET_S,
        "help_screens_s": screens, "references_s": {name: statistics.median(times[name]) for name in REFERENCES},
        "slowest_s": max(screens.values()), "all_under_target": all(value < TARGET_S for value in screens.values()),
        "trials_s": times,
    }


def _cpu_model() -> str | None:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)


def _commit(folder: Path) -> str | None:
    """The commit checked out where ``folder`` is (None outside a git work tree)."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=folder)
    return done.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each screen (default: 5)")
    parser.add_argument("--src", help="a checkout's src folder to time instead of the installed package")
    parser.add_argument("--note", help="a remark kept with the results (what --src holds, the machine's load, ...)")
    parser.add_argument("--output", help="write the results as JSON here")
    args = parser.parse_args(argv)
    result = measure(args.repeats, args.src, args.note)
    width = max(map(len, [*result["help_screens_s"], *result["references_s"]]))
    for name, seconds in {**result["help_screens_s"], **result["references_s"]}.items():
        print(f"{name:<{width}}  {seconds:6.2f} s")
    print(f"slowest help screen: {result['slowest_s']:.2f} s (target: under {TARGET_S:.0f} s): "
          f"{'met' if result['all_under_target'] else 'missed'}")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
