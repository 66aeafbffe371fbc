"""Cost of one training step (forward, backward, AdamW) of the tiny preset's retrieval-priming
and MLM models, side by side in one run: full-vocabulary vs in-batch softmax at N = 2/5/10,
with a fixed number of groups per step (so every N does the same encoder work), plus the
N = 1 MLM model.

    python3 benchmarks/experiments/step_cost.py --output benchmarks/results/curves/step_cost.json

Batches are real corpus blocks; models are timed round robin (trial t of every model before
trial t + 1 of any) on the process CPU clock, so noise hits all alike.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from muxplm import MuxBertConfig
from muxplm.bench.throughput import environment
from muxplm.data import MLMCollator, PaddingCollator, load_pretraining_corpus, load_tokenizer, tokenize_pretraining
from muxplm.modeling_bert import MuxBertForMaskedLM, MuxBertForRetrieval


def variants(instances):
    for n in instances:
        mux = dict(num_instances=n) if n > 1 else dict(num_instances=1, mux_type="identity", demux_type="identity")
        if n > 1:
            for softmax in ("full", "in_batch"):
                yield f"retrieval N={n} {softmax}", MuxBertForRetrieval, n, dict(mux, retrieval_softmax=softmax)
        for softmax in ("full", "in_batch") if n > 1 else ("full",):
            extra = dict(retrieval_loss_weight=0.2, retrieval_softmax=softmax) if n > 1 else {}
            yield f"mlm N={n}" + (f" r=0.2 {softmax}" if n > 1 else ""), MuxBertForMaskedLM, n, dict(mux, **extra)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default="1,2,5,10")
    parser.add_argument("--groups", type=int, default=32, help="groups per step (batch = groups x N)")
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="steps per trial")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer()
    texts = load_pretraining_corpus(max_words=200_000).select_columns(["text"])
    blocks = tokenize_pretraining(texts, tokenizer, max_length=args.seq_len)
    models = []
    for name, cls, n, settings in variants([int(x) for x in args.instances.split(",")]):
        torch.manual_seed(0)
        config = MuxBertConfig.from_preset("tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                           **settings)
        model = cls(config).train()
        collate = MLMCollator(tokenizer, seed=0) if cls is MuxBertForMaskedLM else PaddingCollator(tokenizer)
        rows = [{k: v for k, v in blocks[i].items() if k != "special_tokens_mask"} for i in range(args.groups * n)]
        batch = collate(rows)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        models.append(dict(name=name, n=n, model=model, batch=batch, optimizer=optimizer, seconds=[]))

    def step(entry):
        out = entry["model"](**entry["batch"])
        out.loss.backward()
        entry["optimizer"].step()
        entry["optimizer"].zero_grad(set_to_none=True)

    for entry in models:  # warm-up
        step(entry)
    for trial in range(args.trials):
        order = models[trial % len(models):] + models[: trial % len(models)]
        for entry in order:
            start = time.process_time()
            for _ in range(args.steps):
                step(entry)
            entry["seconds"].append((time.process_time() - start) / args.steps)
            print(f"trial {trial} {entry['name']}: {entry['seconds'][-1] * 1000:.0f} ms/step", flush=True)
    rows = []
    for entry in models:
        seconds = sum(entry["seconds"]) / len(entry["seconds"])
        rows.append(dict(model=entry["name"], num_instances=entry["n"], ms_per_step=seconds * 1000,
                         steps_per_s=1 / seconds, instances_per_step=args.groups * entry["n"]))
    for row in rows:
        if row["model"].endswith("in_batch"):
            full = next(r for r in rows if r["model"] == row["model"].replace("in_batch", "full"))
            row["speedup_vs_full_softmax"] = full["ms_per_step"] / row["ms_per_step"]
    report = dict(environment=environment("cpu"), settings=vars(args), results=rows)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=1))
    for row in rows:
        extra = f"  ({row['speedup_vs_full_softmax']:.2f}x vs full)" if "speedup_vs_full_softmax" in row else ""
        print(f"{row['model']:32s} {row['ms_per_step']:8.0f} ms/step {row['steps_per_s']:6.2f} steps/s{extra}")


if __name__ == "__main__":
    main()
