"""Int8 dynamic quantisation for CPU inference, in PyTorch and in ONNX Runtime.

Dynamic quantisation stores the weights of every linear layer as int8 and quantises the
activations per batch on the fly: no calibration data, no retraining, and on a CPU the matrix
products of the encoder run in int8. It stacks with multiplexing (each gain multiplies the
other, see ``muxplm bench throughput``). Every inference path takes one option,
``quantize``, from :data:`QUANTIZE_CHOICES`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from pathlib import Path

import torch
from torch import nn

from .choices import QUANTIZE_CHOICES


def check_quantize(quantize: str | None, device: str | torch.device = "cpu",
                   dtype: str | torch.dtype = "float32") -> str:
    """``quantize`` as one of :data:`QUANTIZE_CHOICES` (``None`` is ``"none"``), or a
    ``ValueError`` when it is unknown or asked for where it cannot run (a GPU, half precision)."""
    quantize = quantize or "none"
    if quantize not in QUANTIZE_CHOICES:
        raise ValueError(f"unknown quantize {quantize!r}; choose from {', '.join(QUANTIZE_CHOICES)}")
    if quantize == "int8":
        if torch.device(device).type != "cpu":
            raise ValueError(f"int8 dynamic quantisation runs on the CPU, not on {device}; "
                             f"use device cpu or quantize none")
        if dtype not in ("float32", torch.float32):
            raise ValueError(f"int8 dynamic quantisation starts from float32 weights, not {dtype}; "
                             f"use dtype float32 or quantize none")
    return quantize


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """An int8 dynamically quantised copy of ``model`` (every ``nn.Linear``) for CPU inference,
    in eval mode; ``model`` itself is left as it is. Attributes such as ``config`` carry over.

    Raises ``ValueError`` for a model that is not in float32 on the CPU."""
    for parameter in model.parameters():
        if parameter.device.type != "cpu":
            raise ValueError(f"int8 dynamic quantisation runs on the CPU; the model is on {parameter.device} "
                             f"(move it with model.to('cpu') first)")
        if parameter.is_floating_point() and parameter.dtype != torch.float32:
            raise ValueError(f"int8 dynamic quantisation starts from float32 weights; the model is in "
                             f"{parameter.dtype} (cast it with model.float() first)")
    # torch 2.13 still ships and maintains torch.ao.quantization.quantize_dynamic but announces its
    # move to torchao (not a dependency here): silence only those deprecation notices, here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel",
                                category=UserWarning)
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)  # a copy, in eval mode


def is_quantized(model: nn.Module) -> bool:
    """Whether ``model`` holds dynamically quantised linear layers."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    return any(isinstance(module, DynamicQuantizedLinear) for module in model.modules())


def int8_onnx_path(path: str | os.PathLike) -> Path:
    """Where the int8 graph of ``path`` goes: ``model.onnx`` -> ``model.int8.onnx``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.int8{path.suffix}")


def quantize_onnx_int8(source: str | os.PathLike, target: str | os.PathLike | None = None) -> Path:
    """Quantise the ONNX graph ``source`` with ONNX Runtime's dynamic quantisation (int8
    weights) into ``target`` (default :func:`int8_onnx_path`); returns ``target``. The file
    appears only whole: it is written under a temporary name, then renamed."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = Path(source)
    target = Path(target) if target is not None else int8_onnx_path(source)
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist: no ONNX graph to quantise")
    staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with _quiet_onnx_quantizer():
            quantize_dynamic(source, staging, weight_type=QuantType.QInt8)
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    return target


@contextlib.contextmanager
def _quiet_onnx_quantizer():
    """Drop the quantiser's own root-logger warnings: its advice to pre-process the graph and,
    for every integer tensor of the grouping arithmetic, a dump of the tensor it leaves alone.
    Neither is a fault, and other loggers' records pass."""
    def keep(record: logging.LogRecord) -> bool:
        return f"onnxruntime{os.sep}quantization" not in record.pathname

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)
