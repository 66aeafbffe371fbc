"""Serving MUX models: a batching, multiplexing :class:`Predictor`, a dynamic batcher, an
HTTP server (FastAPI + uvicorn), a loopback load generator and ONNX export.

The server, load generator and ONNX parts need the ``serve`` / ``onnx`` extras and are
imported on first use, so ``from muxplm.serving import Predictor`` works without them. The
other names are imported on first use too, so that the command line's parsers (:mod:`.cli`)
import no PyTorch.
"""

from ..lazy import lazy_exports

_LAZY = {
    **dict.fromkeys(("BatcherClosedError", "BatchStats", "DynamicBatcher", "QueueFullError"), "batcher"),
    **dict.fromkeys(("Encoded", "InputTooLongError", "Predictor", "load_predictor"), "predictor"),
    "create_app": "server",
    "serve": "server",
    "PredictRequest": "server",
    "export_onnx": "onnx_export",
    "OnnxPredictor": "onnx_export",
    "run_serve_bench": "loadgen",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
