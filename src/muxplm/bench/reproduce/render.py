"""What a reproduction writes and prints: Table 1 as markdown, the output files and the
report with the targets' verdict."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from ..analysis import ensemble_table, lottery_table, plot_pareto, table_markdown
from .rows import per_seed_records
from .table import MODELS, SENTENCE_TASKS, TOKEN_TASKS


def table1_markdown(rows: dict[str, dict], tasks: list[str]) -> str:
    """Table 1 shape: mean over composition seeds (max in brackets for N > 1), the sentence and
    token averages, the throughput gain over the N = 1 row (sentence head) and retention."""
    sentence = [t for t in tasks if t in SENTENCE_TASKS]
    token = [t for t in tasks if t in TOKEN_TASKS]
    columns = ["model", "N", *tasks]
    columns += ["sentence avg"] if sentence else []
    columns += ["token avg"] if token else []
    columns += ["throughput gain", "retention (sent / token)", "changed by composition"]
    timed = any("train_minutes" in row for row in rows.values())
    columns += ["train min"] if timed else []
    walled = any("wall_minutes" in row for row in rows.values())
    columns += ["wall min"] if walled else []
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for key, row in rows.items():
        many = row["num_instances"] > 1
        cells = [row["label"], str(row["num_instances"])]
        for task in tasks:
            s = row["scores"][task]
            cells.append(f"{s['mean']:.1f} ± {s['std']:.1f}" + (f" ({s['max']:.1f})" if many else ""))
        for group, present in (("sentence", sentence), ("token", token)):
            if present:
                cells.append(f"{row[f'{group}_avg']:.1f}" + (f" ({row[f'{group}_avg_max']:.1f})" if many else ""))
        gain = row["throughput_gain"].get("sentence", row["throughput_gain"].get("token"))
        cells.append("-" if gain is None else f"{gain:.2f}x")
        retention = [row["retention"].get(f"{g}_avg") for g in ("sentence", "token")]
        cells.append(" / ".join("-" if r is None else f"{100 * r:.1f}%" for r in retention)
                     if row["baseline_used"] not in (None, key) else "-")
        changed = [row["scores"][t].get("changed_across_seeds") for t in tasks]
        cells.append(" / ".join("-" if c is None else f"{100 * c:.1f}%" for c in changed) if many else "-")
        if timed:
            cells.append(f"{row['train_minutes']:.0f}" if "train_minutes" in row else "-")
        if walled:
            cells.append(f"{row['wall_minutes']:.0f}" if "wall_minutes" in row else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_outputs(root: Path, results: dict[str, Any], records: list[dict]) -> dict[str, Path]:
    """results.json, table.md, points.json + pareto.png, records.json, lottery.md, ensemble.md."""
    rows, tasks = results["rows"], results["tasks"]
    head = "sentence" if any(r["throughput"].get("sentence") for r in rows.values()) else "token"
    size = results["recipe"]["preset"]
    points = [dict(name=row["label"], size=size + ("-minilm" if MODELS[key].warm_start else ""),
                   num_instances=row["num_instances"],
                   score=statistics.fmean(s["mean"] for s in row["scores"].values()),
                   throughput=row["throughput"][head])
              for key, row in rows.items()]
    lottery = lottery_table(records)
    has_ensemble = any(r["ensemble"] for r in records)
    ensemble = ensemble_table(records) if has_ensemble else []
    paths = dict(results=root / "results.json", table=root / "table.md", points=root / "points.json",
                 pareto=root / "pareto.png", records=root / "records.json", lottery=root / "lottery.md",
                 ensemble=root / "ensemble.md")
    results = dict(results, lottery=lottery, ensemble=ensemble)
    paths["results"].write_text(json.dumps(results, indent=1))
    paths["table"].write_text(table1_markdown(rows, tasks) + "\n")
    paths["points"].write_text(json.dumps(points, indent=1))
    plot_pareto(points, str(paths["pareto"]),
                title=f"reproduction ({results['preset']}): mean task score vs {head}-head throughput")
    paths["records"].write_text(json.dumps(records, indent=1))
    paths["lottery"].write_text(table_markdown(lottery) + "\n")
    paths["ensemble"].write_text((table_markdown(ensemble) if ensemble else "(no ensembled evaluation)") + "\n")
    return paths


def report_text(results: dict[str, Any]) -> str:
    """What the CLI prints: the table, the targets with their verdict, lottery and ensemble."""
    minutes = results["wall_seconds"] / 60
    # A merge's own time is its timing only; the rows' training is in their train minutes.
    took = (f"merged from {len(results['merged_from'])} parts and timed in {minutes:.1f} min"
            if results.get("merged_from") else f"{minutes:.1f} min")
    lines = [f"Reproduction ({results['preset']} recipe), {len(results['models'])} models x "
             f"{len(results['tasks'])} tasks, {took}", "",
             table1_markdown(results["rows"], results["tasks"]), "", "Targets:"]
    lines += ["  " + check["message"] for check in results["checks"]] or ["  (no targeted model in this run)"]
    met = sum(c["met"] for c in results["checks"])
    lines += [f"Verdict: {met}/{len(results['checks'])} targets met.", "", "Lottery (best minus worst seed):",
              table_markdown(lottery_table(per_seed_records(results["evaluations"])))]
    records = per_seed_records(results["evaluations"])
    if any(r["ensemble"] for r in records):
        lines += ["", "Ensembling:", table_markdown(ensemble_table(records))]
    return "\n".join(lines)
