"""Should composition consistency be the default fine-tuning of MUX models? Measured on the demo.

The demo fine-tunes every row 8 epochs without it. This script fine-tunes the demo's own N > 1
pre-trained checkpoints (``DEMO/nN/2-mlm``) again with the consistency term (weight 4, the tiny
recipe's), for ``--epochs`` (by default 4: each consistency step encodes the batch twice, so 4
epochs cost about what the demo's 8 plain ones do; 8 as well to see the full recipe), scores each
as the demo does (5 composition seeds) and sets them beside the demo's row: accuracy, the share of predictions that change with
the composition seed, and fine-tuning seconds. The rule (issue: stable predictions by default
unless they cost more than 1.5x the training time or a point of accuracy) is applied to each::

    python3 -m muxplm demo --output-dir runs/demo
    python3 benchmarks/demo_stable.py runs/demo --output benchmarks/results/demo/stable.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

WEIGHT = 4.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("demo", type=Path, help="a full demo's output folder (demo_results.json, nN/2-mlm)")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--instances", type=int, nargs="+", default=[2, 5])
    parser.add_argument("--epochs", type=float, nargs="+", default=[4.0], help="fine-tuning epochs with consistency")
    args = parser.parse_args(argv)
    variants = {f"consistency, {epochs:g} epochs": epochs for epochs in args.epochs}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from muxplm.training import TrainConfig, evaluate_checkpoint, run_stage
    from muxplm.training.recipes import DEMO_FULL

    demo = json.loads((args.demo / "demo_results.json").read_text())
    if demo["quick"]:
        raise SystemExit("demo_stable.py: the quick demo's rows are too small to measure; run the full demo")
    task, recipe = demo["task"], DEMO_FULL
    base = demo["models"]["N=1"]["evaluation"]["summary"]["accuracy"]["mean"]
    rows = {}
    for n in args.instances:
        row = demo["models"][f"N={n}"]
        results = {"demo (no consistency, 8 epochs)": {
            "accuracy": row["evaluation"]["summary"]["accuracy"]["mean"],
            "changed_across_seeds": row["evaluation"]["changed_across_seeds"],
            "finetune_seconds": row["stages"]["finetune"]["train_seconds"],
            "row_train_seconds": sum(stage["train_seconds"] for stage in row["stages"].values())}}
        for name, epochs in variants.items():
            folder = args.demo / f"n{n}" / f"stable-{epochs:g}ep"
            shutil.rmtree(folder, ignore_errors=True)
            plain = {key: value for key, value in recipe["finetune"].items() if key != "by_instances"}
            settings = {**plain, "num_epochs": epochs, "consistency_weight": WEIGHT}
            started = time.perf_counter()
            summary = run_stage(TrainConfig(
                stage="finetune", task=task, init=str(args.demo / f"n{n}" / "2-mlm"), output_dir=str(folder),
                seed=0, max_length=recipe["max_length"], warmup_ratio=recipe["warmup_ratio"], logging_steps=10,
                save_total_limit=1, progress=False, eval_steps=10**9, save_steps=10**9, **settings))
            evaluation = evaluate_checkpoint(folder, task, seeds=recipe["seeds"], max_length=recipe["max_length"],
                                             max_examples=recipe["finetune"]["max_eval_examples"])
            finetune = summary["train_seconds"]
            other_stages = results["demo (no consistency, 8 epochs)"]["row_train_seconds"] \
                - results["demo (no consistency, 8 epochs)"]["finetune_seconds"]
            results[name] = {"accuracy": evaluation["summary"]["accuracy"]["mean"],
                             "changed_across_seeds": evaluation["changed_across_seeds"],
                             "finetune_seconds": finetune, "row_train_seconds": other_stages + finetune,
                             "wall_seconds": time.perf_counter() - started}
            print(f"N={n} {name}: {results[name]}", flush=True)
        plain = results["demo (no consistency, 8 epochs)"]
        for name in variants:
            measured = results[name]
            measured["finetune_time_ratio"] = measured["finetune_seconds"] / plain["finetune_seconds"]
            measured["row_time_ratio"] = measured["row_train_seconds"] / plain["row_train_seconds"]
            measured["accuracy_points"] = 100 * (measured["accuracy"] - plain["accuracy"])
            measured["retention"] = measured["accuracy"] / base
            measured["passes_rule"] = measured["finetune_time_ratio"] <= 1.5 and measured["accuracy_points"] >= -1.0
        rows[f"N={n}"] = results
    print(f"\n{'row':5s} {'fine-tuning':32s} {'accuracy':>9s} {'changed':>8s} {'ft time':>8s} {'rule':>5s}")
    for row, results in rows.items():
        for name, measured in results.items():
            ratio = measured.get("finetune_time_ratio", 1.0)
            print(f"{row:5s} {name:32s} {100 * measured['accuracy']:8.1f}% {100 * measured['changed_across_seeds']:7.1f}% "
                  f"{ratio:7.2f}x {('yes' if measured.get('passes_rule') else 'no') if 'passes_rule' in measured else '-':>5s}")
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"demo": str(args.demo), "commit": commit, "date": time.strftime("%Y-%m-%d"),
                                       "consistency_weight": WEIGHT, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
