"""How much a pre-trained checkpoint's masked-LM learned beyond word frequencies: its held-out
MLM loss and accuracy beside a unigram model's (token frequencies counted on the same training
blocks, scored on the same held-out blocks: cross-entropy over every non-special token, and the
accuracy of always guessing the most frequent one).

    python3 benchmarks/experiments/mlm_unigram.py runs/reproduce-paper-full/bert/2-pretrain \\
        runs/reproduce-paper-full/mux-bert-2/2-pretrain --output benchmarks/results/reproduce/paper-full/mlm-unigram.json

A checkpoint whose loss sits near the unigram cross-entropy has learned little context, so its
upper layers (and pre-training itself) have little to add to a fine-tuning that starts from it.
A checkpoint trained with the auxiliary retrieval term (a MUX one, or a primed N = 1 one that kept
it) has it in its held-out loss too, so for it only the accuracy is compared. A retrieval-priming stage (its held-out retrieval accuracy) gets only the similarity, and
so does a stage's intermediate `checkpoint-N` folder (no held-out scores saved there), which
traces how the similarity moved during a stage.
Beside them, how alike the encoder's outputs are: the mean cosine between its final
vectors at two positions of one held-out block. At 1.0 it gives every token the same vector (it
only predicts word frequencies), and a fine-tuning has nothing to start from.
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


def output_similarity(encoder, blocks, tokenizer, batch_size: int = 40) -> float:
    """Mean cosine between ``encoder``'s final outputs at two different real (non-special)
    positions of one block, averaged over ``blocks`` (lists of token ids). ``batch_size`` must be a
    multiple of a MUX encoder's N, whose forward groups consecutive inputs."""
    import torch

    special = torch.tensor(sorted(tokenizer.all_special_ids))
    means = []
    with torch.no_grad():
        for start in range(0, len(blocks), batch_size):
            batch = tokenizer.pad({"input_ids": [list(ids) for ids in blocks[start:start + batch_size]]},
                                  return_tensors="pt")
            hidden = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
            real = batch["attention_mask"].bool() & ~torch.isin(batch["input_ids"], special)
            for vectors, keep in zip(hidden, real):
                unit = torch.nn.functional.normalize(vectors[keep].float(), dim=-1)
                count = unit.shape[0]
                if count > 1:  # every pair of two positions, each position's match with itself left out
                    means.append(((unit @ unit.T).sum() - count).item() / (count * (count - 1)))
    if not means:
        raise ValueError("no block has two real tokens to compare")
    return sum(means) / len(means)


def saved_stage(folder: Path) -> tuple[dict, int, dict | None]:
    """A stage folder's settings, steps and held-out scores, or those of one of its intermediate
    ``checkpoint-N`` folders (settings and step from its trainer state; no held-out scores: ``None``)."""
    if (folder / "train_config.json").exists():
        trained = json.loads((folder / "train_results.json").read_text())
        return json.loads((folder / "train_config.json").read_text()), trained["final_step"], trained["eval"]
    from muxplm.training.checkpoint import STATE_FILE, run_record

    if (folder / STATE_FILE).exists():
        state = run_record(folder)
        return state["config"], state["step"], None
    raise SystemExit(f"mlm_unigram.py: {folder} has neither a train_config.json (a stage) nor a "
                     f"trainer_state.json (a checkpoint)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="pre-training or priming stage folders (train_config.json, train_results.json), "
                                                    "or their checkpoint-N folders (the similarity only)")
    parser.add_argument("--output", required=True)
    parser.add_argument("--similarity-blocks", type=int, default=200,
                        help="held-out blocks the outputs' similarity is measured on (0: not measured)")
    parser.add_argument("--initial", action="store_true",
                        help="also measure the similarity of each checkpoint's model freshly initialised (seed 0)")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoConfig, AutoModel

    import muxplm  # noqa: F401  (registers the MUX models with the Auto classes)
    from muxplm.training.config import TrainConfig
    from muxplm.training.inputs import pretraining_blocks
    from muxplm.training.models import tokenizer_for

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    rows, unigram, held_out_ids = {}, {}, {}
    for folder in map(Path, args.checkpoints):
        saved, steps, scores = saved_stage(folder)
        config = TrainConfig(**{k: v for k, v in saved.items() if k in fields})
        if config.stage not in ("mlm", "retrieval"):
            raise SystemExit(f"mlm_unigram.py: {folder} is a {config.stage!r} stage, not masked-LM pre-training "
                             f"or retrieval priming")
        tokenizer = tokenizer_for(config, folder)
        key = json.dumps([config.corpus_max_words, config.corpus_sources, config.max_length, config.train_file])
        if key not in unigram:  # the same corpus gives the same blocks and held-out split
            train, held_out = pretraining_blocks(config, tokenizer)
            unigram[key] = unigram_scores(train["input_ids"], held_out["input_ids"], set(tokenizer.all_special_ids))
            held_out_ids[key] = held_out["input_ids"]
        model = json.loads((folder / "config.json").read_text())
        instances = model.get("num_instances", 1)
        # A MUX model's held-out loss also holds its retrieval term (so does a primed N = 1 model's
        # that keeps it): only the accuracy compares.
        mixed = bool(model.get("retrieval_loss_weight"))
        rows[str(folder)] = {"num_instances": instances, "steps": steps, "model": scores,
                             "loss_includes_retrieval": mixed, "unigram": unigram[key]}
        similarity = ""
        if args.similarity_blocks:
            encoder = AutoModel.from_pretrained(folder).eval()
            blocks = held_out_ids[key][: args.similarity_blocks]
            batch_size = instances * max(1, 40 // instances)  # whole groups of N
            cosine = output_similarity(encoder, blocks, tokenizer, batch_size=batch_size)
            rows[str(folder)]["outputs_cosine"] = cosine
            similarity = f"; outputs' mean cosine {cosine:.4f}"
            if args.initial:  # the same architecture before any training: what pre-training started from
                torch.manual_seed(0)
                fresh = AutoModel.from_config(AutoConfig.from_pretrained(folder)).eval()
                initial = output_similarity(fresh, blocks, tokenizer, batch_size=batch_size)
                rows[str(folder)]["initial_outputs_cosine"] = initial
                similarity += f" (at initialisation {initial:.4f})"
        rows[str(folder)]["stage"] = config.stage
        if scores is None:  # an intermediate checkpoint: the similarity only
            print(f"{folder}: N = {instances}, {config.stage} checkpoint at step {steps}{similarity}")
            continue
        if config.stage == "retrieval":  # a priming stage: its own task's accuracy, no masked-LM loss
            print(f"{folder}: N = {instances}, {steps} retrieval steps: held-out retrieval accuracy "
                  f"{100 * scores['accuracy']:.1f} %{similarity}")
            continue
        loss = "-" if mixed else f"{scores['loss']:.3f}"
        print(f"{folder}: N = {instances}, {steps} MLM steps: held-out loss {loss} / accuracy "
              f"{100 * scores['accuracy']:.1f} %; unigram {unigram[key]['loss']:.3f} / "
              f"{100 * unigram[key]['accuracy']:.1f} %{similarity}")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
