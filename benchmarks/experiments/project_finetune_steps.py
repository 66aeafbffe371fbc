"""What a reproduction's whole run would take with a shorter fine-tuning grid: each row's wall
minutes with its fine-tuning stages' minutes scaled by the new steps over the steps they ran (the
dev evaluations every `eval_steps` and the checkpoints scale with them), everything else
(pre-training, scoring, the merge) as measured, the rows scheduled on `--lanes` shards side by side
as `compare_reproductions.py` schedules them (longest row first).

    python3 benchmarks/experiments/project_finetune_steps.py RUN/results.json --steps 1000 \
        [--lanes 2] [--output RUN/at-1000-steps.md]

A projection, not a run: it says whether a grid that short could fit a time budget; whether it
keeps the scores takes training at that length (`run_reproduce_paper.sh --set finetune.max_steps=N`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_reproductions import _merge_minutes, lanes_minutes  # noqa: E402  (one schedule for both)


def projected_rows(run: dict, steps: int) -> list[dict]:
    """Each row with wall minutes: its label, its wall and fine-tuning minutes as measured, and its
    wall minutes with every fine-tuning stage that ran longer than ``steps`` cut to ``steps``."""
    rows = []
    for key, row in run["rows"].items():
        wall = row.get("wall_minutes")
        stages = {name: stage for name, stage in (run.get("training") or {}).get(key, {}).items()
                  if name.startswith("finetune-") and isinstance(stage, dict)}
        if not wall or not stages:
            continue
        finetune = sum(stage["train_seconds"] for stage in stages.values()) / 60
        saved = sum(stage["train_seconds"] / 60 * (1 - steps / stage["final_step"])
                    for stage in stages.values() if stage["final_step"] > steps)
        rows.append(dict(label=row.get("label", key), wall=wall, finetune=finetune, projected=wall - saved))
    if not rows:
        raise SystemExit("no row has both wall minutes and fine-tuning stages")
    return rows


def markdown(rows: list[dict], steps: int, lanes: int, merge: float | None, skipped: int) -> str:
    lines = [f"| row | wall min | of it fine-tuning | wall min at {steps} steps |", "|---|---|---|---|"]
    lines += [f"| {row['label']} | {row['wall']:.0f} | {row['finetune']:.0f} | {row['projected']:.0f} |" for row in rows]
    merge_text = f" + {merge:.0f} min of merge" if merge else ""
    lines.append("")
    for name, field in (("as measured", "wall"), (f"at {steps} fine-tuning steps", "projected")):
        minutes = [row[field] for row in rows]
        total = lanes_minutes(minutes, lanes) + (merge or 0)
        lines.append(f"{len(rows)} rows {name}, on {lanes} shards side by side{merge_text}: {total / 60:.2f} h "
                     f"(split evenly, at best: {(sum(minutes) / lanes + (merge or 0)) / 60:.2f} h).")
    if skipped:
        lines.append(f"Left out, without wall minutes (their stages reused): {skipped} of the run's rows.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a reproduction's results.json")
    parser.add_argument("--steps", type=int, required=True, help="the fine-tuning steps to project to")
    parser.add_argument("--lanes", type=int, default=2, help="shards side by side")
    parser.add_argument("--output", help="also write the table here (markdown)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.lanes < 1:
        parser.error("--steps and --lanes must be at least 1")
    run = json.loads(Path(args.results).read_text())
    rows = projected_rows(run, args.steps)
    text = markdown(rows, args.steps, args.lanes, _merge_minutes(run), len(run["rows"]) - len(rows))
    print(text, end="")
    if args.output:
        Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
