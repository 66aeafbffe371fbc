"""Which predictions change with the composition, and how far the composition noise would have
to fall for the stability targets: a sentence checkpoint's class probabilities under several
composition seeds, against the margins of the same examples.

    python3 benchmarks/experiments/churn_margins.py sentiment \
        NAME=CHECKPOINT [NAME=CHECKPOINT ...] [--seeds 5] [--max-length 48] [--output FILE.json]

For every checkpoint: the share of dev examples whose label changes across seeds; the spread
(std across seeds) of the probability of the predicted class; the churn inside and outside
the band of examples whose mean probability is within 0.1 of the decision boundary; and the
factor by which the composition noise would have to shrink, margins unchanged, for a target
churn (5 % / 10 %).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from muxplm.inference import Encoded, forward_batches, forward_pass, pad_token_id
from muxplm.training.inputs import load_task_features
from muxplm.training.models import load_classifier


def seed_probabilities(checkpoint: str, task: str, seeds: int, max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[seeds, examples, classes]`` probabilities and the gold labels."""
    model, tokenizer = load_classifier(checkpoint)
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    length = min(max_length, model.config.max_position_embeddings - model.config.num_prefix_tokens)
    _, features = load_task_features(tokenizer, task=task, task_kind="sentence", label_names=names,
                                     max_length=length, splits=("validation",))
    rows = features["validation"]
    instances = [Encoded.from_features(rows[i]) for i in range(len(rows))]
    golds = [rows[i]["labels"] for i in range(len(rows))]
    pad = pad_token_id(tokenizer, model.config)
    model.eval()

    def run_pass(batch, composition_seed):  # the evaluation's passes, its logits kept
        return forward_pass(model, batch, task="sentence", pad_token_id=pad, composition_seed=composition_seed)

    runs = seeds if model.config.num_instances > 1 else 1
    probabilities = []
    with torch.inference_mode():
        for seed in range(runs):
            outputs = forward_batches(run_pass, instances, batch_size=64, composition_seed=seed)
            probabilities.append(torch.stack(outputs).softmax(-1))
    return torch.stack(probabilities), torch.tensor(golds)


def noise_reduction_needed(margin: torch.Tensor, spread: torch.Tensor, changed: float, target: float) -> float:
    """By what factor the composition noise of every example would have to shrink, margins
    unchanged, for the churn to fall from ``changed`` to ``target``: an example flips when its
    margin is under c times its spread, where c is whatever reproduces today's churn."""
    ratio = margin / spread.clamp(min=1e-9)
    return float(torch.quantile(ratio, changed) / torch.quantile(ratio, target))


def analyse(probabilities: torch.Tensor, golds: torch.Tensor) -> dict:
    labels = probabilities.argmax(-1)  # [seeds, examples]
    changed = (labels != labels[0]).any(0)
    mean = probabilities.mean(0)
    predicted = mean.argmax(-1)
    spread = probabilities[:, torch.arange(len(predicted)), predicted].std(0) if len(probabilities) > 1 \
        else torch.zeros(len(predicted))
    top2 = mean.topk(2, -1).values
    margin = (top2[:, 0] - top2[:, 1]) / 2  # |p - 1/2| for two classes
    near = margin < 0.1
    return {
        "examples": len(golds), "seeds": len(probabilities),
        "accuracy": 100 * float((labels == golds).float().mean()),
        "changed": 100 * float(changed.float().mean()),
        "median_spread": float(spread.median()), "mean_spread": float(spread.mean()),
        "near_boundary": 100 * float(near.float().mean()),
        "changed_near_boundary": 100 * float(changed[near].float().mean()) if near.any() else None,
        "changed_elsewhere": 100 * float(changed[~near].float().mean()) if (~near).any() else None,
        "share_of_changes_near_boundary": 100 * float((changed & near).sum() / changed.sum().clamp(min=1)),
        "noise_reduction_needed": {f"{int(100 * t)}%": noise_reduction_needed(margin, spread, float(changed.float().mean()), t)
                                   for t in (0.05, 0.10)} if changed.any() else None,
        "margin_quantiles": {f"{q:.2f}": float(torch.quantile(margin, q)) for q in (0.05, 0.10, 0.25, 0.5)},
    }


def _factors(needed: dict | None) -> str:
    return " / ".join(f"{value:.2f}x" for value in needed.values()) if needed else "-"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("checkpoints", nargs="+", metavar="NAME=CHECKPOINT")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=48, help="tokens per input (the reproduction's 48)")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    report = {}
    for item in args.checkpoints:
        name, checkpoint = item.split("=", 1)
        report[name] = {"checkpoint": checkpoint, **analyse(*seed_probabilities(checkpoint, args.task, args.seeds, args.max_length))}
        row = report[name]
        print(f"{name}: accuracy {row['accuracy']:.1f} %, changed {row['changed']:.1f} %, spread median "
              f"{row['median_spread']:.3f}, near the boundary {row['near_boundary']:.1f} % (changed there "
              f"{row['changed_near_boundary'] or 0:.1f} %, elsewhere {row['changed_elsewhere'] or 0:.1f} %), "
              f"noise to shrink {_factors(row['noise_reduction_needed'])} for 5 % / 10 %", flush=True)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
