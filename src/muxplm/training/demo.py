"""``muxplm demo``: the whole MUX-PLM recipe on a CPU, end to end.

For N = 1 (the plain baseline: no retrieval priming, it has nothing to retrieve from), N = 2
and N = 5: token-retrieval priming -> MLM pre-training -> fine-tuning on the built-in
``sentiment`` task, then multi-seed evaluation and a side-by-side inference throughput
measurement. Prints a table of score, retention (score / the N = 1 score) and speed-up, and
writes ``demo_results.json`` to the output directory.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from ..provenance import code_version
from ..timing import side_by_side
from .config import TrainConfig
from .evaluate import evaluate_checkpoint
from .models import load_classifier
from .recipes import DEMO_FULL, DEMO_QUICK, for_instances
from .stages import run_stage

def _stage(recipe: dict, stage: str, output_dir: Path, seed: int, progress: bool, instances: int,
           num_instances: int | None = None, **settings) -> dict[str, Any]:
    """One stage of the demo's recipe for a row of ``instances``; ``num_instances`` for a model
    built here (one that starts from a checkpoint keeps its own)."""
    section = "finetune" if stage == "finetune" else ("retrieval" if stage == "retrieval" else "mlm")
    values = dict(
        stage=stage, output_dir=str(output_dir), seed=seed, max_length=recipe["max_length"],
        warmup_ratio=recipe["warmup_ratio"], logging_steps=10, save_total_limit=1, progress=progress,
        corpus_max_words=recipe["corpus_max_words"], corpus_sources=recipe["corpus_sources"],
    )
    values.update(for_instances(recipe[section], instances))  # a stage may set its own max_length
    if num_instances is not None:
        values["num_instances"] = num_instances
    values.update(settings)
    # Evaluate and checkpoint once per stage (at the end): the demo is about the result.
    values.setdefault("eval_steps", 10**9)
    values.setdefault("save_steps", 10**9)
    shutil.rmtree(output_dir, ignore_errors=True)  # a demo run always starts fresh
    return run_stage(TrainConfig(**values))


def run_demo(output_dir: str | Path = "runs/demo", quick: bool = False, seed: int = 0,
             progress: bool = True, task: str = "sentiment") -> dict[str, Any]:
    """Train and compare tiny models at N = 1, 2 and 5 (quick: 1 and 2); returns (and saves)
    the results."""
    recipe = DEMO_QUICK if quick else DEMO_FULL
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    fresh = dict(preset="tiny", model_overrides=recipe["model_overrides"])
    results: dict[str, Any] = {"quick": quick, "task": task, "models": {}}
    for n in recipe["instances"]:
        log = {}
        tag = root / f"n{n}"
        t0 = time.perf_counter()
        if n > 1:
            log["retrieval"] = _stage(recipe, "retrieval", tag / "1-retrieval", seed, progress, n,
                                      num_instances=n, **fresh)
            mlm_init = dict(init=str(tag / "1-retrieval"))
        else:  # a plain model has nothing to retrieve
            mlm_init = dict(num_instances=1, **fresh)
        log["mlm"] = _stage(recipe, "mlm", tag / "2-mlm", seed, progress, n, **mlm_init)
        log["finetune"] = _stage(recipe, "finetune", tag / f"3-{task}", seed, progress, n,
                                 init=str(tag / "2-mlm"), task=task)
        evaluation = evaluate_checkpoint(
            tag / f"3-{task}", task, seeds=recipe["seeds"],
            max_length=recipe["max_length"], max_examples=recipe["finetune"]["max_eval_examples"],
        )
        results["models"][f"N={n}"] = {
            "num_instances": n,
            "train_seconds": time.perf_counter() - t0,
            "stages": {stage: _brief(summary) for stage, summary in log.items()},
            "evaluation": evaluation,
            "checkpoint": str(tag / f"3-{task}"),
        }
    results["throughput"] = _throughput_side_by_side(
        [model["checkpoint"] for model in results["models"].values()], **recipe["throughput"]
    )
    base_speed = results["throughput"][0]["samples_per_s"]
    base_score = _mean_score(results["models"]["N=1"])
    for model, speed in zip(results["models"].values(), results["throughput"]):
        model["speedup"] = speed["samples_per_s"] / base_speed
        model["retention"] = _mean_score(model) / base_score if base_score else None
    results["wall_seconds"] = time.perf_counter() - start
    # What made these figures: the code, the machine and the date, beside them.
    results.update(code=code_version(), machine=_machine(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    (root / "demo_results.json").write_text(json.dumps(results, indent=1))
    _print_table(results)
    return results


def _machine() -> str:
    import os
    import platform

    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if line.startswith("model name")]
    return f"{names[0] if names else platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def _mean_score(model: dict[str, Any]) -> float:
    evaluation = model["evaluation"]
    return evaluation["summary"][evaluation["main_metric"]]["mean"]


def _brief(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("final_step", "final_loss", "eval", "train_seconds", "train_samples_per_s")
    return {key: summary.get(key) for key in keep}


def _throughput_side_by_side(checkpoints: list[str], batch_size: int, seq_length: int, num_batches: int,
                             trials: int, statistic: str = "mean") -> list[dict[str, Any]]:
    """Inference samples/s of each model (``statistic`` of its trials), timed round robin so all
    see the same machine load."""
    models = {path: load_classifier(path)[0].eval() for path in checkpoints}
    measured = side_by_side(models, batch_size=batch_size, seq_length=seq_length, batches=num_batches,
                            trials=trials, device="cpu", warmup=2, statistic=statistic)
    return [{"checkpoint": path, "num_instances": model.config.num_instances,
             "samples_per_s": measured[path]["samples_per_s"], "statistic": statistic,
             "trials": measured[path]["trials"], "batch_size": batch_size, "seq_length": seq_length,
             "threads": torch.get_num_threads()}
            for path, model in models.items()]


def _print_table(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"muxplm demo: tiny preset, task {results['task']}"
                        + (" (quick)" if results["quick"] else ""))
    for column in ("model", "metric", "mean", "std", "max", "changed by seed", "retention", "samples/s", "speed-up"):
        table.add_column(column, justify="left" if column in ("model", "metric") else "right")
    for (name, model), speed in zip(results["models"].items(), results["throughput"]):
        evaluation = model["evaluation"]
        stats = evaluation["summary"][evaluation["main_metric"]]
        retention = model["retention"]
        table.add_row(
            name, evaluation["main_metric"], f"{stats['mean']:.4f}", f"{stats['std']:.4f}", f"{stats['max']:.4f}",
            f"{100 * evaluation['changed_across_seeds']:.1f}%", "-" if retention is None else f"{100 * retention:.1f}%",
            f"{speed['samples_per_s']:.1f}", f"{model['speedup']:.2f}x",
        )
    console = Console(width=max(120, Console().width))  # the table's columns fit even when piped
    console.print(table)
    console.print(f"wall time {results['wall_seconds']:.0f}s")
