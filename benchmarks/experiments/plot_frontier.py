"""Speed against accuracy for fine-tuned checkpoints timed side by side: the cut encoders' line
and every multiplexed point, each row at the fine-tuning length it was run with.

    python3 benchmarks/experiments/plot_frontier.py \\
        --rows benchmarks/results/convert-{stack20,adapters,sdistill,consistency,stacked}/rows.jsonl \\
        --speed benchmarks/results/convert-stacked/speed.json --out benchmarks/results/convert-stacked

(the command of the committed ``convert-stacked/frontier.md``; the tree keeps the adapters and
sdistill rows, the others are in the lab notebook commit 8c644a7).

Scores: the grid rows' fp32 means (``convert_grid.py``; 5 composition seeds for N > 1), the sentence
average over sentiment and trec for rows scored on both. Speed: ``muxplm bench throughput --model
DIR ...`` over the rows' own checkpoints (``speed.json``; a row's speed is that of the checkpoint
folder ``RUNS/ROW/TASK`` timed, any task: the heads differ only in their labels). Writes
``frontier.md`` (the table, with whether a cut at least as fast is as accurate) and ``frontier.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

SENTENCE = ("sentiment", "trec")
TASKS = SENTENCE + ("pos", "ner")
# Speeds within this fraction count as equal (repeated timings of one shape spread by a few percent).
SPEED_TOLERANCE = 0.05


def read_rows(paths: list[Path]) -> dict[str, dict]:
    """Row name -> its shape and fp32 scores per task (a later file's score of a row wins)."""
    rows: dict[str, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("precision", "fp32") != "fp32":
                continue
            row = rows.setdefault(entry["row"], dict(num_instances=entry["num_instances"], keep=entry["keep"],
                                                     unmuxed=entry["unmuxed"], scores={}))
            row["scores"][entry["task"]] = dict(mean=entry["mean"], std=entry["std"], changed=entry["changed"])
    return rows


def read_speeds(path: Path) -> dict[str, dict[str, float]]:
    """Row name -> {precision: speed-up over the plain encoder} from a throughput run."""
    speeds: dict[str, dict[str, float]] = {}
    for result in json.loads(path.read_text())["results"]:
        folder = Path(result["checkpoint"])  # RUNS/ROW/TASK, or a model folder of its own (the plain encoder)
        row = folder.parent.name if folder.name in TASKS else folder.name
        speeds.setdefault(row, {})[result["precision"]] = result["speedup"]
    return speeds


def frontier(rows: dict[str, dict], speeds: dict[str, dict[str, float]]) -> list[dict]:
    """The rows scored on both sentence tasks and timed, fastest first, each with its sentence
    average and whether a cut encoder at least as fast (within the tolerance) is as accurate."""
    points = []
    for name, row in rows.items():
        if not all(task in row["scores"] for task in SENTENCE) or name not in speeds:
            continue
        average = statistics.fmean(row["scores"][task]["mean"] for task in SENTENCE)
        changed = statistics.fmean(row["scores"][task]["changed"] for task in SENTENCE) if row["num_instances"] > 1 else None
        points.append(dict(name=name, num_instances=row["num_instances"], keep=row["keep"], average=average,
                           scores=row["scores"], changed=changed, speedup=speeds[name]["fp32"],
                           int8_speedup=speeds[name].get("int8")))
    cuts = [p for p in points if p["num_instances"] == 1]
    for point in points:
        point["beaten_by"] = [] if point["num_instances"] == 1 else [
            c["name"] for c in cuts
            if c["speedup"] >= point["speedup"] * (1 - SPEED_TOLERANCE) and c["average"] >= point["average"]]
    return sorted(points, key=lambda p: -p["speedup"])


def table(points: list[dict]) -> str:
    lines = ["| row | N | layers | sentiment | trec | sentence avg | speed-up fp32 / int8 | changed by composition "
             "| a cut as fast is as accurate |", "|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        cells = [f"{p['scores'][t]['mean']:.1f}" + (f" ± {p['scores'][t]['std']:.1f}" if p["num_instances"] > 1 else "")
                 for t in SENTENCE]
        int8 = f"{p['int8_speedup']:.2f}x" if p["int8_speedup"] else "-"
        changed = f"{100 * p['changed']:.0f} %" if p["changed"] is not None else "-"
        verdict = ("-" if p["num_instances"] == 1 else ", ".join(p["beaten_by"]) or "no")
        lines.append(f"| {p['name']} | {p['num_instances']} | {p['keep'] or 'all'} | {cells[0]} | {cells[1]} | "
                     f"{p['average']:.1f} | {p['speedup']:.2f}x / {int8} | {changed} | {verdict} |")
    return "\n".join(lines) + "\n"


def plot(points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    cuts = sorted((p for p in points if p["num_instances"] == 1), key=lambda p: p["speedup"])
    ax.plot([p["speedup"] for p in cuts], [p["average"] for p in cuts], "k-o", label="cut encoders (N = 1)")
    for p in cuts:
        ax.annotate(p["name"], (p["speedup"], p["average"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    for n, marker in ((2, "s"), (5, "^")):
        group = [p for p in points if p["num_instances"] == n]
        ax.scatter([p["speedup"] for p in group], [p["average"] for p in group], marker=marker, label=f"N = {n}")
        for p in group:
            ax.annotate(p["name"], (p["speedup"], p["average"]), textcoords="offset points", xytext=(4, -9), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("speed-up over plain MiniLM (fp32, this CPU, one thread)")
    ax.set_ylabel("sentence average (sentiment, trec)")
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", required=True, nargs="+", type=Path, help="rows.jsonl of convert_grid.py runs")
    parser.add_argument("--speed", required=True, type=Path, help="muxplm bench throughput --output of the checkpoints")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    points = frontier(read_rows(args.rows), read_speeds(args.speed))
    if not points:
        raise SystemExit("plot_frontier.py: no row is both scored on sentiment and trec and timed")
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(points)
    (args.out / "frontier.md").write_text(text)
    plot(points, args.out / "frontier.png")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
