"""Fine-tuned score against conversion compute (``convert_grid.py curves`` / ``curves20`` rows):

    python3 benchmarks/experiments/plot_convert_curves.py benchmarks/results/convert-curves

Reads ``rows-*.jsonl`` in the folder (a grid's ``rows.jsonl`` copied as ``rows-LABEL.jsonl``, LABEL
naming its fine-tuning: ``rows-3xN-epochs.jsonl`` from ``curves``, ``rows-20-epochs.jsonl`` from
``curves20``), writes ``curves.png`` (left: the sentence-task average after
fine-tuning; right: held-out retrieval accuracy at the end of the conversion, both against the
conversion steps on a log scale) and ``curves.md`` (the same numbers as a table). Reference lines:
plain MiniLM and its 3- and 2-layer cuts fine-tuned the same way in the same run. The rows behind
the committed ``curves.md`` are in the lab notebook commit 8c644a7 only.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

PATTERN = re.compile(r"n(?P<n>\d+)-k(?P<k>\d+)-(?P<kind>prime|distill)-(?P<steps>\d+)(?P<tag>.*)")


def main(folder: str) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    root = Path(folder)
    files = sorted(root.glob("rows-*.jsonl"))
    if not files:  # rather than overwrite the folder's curves with empty ones
        raise SystemExit(f"plot_convert_curves.py: no rows-*.jsonl in {root}")
    series: dict[str, dict[int, dict]] = defaultdict(dict)
    references: dict[str, float] = {}
    for path in files:
        fine_tuning = path.stem.removeprefix("rows-")
        by_row: dict[str, list[dict]] = defaultdict(list)
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            by_row[entry["row"]].append(entry)
        for name, entries in by_row.items():
            if len(entries) < 2:
                continue
            average = statistics.fmean(e["mean"] for e in entries)
            match = PATTERN.fullmatch(name)
            if match is None:
                references.setdefault(name, average)
                continue
            label = f"N={match['n']} K={match['k']} {match['kind']}{match['tag'].replace('-ep20', '')} (fine-tuning {fine_tuning.replace('-', ' ')})"
            conversion = entries[0]["convert_eval"] or {}  # None: another row's conversion (read there)
            series[label][int(match["steps"])] = dict(score=average, retrieval=conversion.get("accuracy", float("nan")),
                                                      per_task={e["task"]: e["mean"] for e in entries})
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for label, points in sorted(series.items()):
        steps = sorted(points)
        style = "-" if "distill" in label else ":"
        left.plot(steps, [points[s]["score"] for s in steps], style, marker="o", label=label)
        right.plot(steps, [100 * points[s]["retrieval"] for s in steps], style, marker="o", label=label)
    for name, value in references.items():
        left.axhline(value, color="grey", lw=0.8, ls="--")
        left.annotate(name, (min(min(p) for p in series.values()), value), fontsize=7, va="bottom")
    for ax, ylabel in ((left, "sentence average after fine-tuning (sentiment, trec)"),
                       (right, "held-out retrieval accuracy after conversion (%)")):
        ax.set_xscale("log")
        ax.set_xlabel("conversion steps of 64 groups x 32 tokens (log)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    left.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(root / "curves.png", dpi=120)
    lines = ["| conversion | steps | sentiment | trec | sentence avg | held-out retrieval |", "|---|---|---|---|---|---|"]
    for label, points in sorted(series.items()):
        for s in sorted(points):
            p = points[s]
            lines.append(f"| {label} | {s} | {p['per_task'].get('sentiment', float('nan')):.1f} | "
                         f"{p['per_task'].get('trec', float('nan')):.1f} | {p['score']:.1f} | {100 * p['retrieval']:.1f} % |")
    lines += ["", "References (fine-tuned the same way, in the same runs): " +
              ", ".join(f"{name} {value:.1f}" for name, value in references.items())]
    (root / "curves.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="the folder of rows-*.jsonl; curves.png and curves.md are written there")
    sys.exit(main(parser.parse_args().folder))
