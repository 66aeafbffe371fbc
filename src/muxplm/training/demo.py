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

from ..timing import side_by_side
from .config import TrainConfig
from .evaluate import evaluate_checkpoint
from .models import load_classifier
from .stages import run_stage

# Tiny-preset CPU recipe; the full demo needs <= 20 minutes on 2 cores, --quick about one.
# Priming as in the tiny training recipe (unbinding demux, 32 groups a step of 32-token blocks,
# in-batch softmax; benchmarks/results/curves/priming); MUX pre-training keeps the auxiliary
# retrieval loss (r = 0.2): without it the short MLM stage undid the priming and fine-tuning
# stayed at chance (51 % vs 77 % on sentiment at N = 2).
FULL = dict(
    model_overrides={}, max_length=48, corpus_max_words=400_000, corpus_sources=None, instances=(1, 2, 5),
    retrieval=dict(max_steps=200, lr=1e-3, batch_groups=32, max_length=32, retrieval_softmax="in_batch"),
    mlm=dict(max_steps=150, lr=5e-4, batch_size=32),
    # Without the recipe's composition consistency: it doubles the cost of a MUX fine-tuning
    # step (+9 min here) and the demo must fit 20 minutes; it is worth a point of accuracy and
    # 8-10 points fewer predictions changed by the composition (docs/training.md).
    # Every row fine-tunes the same 8 epochs: the N = 5 head needs them to leave chance, and the
    # N = 1 baseline gets as much training as the rows it is compared with.
    finetune=dict(num_epochs=8.0, lr=2e-4, batch_size=32, max_train_examples=None, max_eval_examples=None,
                  min_steps=1, sentence_pooling="mean", consistency_weight=0.0),
    seeds=5, throughput=dict(batch_size=128, seq_length=48, num_batches=5, trials=3),
)
QUICK = dict(
    model_overrides=dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128),
    max_length=32, corpus_max_words=20_000, corpus_sources=["moby_dick"], instances=(1, 2),
    retrieval=dict(max_steps=30, lr=2e-3, batch_size=16),
    mlm=dict(max_steps=20, lr=1e-3, batch_size=16),
    finetune=dict(num_epochs=1.0, lr=1e-3, batch_size=16, max_train_examples=800, max_eval_examples=200, min_steps=1,
                  consistency_weight=0.0),
    seeds=2, throughput=dict(batch_size=64, seq_length=32, num_batches=5, trials=2),
)


def _stage(recipe: dict, stage: str, output_dir: Path, seed: int, progress: bool, **settings) -> dict[str, Any]:
    section = "finetune" if stage == "finetune" else ("retrieval" if stage == "retrieval" else "mlm")
    values = dict(
        stage=stage, output_dir=str(output_dir), seed=seed, max_length=recipe["max_length"],
        warmup_ratio=0.1, logging_steps=10, save_total_limit=1, progress=progress,
        corpus_max_words=recipe["corpus_max_words"], corpus_sources=recipe["corpus_sources"],
    )
    values.update(recipe[section])  # a stage may set its own max_length
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
    recipe = QUICK if quick else FULL
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
            log["retrieval"] = _stage(recipe, "retrieval", tag / "1-retrieval", seed, progress,
                                      num_instances=n, **fresh)
            mlm_init = dict(init=str(tag / "1-retrieval"), retrieval_loss_weight=0.2)
        else:
            mlm_init = dict(num_instances=1, **fresh)
        log["mlm"] = _stage(recipe, "mlm", tag / "2-mlm", seed, progress, **mlm_init)
        log["finetune"] = _stage(recipe, "finetune", tag / f"3-{task}", seed, progress,
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
    (root / "demo_results.json").write_text(json.dumps(results, indent=1))
    _print_table(results)
    return results


def _mean_score(model: dict[str, Any]) -> float:
    evaluation = model["evaluation"]
    return evaluation["summary"][evaluation["main_metric"]]["mean"]


def _brief(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("final_step", "final_loss", "eval", "train_seconds", "train_samples_per_s")
    return {key: summary.get(key) for key in keep}


def _throughput_side_by_side(checkpoints: list[str], batch_size: int, seq_length: int, num_batches: int,
                             trials: int) -> list[dict[str, Any]]:
    """Inference samples/s of each model, timed round robin so all see the same machine load."""
    models = {path: load_classifier(path)[0].eval() for path in checkpoints}
    measured = side_by_side(models, batch_size=batch_size, seq_length=seq_length, batches=num_batches,
                            trials=trials, device="cpu", warmup=2)
    return [{"checkpoint": path, "num_instances": model.config.num_instances,
             "samples_per_s": measured[path]["samples_per_s"], "trials": measured[path]["trials"],
             "batch_size": batch_size, "seq_length": seq_length, "threads": torch.get_num_threads()}
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
