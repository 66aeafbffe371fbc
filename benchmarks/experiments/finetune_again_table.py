"""The table of a row's fine-tunings run again (`benchmarks/run_stable_finetune_again.sh`): each
run's settings that differ from the row's own run (ROW-table: the fine-tuning the row's stage did,
the table's run when the row is the table's, a probe's when it is a probe's), its score over the
composition seeds and the share of predictions the composition changes; then the runs grouped by
their settings other than the data-order seed, so that a setting's effect reads against the spread
between seeds.

    python3 benchmarks/experiments/finetune_again_table.py OUT [--output OUT/TASK-again.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

IGNORED = {"output_dir"}  # where a run trains is not a setting of it


def _setting(key: str, value):
    """A setting as runs compare it: the encoder a run starts from by its row and stage only (e.g.
    mux-bert-5/2-pretrain), since the folder its runs sit in moves between sessions (RUNS)."""
    return tuple(Path(value).parts[-2:]) if key == "init" and isinstance(value, str) else value


def load_runs(folder: Path) -> list[dict]:
    """Every scored run in ``folder``: name, the settings it changed against its row's own run, and
    its evaluation. The rows' own runs come first, with nothing changed."""
    runs = []
    for scored in sorted(folder.glob("*-eval.json")):
        name = scored.name[: -len("-eval.json")]
        config = folder / f"{name}-config.json"
        if not config.is_file():
            raise SystemExit(f"{config} is missing: every scored run keeps its settings beside its score")
        runs.append(dict(name=name, config=json.loads(config.read_text()), eval=json.loads(scored.read_text()),
                         table=name.endswith("-table")))
    tables = {run["name"][: -len("-table")]: run["config"] for run in runs if run["table"]}
    longest_first = sorted(tables, key=len, reverse=True)  # a run belongs to the longest row name it starts with
    for run in runs:
        row = next((r for r in longest_first if run["name"].startswith(r + "-")), None)
        if row is None:
            raise SystemExit(f"{run['name']}: no table run of its row in the folder (ROW-table-config.json)")
        base = tables[row]
        run["row"] = row
        run["changed"] = {key: value for key, value in run["config"].items()
                          if key not in IGNORED and _setting(key, base.get(key)) != _setting(key, value)}
    return sorted(runs, key=lambda r: (r["row"], not r["table"], r["name"]))


def _cells(runs: list[dict]) -> tuple[str, str]:
    scores = [100 * r["eval"]["summary"]["main"]["mean"] for r in runs]
    changed = [100 * r["eval"]["changed_across_seeds"] for r in runs]
    if len(runs) == 1:
        return f"{scores[0]:.1f}", f"{changed[0]:.2f} %"
    return (f"{statistics.fmean(scores):.1f} ({min(scores):.1f}-{max(scores):.1f})",
            f"{statistics.fmean(changed):.2f} % ({min(changed):.2f}-{max(changed):.2f})")


def table(runs: list[dict]) -> str:
    metric = runs[0]["eval"]["main_metric"]
    lines = [f"| run | settings changed | {metric} (mean over composition seeds) | predictions changed by the composition |",
             "|---|---|---|---|"]
    for run in runs:
        score, changed = _cells([run])
        what = ", ".join(f"{k}={v}" for k, v in sorted(run["changed"].items())) or "(the row's own run)"
        lines.append(f"| {run['name']} | {what} | {score} | {changed} |")
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        setting = tuple(sorted((k, v) for k, v in run["changed"].items() if k != "seed"))
        groups[(run["row"], setting)].append(run)
    lines += ["", f"| row | settings other than the seed | runs (seeds) | {metric}: mean (range) | changed: mean (range) |",
              "|---|---|---|---|---|"]
    for (row, setting), members in groups.items():
        seeds = ", ".join(str(m["config"].get("seed")) for m in members)
        score, changed = _cells(members)
        what = ", ".join(f"{k}={v}" for k, v in setting) or "the row's"
        lines.append(f"| {row} | {what} | {len(members)} ({seeds}) | {score} | {changed} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--output", type=Path, help="markdown file (default: print only)")
    args = parser.parse_args()
    text = table(load_runs(args.folder))
    print(text, end="")
    if args.output:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
