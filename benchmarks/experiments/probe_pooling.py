"""Linear probes of a checkpoint's frozen sentence vectors: how much of a task the encoder's
features carry before any fine-tuning, and how they are best pooled.

    python3 benchmarks/experiments/probe_pooling.py --task sentiment --out benchmarks/results/probe-pooling \\
        NAME=CHECKPOINT_DIR ...

For a MUX checkpoint two poolings are probed: the model's own (each instance's mean of the
multiplexed states over its tokens, then demultiplexed: one demultiplexer pass per instance) and
demultiplexing every token, then taking each instance's mean (one pass per instance and token).
A plain encoder gives its mean over tokens. A logistic regression (scikit-learn) is fitted on the
training vectors and scored on the dev ones; 5 composition seeds for MUX checkpoints. Each row also
gives the share of the training vectors' variance that lies between the classes' means.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from transformers import AutoConfig, AutoModel, AutoTokenizer

import muxplm  # noqa: F401  (registers the MUX models with the Auto classes)
from muxplm.data.tasks import get_task
from muxplm.modeling_mux import mean_over_tokens, pooled_instance_states
from muxplm.training.inputs import fixed_subset


@torch.inference_mode()
def sentence_vectors(model, is_mux: bool, encoded: dict, seed: int, batch_size: int = 160) -> dict[str, np.ndarray]:
    """Every pooling's vectors ``[B, H]`` for the encoded examples, in input order."""
    out: dict[str, list[torch.Tensor]] = {}
    for start in range(0, encoded["input_ids"].shape[0], batch_size):
        batch = {key: value[start:start + batch_size] for key, value in encoded.items()}
        if not is_mux:
            states = model(**batch).last_hidden_state
            out.setdefault("mean", []).append(mean_over_tokens(states, batch["attention_mask"]))
            continue
        state = model.multiplex(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"),
                                composition_seed=seed + start)
        pooled = pooled_instance_states(state.demux, state.muxed, state.slot_mask)  # [G, N, H]
        out.setdefault("pool-then-demux", []).append(state.plan.ungroup(pooled.flatten(0, 1)))
        out.setdefault("demux-then-pool", []).append(mean_over_tokens(state.demux_rows(), batch["attention_mask"]))
    return {name: torch.cat(parts).float().numpy() for name, parts in out.items()}


def between_class_share(x: np.ndarray, y: np.ndarray) -> float:
    """The share of the vectors' variance that lies between the classes' means (trace of the
    between-class scatter over the total): how loudly the classes speak over everything else, a
    companion's interference included."""
    centred = x - x.mean(0)
    between = sum((y == label).sum() * np.sum((x[y == label].mean(0) - x.mean(0)) ** 2) for label in np.unique(y))
    return float(between / np.sum(centred ** 2))


def probe(train_x, train_y, dev_x, dev_y) -> float:
    classifier = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000))
    classifier.fit(train_x, train_y)
    return float((classifier.predict(dev_x) == dev_y).mean())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="NAME=DIR (a plain encoder or a MUX checkpoint)")
    parser.add_argument("--task", default="sentiment")
    parser.add_argument("--train-examples", type=int, default=2000)
    parser.add_argument("--dev-examples", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=48)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    spec, data = get_task(args.task)
    text, label = spec.text_columns[0], "label"
    # The fine-tuning's subsets (a seeded shuffle: the files are sorted, by label for sentiment).
    train = fixed_subset(data["train"], args.train_examples)
    dev = fixed_subset(data["validation"], args.dev_examples)
    results = []
    for item in args.checkpoints:
        name, path = item.split("=", 1)
        is_mux = AutoConfig.from_pretrained(path).model_type.startswith("mux_")
        model = AutoModel.from_pretrained(path).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)

        def encode(split):
            return dict(tokenizer(list(split[text]), padding="max_length", truncation=True, max_length=args.max_length,
                                  return_tensors="pt"))

        train_enc, dev_enc = encode(train), encode(dev)
        scores: dict[str, list[float]] = {}
        shares: dict[str, list[float]] = {}
        started = time.time()
        for seed in range(args.seeds if is_mux else 1):
            train_vectors = sentence_vectors(model, is_mux, train_enc, seed)
            dev_vectors = sentence_vectors(model, is_mux, dev_enc, 1000 + seed)
            for pooling in train_vectors:
                scores.setdefault(pooling, []).append(
                    probe(train_vectors[pooling], np.array(train[label]), dev_vectors[pooling], np.array(dev[label])))
                shares.setdefault(pooling, []).append(between_class_share(train_vectors[pooling], np.array(train[label])))
        for pooling, values in scores.items():
            row = dict(checkpoint=name, path=path, task=args.task, pooling=pooling, mean=100 * float(np.mean(values)),
                       std=100 * float(np.std(values)), between_class_share=float(np.mean(shares[pooling])),
                       seeds=len(values), seconds=time.time() - started)
            results.append(row)
            print(f"{name:40s} {pooling:16s} {row['mean']:.1f} ± {row['std']:.1f}  between-class share of the "
                  f"variance {row['between_class_share']:.4f}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"probes-{args.task}.jsonl").open("a") as handle:
        for row in results:
            handle.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
