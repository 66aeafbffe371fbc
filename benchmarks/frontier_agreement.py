"""Do ``muxplm frontier``'s speed-ups agree with ``muxplm bench throughput`` on the same checkpoints?

    python3 benchmarks/frontier_agreement.py FRONTIER_DIR BENCH_JSON --output OUT.json
    python3 benchmarks/frontier_agreement.py benchmarks/results/frontier/minilm-sentiment bench.json \
        --output benchmarks/results/frontier/minilm-sentiment/agreement.json

FRONTIER_DIR holds a finished run's ``frontier.json``; BENCH_JSON is the ``--output`` of the
``muxplm bench throughput`` command printed at the end of its ``frontier.md``, run on the run's
candidate checkpoints. Each model's speed-up over the plain model in float32 is read from both and
compared; the target is within 10 %.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
from datetime import date
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frontier_dir", type=Path)
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    rows = json.loads((args.frontier_dir / "frontier.json").read_text())["rows"]
    bench = {(r["model"].split("/")[0], r["runtime"], r["precision"]): r
             for r in json.loads(args.bench_json.read_text())["results"]}
    plain = bench[("plain", "torch", "fp32")]["samples_per_s"]
    compared = []
    for row in rows:
        timed = bench.get((row["name"].split()[0], row.get("runtime", "torch"), row["precision"]))
        if timed is None:
            continue
        speedup = timed["samples_per_s"] / plain
        compared.append({"name": row["name"], "frontier": round(row["speedup"], 3), "bench": round(speedup, 3),
                         "ratio": round(row["speedup"] / speedup, 3),
                         "bench_std_share": round(timed["std"] / timed["samples_per_s"], 3)})
    within = [c for c in compared if abs(c["ratio"] - 1) <= 0.10]
    from scipy.stats import spearmanr

    from muxplm.frontier.pareto import recommend

    table = json.loads((args.frontier_dir / "frontier.json").read_text())
    bench_speeds = {c["name"]: c["bench"] for c in compared}
    rows_at_bench_speed = [dict(row, speedup=bench_speeds[row["name"]]) for row in rows if row["name"] in bench_speeds]
    recommended_at_bench_speed = recommend(rows_at_bench_speed, table["min_retention"])["name"]
    report = {"machine": platform.processor() or platform.machine(), "date": date.today().isoformat(),
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True).stdout.strip(),
              "within_10_percent": f"{len(within)} of {len(compared)}",
              "rank_correlation": round(float(spearmanr([c["frontier"] for c in compared],
                                                        [c["bench"] for c in compared]).statistic), 3),
              "recommended": table["recommended"], "recommended_at_bench_speed": recommended_at_bench_speed,
              "rows": compared}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    for c in compared:
        print(f"{c['name']:24} frontier {c['frontier']:6.2f}x  bench {c['bench']:6.2f}x  ratio {c['ratio']:.2f}"
              f"  (bench spread {100 * c['bench_std_share']:.0f} %)")
    print(f"within 10 %: {report['within_10_percent']}; rank correlation {report['rank_correlation']}; "
          f"recommended {report['recommended']}, at the benchmark's speed-ups {recommended_at_bench_speed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
