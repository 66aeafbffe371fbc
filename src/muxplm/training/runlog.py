"""What a training run records: the step statistics kept on the device between logging steps
(with the first non-finite loss), and the log files they are written to."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

from . import checkpoint as ckpt


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the run stopped without saving the bad state."""


# Per-step output fields logged as curves when a model or loss provides them.
_CURVES = ("accuracy", "similarity", "disagreement")


class RunLog:
    """Training/eval records to ``log.jsonl``, and their numbers to Accelerate's experiment
    trackers (``--report-to``). Only the main process writes."""

    def __init__(self, output_dir: Path, accelerator: Accelerator, keep_until_step: int | None, config: dict):
        self.enabled, self.accelerator = accelerator.is_main_process, accelerator
        self.jsonl = output_dir / "log.jsonl"
        if self.enabled:
            output_dir.mkdir(parents=True, exist_ok=True)
            self._truncate(keep_until_step)
        # Trackers take scalar settings only (TensorBoard's hyper-parameter table).
        accelerator.init_trackers("muxplm", config={k: v for k, v in config.items()
                                                    if isinstance(v, (bool, int, float, str))})

    def _truncate(self, keep_until_step: int | None) -> None:
        """On resume keep the records up to the checkpoint; start fresh otherwise."""
        records = []
        if keep_until_step is not None and self.jsonl.is_file():
            for line in self.jsonl.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line torn by a crash mid-write
                    continue
                if record.get("step", 0) <= keep_until_step:
                    records.append(record)
        self.jsonl.unlink(missing_ok=True)
        for record in records:
            self.write(record, track=False)

    def write(self, record: dict[str, Any], track: bool = True) -> None:
        if not self.enabled:
            return
        with open(self.jsonl, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        kind = record.get("kind")
        if track and kind in ("train", "eval"):
            self.accelerator.log({f"{kind}/{key}": value for key, value in record.items()
                                  if isinstance(value, (int, float)) and key != "step"}, step=record["step"])

    def close(self) -> None:
        # Not Accelerator.end_training: that would also end the process group, which later
        # stages of the same program still use.
        for tracker in self.accelerator.trackers:
            tracker.finish()
        self.accelerator.trackers.clear()


_NON_FINITE = {1: "nan", 2: "inf", 3: "-inf"}
_NONE_BAD = 2**62


class StepStats:
    """The training statistics between two logging steps, kept on the device (a per-step
    ``.item()`` would make a GPU wait for Python every step), and the first non-finite loss."""

    def __init__(self, device: torch.device):
        self.window = torch.zeros(1 + len(_CURVES), device=device)  # sums of the loss and of each curve
        self.shown = dict.fromkeys(_CURVES, False)
        self.steps, self.grad_norm = 0, None
        # The first non-finite loss as one integer, step * 4 + kind (1 nan, 2 inf, 3 -inf); NONE if
        # there was none. The minimum over ranks is the earliest step with its own kind.
        self.first_bad = torch.full((), _NONE_BAD, dtype=torch.long, device=device)
        self.started = time.perf_counter()

    def add(self, output, step: int, accumulation: int) -> None:
        """One micro-batch's output, of optimizer step ``step``."""
        value = output.loss.detach().float()
        kind = torch.where(value.isnan(), 1, torch.where(value > 0, 2, 3))
        code = torch.where(torch.isfinite(value), _NONE_BAD, step * 4 + kind)
        self.first_bad = torch.minimum(self.first_bad, code)
        self.window[0] += value / accumulation
        accuracy = getattr(output, "accuracy", None)
        if accuracy is None:
            accuracy = getattr(output, "retrieval_accuracy", None)
        for slot, name in enumerate(_CURVES, start=1):
            measured = accuracy if name == "accuracy" else getattr(output, name, None)
            if measured is not None:
                self.window[slot] += torch.as_tensor(measured, device=self.window.device).detach().float() / accumulation
                self.shown[name] = True

    def stop_if_diverged(self, accelerator: Accelerator, lr: float, output_dir: Path) -> None:
        """Raise on a non-finite loss seen so far (every rank together)."""
        bad = self.first_bad.clone()
        if accelerator.num_processes > 1:
            torch.distributed.all_reduce(bad, op=torch.distributed.ReduceOp.MIN)
        code = int(bad.item())
        if code != _NONE_BAD:
            raise TrainingDiverged(
                f"loss became {_NON_FINITE[code % 4]} at step {code // 4} (lr {lr:.3g}); "
                f"stopped without saving. Last good checkpoint: "
                f"{ckpt.latest_checkpoint(output_dir) or 'none'}. Try a lower --lr or more warm-up."
            )

    def record(self, accelerator: Accelerator, samples_per_step: int) -> dict[str, Any]:
        """Means over the window (and every rank), then a fresh window."""
        stats = self.window / max(self.steps, 1)
        if accelerator.num_processes > 1:
            stats = accelerator.reduce(stats, "mean")
        stats = stats.tolist()  # the one host sync of a logging step
        elapsed = time.perf_counter() - self.started
        record = {"loss": stats[0], "samples_per_s": self.steps * samples_per_step / max(elapsed, 1e-9),
                  "grad_norm": None if self.grad_norm is None else float(self.grad_norm)}
        record.update({name: stats[slot] for slot, name in enumerate(_CURVES, start=1) if self.shown[name]})
        self.window.zero_()
        self.steps, self.started = 0, time.perf_counter()
        return record
