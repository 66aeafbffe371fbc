"""Labelling files with a MUX checkpoint: ``muxplm predict`` and its Python API.

:func:`predict_files` reads CSV / TSV / JSONL / Parquet / text files as a stream, labels them part
by part in this process or in worker processes, and writes one ordered JSONL or Parquet output that
an interrupted run resumes. :class:`PartLabeller` labels one part; the Ray integration
(:class:`muxplm.integrations.ray.MuxPredictor`) runs it on a cluster. The names are imported on
first use, so that the command line's parser imports no PyTorch.
"""

from ..lazy import lazy_exports

_LAZY = {
    "predict_files": "run",
    "plan_workers": "run",
    **dict.fromkeys(("BadRowError", "LabelSettings", "LabelledPart", "PartLabeller"), "labelling"),
    **dict.fromkeys(("Columns", "InputRow", "find_sources", "read_rows"), "sources"),
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
