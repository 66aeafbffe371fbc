"""Where the time of one forward pass goes: per-stage wall time (embeddings, mux, encoder,
demux, head, and everything else: input checks, grouping plan, masks, ungrouping) and the
top operators from ``torch.profiler``. Used to tell avoidable overhead from inherent cost
when a throughput target is missed."""

from __future__ import annotations

import time

import torch
from torch import nn

from ..timing import random_inputs, sync
from .throughput import ModelSpec, build_model

STAGES = ("embeddings", "mux", "encoder", "demux", "head")


def _stage_modules(model: nn.Module) -> dict[str, list[nn.Module]]:
    base = getattr(model, "bert", None) or model.base_model
    stages = {
        "embeddings": [base.embeddings],
        "encoder": list(base.encoder.layer),
        "head": [model.classifier],
    }
    if hasattr(base, "mux"):
        stages["mux"] = [base.mux]
        stages["demux"] = [base.demux]
    return stages


def stage_breakdown(model: nn.Module, inputs: dict, device: torch.device, repeats: int = 3,
                    clock: str = "wall") -> dict[str, float]:
    """Mean milliseconds per forward pass spent in each stage; ``other`` is the rest of the
    forward (validation, grouping, mask building, indexing), ``total`` the whole pass.
    ``clock="process"`` counts this process's CPU time instead of elapsed time (CPU only;
    steadier on a shared machine, exact with one thread)."""
    now = time.process_time if clock == "process" else time.perf_counter
    spent = {stage: 0.0 for stage in STAGES}
    handles, started = [], {}

    def enter(stage):
        def hook(module, args):
            sync(device)
            started[id(module)] = now()
        return hook

    def leave(stage):
        def hook(module, args, output):
            sync(device)
            spent[stage] += now() - started.pop(id(module))
        return hook

    for stage, modules in _stage_modules(model).items():
        for module in modules:
            handles.append(module.register_forward_pre_hook(enter(stage)))
            handles.append(module.register_forward_hook(leave(stage)))
    try:
        with torch.inference_mode():
            model(**inputs)  # warm-up, not counted
            spent.update({stage: 0.0 for stage in STAGES})
            sync(device)
            start = now()
            for _ in range(repeats):
                model(**inputs)
            sync(device)
            total = now() - start
    finally:
        for handle in handles:
            handle.remove()
    result = {stage: 1000 * seconds / repeats for stage, seconds in spent.items()}
    result["total"] = 1000 * total / repeats
    result["other"] = result["total"] - sum(result[stage] for stage in STAGES)
    return result


def top_operators(model: nn.Module, inputs: dict, device: torch.device, limit: int = 15) -> str:
    """``torch.profiler`` table of the operators with the most self time in one forward pass."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.inference_mode():
        model(**inputs)
        with torch.profiler.profile(activities=activities) as prof:
            model(**inputs)
            sync(device)
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort_by, row_limit=limit)


def profile_specs(
    specs: list[ModelSpec],
    head: str = "sentence",
    *,
    batch_size: int = 128,
    seq_len: int = 128,
    repeats: int = 3,
    device: str = "cpu",
    dtype: str = "float32",
    clock: str = "wall",
    operators: bool = False,
    log=print,
) -> list[dict]:
    """Stage breakdown (and optionally the operator table) of every spec; one dict per spec."""
    from .throughput import DTYPES

    device = torch.device(device)
    inputs = random_inputs(batch_size, seq_len, device)
    results = []
    header = f"{'model':48s} " + " ".join(f"{s:>10s}" for s in (*STAGES, "other", "total")) + "   (ms / batch)"
    log(header)
    for spec in specs:
        model = build_model(spec, head, device, DTYPES[dtype])
        times = stage_breakdown(model, inputs, device, repeats, clock)
        log(f"{spec.name:48s} " + " ".join(f"{times[s]:10.2f}" for s in (*STAGES, "other", "total")))
        entry = dict(name=spec.name, head=head, ms=times)
        if operators:
            entry["operators"] = top_operators(model, inputs, device)
            log(entry["operators"])
        results.append(entry)
    return results
