"""How much a pre-trained checkpoint's masked-LM learned beyond word frequencies: its held-out
MLM loss and accuracy beside a unigram model's (token frequencies counted on the same training
blocks, scored on the same held-out blocks: cross-entropy over every non-special token, and the
accuracy of always guessing the most frequent one).

    python3 benchmarks/experiments/mlm_unigram.py runs/reproduce-paper-full/bert/2-pretrain \\
        runs/reproduce-paper-full/mux-bert-2/2-pretrain --output results/reproduce/paper-full/mlm-unigram.json

A checkpoint whose loss sits near the unigram cross-entropy has learned little context, so its
upper layers (and pre-training itself) have little to add to a fine-tuning that starts from it.
A MUX checkpoint's held-out loss also holds its retrieval term, so for it only the accuracy is
compared.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections import Counter
from pathlib import Path


def unigram_scores(train_ids, held_out_ids, special: set[int]) -> dict[str, float]:
    """Cross-entropy (nats) and top-1 accuracy on ``held_out_ids`` of the token frequencies of
    ``train_ids`` (add-one smoothed over the tokens seen), special tokens left out of both."""
    counts = Counter(t for ids in train_ids for t in ids if t not in special)
    total, vocabulary = sum(counts.values()), len(counts) + 1  # +1: one slot for unseen tokens
    top = counts.most_common(1)[0][0]
    loss, hits, seen = 0.0, 0, 0
    for ids in held_out_ids:
        for t in ids:
            if t in special:
                continue
            loss -= math.log((counts.get(t, 0) + 1) / (total + vocabulary))
            hits += t == top
            seen += 1
    return {"loss": loss / seen, "accuracy": hits / seen, "tokens": seen, "train_tokens": total}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="pre-training stage folders (train_config.json, train_results.json)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)

    from muxplm.training.config import TrainConfig
    from muxplm.training.inputs import pretraining_blocks
    from muxplm.training.models import tokenizer_for

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    rows, unigram = {}, {}
    for folder in map(Path, args.checkpoints):
        saved = json.loads((folder / "train_config.json").read_text())
        config = TrainConfig(**{k: v for k, v in saved.items() if k in fields})
        if config.stage != "mlm":
            raise SystemExit(f"mlm_unigram.py: {folder} is a {config.stage!r} stage, not masked-LM pre-training")
        tokenizer = tokenizer_for(config, folder)
        key = json.dumps([config.corpus_max_words, config.corpus_sources, config.max_length, config.train_file])
        if key not in unigram:  # the same corpus gives the same blocks and held-out split
            train, held_out = pretraining_blocks(config, tokenizer)
            unigram[key] = unigram_scores(train["input_ids"], held_out["input_ids"], set(tokenizer.all_special_ids))
        trained = json.loads((folder / "train_results.json").read_text())
        model = json.loads((folder / "config.json").read_text())
        instances = model.get("num_instances", 1)
        # A MUX model's held-out loss also holds its retrieval term: only the accuracy compares.
        mixed = instances > 1 and bool(model.get("retrieval_loss_weight"))
        rows[str(folder)] = {"num_instances": instances, "steps": trained["final_step"], "model": trained["eval"],
                             "loss_includes_retrieval": mixed, "unigram": unigram[key]}
        loss = "-" if mixed else f"{trained['eval']['loss']:.3f}"
        print(f"{folder}: N = {instances}, {trained['final_step']} MLM steps: held-out loss {loss} / accuracy "
              f"{100 * trained['eval']['accuracy']:.1f} %; unigram {unigram[key]['loss']:.3f} / "
              f"{100 * unigram[key]['accuracy']:.1f} %")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
