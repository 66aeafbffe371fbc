"""One table from several results folders of one reproduction (``muxplm reproduce --merge``):
the parts' scores and training as they measured them, every row timed again side by side."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..throughput import environment
from .render import write_outputs
from .rows import per_seed_records, summarize_results
from .run import _timing_on, keep_configs, measure_side_by_side
from .table import DEFAULT_TASKS, PAPER_MODELS
from .targets import check_targets


# What a merge may set over the parts' recipe: how its side-by-side timing runs.
MERGE_TIMING_SETTINGS = ("batches", "trials", "warmup", "statistic")


def merge_reproductions(parts: list[str | Path], output_dir: str | Path, log=print,
                        device: str | None = None, timing: dict[str, Any] | None = None) -> dict[str, Any]:
    """One table from the results folders of several runs of one reproduction: shards trained
    apart (a few rows at a time, on machines whose checkpoints need not outlive the run). The
    parts must share the recipe and the code every stage was trained with (one source hash). A
    row may come in parts with different tasks (a row too slow for one run, fine-tuned a few
    tasks at a time) when each of its tasks comes once and its pre-training stages ended the same
    in every part (same steps, loss and held-out scores: the same deterministic run); in the
    end every row has every task. Scores and training summaries are taken as the parts measured
    them; every row is timed again, all side by side here, on a model built from its kept
    config.json with random weights (a forward pass costs the same whatever its weights), on
    ``device`` if given (rows trained on a GPU, timed on the CPU that serves them), else on the
    recipe's, by the recipe's timing settings with ``timing``'s over them (more trials, their
    median: the timing is the merge's own, so the parts' training is untouched)."""
    loaded = [(Path(part), json.loads((Path(part) / "results.json").read_text())) for part in parts]
    if not loaded:
        raise ValueError("merge needs at least one results folder")
    first_dir, first = loaded[0]
    evaluations: dict[str, dict] = {}
    training: dict[str, dict] = {}
    configs: dict[str, dict[str, Path]] = {}
    for folder, part in loaded:
        for field in ("preset", "recipe"):
            if part[field] != first[field]:
                differing = sorted(k for k in set(part[field]) | set(first[field])
                                   if part[field].get(k) != first[field].get(k)) if isinstance(part[field], dict) \
                    else [field]
                raise ValueError(f"{folder} and {first_dir} differ in their {field} ({', '.join(differing)}): "
                                 f"they are not parts of one reproduction")
        for key in part["models"]:
            stages = part["training"][key]
            for task, result in part["evaluations"][key].items():
                if task in evaluations.get(key, {}):
                    raise ValueError(f"{key} on {task} is in more than one part ({folder} and an earlier one)")
                evaluations.setdefault(key, {})[task] = result
            if key in training:
                _check_same_pretraining(key, training[key], stages, folder)
            merged = training.setdefault(key, {})
            for name, stage in stages.items():
                # a stage one part trained and another reused: the record of its training
                if name != "wall_seconds" and (name not in merged or merged[name].get("reused")):
                    merged[name] = stage
            # A row made in several parts took all of their time; a part without one leaves it unknown.
            earlier = merged.get("wall_seconds", 0.0)
            merged["wall_seconds"] = None if earlier is None or stages.get("wall_seconds") is None \
                else earlier + stages["wall_seconds"]
            for head in part["throughput"]:
                kept = folder / "configs" / f"{key}-{head}"
                if not (kept / "config.json").is_file():
                    raise ValueError(f"{kept}/config.json is missing: a part keeps each timed model's config "
                                     f"(run_reproduction writes them) so that the merge can time it again")
                configs.setdefault(head, {})[key] = kept
    codes = _stage_codes(training)
    if len(codes) > 1:
        which = "; ".join(f"{code[:12]}: {', '.join(sorted(keys))}" for code, keys in codes.items())
        raise ValueError(f"the parts were trained by different code ({which}); train every part with one pinned "
                         f"commit (CODE=COMMIT bash benchmarks/run_reproduce_paper.sh)")
    known = {task for by_task in evaluations.values() for task in by_task}
    tasks = [t for t in DEFAULT_TASKS if t in known] + sorted(known - set(DEFAULT_TASKS))
    for key, by_task in evaluations.items():
        missing = [t for t in tasks if t not in by_task]
        if missing:
            raise ValueError(f"{key} has no part with {', '.join(missing)}: every row needs every task")
    order = {key: i for i, key in enumerate(PAPER_MODELS)}
    models = sorted(evaluations, key=lambda key: order.get(key, len(order)))
    recipe = first["recipe"]
    device = device or recipe["device"]
    unknown = sorted(set(timing or {}) - set(MERGE_TIMING_SETTINGS))
    if unknown:
        raise ValueError(f"a merge sets only its timing ({', '.join(MERGE_TIMING_SETTINGS)}), not "
                         f"{', '.join(unknown)}: the parts' training is theirs")
    timing = _timing_on(device, {**recipe["throughput"], **(timing or {})})
    log(f"== throughput on {device}, {len(models)} models side by side (built from their configs)")
    start = time.perf_counter()
    throughput = {head: measure_side_by_side({key: str(by_key[key]) for key in models}, device=device,
                                             fresh=True, **timing)
                  for head, by_key in configs.items()}
    rows = summarize_results(models, tasks, evaluations, throughput, training)
    results = dict(
        preset=first["preset"], recipe=recipe, models=models, tasks=tasks, environment=environment(device),
        rows=rows, checks=check_targets(rows), throughput=throughput, timing=dict(device=device, **timing),
        training=training, evaluations=evaluations, wall_seconds=time.perf_counter() - start,
        merged_from=[dict(folder=str(folder), models=part["models"], tasks=part["tasks"],
                          environment=part["environment"]) for folder, part in loaded],
    )
    keep_configs(Path(output_dir), {head: {key: str(path) for key, path in by_key.items()}
                                    for head, by_key in configs.items()})
    write_outputs(Path(output_dir), results, per_seed_records(evaluations))
    return results


def _check_same_pretraining(key: str, earlier: dict[str, Any], stages: dict[str, Any], folder: Path) -> None:
    """A row met again in another part must have ended each pre-training stage as before."""
    for name, stage in stages.items():
        if name.startswith("finetune-") or name == "wall_seconds" or name not in earlier:
            continue
        ended = {field: stage.get(field) for field in ("final_step", "final_loss", "eval")}
        before = {field: earlier[name].get(field) for field in ("final_step", "final_loss", "eval")}
        if ended != before:
            raise ValueError(f"{key}'s {name} stage in {folder} ended otherwise than in an earlier part "
                             f"({ended} against {before}): not the same pre-trained model")


def _stage_codes(training: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """source hash -> the rows with a stage trained by that code."""
    codes: dict[str, set[str]] = {}
    for key, stages in training.items():
        for stage in stages.values():
            if isinstance(stage, dict) and (stage.get("code") or {}).get("source_hash"):
                codes.setdefault(stage["code"]["source_hash"], set()).add(key)
    return codes
