"""The reproduction's fine-tuning length grid: every row's dev score at each evaluation of its
fine-tuning, per task, from the stages' own logs, and the step each row ended with (its best).

    python3 benchmarks/experiments/plot_length_grid.py --runs runs/reproduce-paper-full \\
        --out benchmarks/results/reproduce/paper-full

Reads ``RUNS/ROW/3-TASK/log.jsonl`` (``kind: eval`` records, main metric, in points) for every
row folder. Writes ``length-grid.md`` (per row and task: the score at each evaluated step, the
best one marked) and ``length-grid.png`` (one panel per task, one line per row). Where the best
step is the last one evaluated the row was still learning when its fine-tuning ended: the table
says so, since that row would gain from a longer grid.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TASKS = ("sentiment", "trec", "pos", "ner")


def read_curves(runs: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Row -> task -> [(step, dev main metric in points)], in step order."""
    curves: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for log in sorted(runs.glob("*/3-*/log.jsonl")):
        row, task = log.parent.parent.name, log.parent.name.removeprefix("3-")
        points = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        evals = sorted((p["step"], 100 * p["main"]) for p in points if p.get("kind") == "eval" and "main" in p)
        if evals:
            curves.setdefault(row, {})[task] = evals
    return curves


def grid_markdown(curves: dict[str, dict[str, list[tuple[int, float]]]]) -> str:
    steps = sorted({step for row in curves.values() for curve in row.values() for step, _ in curve})
    lines = ["| row | task | " + " | ".join(str(s) for s in steps) + " | best step |",
             "|---|---|" + "---|" * (len(steps) + 1)]
    for row, by_task in curves.items():
        for task in [t for t in TASKS if t in by_task] + sorted(set(by_task) - set(TASKS)):
            curve = dict(by_task[task])
            best = max(curve, key=lambda step: (curve[step], -step))  # the earliest of equal scores
            cells = [("**%.1f**" if step == best else "%.1f") % curve[step] if step in curve else "-" for step in steps]
            note = " (last: still rising)" if best == max(curve) and len(curve) > 1 else ""
            lines.append(f"| {row} | {task} | " + " | ".join(cells) + f" | {best}{note} |")
    return "\n".join(lines)


def plot(curves: dict[str, dict[str, list[tuple[int, float]]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(t in row for row in curves.values())]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 4), squeeze=False)
    for axis, task in zip(axes[0], tasks):
        for row, by_task in curves.items():
            if task in by_task:
                steps, scores = zip(*by_task[task])
                axis.plot(steps, scores, marker="o", markersize=3, label=row)
        axis.set_title(task)
        axis.set_xlabel("fine-tuning step")
        axis.set_ylabel("dev score (points)")
        axis.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="the reproduction's runs directory")
    parser.add_argument("--out", type=Path, required=True, help="folder for length-grid.md and length-grid.png")
    args = parser.parse_args(argv)
    curves = read_curves(args.runs)
    if not curves:
        parser.error(f"no fine-tuning logs with evaluations under {args.runs}/*/3-*/")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "length-grid.md").write_text(grid_markdown(curves) + "\n")
    plot(curves, args.out / "length-grid.png")
    print(grid_markdown(curves))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
