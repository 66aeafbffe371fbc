"""The three training stages: building the model and data for each, then running the loop.

1. ``retrieval``: token-retrieval priming (auto-encoding) from a preset or a checkpoint;
2. ``mlm`` (every family but ELECTRA) / ``electra`` (MUX-ELECTRA): pre-training, normally
   ``--init`` from stage 1;
3. ``finetune``: a task head on a stage-2 checkpoint, on any MUX checkpoint, or on a plain
   encoder of any supported family (warm start, ``init_encoder``; :mod:`muxplm.families`).

Every run writes a self-contained model directory (config with ``id2label``, safetensors
weights, tokenizer files) that the next stage's ``init`` points at.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..checkpoints import local_folder
from ..configuration import MuxBertConfig
from ..data import PaddingCollator
from ..released import input_length
from . import checkpoint as ckpt
from .config import TrainConfig, resolve
from .consistency import CompositionConsistency
from .distill import StateDistillation, TaskDistillation
from .evaluate import evaluate_model
from .inputs import load_task_features, pretraining_blocks, pretraining_collator, pretraining_evaluator
from .loop import TrainingRun, make_accelerator, process_state, train
from .models import build_model, read_model_config, size_of, tokenizer_for, with_bert_names

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- running a stage


def _resume_point(config: TrainConfig) -> Path | None:
    latest = ckpt.latest_checkpoint(config.output_dir)
    if config.resume:
        whole = ckpt.resumable_checkpoint(config.output_dir, logger.warning)
        if whole is None and latest is not None:
            raise ValueError(f"--resume: no checkpoint in {config.output_dir} is whole (see the warnings above); "
                             f"start a new run")
        if whole is None:
            logger.warning("--resume: no complete checkpoint in %s, starting from scratch", config.output_dir)
        return whole
    if latest is not None:
        raise ValueError(
            f"{config.output_dir} already holds checkpoints ({latest.name}); pass --resume to continue that run "
            f"or choose a new --output-dir"
        )
    return None


def _recover_folders(config: TrainConfig) -> None:
    """A run folder whose final-model swap a crash interrupted is put right (by one process)
    before anything reads it: this run's own and the one it starts from."""
    state = process_state()
    with state.main_process_first():
        if state.is_main_process:
            ckpt.recover_run_folder(config.output_dir)
            if config.init:  # another run's folder: only a swap cut short is completed, nothing removed
                ckpt.recover_run_folder(config.init, clean=False)


def _quiet_libraries() -> None:
    import datasets
    import transformers

    datasets.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # per-file save/load bars
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run_stage(config: TrainConfig) -> dict[str, Any]:
    """Run one training stage (``config.stage``) and return its summary; the trained model,
    checkpoints, logs and ``train_results.json`` land in ``config.output_dir``."""
    _quiet_libraries()
    if config.init:  # a hub name: downloaded first
        config = dataclasses.replace(config, init=str(local_folder(config.init)))
    _recover_folders(config)
    resume_from = _resume_point(config)
    model_dir = resume_from or config.init or config.init_encoder
    tokenizer = tokenizer_for(config, model_dir)
    if config.stage == "finetune":
        return _finetune(config, tokenizer, resume_from)
    return _pretrain(config, tokenizer, resume_from)


def resolved_config(config: TrainConfig, resume_from: Path | None = None) -> TrainConfig:
    """The settings a run of ``config`` trains with: every unset one filled in for the size of
    the model being trained (read from the checkpoint or preset it starts from)."""
    if config.preset:
        return resolve(config, config.preset, config.num_instances or MuxBertConfig.num_instances)
    source = resume_from or config.init or config.init_encoder
    saved = read_model_config(source) if source else {}
    instances = config.num_instances or saved.get("num_instances") or (2 if config.init_encoder else 1)
    # The paper's released checkpoints fine-tune with the paper's recipe unless another is named.
    default = "paper" if saved.get("forward_variant") == "released" and config.stage == "finetune" else None
    return resolve(config, size_of(SimpleNamespace(**with_bert_names(saved))), instances, default_recipe=default)


def _pretrain(config: TrainConfig, tokenizer, resume_from: Path | None) -> dict[str, Any]:
    from accelerate.utils import set_seed

    config = resolved_config(config, resume_from)
    accelerator = make_accelerator(config)
    set_seed(config.seed)
    model = build_model(config, config.stage, tokenizer, {}, resume_from)
    with accelerator.main_process_first():  # one process fetches and tokenizes; the others read its cache
        train_blocks, eval_blocks = pretraining_blocks(config, tokenizer)
    collate = pretraining_collator(config.stage, tokenizer, model, config, seed=config.seed)
    evaluate = pretraining_evaluator(config.stage, tokenizer, model, config, eval_blocks) if eval_blocks else None
    loss_fn = None
    if config.teacher:
        if config.stage != "retrieval":
            raise ValueError(f"--teacher applies to fine-tuning and to retrieval priming, not to --stage {config.stage}")
        loss_fn = StateDistillation(config.teacher, model, weight=config.distill_weight,
                                    pooling=config.distill_pooling, device=accelerator.device)
    run = TrainingRun(
        model=model, tokenizer=tokenizer, train_set=train_blocks, collate=collate, evaluate=evaluate,
        resume_from=resume_from, best_metric=("loss", False), loss_fn=loss_fn,
        summary={"num_instances": model.config.num_instances, "train_blocks": len(train_blocks)},
    )
    return train(run, config, accelerator)


def _finetune(config: TrainConfig, tokenizer, resume_from: Path | None) -> dict[str, Any]:
    from accelerate.utils import set_seed

    config = resolved_config(config, resume_from)
    accelerator = make_accelerator(config)
    with accelerator.main_process_first():  # one process fetches and tokenizes; the others read its cache
        spec, features = load_task_features(
            tokenizer, task=config.task, train_file=config.train_file, validation_file=config.validation_file,
            task_kind=config.task_kind, max_length=config.max_length, cache_dir=config.cache_dir,
            max_examples={"train": config.max_train_examples, "validation": config.max_eval_examples},
        )
    if spec.is_regression:
        labels = {"num_labels": 1, "problem_type": "regression"}
    else:
        labels = {
            "num_labels": len(spec.label_names),
            "id2label": dict(enumerate(spec.label_names)),
            "label2id": {name: i for i, name in enumerate(spec.label_names)},
        }
    set_seed(config.seed)
    model = build_model(config, spec.kind, tokenizer, labels, resume_from)
    validation = features["validation"]

    def evaluate(model, shard: tuple[int, int] = (0, 1)) -> dict[str, float]:
        return evaluate_model(model, spec, validation, tokenizer, config.eval_batch_size, composition_seed=0,
                              shard=shard)

    loss_fn = None
    if config.teacher:
        loss_fn = TaskDistillation(config.teacher, model, temperature=config.distill_temperature,
                                   weight=config.distill_weight, device=accelerator.device)
    if config.consistency_weight:
        loss_fn = CompositionConsistency(config.consistency_weight, inner=loss_fn)
    run = TrainingRun(
        model=model, tokenizer=tokenizer, train_set=features["train"],
        collate=PaddingCollator(tokenizer, pad_to_length=input_length(model.config)),
        evaluate=evaluate, resume_from=resume_from, loss_fn=loss_fn,
        best_metric=(spec.metric, True),  # every task's main metric grows with quality
        summary={"task": spec.name, "main_metric": spec.metric, "num_instances": model.config.num_instances,
                 "train_examples": len(features["train"]), "eval_examples": len(validation)},
    )
    return train(run, config, accelerator)


def pretrain(config: TrainConfig | None = None, **settings) -> dict[str, Any]:
    """Stage 1 or 2 from Python: ``pretrain(stage="retrieval", preset="tiny", output_dir=...)``."""
    config = config or TrainConfig(**{"stage": "mlm", **settings})
    if config.stage == "finetune":
        raise ValueError("pretrain() runs the retrieval, mlm or electra stage; use finetune() for tasks")
    return run_stage(config)


def finetune(config: TrainConfig | None = None, **settings) -> dict[str, Any]:
    """Stage 3 from Python: ``finetune(task="sentiment", init="runs/mlm", output_dir=...)``."""
    config = config or TrainConfig(**{**settings, "stage": "finetune"})
    return run_stage(config)
