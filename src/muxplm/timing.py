"""Inference timing, the one timer behind the throughput benchmark, the reproduction, the demo
and ``measure_throughput``.

Models compared with each other are timed *round robin* on the same input batch: trial t of
every model before trial t + 1 of any, the first model rotating, so that a change of machine
load during the run falls on all of them alike. Every timing records both clocks: wall seconds
(the paper's measure) and this process's CPU seconds, which other processes on a shared CPU
machine disturb far less.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Hashable

import torch

from .choices import CLOCKS
from .devices import inputs_checked_on_host

# How a model's trials become its one figure. The mean is what every result before the median
# existed reports; the median, over enough trials, is what a shared machine's bursts of load
# barely move (on the 2-core VM three trials of one model spread by up to a third).
STATISTICS = {"mean": statistics.fmean, "median": statistics.median}


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously to the host)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_inputs(batch_size: int, seq_len: int, device: torch.device | str, vocab_size: int = 30522,
                  seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch of random word-piece ids (a ``[CLS]``-like first token, no padding) on ``device``."""
    generator = torch.Generator().manual_seed(seed)
    low = 1000 if vocab_size > 2000 else 1  # above the special and unused ids of a BERT vocabulary
    ids = torch.randint(low, vocab_size, (batch_size, seq_len), generator=generator)
    ids[:, 0] = min(101, vocab_size - 1)
    return {
        "input_ids": ids.to(device),
        "attention_mask": torch.ones_like(ids).to(device),
        "token_type_ids": torch.zeros_like(ids).to(device),
    }


def time_batches(model: torch.nn.Module, inputs: dict, batches: int, device: torch.device | str) -> tuple[float, float]:
    """Wall-clock and process CPU seconds to run ``batches`` forward passes (the device
    drained before and after), of valid inputs, as the Predictor runs them: checked on the host
    once, never read back from the device by the pass."""
    sync(device)
    start, start_cpu = time.perf_counter(), time.process_time()
    with inputs_checked_on_host():
        for _ in range(batches):
            model(**inputs)
    sync(device)
    return time.perf_counter() - start, time.process_time() - start_cpu


def round_robin(models: dict[Hashable, torch.nn.Module], inputs: dict, *, batches: int, trials: int,
                device: torch.device | str, warmup: int = 1) -> dict[Hashable, list[tuple[float, float]]]:
    """``(wall, cpu)`` seconds of ``trials`` timings of ``batches`` batches for every model,
    after ``warmup`` untimed batches each, in inference mode."""
    order = list(models)
    timings: dict[Hashable, list[tuple[float, float]]] = {key: [] for key in order}
    with torch.inference_mode():
        for key in order:
            if warmup:
                time_batches(models[key], inputs, warmup, device)
        for trial in range(trials):
            shift = trial % max(len(order), 1)
            for key in order[shift:] + order[:shift]:
                timings[key].append(time_batches(models[key], inputs, batches, device))
    return timings


def check_summary(clock: str, statistic: str) -> None:
    """Refuse an unknown clock or statistic before any timing runs, not after it."""
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}; choose from {', '.join(CLOCKS)}")
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; choose from {', '.join(STATISTICS)}")


def rates(timings: list[tuple[float, float]], samples: int, clock: str = "wall",
          statistic: str = "mean") -> dict[str, Any]:
    """Samples/s of each trial on ``clock``, their ``statistic`` (mean or median) and (population)
    spread, and both clocks' figures by the same statistic."""
    check_summary(clock, statistic)
    summarize = STATISTICS[statistic]
    wall = [samples / max(seconds, 1e-9) for seconds, _ in timings]
    cpu = [samples / max(cpu_seconds, 1e-9) for _, cpu_seconds in timings]
    chosen = wall if clock == "wall" else cpu
    return {
        "samples_per_s": summarize(chosen), "std": statistics.pstdev(chosen), "trials": chosen,
        "wall_samples_per_s": summarize(wall), "cpu_samples_per_s": summarize(cpu),
    }


def side_by_side(models: dict[Hashable, torch.nn.Module], *, batch_size: int, seq_length: int, batches: int,
                 trials: int, device: torch.device | str, clock: str = "wall", warmup: int = 1,
                 seed: int = 0, statistic: str = "mean") -> dict[Hashable, dict[str, Any]]:
    """:func:`rates` of every model on one random batch (ids within the smallest vocabulary),
    timed :func:`round_robin`."""
    check_summary(clock, statistic)
    vocab = min(model.config.vocab_size for model in models.values())
    inputs = random_inputs(batch_size, seq_length, device, vocab_size=vocab, seed=seed)
    timings = round_robin(models, inputs, batches=batches, trials=trials, device=device, warmup=warmup)
    return {key: rates(timed, batch_size * batches, clock, statistic) for key, timed in timings.items()}
