"""A reproduction's retention read against its N = 1 rows trained another way: each multiplexed
row's sentence / token retention against its own run's N = 1 row and against the same row from
another run (e.g. one primed by `retrieval.prime_plain_rows`), and the retention checks each gives.
A baseline trained better than the table's says whether a retention above 100 % is real.

    python3 benchmarks/experiments/retention_against.py TABLE/results.json PROBE/results.json [...] \
        [--label primed] --output PROBE/retention-against.md

Every N = 1 row of a PROBE run replaces the table's row of the same key; rows measured against
another N = 1 row keep their retention. Only the retention is read again: the speed-ups and the
composition's churn do not depend on the baseline's training.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

from muxplm.bench.reproduce import check_targets, retention


def against(table: dict, probes: list[dict]) -> tuple[dict, list[str]]:
    """The table's rows with each probe's N = 1 rows in place of its own and every row measured
    against a replaced one given its retention again; and the replaced rows' keys."""
    rows = copy.deepcopy(table["rows"])
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
    if not replaced:
        raise SystemExit("no N = 1 row in the probe run(s): nothing to measure against")
    for row in rows.values():
        if row.get("baseline_used") in replaced:
            row["retention"] = retention(row, rows[row["baseline_used"]], table["tasks"])
    return rows, replaced


def _retention_checks(rows: dict) -> dict[tuple[str, str], dict]:
    return {(c["model"], c["what"]): c for c in check_targets(rows) if c["what"].endswith("retention")}


def report(table: dict, probes: list[dict], label: str) -> str:
    rows, replaced = against(table, probes)
    own = table["rows"]
    lines = ["| N = 1 row | sentence avg | token avg |", "|---|---|---|"]
    for key in replaced:
        for name, source in (("the table's", own), (label, rows)):
            lines.append(f"| {source[key]['label']} ({name}) | {source[key]['sentence_avg']:.1f} | "
                         f"{source[key]['token_avg']:.1f} |")
    lines += ["", f"| model | against | sentence retention: the table's / {label} | token retention: the table's / "
                  f"{label} |", "|---|---|---|---|"]
    for key, row in rows.items():
        if row.get("baseline_used") not in replaced or key in replaced:
            continue
        cells = [f"{100 * own[key]['retention'][f'{g}_avg']:.1f}% / {100 * row['retention'][f'{g}_avg']:.1f}%"
                 for g in ("sentence", "token")]
        lines.append(f"| {row['label']} | {rows[row['baseline_used']]['label']} | {cells[0]} | {cells[1]} |")
    before, after = _retention_checks(own), _retention_checks(rows)
    affected = [k for k in after if rows[k[0]].get("baseline_used") in replaced and k[0] not in replaced]
    lines += ["", f"Retention checks of these rows met: {sum(before[k]['met'] for k in affected)} of {len(affected)} "
                  f"against the table's N = 1 rows, {sum(after[k]['met'] for k in affected)} against {label}."]
    lines += [f"- now {'met' if after[k]['met'] else 'MISSED'}: {after[k]['message'].split(' ', 1)[1].strip()}"
              for k in affected if before[k]["met"] != after[k]["met"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", type=Path, help="the reproduction's results.json")
    parser.add_argument("probes", type=Path, nargs="+", help="results.json of runs with N = 1 rows trained otherwise")
    parser.add_argument("--label", default="the probe's", help="what the probes' N = 1 rows are called")
    parser.add_argument("--output", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    text = report(json.loads(args.table.read_text()), [json.loads(p.read_text()) for p in args.probes], args.label)
    print(text, end="")
    if args.output:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
