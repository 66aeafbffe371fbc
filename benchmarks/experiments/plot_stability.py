"""Score against stability: every run of a sweep grid that ended with a multi-seed evaluation
(its ``stability`` record), next to the reproduction row it varies (consistency weight 0).

    python3 benchmarks/experiments/plot_stability.py consistency \
        --baseline benchmarks/results/reproduce/issue9/results.json --rows mux-bert-2,mux-bert-5
    python3 benchmarks/experiments/plot_stability.py convert-consistency \
        --baseline benchmarks/results/reproduce/convert/results.json \
        --rows convert-minilm-2,convert-minilm-5

Writes ``benchmarks/results/curves/GRID-stability.png`` and ``GRID-stability.md``. Inputs: the
grid's curves (``sweep.py GRID``) and the reproduction's results.json; those behind the committed
``consistency-stability.md`` are in the lab notebook commit 8c644a7 only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CURVES = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "curves"


def run_points(grid: str) -> list[dict]:
    points = []
    for path in sorted((CURVES / grid).glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        # A chain of stages has one settings record per stage: the last one is the evaluated
        # fine-tuning, and the wall time is the whole chain's.
        stages = [r for r in records if r.get("kind") == "settings"]
        stability = [r for r in records if r.get("kind") == "stability"]
        if not stability:
            continue
        settings = dict(stages[-1], wall_seconds=sum(stage["wall_seconds"] for stage in stages))
        s, measured = settings["settings"], stability[-1]
        points.append({
            "run": path.stem, "num_instances": s.get("num_instances") or int(path.stem.split("-")[0][1:]),
            "task": s["task"], "weight": s.get("consistency_weight", 0.0), "teacher": bool(s.get("teacher")),
            "epochs": s.get("num_epochs"), "score": 100 * measured["mean"], "std": 100 * measured["std"],
            "changed": 100 * measured["changed_across_seeds"], "wall_seconds": settings["wall_seconds"],
            "threads": settings.get("threads"),
        })
    return points


def baseline_points(results: Path, rows: list[str], tasks: set[str]) -> list[dict]:
    saved = json.loads(results.read_text())["rows"]
    points = []
    for key in rows:
        row = saved[key]
        for task, score in row["scores"].items():
            if task in tasks:
                points.append({"run": f"{key} (reproduction)", "num_instances": row["num_instances"], "task": task,
                               "weight": 0.0, "teacher": False, "epochs": None, "score": score["mean"],
                               "std": score["std"], "changed": 100 * score["changed_across_seeds"],
                               "wall_seconds": None, "threads": None})
    return points


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid")
    parser.add_argument("--baseline", type=Path, required=True, help="a reproduction's results.json")
    parser.add_argument("--rows", required=True, help="comma-separated row keys of the baseline")
    args = parser.parse_args(argv)
    runs = run_points(args.grid)
    varied = {(p["task"], p["num_instances"]) for p in runs}
    points = [p for p in baseline_points(args.baseline, args.rows.split(","), {task for task, _ in varied})
              if (p["task"], p["num_instances"]) in varied] + runs
    panels = sorted({(p["task"], p["num_instances"]) for p in points})

    lines = [f"Runs of `sweep.py {args.grid}` (5 composition seeds each) and the reproduction rows they vary (2 x N epochs, no consistency term) "
             f"(`{args.baseline}`); written by `plot_stability.py {args.grid}`.", "",
             "| task | N | run | consistency weight | teacher | epochs | score (mean ± std) "
             "| predictions changed by composition | wall (s, torch threads) |", "|---|---|---|---|---|---|---|---|---|"]
    for task, n in panels:
        for p in sorted((p for p in points if (p["task"], p["num_instances"]) == (task, n)),
                        key=lambda p: (p["wall_seconds"] is not None, p["run"])):
            epochs = "-" if p["epochs"] is None else f"{p['epochs']:g}"
            wall = "-" if p["wall_seconds"] is None else f"{round(p['wall_seconds'])} ({p['threads']})"
            teacher = "yes" if p["teacher"] else "no"
            lines.append(f"| {task} | {n} | {p['run']} | {p['weight']:g} | {teacher} | {epochs} | "
                         f"{p['score']:.1f} ± {p['std']:.1f} | {p['changed']:.1f} % | {wall} |")
    (CURVES / f"{args.grid}-stability.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for axis, (task, n) in zip(axes[0], panels):
        for p in (p for p in points if (p["task"], p["num_instances"]) == (task, n)):
            marker = "s" if p["wall_seconds"] is None else ("^" if p["teacher"] else "o")
            axis.scatter(p["changed"], p["score"], marker=marker, s=40)
            axis.annotate(p["run"].replace(f"n{n}-{task}-", ""), (p["changed"], p["score"]), fontsize=7,
                          xytext=(3, 3), textcoords="offset points")
        axis.set_title(f"{task}, N = {n}")
        axis.set_xlabel("dev predictions changed by composition (%)")
        axis.set_ylabel("score (mean of 5 compositions)")
        axis.grid(alpha=0.3)
    fig.suptitle(f"{args.grid}: score against stability (square: the reproduction row)")
    fig.tight_layout()
    fig.savefig(CURVES / f"{args.grid}-stability.png", dpi=120)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
