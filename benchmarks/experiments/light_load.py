"""Accuracy of a served MUX classifier when requests arrive one at a time, against the same
dev set scored in batches of 64.

Every dev sentence goes through a :class:`muxplm.serving.DynamicBatcher` alone (concurrency 1:
each request is answered before the next is sent), with the part-filled group's spare slots
left as fillers, filled with copies of the request (averaged), or filled with companions from
recent traffic (the default). The batcher for each mode first serves ``--warm`` other dev
sentences, as a running server would have.

    python3 benchmarks/experiments/light_load.py runs/demo/n2/3-sentiment \
        --output benchmarks/results/serve/light_load.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from muxplm.data import get_task
from muxplm.serving import DynamicBatcher, Predictor


def accuracy(labels: list[str], gold: list[str]) -> float:
    return 100 * sum(a == b for a, b in zip(labels, gold)) / len(gold)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a fine-tuned sentence classifier (e.g. the demo's N = 2 sentiment model)")
    parser.add_argument("--task", default="sentiment")
    parser.add_argument("--warm", type=int, default=64, help="requests served before the measured ones")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    predictor = Predictor.from_pretrained(args.checkpoint, max_length=128)
    spec, data = get_task(args.task)
    dev = data["validation"]
    texts = [row["text"] for row in dev]
    gold = [spec.label_names[row["label"]] for row in dev]
    warm_texts = [row["text"] for row in data["train"].select(range(args.warm))]
    result = {"checkpoint": args.checkpoint, "task": args.task, "num_instances": predictor.num_instances,
              "examples": len(texts), "date": time.strftime("%Y-%m-%d")}
    result["batch_64"] = accuracy([p["label"] for p in predictor.predict(texts)], gold)
    modes = {"fillers": dict(fill_slots=False), "copies": dict(companions=0), "companions": dict(companions=64)}
    for mode, settings in modes.items():
        batcher = DynamicBatcher(predictor, max_wait_ms=0, **settings).start()
        try:
            for text in warm_texts:
                batcher.submit_texts([text]).result(60)
            labels = [batcher.submit_texts([text]).result(60)[0]["label"] for text in texts]
        finally:
            batcher.close(60)
        result[f"concurrency_1_{mode}"] = accuracy(labels, gold)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
