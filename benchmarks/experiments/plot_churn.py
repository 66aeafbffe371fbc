"""Composition churn against speed: how many sentence predictions change with the composition
(which inputs share a forward pass), for every row of a reproduction table, for re-fine-tunings
of its rows (composition consistency, a longer grid) and for the plain encoder's cuts, which
have no composition and so change nothing.

    python3 benchmarks/experiments/plot_churn.py \\
        --table benchmarks/results/reproduce/paper-full/results.json \\
        --cuts benchmarks/results/reproduce/paper-full/frontier-bert/results.json \\
        --variant "consistency 4=mux-bert-2:RUN/n2/results.json,RUN/n2-trec/results.json" \\
        --output-dir benchmarks/results/reproduce/paper-full/churn

A variant is a re-run of one table row (``LABEL=ROW:RESULTS[,RESULTS...]``, each results file a
``muxplm reproduce`` run of that row, which may change its fine-tuning or its architecture).
Speed-ups: with ``--speeds`` (a ``muxplm bench throughput --model ...`` results file that timed
the points' fine-tuned checkpoints side by side), every point is timed in that one run, over the
table's N = 1 row, each found by the checkpoint its first task's evaluation names (a cut's:
``ROW/3-TASK`` beside the table's runs); without it the table's own speed-ups, a variant at its
row's (right only where it changes the fine-tuning alone) and the cuts at theirs (a separate
run). ``timing`` in the output says which. The token tasks (``--token-tasks``) are reported and
judged beside the sentence tasks, not drawn, and each point's sentence / token retention is
its average over its family's N = 1 row's in the table where it has every task of the group. Writes
``churn.png`` (one panel per sentence task: speed-up against predictions changed, with the 5 % /
10 % targets of N = 2 / 5), ``churn.md`` and ``churn.json``. ``benchmarks/run_churn.sh`` runs it; the
results files it read for the committed ``paper-full/churn`` are in the lab notebook commit 8c644a7 only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TARGETS = {2: 5.0, 5: 10.0}  # the most predictions a row of that N may change, in percent
GROUPS = ("sentence", "token")


def parse_variant(text: str) -> tuple[str, str, list[Path]]:
    """``LABEL=ROW:PATH[,PATH...]`` -> (label, table row, results files)."""
    label, sep, rest = text.partition("=")
    row, sep2, paths = rest.partition(":")
    if not (sep and sep2 and label and row and paths):
        raise ValueError(f"a variant is LABEL=ROW:RESULTS[,RESULTS...], got {text!r}")
    return label, row, [Path(p) for p in paths.split(",")]


def table_points(table: dict, tasks: list[str]) -> list[dict]:
    """One point per multiplexed row of a reproduction's results: its sentence speed-up and,
    per task of ``tasks`` it has, the score and the share of predictions changed (percent)."""
    points = []
    for key, row in table["rows"].items():
        if row["num_instances"] < 2:
            continue
        points.append(dict(
            label=row["label"], row=key, num_instances=row["num_instances"], kind="table",
            speedup=row["throughput_gain"]["sentence"], checkpoint=_checkpoint(table, key, tasks),
            tasks={t: _task(row["scores"][t]) for t in tasks if t in row["scores"]},
        ))
    return points


def _checkpoint(results: dict, row: str, tasks: list[str]) -> str | None:
    """The fine-tuned checkpoint of the row's first task that a results file evaluated."""
    evaluated = results.get("evaluations", {}).get(row, {})
    return next((evaluated[t]["checkpoint"] for t in tasks if t in evaluated), None)


def _task(score: dict) -> dict:
    changed = score.get("changed_across_seeds")
    return dict(score=score["mean"], changed=None if changed is None else 100 * changed)


def add_retention(points: list[dict], table: dict, groups: dict[str, list[str]]) -> None:
    """Each point's ``retention`` per group of tasks (``{"sentence": [...], "token": [...]}``): its
    average score over its family's N = 1 row's on the same tasks (the ``baseline_used`` the table
    resolved for its row, so MUX-ELECTRA against ELECTRA; else the table's first N = 1 row), where
    it has all of them."""
    first = next((row for row in table["rows"].values() if row["num_instances"] == 1), None)
    for p in points:
        base = table["rows"].get(p["row"], {}).get("baseline_used")
        reference = table["rows"].get(base, first)
        p["retention"] = {}
        for group, names in groups.items():
            if reference is None or not names or not all(t in p["tasks"] and t in reference["scores"] for t in names):
                continue
            ours = sum(p["tasks"][t]["score"] for t in names)
            p["retention"][group] = 100 * ours / sum(reference["scores"][t]["mean"] for t in names)


def variant_point(label: str, row: str, results: list[dict], table: dict, tasks: list[str]) -> dict:
    """A re-fine-tuning of table row ``row``: its tasks from ``results`` (a later file wins a
    task both hold), drawn at the row's speed-up."""
    if row not in table["rows"]:
        raise ValueError(f"variant {label!r}: the table has no row {row!r} (it has {sorted(table['rows'])})")
    base = table["rows"][row]
    measured, checkpoint = {}, None
    for result in results:
        if row not in result["rows"]:
            raise ValueError(f"variant {label!r}: a results file has no row {row!r}")
        measured.update({t: _task(s) for t, s in result["rows"][row]["scores"].items() if t in tasks})
        checkpoint = checkpoint or _checkpoint(result, row, tasks)
    if not measured:
        raise ValueError(f"variant {label!r}: its results hold none of the tasks {tasks}")
    return dict(label=f"{base['label']} + {label}", row=row, num_instances=base["num_instances"], kind="variant",
                variant=label, speedup=base["throughput_gain"]["sentence"], checkpoint=checkpoint, tasks=measured)


def cut_points(frontier: dict, tasks: list[str], runs: Path | None = None) -> list[dict]:
    """The plain encoder and its cuts, fp32 (a plain model changes no prediction); ``runs``:
    the folder of their fine-tunings (``ROW/3-TASK``)."""
    rows = frontier["rows"]
    reference = frontier["speeds"]["N1-K0-L4"]["fp32"]
    points = []
    for key, row in rows.items():
        if row["num_instances"] != 1 or row["precision"] != "fp32":
            continue
        speed = frontier["speeds"][f"N1-K0-L{row['layers']}"]["fp32"]
        points.append(dict(label=f"{key} ({row['layers']} layer{'s' * (row['layers'] > 1)})", row=key,
                           num_instances=1, kind="cut", speedup=speed / reference,
                           checkpoint=None if runs is None else str(runs / key / f"3-{tasks[0]}"),
                           tasks={t: dict(score=row["scores"][t]["mean"], changed=0.0) for t in tasks if t in row["scores"]}))
    return points


def apply_speeds(points: list[dict], timed: dict, baseline: str) -> None:
    """Each point's speed-up from one side-by-side timing (``muxplm bench throughput --model``'s
    results): its checkpoint's samples/s over the ``baseline`` checkpoint's."""
    speeds = {Path(entry["checkpoint"]).resolve(): entry["samples_per_s"]
              for entry in timed["results"] if entry.get("checkpoint") and entry.get("precision") == "fp32"
              and entry.get("runtime", "torch") == "torch"}
    reference = speeds.get(Path(baseline).resolve())
    if reference is None:
        raise ValueError(f"the timing has no fp32 entry for the N = 1 row's checkpoint {baseline}")
    for p in points:
        speed = None if p.get("checkpoint") is None else speeds.get(Path(p["checkpoint"]).resolve())
        if speed is None:
            raise ValueError(f"the timing has no fp32 entry for {p['label']} ({p.get('checkpoint')})")
        p["speedup"] = speed / reference


def checks(points: list[dict]) -> list[str]:
    """Each point of an N with a stability target against it: its most-changed task of any group."""
    lines = []
    for p in points:
        target = TARGETS.get(p["num_instances"])
        changed = [v["changed"] for v in p["tasks"].values() if v["changed"] is not None]
        if target is None or not changed:
            continue
        worst = max(changed)
        verdict = "met" if worst <= target else "MISSED"
        lines.append(f"{verdict} {p['label']}: at most {worst:.1f} % of a task's predictions changed "
                     f"(<= {target:.0f} %) at {p['speedup']:.2f}x, over {', '.join(p['tasks'])}")
    return lines


def table_markdown(points: list[dict], tasks: list[str]) -> str:
    header = ["system", "N", "speed-up"] + [f"{t}: score / changed" for t in tasks] + ["retention (sent. / token)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for p in sorted(points, key=lambda p: (p["kind"] == "cut", p["speedup"])):
        cells = [p["label"], str(p["num_instances"]), f"{p['speedup']:.2f}x"]
        for t in tasks:
            v = p["tasks"].get(t)
            cells.append("-" if v is None else f"{v['score']:.1f} / {v['changed']:.1f} %")
        retention = [p.get("retention", {}).get(group) for group in GROUPS]
        cells.append(" / ".join("-" if r is None else f"{r:.1f} %" for r in retention))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(points: list[dict], tasks: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.8), squeeze=False)
    style = {"table": dict(marker="o"), "variant": dict(marker="*", s=140), "cut": dict(marker="s")}
    families = sorted({p["row"].rsplit("-", 1)[0] for p in points if p["kind"] != "cut"})
    colour = {family: f"C{i % 10}" for i, family in enumerate(families)}  # a row and its variants alike
    rows = {p["row"]: p for p in points if p["kind"] == "table"}
    for ax, task in zip(axes[0], tasks):
        for p in points:
            v = p["tasks"].get(task)
            if v is None or v["changed"] is None:
                continue
            family = p["row"].rsplit("-", 1)[0]
            ax.scatter(p["speedup"], v["changed"], color=colour.get(family, "black"), **style[p["kind"]])
            ax.annotate(p["label"], (p["speedup"], v["changed"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
            base = rows.get(p["row"]) if p["kind"] == "variant" else None
            if base is not None and base["tasks"].get(task, {}).get("changed") is not None:
                ax.annotate("", (p["speedup"], v["changed"]), (base["speedup"], base["tasks"][task]["changed"]),
                            arrowprops=dict(arrowstyle="->", color="grey"))
        for n, target in TARGETS.items():
            ax.axhline(target, linestyle="--", linewidth=0.8, color="tab:red")
            ax.text(0.99, target, f"target at N = {n}", fontsize=7, color="tab:red", va="bottom", ha="right",
                    transform=ax.get_yaxis_transform())
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
        ax.set_xlabel("sentence throughput over the plain encoder (log)")
        ax.set_ylabel(f"{task}: dev predictions changed by the composition (%)")
        ax.set_title(task)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, type=Path, help="a muxplm reproduce results.json")
    parser.add_argument("--cuts", type=Path, help="a reproduce_frontier.py results.json (the plain encoder's cuts)")
    parser.add_argument("--variant", action="append", default=[], help="LABEL=ROW:RESULTS[,RESULTS...]")
    parser.add_argument("--speeds", type=Path, help="a muxplm bench throughput --model results file timing every point")
    parser.add_argument("--tasks", default="sentiment,trec", help="comma-separated sentence tasks (drawn)")
    parser.add_argument("--token-tasks", default="pos,ner",
                        help="comma-separated token tasks (reported and judged, not drawn; '' for none)")
    parser.add_argument("--output-dir", required=True, type=Path)
    args = parser.parse_args(argv)

    drawn = args.tasks.split(",")
    token_tasks = [t for t in args.token_tasks.split(",") if t]
    tasks = drawn + token_tasks
    table = json.loads(args.table.read_text())
    points = table_points(table, tasks)
    for text in args.variant:
        label, row, paths = parse_variant(text)
        points.append(variant_point(label, row, [json.loads(p.read_text()) for p in paths], table, tasks))
    timing = {"table": str(args.table)}
    baseline = next((_checkpoint(table, key, tasks) for key, row in table["rows"].items() if row["num_instances"] == 1), None)
    if args.cuts:
        frontier = json.loads(args.cuts.read_text())
        runs = None if baseline is None else Path(baseline).parent.parent
        points += cut_points(frontier, tasks, runs)
        timing["cuts"] = f"{args.cuts} (a separate timing run: {frontier.get('timing')})"
    if args.speeds:
        timed = json.loads(args.speeds.read_text())
        apply_speeds(points, timed, baseline)
        timing = {"every point": f"{args.speeds}: {timed.get('settings')}, {timed.get('environment')}"}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    add_retention(points, table, {"sentence": drawn, "token": token_tasks})
    verdicts = checks(points)
    (args.output_dir / "churn.json").write_text(json.dumps(dict(points=points, checks=verdicts, timing=timing), indent=1))
    markdown = table_markdown(points, tasks) + "\n\n" + "\n".join(f"* {line}" for line in verdicts) + "\n"
    (args.output_dir / "churn.md").write_text(markdown)
    plot(points, drawn, args.output_dir / "churn.png")
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
