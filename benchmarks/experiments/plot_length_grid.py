"""The reproduction's fine-tuning length grid: every row's dev score at each evaluation of its
fine-tuning, per task, from the stages' own logs, and the step each row ended with (its best).

    python3 benchmarks/experiments/plot_length_grid.py --runs runs/reproduce-paper-full \\
        --out benchmarks/results/reproduce/paper-full

Reads ``RUNS/ROW/3-TASK/log.jsonl`` (``kind: eval`` records, main metric, in points) for every
row folder. Writes ``length-grid.md`` (per row and task: the score at each evaluated step, the
best one marked) and ``length-grid.png`` (one panel per task, one line per row). Where the best
step is the last one evaluated the row was still learning when its fine-tuning ended: the table
says so, since that row would gain from a longer grid.

``length-grid.md`` also answers what early stopping (``--early_stopping_patience P``: stop after P
evaluations without a new best, keep the best) would have done to the same runs: the schedule
does not depend on where a run stops, so each curve up to its stopping step is the one logged.
Per patience: the share of the grid's fine-tuning time it would have spent (each stage's
seconds per step from its ``train_results.json``) and the points each row would have lost.
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


def stopping_point(curve: list[tuple[int, float]], patience: int) -> tuple[int, float]:
    """(the step a run stops at, the best score it keeps) under early stopping with ``patience``."""
    best, since = None, 0
    for step, score in curve:
        if best is None or score > best:
            best, since = score, 0
        else:
            since += 1
        if since >= patience:
            return step, best
    return curve[-1][0], best


def seconds_per_step(runs: Path) -> dict[tuple[str, str], float]:
    """(row, task) -> the fine-tuning stage's training seconds per step."""
    costs = {}
    for summary in runs.glob("*/3-*/train_results.json"):
        saved = json.loads(summary.read_text())
        if saved.get("train_seconds") and saved.get("final_step"):
            costs[(summary.parent.parent.name, summary.parent.name.removeprefix("3-"))] = \
                saved["train_seconds"] / saved["final_step"]
    return costs


def early_stopping_markdown(curves: dict[str, dict[str, list[tuple[int, float]]]],
                            costs: dict[tuple[str, str], float], patiences=(1, 2, 3)) -> str:
    lines = ["| patience | fine-tuning time (share of the grid's) | N = 1 rows' time | rows x tasks that lose | "
             "points lost (largest; where) |", "|---|---|---|---|---|"]
    for patience in patiences:
        spent = {"all": 0.0, "plain": 0.0}  # steps run x seconds per step, under early stopping
        whole = {"all": 0.0, "plain": 0.0}  # the same over the whole grid
        losses = []
        for row, by_task in curves.items():
            groups = ("all", "plain") if _plain(row) else ("all",)
            for task, curve in by_task.items():
                cost = costs.get((row, task), 1.0)
                stop, kept = stopping_point(curve, patience)
                for group in groups:
                    spent[group] += stop * cost
                    whole[group] += curve[-1][0] * cost
                lost = max(score for _, score in curve) - kept
                if lost > 0:
                    losses.append((lost, f"{row} {task}"))
        largest = max(losses, default=(0.0, "-"))
        plain = f"{100 * spent['plain'] / whole['plain']:.0f} %" if whole["plain"] else "-"
        lines.append(f"| {patience} | {100 * spent['all'] / whole['all']:.0f} % | {plain} | {len(losses)} | "
                     f"{largest[0]:.1f}; {largest[1]} |")
    return "\n".join(lines)


def _plain(row: str) -> bool:
    """An N = 1 row of the reproduction (bert, electra, bert-small, ...)."""
    from muxplm.bench.reproduce import MODELS

    return row in MODELS and MODELS[row].num_instances == 1


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
    text = grid_markdown(curves) + "\n\nEarly stopping on the same curves:\n\n" + \
        early_stopping_markdown(curves, seconds_per_step(args.runs))
    (args.out / "length-grid.md").write_text(text + "\n")
    plot(curves, args.out / "length-grid.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
