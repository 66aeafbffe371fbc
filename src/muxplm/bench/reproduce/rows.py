"""The table's rows from what a run measured: each model's scores per task, its sentence and
token averages, retention and throughput gain against its N = 1 row and its training time; and
the per-seed records the analyses read."""

from __future__ import annotations

import statistics
from typing import Any

from .table import MODELS, SENTENCE_TASKS, TOKEN_TASKS


def summarize_results(models: list[str], tasks: list[str], evaluations: dict[str, dict[str, dict]],
                      throughput: dict[str, dict[str, dict]],
                      training: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per model: per task mean/std/max (in points), sentence/token averages, retention against
    its N = 1 row, throughput gain against the N = 1 row (per head) and, given the stage
    summaries, the minutes its stages trained (reused stages count what they took when trained)
    and, where it holds all of that training (:func:`_wall_is_whole`), the row's wall time, all
    from the measured values passed in."""
    rows: dict[str, dict[str, Any]] = {}
    for key in models:
        scores = {}
        for task in tasks:
            result = evaluations[key][task]
            stats = result["summary"]["main"]
            scores[task] = dict(mean=100 * stats["mean"], std=100 * stats["std"], max=100 * stats["max"],
                                min=100 * stats["min"], metric=result["main_metric"],
                                seeds=len(result["seeds"]), changed_across_seeds=result.get("changed_across_seeds"),
                                ensemble=None if not result.get("ensemble") else 100 * result["ensemble"]["main"])
        row = dict(label=MODELS[key].label, num_instances=MODELS[key].num_instances, baseline=MODELS[key].baseline,
                   scores=scores, **group_averages(scores, tasks))
        row["throughput"] = {head: speeds[key]["samples_per_s"] for head, speeds in throughput.items() if key in speeds}
        if training and key in training:
            row["train_minutes"] = sum(stage.get("train_seconds") or 0 for stage in training[key].values()
                                       if isinstance(stage, dict)) / 60
            if _wall_is_whole(training[key]):
                # the row's whole time in the run(s) that made it: training and evaluation
                row["wall_minutes"] = training[key]["wall_seconds"] / 60
        rows[key] = row
    for key, row in rows.items():
        base = _baseline_of(key, rows)
        row["baseline_used"] = base
        if base is None:
            row["retention"], row["throughput_gain"] = {}, {}
            continue
        reference = rows[base]
        row["retention"] = retention(row, reference, tasks)
        row["throughput_gain"] = {head: value / reference["throughput"][head]
                                  for head, value in row["throughput"].items() if head in reference["throughput"]}
    return rows


def group_averages(scores: dict[str, dict], tasks: list[str]) -> dict[str, float | None]:
    """A row's sentence and token averages over its ``tasks`` (``sentence_avg``, ``token_avg``; of
    the composition seeds' best too: ``..._avg_max``), None for a group without a task."""
    averages = {}
    for group, members in (("sentence", SENTENCE_TASKS), ("token", TOKEN_TASKS)):
        present = [t for t in tasks if t in members]
        for suffix, stat in (("", "mean"), ("_max", "max")):
            averages[f"{group}_avg{suffix}"] = statistics.fmean(scores[t][stat] for t in present) if present else None
    return averages


def retention(row: dict[str, Any], reference: dict[str, Any], tasks: list[str]) -> dict[str, float]:
    """A row's score over its N = 1 reference row's, per task (where the reference scored above
    zero) and per group average (``sentence_avg``, ``token_avg``)."""
    kept = {task: row["scores"][task]["mean"] / reference["scores"][task]["mean"]
            for task in tasks if reference["scores"][task]["mean"] > 0}
    for group in ("sentence", "token"):
        if row[f"{group}_avg"] is not None and reference[f"{group}_avg"]:
            kept[f"{group}_avg"] = row[f"{group}_avg"] / reference[f"{group}_avg"]
    return kept


def _baseline_of(key: str, rows: dict) -> str | None:
    """The N = 1 row a model is compared with: its own baseline when it was run, else BERT."""
    wanted = MODELS[key].baseline
    if wanted in rows:
        return wanted
    # another size or a warm start is compared with nothing rather than with the wrong BERT
    return "bert" if "bert" in rows and not (MODELS[key].warm_start or MODELS[key].size) else None


def _wall_is_whole(stages: dict[str, Any]) -> bool:
    """Whether a row's recorded wall time holds all of its training. Not when a stage was reused
    from an earlier run or resumed after a stop (that run's time is not in it), nor when a merged
    part recorded no wall time; records older than these marks give themselves away by a wall time
    shorter than the training it would include."""
    wall = stages.get("wall_seconds")
    trained = [stage for stage in stages.values() if isinstance(stage, dict)]
    return (wall is not None
            and not any(stage.get("reused") or stage.get("resumed_from_step") for stage in trained)
            and wall >= sum(stage.get("train_seconds") or 0 for stage in trained))


def per_seed_records(evaluations: dict[str, dict[str, dict]]) -> list[dict[str, Any]]:
    """The records ``muxplm analyze ensemble|lottery`` read: one per (model, task, seed), plus
    the ensembled score where it was measured."""
    records = []
    for key, by_task in evaluations.items():
        for task, result in by_task.items():
            common = dict(model=MODELS[key].label, task=task, num_instances=result["num_instances"])
            records += [dict(common, seed=seed, score=100 * metrics["main"], ensemble=False)
                        for seed, metrics in zip(result["seeds"], result["per_seed"])]
            if result.get("ensemble"):
                records.append(dict(common, seed=result["seeds"][0], score=100 * result["ensemble"]["main"],
                                    ensemble=True))
    return records
