"""Where a model runs: one check of a requested device and dtype for every command that runs
a model (serve, evaluate), and what a forward pass may read back from that device."""

from __future__ import annotations

import contextlib
import threading

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def default_device(backend: str = "torch", quantize: str | None = "none") -> str:
    """Where a command runs a model when ``--device`` is not given: the GPU when there is one and
    the runtime can use it, else the CPU. ONNX Runtime and int8 dynamic quantisation run on the
    CPU here, so they keep it."""
    if backend != "torch" or (quantize or "none") != "none":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | torch.device, dtype: str | torch.dtype) -> tuple[torch.device, torch.dtype]:
    """The device and dtype to run on, or a ``ValueError`` that says why not."""
    try:
        device = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"unknown device {device!r}: {error}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device} asked for, but this machine has no CUDA GPU (use --device cpu)")
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        dtype = DTYPES[dtype]
    if dtype == torch.float16 and device.type == "cpu":
        usable = "float32 or bfloat16" if cpu_runs_bf16_natively() else "float32 (this CPU has no native bf16)"
        raise ValueError(f"float16 inference needs a CUDA device; on CPU use {usable}")
    if dtype == torch.bfloat16 and device.type == "cpu":
        check_cpu_bf16("--dtype bfloat16", "--dtype float32")
    return device, dtype


def cpu_runs_bf16_natively() -> bool:
    """Whether PyTorch multiplies bf16 matrices on this CPU in oneDNN (x86 with AVX-512 or AMX,
    Arm with BF16): the test its own bf16 matrix products dispatch on. Without it they fall back to
    a reference kernel that runs 38-102x slower than float32 (measured on a 2-core AVX2 EPYC)."""
    supported = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return True if supported is None else bool(supported())


def check_cpu_bf16(asked: str, instead: str) -> None:
    """Refuse bf16 on a CPU that has no native bf16: it would only make every step slower."""
    if not cpu_runs_bf16_natively():
        raise ValueError(f"{asked} on this CPU: it has no native bf16 (AVX-512 or AMX; Arm BF16), so PyTorch's "
                         f"bf16 matrix products take a reference kernel, tens of times slower than float32; "
                         f"use {instead}")


# Instances per forward pass when none is asked for. A CPU is compute-bound well before 64, so
# more only adds latency; a GPU running a multiplexed model at the paper's 128 instances a batch is
# launch-bound (the throughput benchmark's H100 figures: about 6 ms a batch whatever N), so it gets
# 128 groups of N instances.
CPU_BATCH_SIZE = 64
GPU_GROUPS = 128


def default_batch_size(device: torch.device | str, num_instances: int) -> int:
    """Instances per forward pass that suit ``device``: 64 on a CPU, ``128 * num_instances``
    on an accelerator."""
    return CPU_BATCH_SIZE if torch.device(device).type == "cpu" else GPU_GROUPS * num_instances


_checked = threading.local()


@contextlib.contextmanager
def inputs_checked_on_host():
    """Run forward passes whose inputs the caller has already validated on the host (the
    :class:`~muxplm.serving.Predictor` checks its CPU tensors before moving them): inside,
    :func:`host_checks_wanted` is False on every device, so a forward pass reads nothing back
    from the device, and ``torch.compile`` captures it as one graph (CUDA graphs included).
    Per thread: a model run by another thread keeps its checks."""
    previous = getattr(_checked, "active", False)
    _checked.active = True
    try:
        yield
    finally:
        _checked.active = previous


def host_checks_wanted(tensor: torch.Tensor, training: bool) -> bool:
    """Whether the host may read values that live on the device (a range check, a boolean
    selection whose size depends on the data): always for CPU tensors (free) and outside
    training (a clear error or a compact output is worth one sync); not in a training step on an
    accelerator, whose batches come from the stage's own tokenizer and collators (checked when
    the stage starts), so that the step does not wait for the host. The losses then take their
    fixed-shape forms (every position scored, the unscored ones weighted out). Never inside
    :func:`inputs_checked_on_host`."""
    if getattr(_checked, "active", False):
        return False
    return tensor.device.type == "cpu" or not training


def check_finite_weights(model: torch.nn.Module, source: object = "the model") -> None:
    """Refuse weights holding NaN or infinity (a diverged or damaged checkpoint): every prediction
    from them would be meaningless, and a NaN score is not even valid JSON. Raises ``ValueError``
    naming ``source`` and the first tensors affected."""
    bad = []
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                bad.append(name)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise ValueError(f"{source}: weights hold NaN or infinite values ({shown}); refusing to use them")
