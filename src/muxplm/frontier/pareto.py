"""The measured frontier of ``muxplm frontier``: which rows no other row beats, the one to ship,
and the table and plot that show them. A row is one model as run (a candidate in fp32, int8 or
ONNX Runtime int8) with at least ``name``, ``accuracy`` and ``speedup``. Nothing here imports
PyTorch; matplotlib is imported by :func:`plot_frontier` only.
"""

from __future__ import annotations

import os
from typing import Any

PRECISION_LABELS = {("torch", "fp32"): "fp32", ("torch", "int8"): "int8", ("onnx", "int8"): "int8 (ONNX Runtime)",
                    ("onnx", "fp32"): "fp32 (ONNX Runtime)"}


def dominates(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether row ``a`` dominates row ``b``: at least as fast and at least as accurate, and
    strictly better in one of the two."""
    at_least = a["speedup"] >= b["speedup"] and a["accuracy"] >= b["accuracy"]
    return at_least and (a["speedup"] > b["speedup"] or a["accuracy"] > b["accuracy"])


def dominating(rows: list[dict[str, Any]], row: dict[str, Any]) -> list[str]:
    """The names of the rows that dominate ``row``."""
    return [other["name"] for other in rows if other is not row and dominates(other, row)]


def frontier(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows no other row dominates, fastest first."""
    kept = [row for row in rows if not dominating(rows, row)]
    return sorted(kept, key=lambda row: (-row["speedup"], -row["accuracy"]))


def recommend(rows: list[dict[str, Any]], min_retention: float, plain: str = "plain") -> dict[str, Any]:
    """The row to ship: the fastest row whose ``retention`` is at least ``min_retention`` and that
    no other row dominates (the more accurate of two equally fast ones). Where none qualifies
    (``min_retention`` above what even the plain model keeps), the plain model's row ``plain``."""
    qualifying = [row for row in rows if row["retention"] >= min_retention and not dominating(rows, row)]
    if not qualifying:
        return next(row for row in rows if row["name"] == plain)
    return max(qualifying, key=lambda row: (row["speedup"], row["accuracy"]))


def precision_label(row: dict[str, Any]) -> str:
    return PRECISION_LABELS.get((row.get("runtime", "torch"), row["precision"]), row["precision"])


def _steps(row: dict[str, Any]) -> str:
    steps = str(row.get("finetune_steps") or "-")
    return f"{steps} + {row['priming_steps']} priming" if row.get("priming_steps") else steps


def retention_label(retention: float, min_retention: float | None = None) -> str:
    """A retention as a percentage to one decimal, or to more where one would round it across
    ``min_retention`` (96.97 % is not shown as the 97.0 % it misses)."""
    for digits in range(1, 5):
        shown = f"{100 * retention:.{digits}f}"
        if min_retention is None or (float(shown) >= 100 * min_retention) == (retention >= min_retention):
            break
    return f"{shown} %"


def markdown_table(rows: list[dict[str, Any]], recommended: str | None = None,
                   min_retention: float | None = None) -> str:
    """The table of every row, fastest first: accuracy (± its standard deviation over composition
    seeds), retention, churn, speed-up, weights, shape, precision and the training it had; the
    last column says whether the row is on the frontier, or which rows dominate it."""
    head = ["model", "accuracy", "retention", "churn", "speed-up", "weights", "layers", "N", "precision",
            "examples", "steps", "frontier"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in sorted(rows, key=lambda row: (-row["speedup"], -row["accuracy"])):
        spread = f" ± {row['accuracy_std']:.1f}" if row["num_instances"] > 1 else ""
        churn = f"{row['churn']:.1f} %" if row["num_instances"] > 1 else "-"
        beaten = dominating(rows, row)
        verdict = "yes" if not beaten else "no: " + ", ".join(beaten[:3]) + (", ..." if len(beaten) > 3 else "")
        if row["name"] == recommended:
            verdict = "recommended"
        cells = [row["name"], f"{row['accuracy']:.1f}{spread}", retention_label(row["retention"], min_retention), churn,
                 f"{row['speedup']:.2f}x", f"{row['weights_mb']:.1f} MB", str(row["num_layers"]),
                 str(row["num_instances"]), precision_label(row), str(row.get("train_examples", "-")), _steps(row),
                 verdict]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


_COLOURS = {1: "black", 2: "tab:blue", 5: "tab:orange", 10: "tab:green"}
_MARKERS = {("torch", "fp32"): "o", ("torch", "int8"): "s", ("onnx", "int8"): "^"}


def plot_frontier(rows: list[dict[str, Any]], path: str | os.PathLike, *, recommended: str | None = None,
                  min_retention: float | None = None, plain: str = "plain", title: str | None = None) -> str:
    """Accuracy against speed-up (log scale) of every row: colour N, marker precision (circle fp32,
    square int8, triangle ONNX Runtime int8), the frontier as a line, the accuracy ``min_retention``
    keeps as a dashed line and the recommended row ringed. Writes a PNG to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for row in rows:
        colour = _COLOURS.get(row["num_instances"], "tab:purple")
        marker = _MARKERS.get((row.get("runtime", "torch"), row["precision"]), "D")
        ax.scatter(row["speedup"], row["accuracy"], color=colour, marker=marker, s=45, zorder=3)
        ax.annotate(row["name"], (row["speedup"], row["accuracy"]), fontsize=7, xytext=(4, 3),
                    textcoords="offset points")
    line = sorted(frontier(rows), key=lambda row: row["speedup"])
    ax.plot([row["speedup"] for row in line], [row["accuracy"] for row in line], color="grey", lw=2.5, alpha=0.5,
            zorder=2, label="frontier (no model faster and as accurate)")
    base = next((row for row in rows if row["name"] == plain), None)
    if base is not None and min_retention is not None:
        ax.axhline(min_retention * base["accuracy"], color="tab:red", ls="--", lw=1,
                   label=f"{100 * min_retention:g} % of the plain model's accuracy")
    chosen = next((row for row in rows if row["name"] == recommended), None)
    if chosen is not None:
        ax.scatter(chosen["speedup"], chosen["accuracy"], s=260, facecolors="none", edgecolors="tab:red", lw=2,
                   zorder=4, label=f"recommended: {chosen['name']}")
    for n, colour in _COLOURS.items():
        if any(row["num_instances"] == n for row in rows):
            ax.scatter([], [], color=colour, label=f"N = {n}")
    ax.set_xscale("log")
    speeds = [row["speedup"] for row in rows]
    ticks = [t for t in (0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32)
             if min(speeds) / 1.2 <= t <= max(speeds) * 1.2]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("speed-up over the plain model (fp32, this device)")
    ax.set_ylabel("accuracy (the task's main metric)")
    markers = "circles fp32, squares int8, triangles ONNX Runtime int8"
    ax.set_title(f"{title}\n{markers}" if title else markers, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)
