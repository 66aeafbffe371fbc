"""Do ``muxplm frontier``'s speed-ups agree with ``muxplm bench throughput`` on the same checkpoints?

    python3 benchmarks/frontier_agreement.py FRONTIER_DIR BENCH_JSON --output OUT.json [--again BENCH_JSON2]
    python3 benchmarks/frontier_agreement.py runs/frontier-minilm-sentiment-3k bench.json --again bench-again.json \
        --output benchmarks/results/frontier/minilm-sentiment-3k/agreement.json

FRONTIER_DIR holds a finished run's ``frontier.json``; BENCH_JSON is the ``--output`` of the
``muxplm bench throughput`` command printed at the end of its ``frontier.md``, run on the run's
candidate checkpoints. Each model's speed-up over the plain model in float32 is read from both and
compared; the target is within 10 %. Also reported: how alike the two orders of the models are
(Spearman's rank correlation), the recommendation the frontier's rule makes from the benchmark's
speed-ups, and with ``--again`` (the same command run a second time) how well the benchmark agrees
with itself, the noise floor of the comparison.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
from datetime import date
from pathlib import Path


def bench_speedups(path: Path) -> dict[tuple, dict]:
    """(candidate, runtime, precision) -> the row of a ``bench throughput --output`` with its
    speed-up over the plain model in float32."""
    results = json.loads(path.read_text())["results"]
    rows = {(r["model"].split("/")[0], r["runtime"], r["precision"]): r for r in results}
    plain = rows[("plain", "torch", "fp32")]["samples_per_s"]
    return {key: dict(row, speedup=row["samples_per_s"] / plain) for key, row in rows.items()}


def within(ratios: list[float], share: float = 0.10) -> str:
    return f"{sum(abs(r - 1) <= share for r in ratios)} of {len(ratios)}"


def main(argv=None) -> int:
    from scipy.stats import spearmanr

    from muxplm.frontier.pareto import recommend

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frontier_dir", type=Path)
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--again", type=Path, help="the same benchmark run a second time")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    table = json.loads((args.frontier_dir / "frontier.json").read_text())
    bench = bench_speedups(args.bench_json)
    again = bench_speedups(args.again) if args.again else None
    compared = []
    for row in table["rows"]:
        key = (row["name"].split()[0], row.get("runtime", "torch"), row["precision"])
        if key not in bench:
            continue
        timed = bench[key]
        entry = {"name": row["name"], "frontier": round(row["speedup"], 3), "bench": round(timed["speedup"], 3),
                 "ratio": round(row["speedup"] / timed["speedup"], 3),
                 "bench_std_share": round(timed["std"] / timed["samples_per_s"], 3)}
        if again is not None:
            entry["bench_again"] = round(again[key]["speedup"], 3)
            entry["bench_over_again"] = round(timed["speedup"] / again[key]["speedup"], 3)
        compared.append(entry)
    bench_speed = {c["name"]: c["bench"] for c in compared}
    at_bench_speed = [dict(row, speedup=bench_speed[row["name"]]) for row in table["rows"] if row["name"] in bench_speed]
    report = {"machine": platform.processor() or platform.machine(), "date": date.today().isoformat(),
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True).stdout.strip(),
              "within_10_percent": within([c["ratio"] for c in compared]),
              "rank_correlation": round(float(spearmanr([c["frontier"] for c in compared],
                                                        [c["bench"] for c in compared]).statistic), 3),
              "recommended": table["recommended"],
              "recommended_at_bench_speed": recommend(at_bench_speed, table["min_retention"])["name"]}
    if again is not None:
        report["bench_against_itself_within_10_percent"] = within([c["bench_over_again"] for c in compared])
    report["rows"] = compared
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    for c in compared:
        line = f"{c['name']:24} frontier {c['frontier']:6.2f}x  bench {c['bench']:6.2f}x  ratio {c['ratio']:.2f}"
        if again is not None:
            line += f"  bench again {c['bench_again']:6.2f}x  ratio {c['bench_over_again']:.2f}"
        print(line + f"  (bench spread {100 * c['bench_std_share']:.0f} %)")
    print(f"within 10 %: {report['within_10_percent']}; rank correlation {report['rank_correlation']}; "
          f"recommended {report['recommended']}, at the benchmark's speed-ups {report['recommended_at_bench_speed']}")
    if again is not None:
        print(f"the benchmark against itself, within 10 %: {report['bench_against_itself_within_10_percent']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
