"""Fine-tuned score against fine-tuning length: the K = 0 conversions and the cuts that run at least as fast.

    python3 benchmarks/experiments/plot_epoch_curves.py OUT FOLDER [FOLDER ...]

Reads every ``FOLDER/rows.jsonl`` (``convert_grid.py`` rows named ``BASE-epE``: the same conversion
or cut fine-tuned E epochs) and the training logs in ``FOLDER/logs.tar.gz``, keeps one task's fp32
rows and writes ``OUT/epochs.png`` (left: mean ± std of the composition seeds against the epochs,
log scale; right: each run's training loss against its epochs, where the N = 5 rows sit at chance
before they learn) and ``OUT/epochs.md`` (the table, the epoch at which each run's loss first fell
below ``--left-chance``, the gain per doubling of the last two lengths of each series, and where that
gain would meet the cut that runs at least as fast: ``--match N=CUT``).

The committed ``convert-ep80/epochs.md`` came from ``plot_epoch_curves.py benchmarks/results/convert-ep80
benchmarks/results/convert-{stack20,progressive,curriculum,ep40,ep80,adapters,enclr}``; the rows.jsonl
and logs.tar.gz it read are in the lab notebook commit 8c644a7 (the tree keeps some of the rows).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tarfile
from pathlib import Path

NAME = re.compile(r"(?P<base>.+)-ep(?P<epochs>\d+)")


def read_series(folders: list[Path], task: str) -> dict[str, dict[int, dict]]:
    series: dict[str, dict[int, dict]] = {}
    for folder in folders:
        for line in (folder / "rows.jsonl").read_text().splitlines():
            entry = json.loads(line)
            match = NAME.fullmatch(entry["row"])
            if match is None or entry["task"] != task or entry["precision"] != "fp32":
                continue
            series.setdefault(match["base"], {})[int(match["epochs"])] = entry
    return series


def read_losses(folders: list[Path], task: str) -> dict[str, list[tuple[float, float]]]:
    """(epoch, training loss) of every run whose log a folder's ``logs.tar.gz`` holds. A grid archives
    every run of its runs folder, some still training in another grid: the longest copy wins."""
    losses: dict[str, list[tuple[float, float]]] = {}
    for folder in folders:
        archive = folder / "logs.tar.gz"
        if not archive.is_file():
            continue
        with tarfile.open(archive) as logs:
            for member in logs.getmembers():
                parts = member.name.split("/")
                if parts[1:] != [task, "log.jsonl"]:
                    continue
                records = (json.loads(line) for line in logs.extractfile(member).read().decode().splitlines())
                curve = [(r["epoch"], r["loss"]) for r in records if r.get("kind") == "train"]
                if len(curve) > len(losses.get(parts[0], [])):
                    losses[parts[0]] = curve
    return losses


def left_chance(curve: list[tuple[float, float]], threshold: float) -> float | None:
    """The first logged epoch with the training loss under ``threshold`` (None: never)."""
    return next((epoch for epoch, loss in curve if loss < threshold), None)


def gain_per_doubling(points: dict[int, dict]) -> float:
    """The score gained per doubling of the epochs between a series' last two lengths."""
    (short, a), (long, b) = sorted(points.items())[-2:]
    return (b["mean"] - a["mean"]) / math.log2(long / short)


def crossing(points: dict[int, dict], target: float) -> tuple[float, float | None]:
    """The gain per doubling of the last two lengths, and the epochs at which that log-linear trend
    reaches ``target`` (None when it does not rise)."""
    per_doubling, (longest, last) = gain_per_doubling(points), max(points.items())
    if per_doubling <= 0:
        return per_doubling, None
    return per_doubling, longest * 2 ** ((target - last["mean"]) / per_doubling)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--task", default="sentiment")
    parser.add_argument("--rows", default=r"minilm-cut[12]|n\d+-.*k0.*", help="regex: the series to keep")
    parser.add_argument("--match", action="append",
                        help="N=CUT: the cut that runs at least as fast as the N-instance rows, their target "
                             "(repeatable; default: 2=minilm-cut2 5=minilm-cut1, MiniLM's timings)")
    parser.add_argument("--left-chance", type=float, default=0.6,
                        help="training loss under which a run counts as having left chance (binary: ln 2 = 0.69)")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folders = [Path(f) for f in args.folders]
    series = {base: points for base, points in read_series(folders, args.task).items() if re.fullmatch(args.rows, base)}
    losses = read_losses(folders, args.task)
    # The best length of each speed-matched cut: what a MUX row of that N has to beat.
    targets = {}
    for pair in args.match or ["2=minilm-cut2", "5=minilm-cut1"]:
        instances, cut = pair.split("=")
        if cut in series:
            epochs, entry = max(series[cut].items(), key=lambda item: item[1]["mean"])
            targets[int(instances)] = (entry["mean"], f"{cut}-ep{epochs}")
    fig, (ax, right) = plt.subplots(1, 2, figsize=(14, 5))
    lengths = sorted({e for p in series.values() for e in p})
    lines = [f"| row ({args.task}) | N | " + " | ".join(f"{e} ep" for e in lengths)
             + " | left chance at epoch | gain per doubling (last two) | epochs to reach the cut as fast, at that gain |"]
    lines.append("|---|---|" + "---|" * len(lengths) + "---|---|---|")
    colours = plt.get_cmap("tab20")  # more series than the default cycle's ten colours
    for index, (base, points) in enumerate(sorted(series.items())):
        epochs = sorted(points)
        means = [points[e]["mean"] for e in epochs]
        errors = [points[e]["std"] for e in epochs]
        instances = points[epochs[0]]["num_instances"]
        style = "--" if base.startswith("minilm-cut") else "-"
        drawn = ax.errorbar(epochs, means, yerr=errors, fmt=style, marker="o", capsize=3, color=colours(index % 20),
                            label=f"{base} (N = {instances})")
        for e in epochs:
            curve = losses.get(f"{base}-ep{e}", [])
            if curve:
                right.plot(*zip(*curve), style, color=drawn[0].get_color(), lw=1, alpha=0.4 + 0.6 * e / max(epochs),
                           label=f"{base}-ep{e}")
        departures = [left_chance(losses.get(f"{base}-ep{e}", []), args.left_chance) for e in lengths]
        cells = [f"{points[e]['mean']:.1f} ± {points[e]['std']:.1f}" if e in points else "" for e in lengths]
        trend, reach = ("", "")
        if len(epochs) >= 2:
            trend = f"{gain_per_doubling(points):+.1f}"
            if instances in targets and instances > 1:
                at = crossing(points, targets[instances][0])[1]
                reach = f"{targets[instances][1]}: " + ("never" if at is None else f"~{at:.0f}")
        departed = " / ".join("never" if at is None else f"{at:.0f}" for e, at in zip(lengths, departures)
                              if f"{base}-ep{e}" in losses)
        lines.append(f"| {base} | {instances} | " + " | ".join(cells) + f" | {departed} | {trend} | {reach} |")
    for instances, (value, name) in sorted(targets.items()):
        ax.axhline(value, color="grey", lw=0.8, ls=":")
        ax.annotate(f"N = {instances} target: {name} {value:.1f}", (lengths[0], value), fontsize=7, va="bottom")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(e) for e in lengths])
    ax.set_xlabel("fine-tuning epochs (2,000 examples, log scale)")
    ax.set_ylabel(f"{args.task} accuracy, mean ± std of 5 composition seeds")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    right.axhline(math.log(2), color="grey", lw=0.8, ls=":")
    right.set_xlabel("epoch")
    right.set_ylabel(f"{args.task} training loss (chance: ln 2 for two labels)")
    right.grid(alpha=0.3)
    right.legend(fontsize=6, loc="lower left", ncol=2)
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "epochs.png", dpi=120)
    lines += ["", f"Left chance: the first logged epoch with the training loss under {args.left_chance}, per length "
              "(in the order of the columns). Targets (the best length of the cut that runs at least as fast): "
              + ", ".join(f"N = {n}: {name} {value:.1f}" for n, (value, name) in sorted(targets.items()))
              + ". Read from: " + ", ".join(args.folders) + "."]
    (out / "epochs.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
