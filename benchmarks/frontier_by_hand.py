"""Do ``muxplm frontier``'s accuracies agree with the same candidates built by hand?

    python3 benchmarks/frontier_by_hand.py FRONTIER_DIR --task sentiment --output OUT.json \
        [--rows plain,cut4,n2] [--work-dir runs/frontier-by-hand]

For each named row of a finished run's ``frontier.json`` this runs the row's own rebuild commands
(``muxplm convert`` / ``muxplm finetune``, as the table prints them) into a fresh folder, scores
the result with ``muxplm evaluate`` over the same number of composition seeds, and compares the
mean accuracy with the table's. The target is within 1 point.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import time
from datetime import date
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frontier_dir", type=Path)
    parser.add_argument("--task", required=True, help="the task the frontier ran on")
    parser.add_argument("--rows", default="plain,cut4,n2", help="comma-separated row names")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/frontier-by-hand"))
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    table = json.loads((args.frontier_dir / "frontier.json").read_text())
    rows = {row["name"]: row for row in table["rows"]}
    old_root = str(Path(rows["plain"]["checkpoint"]).parent.parent)  # .../candidates
    compared = []
    for name in args.rows.split(","):
        row = rows[name]
        started = time.perf_counter()
        for command in row["commands"]:
            argv_ = [part.replace(old_root, str(args.work_dir)) for part in shlex.split(command)]
            subprocess.run(argv_, check=True)
        checkpoint = row["checkpoint"].replace(old_root, str(args.work_dir))
        scores = args.work_dir / name / "eval.json"
        evaluate = ["muxplm", "evaluate", checkpoint, "--task", args.task, "--seeds", str(row["seeds"]),
                    "--output", str(scores)]
        if row["precision"] != "fp32":
            evaluate += ["--quantize", "int8", "--runtime", row.get("runtime", "torch")]
        subprocess.run(evaluate, check=True)
        by_hand = 100 * json.loads(scores.read_text())["summary"][table["metric"]]["mean"]
        compared.append({"name": name, "frontier": round(row["accuracy"], 2), "by_hand": round(by_hand, 2),
                         "difference": round(by_hand - row["accuracy"], 2), "commands": row["commands"],
                         "seconds": round(time.perf_counter() - started, 1)})
        print(f"{name:12} frontier {row['accuracy']:6.2f}  by hand {by_hand:6.2f}", flush=True)
    within = [c for c in compared if abs(c["difference"]) <= 1.0]
    report = {"machine": platform.processor() or platform.machine(), "date": date.today().isoformat(),
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True).stdout.strip(),
              "within_1_point": f"{len(within)} of {len(compared)}", "rows": compared}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"within 1 point: {report['within_1_point']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
