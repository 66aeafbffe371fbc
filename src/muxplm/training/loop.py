"""The training loop: a compact Accelerate loop shared by all three stages.

Runs unchanged in one process or under ``accelerate launch`` / ``torchrun`` (DDP; gloo on CPU).
Its parts live beside it: the data order (a pure function of seed and micro-batch index, so a
resumed run sees exactly the batches an uninterrupted run would have seen) in
:mod:`~muxplm.training.batches`, the step statistics and log files in
:mod:`~muxplm.training.runlog`, the checkpoint files in :mod:`~muxplm.training.checkpoint`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, gather_object
from transformers import get_linear_schedule_with_warmup

from ..devices import check_cpu_bf16
from ..provenance import code_version, folder_hash, source_hash
from . import checkpoint as ckpt
from .batches import ShardedBatches, micro_batch_loader
from .config import TrainConfig
from .runlog import RunLog, StepStats, TrainingDiverged  # noqa: F401 (TrainingDiverged: re-exported)


def unmuxed_layers_at(step: int, total_steps: int, start: int, end: int) -> int:
    """Progressive multiplexing: the number of unmuxed layers for the update ``step`` (0-based),
    lowered one layer at a time in equal parts of the first 3/4 of the run, from ``start`` to
    ``end``; the last quarter trains at ``end``, the layout the model is saved with."""
    moving = 0.75 * total_steps
    if start <= end or step >= moving:
        return end
    return start - int(step * (start - end) / moving)


def make_accelerator(config: TrainConfig) -> Accelerator:
    precision = config.mixed_precision
    if precision == "auto":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            precision = "bf16"
        elif torch.cuda.is_available():
            precision = "fp16"
        else:
            precision = "no"
    if precision == "fp16" and not torch.cuda.is_available():
        raise ValueError("--mixed-precision fp16 needs a CUDA GPU; on the CPU use bf16 or no")
    if precision == "bf16" and not torch.cuda.is_available():
        check_cpu_bf16("--mixed-precision bf16", "--mixed-precision no")
    folders = ProjectConfiguration(project_dir=config.output_dir, logging_dir=str(Path(config.output_dir) / "trackers"))
    return Accelerator(mixed_precision=precision, cpu=_cpu_processes(), log_with=trackers(config.report_to) or None,
                       project_config=folders)


def trackers(report_to: list[str] | None) -> list[str]:
    """Accelerate's experiment trackers named by ``--report-to`` (TensorBoard when installed if
    unset). One that is not installed is refused here, where Accelerate would drop it with a
    debug message only; an unknown name Accelerate refuses itself."""
    from accelerate.tracking import get_available_trackers
    from accelerate.utils import LoggerType

    available = {str(name) for name in get_available_trackers()} | {"all"}
    if report_to is None:
        return ["tensorboard"] if "tensorboard" in available else []
    for name in report_to:
        if name in LoggerType.list() and name not in available:
            raise ValueError(f"--report-to {name}: the {name} package is not installed (pip install {name})")
    return [name for name in report_to if name != "none"]


def _cpu_processes() -> bool:
    """Without a GPU, several processes (torchrun / accelerate launch) must use the CPU (gloo)
    backend, which Accelerate only picks when told so. With GPUs every process needs its own:
    more are refused here, before the first barrier (CUDA would fail there with "invalid device
    ordinal")."""
    if not torch.cuda.is_available():
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    local_processes, gpus = int(os.environ.get("LOCAL_WORLD_SIZE", "1")), torch.cuda.device_count()
    if local_processes > gpus:
        raise ValueError(f"{local_processes} processes on this machine but {gpus} GPU(s): start one process per GPU "
                         f"(torchrun --nproc-per-node {gpus}), or hide the GPUs (CUDA_VISIBLE_DEVICES=) to train "
                         f"in CPU processes")
    return False


def process_state():
    """Accelerate's process state, set up as :func:`make_accelerator` will (the first set-up of
    the shared state decides the backend: a plain ``PartialState()`` would leave CPU processes
    ungrouped, each believing it is the main one)."""
    from accelerate import PartialState

    return PartialState(cpu=_cpu_processes())


@dataclass
class TrainingRun:
    """What the loop needs beyond the config; built by :mod:`muxplm.training.stages`."""

    model: torch.nn.Module
    tokenizer: Any
    train_set: Any  # indexable tokenized rows
    collate: Callable[[list[dict]], dict[str, torch.Tensor]]
    # (model, (rank, world)) -> metrics of the whole evaluation set, the same on every process
    evaluate: Callable[[torch.nn.Module, tuple[int, int]], dict[str, float]] | None = None
    resume_from: Path | None = None
    summary: dict[str, Any] | None = None  # extra facts for trainer_state / results
    # (model, batch) -> model output with .loss; default model(**batch) (distillation replaces it)
    loss_fn: Callable[[torch.nn.Module, dict[str, torch.Tensor]], Any] | None = None
    best_metric: tuple[str, bool] | None = None  # (evaluation key, greater is better) that ranks checkpoints


def _optimizer(model: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW without weight decay on biases and norms; the embeddings and encoder layers at
    ``encoder_lr`` when given (a warm-started encoder wants smaller steps than fresh modules).
    PyTorch's fused kernel where it has one: on the CPU it updates the tiny 11M-parameter model
    in 0.02 s against 0.14 s for the default, which was half of an N = 5 fine-tuning step."""
    prefix = getattr(model, "base_model_prefix", "")
    encoder = tuple(f"{prefix}.{part}." if prefix and hasattr(model, prefix) else f"{part}."
                    for part in ("embeddings", "encoder", "embeddings_project"))
    groups: dict[tuple[bool, bool], list[torch.nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        no_decay = param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name
        in_encoder = config.encoder_lr is not None and name.startswith(encoder)
        groups.setdefault((no_decay, in_encoder), []).append(param)
    return torch.optim.AdamW(
        [{"params": params, "weight_decay": 0.0 if no_decay else config.weight_decay,
          "lr": config.encoder_lr if in_encoder else config.lr}
         for (no_decay, in_encoder), params in sorted(groups.items())],
        lr=config.lr, eps=config.adam_eps, fused=device.type in ("cpu", "cuda"),
    )


@contextlib.contextmanager
def _rng_preserved():
    """Evaluation must not shift the training RNG streams (exact resume depends on it)."""
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
             torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
    try:
        yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])
        if state[3] is not None:
            torch.cuda.set_rng_state_all(state[3])


def _checkpoint_state(accelerator: Accelerator, scheduler) -> None:
    """Hand the training state to Accelerate's ``save_state`` / ``load_state``, except the
    weights: a checkpoint is a ``save_pretrained`` model folder (loadable with ``--init``), and a
    resumed run builds its model from it. Each run has its own Accelerator (make_accelerator)."""
    accelerator.register_for_checkpointing(scheduler)  # not prepared: it steps once per update

    def skip_weights(models, weights, output_dir) -> None:
        weights.clear()  # Accelerate's own list of state dicts to write, not its models

    def skip_models(models, input_dir) -> None:
        models.clear()  # the list of models to load into, local to load_state

    accelerator.register_save_state_pre_hook(skip_weights)
    accelerator.register_load_state_pre_hook(skip_models)


def save_checkpoint(accelerator: Accelerator, model, optimizer, scheduler, tokenizer, output_dir: Path,
                    state: dict[str, Any], keep: int | None) -> Path:
    """``checkpoint-<step>``: every file written into a staging folder (each rank its RNG
    state), ``trainer_state.json`` last, then one rename; older checkpoints rotated out."""
    main, at_step = accelerator.is_main_process, state["step"]
    staging = ckpt.staging_dir(output_dir, at_step)
    final = output_dir / f"checkpoint-{at_step}"
    if main:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    accelerator.wait_for_everyone()
    # Accelerate writes the optimizer, the scheduler (registered for checkpointing), the gradient
    # scaler of fp16 training and each process's RNG states; the weights come from save_pretrained.
    accelerator.save_state(str(staging))
    if main:
        accelerator.unwrap_model(model).save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    accelerator.wait_for_everyone()
    if main:
        ckpt.write_json_atomic(staging / ckpt.STATE_FILE, state)  # its presence marks the checkpoint complete
        ckpt.publish(staging, final)
        ckpt.rotate(output_dir, keep, protect=final)
    accelerator.wait_for_everyone()
    return final


def train(run: TrainingRun, config: TrainConfig, accelerator: Accelerator) -> dict[str, Any]:
    """Train ``run.model``; returns a summary (final step, losses, eval metrics, timings).

    Raises :class:`TrainingDiverged` when a loss is not finite (all ranks stop together; the
    last checkpoint on disk stays the newest one).
    """
    if (config.load_best_at_end or config.early_stopping_patience) and (run.evaluate is None or run.best_metric is None):
        option = "early_stopping_patience" if config.early_stopping_patience else "load_best_at_end"
        raise ValueError(f"{option} needs an evaluation set to rank checkpoints, and this run has none")
    loop = _Loop(run, config, accelerator)
    progress = None
    if loop.main and config.progress:
        from ..progress import progress_bar

        progress = progress_bar(loop.total_steps, initial=loop.step, desc=config.stage)
    batches = iter(micro_batch_loader(run.train_set, run.collate, loop.sampler, config, loop.micro_step,
                                      (loop.total_steps - loop.step) * config.gradient_accumulation_steps,
                                      accelerator.device))
    last_saved = loop.step if run.resume_from is not None else None
    try:
        while loop.step < loop.total_steps and not loop.out_of_patience():
            loop.optimizer_step(batches)
            step, last = loop.step, loop.step == loop.total_steps
            if step % config.logging_steps == 0 or last:
                record = loop.log_step()
                if progress is not None:
                    progress.set_postfix(loss=f"{record['loss']:.4f}", samples_s=f"{record['samples_per_s']:.1f}")
            if progress is not None:
                progress.update(1)
            if step % config.eval_steps == 0 or last:
                loop.evaluate()
            stopping = loop.out_of_patience() and not last
            # with early stopping, every new best is saved: the run ends with those weights
            new_best = config.early_stopping_patience is not None and loop.evals_since_best == 0 \
                and loop.last_eval_step == step
            if step % config.save_steps == 0 or last or stopping or new_best:
                loop.save()
                last_saved = step
            if stopping:
                loop.log.write({"kind": "early_stop", "step": step, "best": loop.best_score,
                                "patience": config.early_stopping_patience})
    finally:
        if progress is not None:
            progress.close()
        loop.log.close()
    if last_saved != loop.step:  # a resumed, already finished run
        loop.save()
    return loop.finish()


class _Loop:
    """One run's moving parts: the prepared model, optimizer and scheduler, the position in the
    data, the log, and the evaluations and checkpoints made along the way."""

    def __init__(self, run: TrainingRun, config: TrainConfig, accelerator: Accelerator):
        self.run, self.config, self.accelerator = run, config, accelerator
        self.output_dir = Path(config.output_dir)
        self.world, self.main = accelerator.num_processes, accelerator.is_main_process
        lengths = [len(ids) for ids in run.train_set["input_ids"]] if config.group_by_length else None
        self.sampler = ShardedBatches(len(run.train_set), config.batch_size, self.world, accelerator.process_index,
                                      config.seed, lengths)
        accumulation = config.gradient_accumulation_steps
        if config.max_steps is not None:
            self.total_steps = config.max_steps
        else:
            self.total_steps = max(1, config.min_steps or 1,
                                   math.ceil(config.num_epochs * self.sampler.batches_per_epoch / accumulation))
        warmup = (config.warmup_steps if config.warmup_steps is not None
                  else round(config.warmup_ratio * self.total_steps))
        optimizer = _optimizer(run.model, config, accelerator.device)
        self.scheduler = get_linear_schedule_with_warmup(optimizer, warmup, self.total_steps)
        # The scheduler is stepped here once per optimizer update, so it is not handed to prepare()
        # (Accelerate's wrapper would step it once per process).
        self.model, self.optimizer = accelerator.prepare(run.model, optimizer)
        _checkpoint_state(accelerator, self.scheduler)
        self.step, self.micro_step = 0, 0
        if run.resume_from is not None:
            state = ckpt.read_state(run.resume_from)
            _check_same_layout(run.resume_from, state, config, self.world)
            # The weights were loaded with the model; tensors are read onto the CPU, then each rank's
            # optimizer moves its state to its own device (not the saver's cuda:0). Every file is read
            # weights_only (Accelerate asks for a full unpickling of the scheduler): a checkpoint
            # carries state, never code.
            with ckpt.weights_only_loads():
                accelerator.load_state(str(run.resume_from))
            self.step, self.micro_step = state["step"], state["micro_step"]
        self.log = RunLog(self.output_dir, accelerator, keep_until_step=self.step if run.resume_from is not None else None,
                          config=config.to_dict())
        if self.main:
            (self.output_dir / "train_config.json").write_text(json.dumps(config.to_dict(), indent=1, default=str))
        self.samples_per_step = config.batch_size * self.world * accumulation
        self.stats = StepStats(accelerator.device)
        self.last_eval: dict[str, float] | None = None
        self.last_eval_step: int | None = None
        # Early stopping: the best score so far and the evaluations since it (kept in checkpoints)
        resumed = ckpt.read_state(run.resume_from) if run.resume_from is not None else {}
        self.best_score: float | None = resumed.get("patience", {}).get("best")
        self.evals_since_best: int = resumed.get("patience", {}).get("evals_since_best", 0)
        self.first_batch_ids: list[int] | None = None
        self.losses: list[float] = []
        self.start_step, self.started = self.step, time.perf_counter()
        # The training time of the sessions before this one, to their last checkpoint (kept in
        # checkpoints), so that a resumed stage reports all of its training, not only its last session's
        self.earlier_seconds: float = resumed.get("train_seconds") or 0.0
        # What the stage started from and the code training it, in each checkpoint too: a driver
        # resumes a stopped stage only when both are still those it asks for.
        self.provenance = {"source_hash": source_hash(),
                           "init_encoder_sha256": folder_hash(config.init_encoder) if config.init_encoder else None}
        self.model.train()

    def optimizer_step(self, batches) -> None:
        """One update from ``gradient_accumulation_steps`` micro-batches (gradients synchronised
        over the processes on the last one only)."""
        accelerator, accumulation = self.accelerator, self.config.gradient_accumulation_steps
        if self.config.start_unmuxed_layers is not None:  # a function of the step: a resumed run follows it exactly
            accelerator.unwrap_model(self.model).config.num_unmuxed_layers = unmuxed_layers_at(
                self.step, self.total_steps, self.config.start_unmuxed_layers, self.config.num_unmuxed_layers)
        for k in range(accumulation):
            ids, batch = next(batches)
            if self.first_batch_ids is None:
                self.first_batch_ids = ids
            batch = {key: value.to(accelerator.device, non_blocking=True) for key, value in batch.items()}
            self.micro_step += 1
            sync = contextlib.nullcontext() if k == accumulation - 1 else accelerator.no_sync(self.model)
            with sync:
                output = self.run.loss_fn(self.model, batch) if self.run.loss_fn is not None else self.model(**batch)
                accelerator.backward(output.loss / accumulation)
            self.stats.add(output, self.step + 1, accumulation)
        if self.config.max_grad_norm:
            self.stats.grad_norm = accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        if not accelerator.optimizer_step_was_skipped:  # fp16: a step skipped for inf/NaN gradients
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.stats.steps += 1

    def stop_if_diverged(self) -> None:
        self.stats.stop_if_diverged(self.accelerator, self.scheduler.get_last_lr()[0], self.output_dir)

    def log_step(self) -> dict[str, Any]:
        self.stop_if_diverged()
        record = {"kind": "train", "step": self.step,
                  "epoch": round(self.micro_step / self.sampler.batches_per_epoch, 4),
                  "lr": self.scheduler.get_last_lr()[0], **self.stats.record(self.accelerator, self.samples_per_step)}
        self.losses.append(record["loss"])
        self.log.write(record)
        return record

    def evaluate(self) -> None:
        if self.run.evaluate is None:
            return
        self.stop_if_diverged()
        # Every process scores its share of the batches (the unwrapped model: no gradient hooks);
        # the evaluator gathers, so every process returns the same metrics.
        unwrapped = self.accelerator.unwrap_model(self.model)
        with _rng_preserved():
            unwrapped.eval()
            metrics = self.run.evaluate(unwrapped, (self.accelerator.process_index, self.world))
            unwrapped.train()
        if self.main:
            self.log.write({"kind": "eval", "step": self.step, **metrics})
        self.last_eval, self.last_eval_step = metrics, self.step
        score = self.score()
        if score is not None:
            best, value = self.best_score, score["value"]
            # a non-finite score never counts as a new best (nor does best_checkpoint rank it)
            if math.isfinite(value) and (best is None or (value > best if score["greater_is_better"] else value < best)):
                self.best_score, self.evals_since_best = value, 0
            else:
                self.evals_since_best += 1

    def out_of_patience(self) -> bool:
        """Early stopping: the last ``early_stopping_patience`` evaluations did not beat the best
        (the metrics are gathered, so every process decides alike)."""
        patience = self.config.early_stopping_patience
        return patience is not None and self.evals_since_best >= patience

    def score(self) -> dict[str, Any] | None:
        """The ranking score of a checkpoint now: only an evaluation of these very weights counts."""
        if self.run.best_metric is None or self.last_eval is None or self.last_eval_step != self.step:
            return None
        name, greater_is_better = self.run.best_metric
        if name not in self.last_eval:
            return None
        return {"metric": name, "value": self.last_eval[name], "greater_is_better": greater_is_better}

    def save(self) -> Path:
        self.stop_if_diverged()  # never a checkpoint of weights a non-finite loss has touched
        state = {"step": self.step, "micro_step": self.micro_step, "total_steps": self.total_steps,
                 "world_size": self.world, "samples_seen": self.step * self.samples_per_step,
                 "config": self.config.to_dict(), "last_eval": self.last_eval, "score": self.score(),
                 "patience": {"best": self.best_score, "evals_since_best": self.evals_since_best},
                 "train_seconds": self.earlier_seconds + time.perf_counter() - self.started, **self.provenance}
        final = save_checkpoint(self.accelerator, self.model, self.optimizer, self.scheduler, self.run.tokenizer,
                                self.output_dir, state, self.config.save_total_limit)
        self.log.write({"kind": "checkpoint", "step": self.step, "path": str(final)})
        return final

    def finish(self) -> dict[str, Any]:
        """The summary, and the final model (or the best checkpoint's, with --load-best-at-end)
        published at the top of the output folder."""
        accelerator, run = self.accelerator, self.run
        session_seconds = time.perf_counter() - self.started
        unwrapped = accelerator.unwrap_model(self.model)
        first_ids = gather_object([list(self.first_batch_ids or [])])
        # Every rank's sum of its weights: equal on all ranks when gradients were synchronised.
        weight_sum = torch.stack([p.detach().double().sum() for p in unwrapped.parameters()]).sum().reshape(1)
        weight_sums = accelerator.gather(weight_sum).tolist()
        done = self.step - self.start_step
        summary = {
            "stage": self.config.stage, "final_step": self.step, "total_steps": self.total_steps,
            "resumed_from_step": self.start_step, "world_size": self.world,
            "train_seconds": self.earlier_seconds + session_seconds, "session_seconds": session_seconds,
            "train_samples_per_s": done * self.samples_per_step / max(session_seconds, 1e-9),
            "final_loss": self.losses[-1] if self.losses else None, "eval": self.last_eval,
            "stopped_early": self.out_of_patience() and self.step < self.total_steps,
            "first_batch_ids_per_rank": first_ids, "weight_sum_per_rank": weight_sums,
            "code": code_version(), **(run.summary or {}),
        }
        if self.config.init_encoder:  # the warm start's weights, whatever folder held them
            summary["init_encoder_sha256"] = self.provenance["init_encoder_sha256"]
        best = ckpt.best_checkpoint(self.output_dir)
        if best is not None:
            best_state = ckpt.read_state(best)
            summary["best_checkpoint"] = {"path": str(best), "step": best_state["step"], **best_state["score"]}
            load_best = self.config.load_best_at_end or self.config.early_stopping_patience is not None
            if load_best and best_state["step"] != self.step:
                # The saved final model (what later stages and evaluation read) becomes the best one.
                unwrapped.load_state_dict(type(unwrapped).from_pretrained(best).state_dict())
                summary["eval"] = best_state["last_eval"]
                summary["loaded_best"] = True
        accelerator.wait_for_everyone()  # no rank may still read the run folder while it is swapped
        if self.main:
            _save_final(unwrapped, run.tokenizer, self.output_dir, summary)
        accelerator.wait_for_everyone()
        return summary


def _check_same_layout(checkpoint: Path, state: dict[str, Any], config: TrainConfig, world: int) -> None:
    """The data position of a checkpoint means the same examples only with the same number of
    processes, batch size and accumulation: refuse anything else, saying why."""
    saved = state.get("config", {})
    differences = [
        f"{name} {saved_value} -> {value}"
        for name, saved_value, value in (
            ("processes", state.get("world_size", 1), world),
            ("batch size", saved.get("batch_size", config.batch_size), config.batch_size),
            ("gradient accumulation", saved.get("gradient_accumulation_steps", config.gradient_accumulation_steps),
             config.gradient_accumulation_steps),
        )
        if saved_value != value
    ]
    if differences:
        raise ValueError(
            f"cannot resume {checkpoint} exactly: {', '.join(differences)} would skip or repeat training data; "
            f"resume with the saved settings, or start a new run (another --output-dir, or --init {checkpoint})"
        )


def _save_final(model, tokenizer, output_dir: Path, summary: dict[str, Any]) -> None:
    """The final model, tokenizer and ``train_results.json`` at the top of ``output_dir`` (what
    ``--init`` of the next stage points at), replacing the previous ones whole or not at all."""

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        ckpt.write_json_atomic(folder / "train_results.json", summary)

    ckpt.publish_final(output_dir, write)
