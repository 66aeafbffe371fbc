"""A reproduction's retention read against its N = 1 rows trained another way: each multiplexed
row's sentence / token retention against its own run's N = 1 row and against the same row from
another run (e.g. one primed by `retrieval.prime_plain_rows`), and the retention checks each gives.
A baseline trained better than the table's says whether a retention above 100 % is real.

    python3 benchmarks/experiments/retention_against.py TABLE/results.json [PROBE/results.json ...] \
        [--label primed] [--seeds KEY=DIR ...] [--probe-seeds KEY=DIR ...] --output PROBE/retention-against.md

Every N = 1 row of a PROBE run replaces the table's row of the same key; rows measured against
another N = 1 row keep their retention. Only the retention is read again: the speed-ups and the
composition's churn do not depend on the baseline's training.

A row's one fine-tuning run per task is one data-order seed. ``--seeds KEY=DIR`` gives the table's
row KEY, on DIR's task, the mean over its runs in DIR (a `benchmarks/run_stable_finetune_again.sh`
folder: the row's own run and the runs that changed only the seed); ``--probe-seeds`` does the
same for a probe's N = 1 row. The retention then reads seed means on both sides. Without a PROBE,
the table with its seed means is read against the table as it ran (one run per task).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path

from muxplm.bench.reproduce import check_targets, group_averages, retention

sys.path.insert(0, str(Path(__file__).resolve().parent))
from finetune_again_table import load_runs  # noqa: E402  (how a fine-tuning-again folder is read)


def seed_runs(folder: Path, key: str) -> tuple[str, list[dict]]:
    """Row ``key``'s runs in a fine-tuning-again ``folder`` that differ from its own run only by the
    data-order seed, and their task."""
    runs = [run for run in load_runs(folder) if run["row"] == key and set(run["changed"]) <= {"seed"}]
    if not runs:
        raise SystemExit(f"{folder}: no run of {key}")
    tasks = {run["eval"]["task"] for run in runs}
    if len(tasks) != 1:
        raise SystemExit(f"{folder}: {key}'s runs are of several tasks ({sorted(tasks)})")
    return tasks.pop(), runs


def with_seed_means(rows: dict, seeds: dict[str, Path], tasks: list[str], side: str) -> list[str]:
    """Give each row of ``seeds`` the mean over its folder's seed runs on that folder's task (its
    averages too); the notes that say so (``side``: whose row it is)."""
    notes = []
    for key, folder in seeds.items():
        if key not in rows:
            raise SystemExit(f"{key}: no such row for the seeds in {folder}")
        task, runs = seed_runs(folder, key)
        if task not in tasks:
            raise SystemExit(f"{folder}: {task} is not one of the table's tasks")
        scores = [100 * run["eval"]["summary"]["main"]["mean"] for run in runs]
        mean = statistics.fmean(scores)
        rows[key]["scores"][task] = {**rows[key]["scores"][task], "mean": mean,
                                     "max": statistics.fmean(100 * run["eval"]["summary"]["main"]["max"] for run in runs)}
        rows[key].update(group_averages(rows[key]["scores"], tasks))
        seeds_run = ", ".join(str(run["config"].get("seed")) for run in runs)
        notes.append(f"{rows[key]['label']} ({side}), {task}: {mean:.1f}, the mean of {len(runs)} runs "
                     f"(data-order seeds {seeds_run}; {min(scores):.1f}-{max(scores):.1f}) in {folder}")
    return notes


def _measure_again(rows: dict, changed: set[str], tasks: list[str]) -> None:
    for key, row in rows.items():
        if row.get("baseline_used") in rows and changed & {key, row["baseline_used"]}:
            row["retention"] = retention(row, rows[row["baseline_used"]], tasks)


def against(table: dict, probes: list[dict], seeds: dict[str, Path] | None = None,
            probe_seeds: dict[str, Path] | None = None, label: str = "the probe's"
            ) -> tuple[dict, list[str], dict, list[str]]:
    """The table's rows with each probe's N = 1 rows in place of its own and every row measured
    against a replaced one given its retention again; the replaced rows' keys; the table's own rows
    (with ``seeds``' means, measured again); and the notes on the seed means."""
    own = copy.deepcopy(table["rows"])
    notes = with_seed_means(own, seeds or {}, table["tasks"], "the table's")
    _measure_again(own, set(seeds or {}), table["tasks"])
    rows = copy.deepcopy(own)
    replaced = []
    for probe in probes:
        if set(probe["tasks"]) != set(table["tasks"]):
            raise SystemExit(f"the probe scored {probe['tasks']}, the table {table['tasks']}: not the same tasks")
        for key, row in probe["rows"].items():
            if row["num_instances"] != 1:
                continue
            if key not in rows:
                raise SystemExit(f"{key}: the table has no such row to replace")
            rows[key], replaced = copy.deepcopy(row), replaced + [key]
    if probes and not replaced:
        raise SystemExit("no N = 1 row in the probe run(s): nothing to measure against")
    if not probes and not seeds:
        raise SystemExit("neither a probe run nor seed folders: nothing to read again")
    notes += with_seed_means({key: rows[key] for key in replaced}, probe_seeds or {}, table["tasks"], label)
    _measure_again(rows, set(replaced), table["tasks"])
    return rows, replaced, own, notes


def _retention_checks(rows: dict) -> dict[tuple[str, str], dict]:
    return {(c["model"], c["what"]): c for c in check_targets(rows) if c["what"].endswith("retention")}


def report(table: dict, probes: list[dict], label: str, seeds: dict[str, Path] | None = None,
           probe_seeds: dict[str, Path] | None = None) -> str:
    """With probes: the table's rows (with any seed means) against the probes' N = 1 rows. Without:
    the table's rows as it ran them (one run per task) against the same with the seed means."""
    rows, replaced, own, notes = against(table, probes, seeds, probe_seeds, label)
    if probes:
        before, after, names, moved = own, rows, ("the table's", label), set(replaced)
    else:
        before, after, names, moved = table["rows"], own, ("one run", "seed means"), set(seeds)
    lines = [f"- {note}" for note in notes] + ([""] if notes else [])
    lines += ["| N = 1 row | sentence avg | token avg |", "|---|---|---|"]
    for key in [k for k in after if after[k]["num_instances"] == 1 and k in moved]:
        for name, source in zip(names, (before, after)):
            lines.append(f"| {source[key]['label']} ({name}) | {source[key]['sentence_avg']:.1f} | "
                         f"{source[key]['token_avg']:.1f} |")
    affected_rows = [key for key, row in after.items() if row["num_instances"] > 1 and row.get("baseline_used") in after
                     and moved & {key, row["baseline_used"]}]
    lines += ["", f"| model | against | sentence retention: {names[0]} / {names[1]} | token retention: {names[0]} / "
                  f"{names[1]} |", "|---|---|---|---|"]
    for key in affected_rows:
        cells = [f"{100 * before[key]['retention'][f'{g}_avg']:.1f}% / {100 * after[key]['retention'][f'{g}_avg']:.1f}%"
                 for g in ("sentence", "token")]
        lines.append(f"| {after[key]['label']} | {after[after[key]['baseline_used']]['label']} | {cells[0]} | {cells[1]} |")
    checks_before, checks_after = _retention_checks(before), _retention_checks(after)
    affected = [k for k in checks_after if k[0] in affected_rows]
    met_before, met_after = (sum(checks[k]["met"] for k in affected) for checks in (checks_before, checks_after))
    if probes:
        lines += ["", f"Retention checks of these rows met: {met_before} of {len(affected)} against the table's N = 1 "
                      f"rows, {met_after} against {label}."]
    else:
        lines += ["", f"Retention checks of these rows met: {met_before} of {len(affected)} with one run per task, "
                      f"{met_after} with the seed means."]
    lines += [f"- now {'met' if checks_after[k]['met'] else 'MISSED'}: {checks_after[k]['message'].split(' ', 1)[1].strip()}"
              for k in affected if checks_before[k]["met"] != checks_after[k]["met"]]
    return "\n".join(lines) + "\n"


def _folders(pairs: list[str]) -> dict[str, Path]:
    folders = {}
    for pair in pairs:
        key, sep, folder = pair.partition("=")
        if not sep or not key or not folder:
            raise SystemExit(f"{pair!r}: expected KEY=DIR")
        folders[key] = Path(folder)
    return folders


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", type=Path, help="the reproduction's results.json")
    parser.add_argument("probes", type=Path, nargs="*", help="results.json of runs with N = 1 rows trained otherwise")
    parser.add_argument("--label", default="the probe's", help="what the probes' N = 1 rows are called")
    parser.add_argument("--seeds", nargs="+", default=[], metavar="KEY=DIR",
                        help="the table's row KEY scored by the mean of its seed runs in DIR (a fine-tuning-again folder)")
    parser.add_argument("--probe-seeds", nargs="+", default=[], metavar="KEY=DIR",
                        help="the same for a probe's N = 1 row")
    parser.add_argument("--output", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    seeds, probe_seeds = _folders(args.seeds), _folders(args.probe_seeds)
    text = report(json.loads(args.table.read_text()), [json.loads(p.read_text()) for p in args.probes], args.label,
                  seeds, probe_seeds)
    print(text, end="")
    if args.output:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
