"""Plot learning curves kept by ``sweep.py``: held-out metric against step, one line per run,
one panel per group of runs (by default, by number of instances).

    python3 benchmarks/experiments/plot_curves.py benchmarks/results/curves/priming \
        --metric accuracy --output benchmarks/results/curves/priming.png
    python3 benchmarks/experiments/plot_curves.py benchmarks/results/curves/pretrain-budget --kind train \
        --stage -1 --metric loss --panel-by stage --output benchmarks/results/curves/pretrain-budget-finetune.png
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def read_curve(path: Path, kind: str = "eval", stage: int = 0) -> tuple[dict, list[dict]]:
    """The settings and the ``kind`` records of one stage of a run (a chain's curve file holds
    one settings record, then that stage's log, per stage)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    stages, current = [], None
    for record in records:
        if record.get("kind") == "settings" or current is None:
            current = (record if record.get("kind") == "settings" else {"run": path.stem, "settings": {}}, [])
            stages.append(current)
        if record.get("kind") == kind:
            current[1].append(record)
    return stages[stage] if -len(stages) <= stage < len(stages) else ({"run": path.stem, "settings": {}}, [])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--metric", default="accuracy", help="key of the eval records to plot")
    parser.add_argument("--panel-by", default="num_instances", help="setting that splits the runs into panels")
    parser.add_argument("--kind", default="eval", help="eval (held-out) or train (logged while training) records")
    parser.add_argument("--stage", type=int, default=0, help="which stage of a chained run (0: the first, -1: the last)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = defaultdict(list)
    for path in sorted(Path(args.folder).glob("*.jsonl")):
        header, evals = read_curve(path, args.kind, args.stage)
        evals = [r for r in evals if args.metric in r]  # e.g. a stage that logs no accuracy
        if evals:
            panels[header["settings"].get(args.panel_by)].append((header["run"], evals))
    keys = sorted(panels, key=lambda k: (k is None, k))
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4), squeeze=False)
    for axis, key in zip(axes[0], keys):
        for run, evals in panels[key]:
            axis.plot([r["step"] for r in evals], [100 * r[args.metric] if args.metric == "accuracy" else r[args.metric]
                                                  for r in evals], marker="o", markersize=3, label=run)
        if key is not None:  # runs whose logs carry no settings share one untitled panel
            axis.set_title(f"{args.panel_by} = {key}")
        axis.set_xlabel("step")
        where = "held-out" if args.kind == "eval" else "training"
        axis.set_ylabel(f"{where} {args.metric}" + (" (%)" if args.metric == "accuracy" else ""))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    fig.suptitle(args.title or Path(args.folder).name)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
