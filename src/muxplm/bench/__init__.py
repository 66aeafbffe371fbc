"""Benchmarks and analyses of MUX-PLMs (DESIGN.md §3).

* :mod:`muxplm.bench.throughput` — inference throughput of MUX models against the N = 1 model
  and plain ``transformers.BertModel`` of the same size, with the paper's protocol and
  complementary speed-ups (int8, ``torch.compile``, attention kernels, half precision).
* :mod:`muxplm.bench.profile` — where the time of one forward pass goes, stage by stage.
* :mod:`muxplm.bench.analysis` — muxology (per-layer activations and attention entropy),
  the score/throughput Pareto frontier, ensembling gains and composition-seed "lottery tickets".
"""

from .analysis import (
    ensemble_table,
    load_records,
    lottery_table,
    muxology,
    muxology_models,
    pareto_frontier,
    plot_muxology,
    plot_pareto,
    read_sentences,
    table_markdown,
)
from .profile import profile_specs, stage_breakdown
from .throughput import ModelSpec, build_specs, format_table, plot_throughput, run_throughput

__all__ = [
    "ModelSpec",
    "build_specs",
    "ensemble_table",
    "format_table",
    "load_records",
    "lottery_table",
    "muxology",
    "muxology_models",
    "pareto_frontier",
    "plot_muxology",
    "plot_pareto",
    "plot_throughput",
    "profile_specs",
    "read_sentences",
    "run_throughput",
    "stage_breakdown",
    "table_markdown",
]
