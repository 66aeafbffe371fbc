"""Two runs of the reproduction side by side, row by row: each row's scores, retention, the share of
sentence predictions the composition changes, and its training minutes in both, with the
differences and the ratio of the minutes. For a recipe change meant to keep the table and save
time (bf16 on the CPU against the float32 table), it says how much was saved and what it cost.

    python3 benchmarks/experiments/compare_reproductions.py BASE/results.json OTHER/results.json \
        --labels fp32,bf16 --output OTHER/against-base.md

Only the rows both runs trained are compared; the minutes are each row's own training (process
time of its stages), as `table.md` reports them. The last lines say what the rows would take on
`--lanes` shards side by side (the reproduction's shards, longest row first, each row's wall
minutes), and the merge that times them all, where a run was merged from shards; where a run has
rows the other lacks, one more line says the same of all its rows (its whole run). Where some of a
run's rows have no wall minutes (stages reused across the run's starts), a last line estimates its
whole time from every row's train minutes, scaled by the wall-to-train ratio of the rows with both.
"""

from __future__ import annotations

import argparse
import heapq
import json
from pathlib import Path

SENTENCE_TASKS = ("sentiment", "trec")


def row_figures(row: dict) -> dict:
    """What the comparison reads of one row of a reproduction's ``results.json``."""
    retention = row.get("retention") or {}
    changed = [row["scores"][task].get("changed_across_seeds") for task in SENTENCE_TASKS if task in row["scores"]]
    changed = [share for share in changed if share is not None]
    return dict(sentence=row.get("sentence_avg"), token=row.get("token_avg"),
                sentence_retention=retention.get("sentence_avg"), token_retention=retention.get("token_avg"),
                changed=max(changed) if changed and row.get("num_instances", 1) > 1 else None,
                minutes=row.get("train_minutes"), wall=row.get("wall_minutes"))


def lanes_minutes(minutes: list[float], lanes: int) -> float:
    """Wall minutes of rows run ``lanes`` at a time, each started on the first free lane, longest
    first (a greedy schedule, within 4/3 of the best one)."""
    finish = [0.0] * lanes
    for length in sorted(minutes, reverse=True):
        heapq.heapreplace(finish, finish[0] + length)
    return max(finish)


def compare(base: dict, other: dict) -> list[dict]:
    """One entry per row both runs have, in the base run's order."""
    common = [key for key in base["rows"] if key in other["rows"]]
    if not common:
        raise SystemExit("the two runs have no row in common")
    return [dict(key=key, label=base["rows"][key].get("label", key), base=row_figures(base["rows"][key]),
                 other=row_figures(other["rows"][key])) for key in common]


def only_in(run: dict, other: dict) -> list[dict]:
    """The rows of ``run`` that ``other`` lacks, as the comparison reads them, with their labels."""
    return [dict(label=row.get("label", key), **row_figures(row))
            for key, row in run["rows"].items() if key not in other["rows"]]


def _pair(a, b, scale: float = 1.0, digits: int = 1, suffix: str = "") -> str:
    if a is None or b is None:
        return "-"
    return f"{a * scale:.{digits}f}{suffix} / {b * scale:.{digits}f}{suffix} ({(b - a) * scale:+.{digits}f})"


def _merge_minutes(run: dict) -> float | None:
    return run["wall_seconds"] / 60 if run.get("merged_from") and run.get("wall_seconds") else None


def _schedule(walls: list[float], lanes: int, merge: float | None) -> tuple[float, str]:
    """The rows' minutes on the lanes, longest first, and the merge added where the run was merged."""
    lane_minutes = lanes_minutes(walls, lanes)
    return lane_minutes, f" + {merge:.0f} min of merge = {(lane_minutes + merge) / 60:.1f} h" if merge else ""


def markdown(rows: list[dict], labels: tuple[str, str], lanes: int = 2,
             merge_minutes: tuple[float | None, float | None] = (None, None),
             extra: tuple[list[dict], list[dict]] = ((), ())) -> str:
    first, second = labels
    lines = [f"| row | sentence avg {first} / {second} | token avg | sentence retention | token retention | "
             f"most sentence predictions changed | train min | {second} / {first} min |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        a, b = row["base"], row["other"]
        ratio = f"{b['minutes'] / a['minutes']:.2f}" if a["minutes"] and b["minutes"] else "-"
        lines.append(f"| {row['label']} | {_pair(a['sentence'], b['sentence'])} | {_pair(a['token'], b['token'])} | "
                     f"{_pair(a['sentence_retention'], b['sentence_retention'], 100, suffix=' %')} | "
                     f"{_pair(a['token_retention'], b['token_retention'], 100, suffix=' %')} | "
                     f"{_pair(a['changed'], b['changed'], 100, suffix=' %')} | "
                     f"{_pair(a['minutes'], b['minutes'], digits=0)} | {ratio} |")
    timed = [row for row in rows if row["base"]["minutes"] and row["other"]["minutes"]]
    if timed:
        total_a = sum(row["base"]["minutes"] for row in timed)
        total_b = sum(row["other"]["minutes"] for row in timed)
        lines.append("")
        lines.append(f"These {len(timed)} rows: {total_a:.0f} min of training ({first}) against {total_b:.0f} "
                     f"({second}), {total_b / total_a:.2f} of the time.")
    hours, bounds = [], []
    # a row without wall minutes (stages reused from an earlier run) is left out, and said so
    walls_of = {side: [row[side]["wall"] for row in rows if row[side]["wall"]] for side in ("base", "other")}
    for side, label, merge in zip(("base", "other"), labels, merge_minutes):
        walls = walls_of[side]
        if not walls:
            continue
        lane_minutes, merged = _schedule(walls, lanes, merge)
        some = f", {len(walls)} of the {len(rows)} rows" if len(walls) < len(rows) else ""
        hours.append(f"{lane_minutes / 60:.1f} h ({label}{some}){merged}")
        # no schedule beats an even split of the same minutes
        bounds.append(f"{sum(walls):.0f} min, {sum(walls) / lanes / 60:.2f} h ({label})")
    if hours:
        lines.append(f"On {lanes} shards side by side, longest row first, the rows' wall minutes take "
                     f"{' against '.join(hours)}.")
        lines.append(f"Split evenly, at best: {' against '.join(bounds)}, before any merge.")
    for side, label, merge, more in zip(("base", "other"), labels, merge_minutes, extra):
        walls = walls_of[side] + [row["wall"] for row in more if row["wall"]]
        if not more or not walls:
            continue
        lane_minutes, merged = _schedule(walls, lanes, merge)
        lines.append(f"All of {label}'s rows with wall minutes ({len(walls)}; also {', '.join(r['label'] for r in more)}): "
                     f"{lane_minutes / 60:.1f} h longest row first{merged}; split evenly, "
                     f"{sum(walls):.0f} min, {sum(walls) / lanes / 60:.2f} h.")
    for side, label, merge, more in zip(("base", "other"), labels, merge_minutes, extra):
        estimate = _estimate_from_train_minutes([row[side] for row in rows] + list(more), lanes, merge)
        if estimate:
            lines.append(f"{label}'s rows without wall minutes at their train minutes times {estimate}")
    return "\n".join(lines) + "\n"


def _estimate_from_train_minutes(rows: list[dict], lanes: int, merge: float | None) -> str | None:
    """The whole run's time where some rows have no wall minutes (their stages reused across starts):
    each such row at its train minutes times the wall-to-train ratio of the rows that have both."""
    timed = [row for row in rows if row["wall"] and row["minutes"]]
    if not timed or len(timed) == len(rows) or any(not row["minutes"] for row in rows):
        return None
    ratio = sum(row["wall"] for row in timed) / sum(row["minutes"] for row in timed)
    lane_minutes, merged = _schedule([row["wall"] or row["minutes"] * ratio for row in rows], lanes, merge)
    return (f"{ratio:.3f} (the wall-to-train ratio of the {len(timed)} rows with both), all {len(rows)} rows: "
            f"{lane_minutes / 60:.2f} h longest row first{merged} (an estimate).")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the reference run's results.json")
    parser.add_argument("other", help="the changed run's results.json")
    parser.add_argument("--labels", default="base,other", help="two names for the columns, comma-separated")
    parser.add_argument("--lanes", type=int, default=2, help="shards side by side for the wall-time estimate")
    parser.add_argument("--output", help="also write the table here (markdown)")
    args = parser.parse_args(argv)
    labels = tuple(args.labels.split(","))
    if len(labels) != 2:
        parser.error("--labels takes two names, comma-separated")
    if args.lanes < 1:
        parser.error("--lanes must be at least 1")
    base, other = (json.loads(Path(path).read_text()) for path in (args.base, args.other))
    rows = compare(base, other)
    text = markdown(rows, labels, args.lanes, (_merge_minutes(base), _merge_minutes(other)),
                    (only_in(base, other), only_in(other, base)))
    print(text, end="")
    if args.output:
        Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
