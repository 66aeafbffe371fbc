"""The training loop: a compact Accelerate loop shared by all three stages.

Runs unchanged in one process or under ``accelerate launch`` / ``torchrun`` (DDP; gloo on CPU).
Data order is a pure function of (seed, step): micro-batch ``m`` of rank ``r`` is a fixed slice
of a seeded per-epoch permutation, and the corrupting collators are re-seeded per micro-batch,
so a resumed run sees exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import contextlib
import csv
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
from transformers import get_linear_schedule_with_warmup

from . import checkpoint as ckpt
from .config import TrainConfig


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the run stopped without saving the bad state."""


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
    return Accelerator(mixed_precision=precision, cpu=_multi_cpu())


def _multi_cpu() -> bool:
    # Without a GPU, several processes (torchrun / accelerate launch) must use the CPU (gloo)
    # backend, which Accelerate only picks when told so.
    return not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1


def process_state():
    """Accelerate's process state, set up as :func:`make_accelerator` will (the first set-up of
    the shared state decides the backend: a plain ``PartialState()`` would leave CPU processes
    ungrouped, each believing it is the main one)."""
    from accelerate import PartialState

    return PartialState(cpu=_multi_cpu())


class ShardedBatches:
    """Deterministic per-rank batches: micro-batch ``m`` is slice ``rank`` of global batch
    ``m`` of a permutation drawn per epoch from ``seed`` (a batch is never split unevenly;
    the tail of an epoch that does not fill a global batch is skipped).

    With ``lengths`` (``--group-by-length``), each run of ``LENGTH_POOL`` global batches of the
    permutation is sorted by length before it is cut into batches, and the batches are then
    shuffled: batches of similar lengths, so less padding, in random order."""

    LENGTH_POOL = 50

    def __init__(self, num_examples: int, batch_size: int, world_size: int, rank: int, seed: int,
                 lengths: list[int] | None = None):
        if num_examples < 1:
            raise ValueError("the training set is empty")
        self.num_examples = num_examples
        self.batch_size = batch_size
        self.world_size = world_size
        self.rank = rank
        self.seed = seed
        self.global_batch = batch_size * world_size
        self.batches_per_epoch = max(1, num_examples // self.global_batch)
        self.lengths = torch.as_tensor(lengths) if lengths is not None and num_examples >= self.global_batch else None
        self._epoch, self._perm = -1, None

    def _order(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        perm = torch.randperm(self.num_examples, generator=generator)
        if self.lengths is None:
            return perm
        used = perm[: self.batches_per_epoch * self.global_batch]
        pool = self.LENGTH_POOL * self.global_batch
        chunks = [chunk[torch.argsort(self.lengths[chunk], descending=True, stable=True)] for chunk in used.split(pool)]
        batches = torch.cat(chunks).view(self.batches_per_epoch, self.global_batch)
        return batches[torch.randperm(self.batches_per_epoch, generator=generator)].flatten()

    def indices(self, micro_step: int) -> list[int]:
        epoch, position = divmod(micro_step, self.batches_per_epoch)
        if epoch != self._epoch:
            self._epoch, self._perm = epoch, self._order(epoch)
        start = position * self.global_batch + self.rank * self.batch_size
        # Modulo: a training set smaller than one global batch is cycled through.
        return self._perm[(start + torch.arange(self.batch_size)) % self.num_examples].tolist()


class MicroBatches(torch.utils.data.Dataset):
    """Item ``m`` is this rank's collated micro-batch ``m`` (with its example ids): the examples
    and the collator's random draws depend on ``m`` only, so a ``DataLoader`` over it gives the
    same batches with or without worker processes, and resuming means starting at ``m``."""

    def __init__(self, rows, sampler: ShardedBatches, collate, seed: int):
        self.rows, self.sampler, self.collate, self.seed = rows, sampler, collate, seed

    def __len__(self) -> int:  # only a DataLoader formality: the sampler names the items
        return 2**62

    def __getitem__(self, micro_step: int) -> tuple[list[int], dict[str, torch.Tensor]]:
        ids = self.sampler.indices(micro_step)
        _seed_collator(self.collate, (self.seed * 1_000_003 + micro_step) * 1009 + self.sampler.rank)
        return ids, self.collate([self.rows[i] for i in ids])


def micro_batch_loader(run: "TrainingRun", sampler: ShardedBatches, config: TrainConfig, first: int, count: int,
                       device: torch.device) -> torch.utils.data.DataLoader:
    """Micro-batches ``first .. first + count - 1`` in order; workers collate ahead of the step
    (``--dataloader-workers``: by default 2 on a GPU, none on a CPU, whose cores train), and
    batches bound for a GPU come in pinned memory."""
    workers = config.dataloader_workers
    if workers is None:
        workers = 2 if device.type == "cuda" else 0
    return torch.utils.data.DataLoader(
        MicroBatches(run.train_set, sampler, run.collate, config.seed), batch_size=None,
        sampler=range(first, first + count), num_workers=workers, pin_memory=device.type == "cuda",
        # Its own generator: drawing the workers' base seed from the global one would shift the
        # dropout stream of a resumed run against an uninterrupted one.
        generator=torch.Generator().manual_seed(config.seed),
    )


# Per-step output fields logged as curves when a model or loss provides them.
_CURVES = ("accuracy", "similarity", "disagreement")


class RunLog:
    """Training/eval records to ``log.jsonl`` plus ``log.csv`` / ``eval_log.csv``, TensorBoard
    when installed. Only the main process writes."""

    TRAIN_COLUMNS = ("step", "epoch", "loss", "lr", "samples_per_s", "grad_norm", *_CURVES)

    def __init__(self, output_dir: Path, enabled: bool, keep_until_step: int | None):
        self.enabled = enabled
        self.jsonl = output_dir / "log.jsonl"
        self.csv = output_dir / "log.csv"
        self.eval_csv = output_dir / "eval_log.csv"
        self.tensorboard = None
        if not enabled:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self._truncate(keep_until_step)
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(output_dir / "tensorboard"))
        except ImportError:  # tensorboard is optional
            pass

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
        for path in (self.jsonl, self.csv, self.eval_csv):
            path.unlink(missing_ok=True)
        for record in records:
            self.write(record, tensorboard=False)

    def write(self, record: dict[str, Any], tensorboard: bool = True) -> None:
        if not self.enabled:
            return
        with open(self.jsonl, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        kind = record.get("kind")
        if kind == "train":
            self._csv_row(self.csv, self.TRAIN_COLUMNS, record)
        elif kind == "eval":
            columns = ["step", *sorted(k for k in record if k not in ("kind", "step"))]
            self._csv_row(self.eval_csv, columns, record)
        if tensorboard and self.tensorboard is not None and kind in ("train", "eval"):
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.tensorboard.add_scalar(f"{kind}/{key}", value, record["step"])

    @staticmethod
    def _csv_row(path: Path, columns, record) -> None:
        new = not path.is_file()
        with open(path, "a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow({c: record.get(c, "") for c in columns})

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()


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


_NON_FINITE = {1: "nan", 2: "inf", 3: "-inf"}
_NONE_BAD = 2**62


def _optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW without weight decay on biases and norms; the embeddings and encoder layers at
    ``encoder_lr`` when given (a warm-started encoder wants smaller steps than fresh modules)."""
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
        lr=config.lr, eps=config.adam_eps,
    )


def _seed_collator(collate, seed: int) -> None:
    generator = getattr(collate, "generator", None)
    if isinstance(generator, torch.Generator):
        generator.manual_seed(seed)


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
    output_dir = Path(config.output_dir)
    if config.load_best_at_end and (run.evaluate is None or run.best_metric is None):
        raise ValueError("load_best_at_end needs an evaluation set to rank checkpoints, and this run has none")
    world, rank, main = accelerator.num_processes, accelerator.process_index, accelerator.is_main_process
    lengths = [len(ids) for ids in run.train_set["input_ids"]] if config.group_by_length else None
    sampler = ShardedBatches(len(run.train_set), config.batch_size, world, rank, config.seed, lengths)
    accumulation = config.gradient_accumulation_steps
    if config.max_steps is not None:
        total_steps = config.max_steps
    else:
        total_steps = max(1, config.min_steps or 1,
                          math.ceil(config.num_epochs * sampler.batches_per_epoch / accumulation))
    warmup = config.warmup_steps if config.warmup_steps is not None else round(config.warmup_ratio * total_steps)

    model = run.model
    optimizer = _optimizer(model, config)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total_steps)
    # The scheduler is stepped here once per optimizer update, so it is not handed to prepare()
    # (Accelerate's wrapper would step it once per process).
    model, optimizer = accelerator.prepare(model, optimizer)
    _checkpoint_state(accelerator, scheduler)

    step, micro_step = 0, 0
    if run.resume_from is not None:
        state = ckpt.read_state(run.resume_from)
        _check_same_layout(run.resume_from, state, config, world)
        # The weights were loaded with the model; tensors are read onto the CPU, then each rank's
        # optimizer moves its state to its own device (not the saver's cuda:0).
        accelerator.load_state(str(run.resume_from))
        step, micro_step = state["step"], state["micro_step"]
    log = RunLog(output_dir, main, keep_until_step=step if run.resume_from is not None else None)
    if main:
        (output_dir / "train_config.json").write_text(json.dumps(config.to_dict(), indent=1, default=str))

    samples_per_step = config.batch_size * world * accumulation
    last_saved = step if run.resume_from is not None else None
    last_eval: dict[str, float] | None = None
    last_eval_step: int | None = None
    first_batch_ids = None
    stats = StepStats(accelerator.device)
    train_start, start_step = time.perf_counter(), step
    losses: list[float] = []

    def stop_if_diverged() -> None:
        stats.stop_if_diverged(accelerator, scheduler.get_last_lr()[0], output_dir)

    def score_at(at_step: int) -> dict[str, Any] | None:
        """The ranking score of a checkpoint: only an evaluation of these very weights counts."""
        if run.best_metric is None or last_eval is None or last_eval_step != at_step:
            return None
        name, greater_is_better = run.best_metric
        if name not in last_eval:
            return None
        return {"metric": name, "value": last_eval[name], "greater_is_better": greater_is_better}

    def save(at_step: int) -> Path:
        stop_if_diverged()  # never a checkpoint of weights a non-finite loss has touched
        state = {"step": at_step, "micro_step": micro_step, "total_steps": total_steps, "world_size": world,
                 "samples_seen": at_step * samples_per_step, "config": config.to_dict(), "last_eval": last_eval,
                 "score": score_at(at_step)}
        final = save_checkpoint(accelerator, model, optimizer, scheduler, run.tokenizer, output_dir, state,
                                config.save_total_limit)
        log.write({"kind": "checkpoint", "step": at_step, "path": str(final)})
        return final

    def run_eval(at_step: int) -> dict[str, float] | None:
        if run.evaluate is None:
            return None
        stop_if_diverged()
        # Every process scores its share of the batches (the unwrapped model: no gradient hooks);
        # the evaluator gathers, so every process returns the same metrics.
        unwrapped = accelerator.unwrap_model(model)
        with _rng_preserved():
            unwrapped.eval()
            metrics = run.evaluate(unwrapped, (rank, world))
            unwrapped.train()
        if main:
            log.write({"kind": "eval", "step": at_step, **metrics})
        return metrics

    progress = None
    if main and config.progress:
        from tqdm.auto import tqdm

        progress = tqdm(total=total_steps, initial=step, desc=f"{config.stage}", dynamic_ncols=True)

    model.train()
    batches = iter(micro_batch_loader(run, sampler, config, micro_step, (total_steps - step) * accumulation,
                                      accelerator.device))
    try:
        while step < total_steps:
            for k in range(accumulation):
                ids, batch = next(batches)
                if first_batch_ids is None:
                    first_batch_ids = ids
                batch = {key: value.to(accelerator.device, non_blocking=True) for key, value in batch.items()}
                micro_step += 1
                sync = contextlib.nullcontext() if k == accumulation - 1 else accelerator.no_sync(model)
                with sync:
                    output = run.loss_fn(model, batch) if run.loss_fn is not None else model(**batch)
                    accelerator.backward(output.loss / accumulation)
                stats.add(output, step + 1, accumulation)
            if config.max_grad_norm:
                stats.grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            stats.steps += 1
            if step % config.logging_steps == 0 or step == total_steps:
                stop_if_diverged()
                record = {"kind": "train", "step": step, "epoch": round(micro_step / sampler.batches_per_epoch, 4),
                          "lr": scheduler.get_last_lr()[0], **stats.record(accelerator, samples_per_step)}
                losses.append(record["loss"])
                log.write(record)
                if progress is not None:
                    progress.set_postfix(loss=f"{record['loss']:.4f}", samples_s=f"{record['samples_per_s']:.1f}")
            if progress is not None:
                progress.update(1)
            if step % config.eval_steps == 0 or step == total_steps:
                metrics = run_eval(step)
                if metrics is not None:
                    last_eval, last_eval_step = metrics, step
            if step % config.save_steps == 0 or step == total_steps:
                save(step)
                last_saved = step
    finally:
        if progress is not None:
            progress.close()
        log.close()
    if last_saved != step:  # a resumed, already finished run
        save(step)

    train_seconds = time.perf_counter() - train_start
    unwrapped = accelerator.unwrap_model(model)
    first_ids = _gather_lists(accelerator, first_batch_ids or [])
    # Every rank's sum of its weights: equal on all ranks when gradients were synchronised.
    weight_sum = torch.stack([p.detach().double().sum() for p in unwrapped.parameters()]).sum().reshape(1)
    weight_sums = accelerator.gather(weight_sum).tolist() if world > 1 else weight_sum.tolist()
    summary = {
        "stage": config.stage, "final_step": step, "total_steps": total_steps, "resumed_from_step": start_step,
        "world_size": world, "train_seconds": train_seconds,
        "train_samples_per_s": (step - start_step) * samples_per_step / max(train_seconds, 1e-9),
        "final_loss": losses[-1] if losses else None, "eval": last_eval,
        "first_batch_ids_per_rank": first_ids, "weight_sum_per_rank": weight_sums, **(run.summary or {}),
    }
    best = ckpt.best_checkpoint(output_dir)
    if best is not None:
        best_state = ckpt.read_state(best)
        summary["best_checkpoint"] = {"path": str(best), "step": best_state["step"], **best_state["score"]}
        if config.load_best_at_end and best_state["step"] != step:
            # The saved final model (what later stages and evaluation read) becomes the best one.
            unwrapped.load_state_dict(type(unwrapped).from_pretrained(best).state_dict())
            summary["eval"] = best_state["last_eval"]
            summary["loaded_best"] = True
    accelerator.wait_for_everyone()  # no rank may still read the run folder while it is swapped
    if main:
        _save_final(unwrapped, run.tokenizer, output_dir, summary)
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


def _gather_lists(accelerator: Accelerator, ids: list[int]) -> list[list[int]]:
    """Every rank's list (same length on all ranks), for the run summary."""
    if accelerator.num_processes == 1:
        return [list(ids)]
    tensor = torch.tensor(ids, dtype=torch.long, device=accelerator.device)
    gathered = accelerator.gather(tensor).view(accelerator.num_processes, -1)
    return gathered.tolist()


def _save_final(model, tokenizer, output_dir: Path, summary: dict[str, Any]) -> None:
    """The final model, tokenizer and ``train_results.json`` at the top of ``output_dir`` (what
    ``--init`` of the next stage points at), replacing the previous ones whole or not at all."""

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        ckpt.write_json_atomic(folder / "train_results.json", summary)

    ckpt.publish_final(output_dir, write)
