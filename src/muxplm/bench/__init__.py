"""Benchmarks and analyses of MUX-PLMs.

* :mod:`muxplm.bench.throughput` — inference throughput of MUX models against the N = 1 model
  and plain ``transformers.BertModel`` of the same size, with the paper's protocol and
  complementary speed-ups (int8, ``torch.compile``, attention kernels, half precision).
* :mod:`muxplm.bench.profile` — where the time of one forward pass goes, stage by stage.
* :mod:`muxplm.bench.analysis` — muxology (per-layer activations and attention entropy),
  the score/throughput Pareto frontier, ensembling gains and composition-seed "lottery tickets".

The names are imported on first use, so that the command line's parsers (:mod:`.cli`) do not
import PyTorch.
"""

from __future__ import annotations

from ..lazy import lazy_exports

# The module of this package that defines each exported name.
_EXPORTS = {
    **dict.fromkeys(("ensemble_table", "load_records", "lottery_table", "muxology", "muxology_models",
                     "pareto_frontier", "plot_muxology", "plot_pareto", "read_sentences", "table_markdown"),
                    "analysis"),
    **dict.fromkeys(("profile_specs", "stage_breakdown"), "profile"),
    **dict.fromkeys(("ModelSpec", "build_specs", "format_table", "plot_throughput", "run_throughput"), "throughput"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
