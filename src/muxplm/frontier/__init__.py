"""``muxplm frontier``: which speed-up to ship for a model and a task, measured.

It fine-tunes every lever on the user's data (the plain encoder, cuts of it, multiplexed
conversions of it and of its best cut, and int8 copies of each in PyTorch and ONNX Runtime), scores
and times them side by side, and recommends the fastest model that keeps enough of the plain
model's score: :func:`run_frontier`.

* :mod:`.plan` — the candidates, their estimated cost on this device and the plan that fits a budget;
* :mod:`.run` — building, scoring and timing them, resumable;
* :mod:`.pareto` — the frontier, the recommendation rule, the table and the plot.

The names are imported on first use, so that the command line's parser (:mod:`.cli`) does not
import PyTorch.
"""

from __future__ import annotations

from ..lazy import lazy_exports

# The module of this package that defines each exported name.
_EXPORTS = {
    **dict.fromkeys(("Candidate", "Plan", "StepTimes", "Workload", "candidates", "parse_budget", "size_plan"), "plan"),
    **dict.fromkeys(("dominates", "frontier", "markdown_table", "plot_frontier", "recommend"), "pareto"),
    **dict.fromkeys(("measure_step_times", "run_frontier"), "run"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
