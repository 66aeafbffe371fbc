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
import json
import logging
import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..checkpoints import local_folder
from ..configuration import MuxBertConfig
from ..data import PaddingCollator
from ..provenance import code_version, folder_hash, source_hash
from ..released import input_length
from . import checkpoint as ckpt
from .config import TrainConfig, model_source, resolve
from .consistency import CompositionConsistency
from .distill import StateDistillation, TaskDistillation
from .evaluate import evaluate_model
from .inputs import load_task_features, pretraining_blocks, pretraining_collator, pretraining_evaluator
from .models import build_model, read_model_config, size_of, tokenizer_for, with_bert_names
from .recipes import PRIMED_RECIPES, RECIPE_STAGES
from .trainer import MuxTrainer, MuxTrainingArguments, ShardedBatches

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
    config, source_config = resolve_run(config, resume_from)
    source = resume_from or config.init or config.init_encoder
    tokenizer = tokenizer_for(config, source, source_config.get("model_type"))
    if config.stage == "finetune":
        return _finetune(config, tokenizer, resume_from, source_config)
    return _pretrain(config, tokenizer, resume_from, source_config)


def resolve_run(config: TrainConfig, resume_from: Path | None = None) -> tuple[TrainConfig, dict[str, Any]]:
    """The one place a run's settings are settled: ``config`` with every unset setting taken from
    its recipe (the named one, else the one its checkpoint records, else the one for its stage and
    the size of the model it starts from), validated; and the ``config.json`` of the checkpoint or
    encoder it starts from (``{}`` for a fresh preset), read once for everything after."""
    model_source(config)  # before any folder is read
    source = resume_from or config.init or config.init_encoder
    saved = read_model_config(source) if source else {}
    if config.preset:
        return resolve(config, config.preset, config.num_instances or MuxBertConfig.num_instances), saved
    instances = config.num_instances or saved.get("num_instances") or (2 if config.init_encoder else 1)
    # The recipe its checkpoint was trained with (and the paper's for its released checkpoints),
    # unless another is named.
    default = saved.get("training_recipe") if config.init or resume_from else None
    if config.stage not in RECIPE_STAGES.get(default, ()):
        default = None
    if default is None and saved.get("forward_variant") == "released" and config.stage == "finetune":
        default = "paper"
    resolved = resolve(config, size_of(SimpleNamespace(**with_bert_names(saved))), instances, default_recipe=default,
                       world_size=process_state().num_processes)
    return resolved, saved


def _pretrain(config: TrainConfig, tokenizer, resume_from: Path | None, source_config: dict[str, Any]
              ) -> dict[str, Any]:
    from transformers import set_seed

    state = process_state()
    set_seed(config.seed)
    model = build_model(config, config.stage, tokenizer, {}, resume_from, source_config)
    with state.main_process_first():  # one process fetches and tokenizes; the others read its cache
        train_blocks, eval_blocks = pretraining_blocks(config, tokenizer)
    collate = pretraining_collator(config.stage, tokenizer, model, config, seed=config.seed)
    evaluate = pretraining_evaluator(config.stage, tokenizer, model, config, eval_blocks) if eval_blocks else None
    loss = None
    if config.teacher:
        if config.stage != "retrieval":
            raise ValueError(f"--teacher applies to fine-tuning and to retrieval priming, not to --stage {config.stage}")
        loss = StateDistillation(config.teacher, model, weight=config.distill_weight,
                                 pooling=config.distill_pooling, device=state.device)
    streamed = not hasattr(train_blocks, "__len__")
    return _train(config, model, tokenizer, train_blocks, collate, evaluate, loss, resume_from, ("loss", False),
                  {"num_instances": model.config.num_instances, "train_blocks": None if streamed else len(train_blocks)})


def _finetune(config: TrainConfig, tokenizer, resume_from: Path | None, source_config: dict[str, Any]
              ) -> dict[str, Any]:
    from transformers import set_seed

    state = process_state()
    with state.main_process_first():  # one process fetches and tokenizes; the others read its cache
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
    model = build_model(config, spec.kind, tokenizer, labels, resume_from, source_config)
    validation = features["validation"]

    def evaluate(model, shard: tuple[int, int] = (0, 1)) -> dict[str, float]:
        return evaluate_model(model, spec, validation, tokenizer, config.eval_batch_size, composition_seed=0,
                              shard=shard)

    loss = None
    if config.teacher:
        loss = TaskDistillation(config.teacher, model, temperature=config.distill_temperature,
                                weight=config.distill_weight, device=state.device)
    if config.consistency_weight:
        loss = CompositionConsistency(config.consistency_weight, inner=loss)
    collate = PaddingCollator(tokenizer, pad_to_length=input_length(model.config))
    return _train(config, model, tokenizer, features["train"], collate, evaluate, loss, resume_from,
                  (spec.metric, True),  # every task's main metric grows with quality
                  {"task": spec.name, "main_metric": spec.metric, "num_instances": model.config.num_instances,
                   "train_examples": len(features["train"]), "eval_examples": len(validation)})


# --------------------------------------------------------------------------- the Trainer's arguments


def _cpu_processes() -> bool:
    """Without a GPU, several processes (torchrun / accelerate launch) must use the CPU (gloo)
    backend, which Accelerate only picks when told so. With GPUs every process needs its own:
    more are refused here, before the first barrier (CUDA would fail there with "invalid device
    ordinal")."""
    import torch

    if not torch.cuda.is_available():
        return True
    local_processes, gpus = int(os.environ.get("LOCAL_WORLD_SIZE", "1")), torch.cuda.device_count()
    if local_processes > gpus:
        raise ValueError(f"{local_processes} processes on this machine but {gpus} GPU(s): start one process per GPU "
                         f"(torchrun --nproc-per-node {gpus}), or hide the GPUs (CUDA_VISIBLE_DEVICES=) to train "
                         f"in CPU processes")
    return False


def process_state():
    """Accelerate's process state, set up as the Trainer's arguments will (the first set-up of
    the shared state decides the backend: a plain ``PartialState()`` would leave CPU processes
    ungrouped, each believing it is the main one)."""
    from accelerate import PartialState

    return PartialState(cpu=_cpu_processes())


def _precision(setting: str) -> str:
    import torch

    from ..devices import check_cpu_bf16

    if setting == "auto":
        if torch.cuda.is_available():
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "no"
    if setting == "fp16" and not torch.cuda.is_available():
        raise ValueError("--mixed-precision fp16 needs a CUDA GPU; on the CPU use bf16 or no")
    if setting == "bf16" and not torch.cuda.is_available():
        check_cpu_bf16("--mixed-precision bf16", "--mixed-precision no")
    return setting


def reporting(report_to: list[str] | None) -> list[str]:
    """The Trainer's reporting integrations named by ``--report-to`` (TensorBoard when installed
    if unset). One of transformers' own whose package is missing is refused here, naming the
    package (the Trainer would fail later, in its callback); a registered third-party one is
    taken as it is."""
    from transformers.integrations import INTEGRATION_TO_CALLBACK, get_available_reporting_integrations

    available = set(get_available_reporting_integrations())
    if report_to is None:
        return ["tensorboard"] if "tensorboard" in available else ["none"]
    for name in report_to:
        if name not in (*INTEGRATION_TO_CALLBACK, "all", "none"):
            raise ValueError(f"--report-to {name}: not a reporting integration; choose among "
                             f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))}, all or none")
        own = name in INTEGRATION_TO_CALLBACK and INTEGRATION_TO_CALLBACK[name].__module__.startswith("transformers.")
        if own and name not in available:
            raise ValueError(f"--report-to {name}: the {name} package is not installed (pip install {name})")
    return list(report_to) or ["none"]


def training_arguments(config: TrainConfig, num_examples: int | None, best_metric: tuple[str, bool] | None
                       ) -> MuxTrainingArguments:
    """The Trainer's arguments of a resolved ``config``: the run's length in optimizer steps
    (epochs of whole global batches, at least ``min_steps``), the warm-up in steps, and the
    evaluation, checkpoint and logging intervals; ``best_metric`` (name, greater is better)
    ranks checkpoints when the run evaluates."""
    state = process_state()
    precision = _precision(config.mixed_precision)
    accumulation = config.gradient_accumulation_steps
    if num_examples is None and not config.max_steps:
        raise ValueError("--streaming trains for --max-steps steps: a stream's length is not known in advance")
    if num_examples is not None:
        per_epoch = math.ceil(max(1, num_examples // (config.batch_size * state.num_processes)) / accumulation)
    total = config.max_steps or max(1, config.min_steps or 1, math.ceil(config.num_epochs * per_epoch))
    warmup = config.warmup_steps if config.warmup_steps is not None else round(config.warmup_ratio * total)
    load_best = bool(config.load_best_at_end or config.early_stopping_patience)
    if load_best and best_metric is None:
        option = "early_stopping_patience" if config.early_stopping_patience else "load_best_at_end"
        raise ValueError(f"{option} needs an evaluation set to rank checkpoints, and this run has none")
    workers = config.dataloader_workers if config.dataloader_workers is not None else 2 * (state.device.type == "cuda")
    return MuxTrainingArguments(
        output_dir=config.output_dir, max_steps=total, per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.eval_batch_size, gradient_accumulation_steps=accumulation,
        learning_rate=config.lr, encoder_learning_rate=config.encoder_lr, weight_decay=config.weight_decay,
        adam_epsilon=config.adam_eps, max_grad_norm=config.max_grad_norm or 0.0, lr_scheduler_type="linear",
        warmup_steps=warmup, seed=config.seed, bf16=precision == "bf16", fp16=precision == "fp16",
        use_cpu=state.device.type == "cpu", ddp_find_unused_parameters=False,
        eval_strategy="steps" if best_metric else "no", eval_steps=config.eval_steps,
        save_strategy="steps", save_steps=config.save_steps, save_total_limit=config.save_total_limit,
        logging_strategy="steps", logging_steps=config.logging_steps,
        load_best_model_at_end=load_best, metric_for_best_model=best_metric[0] if best_metric else None,
        greater_is_better=best_metric[1] if best_metric else None,
        report_to=reporting(config.report_to), disable_tqdm=not config.progress,
        dataloader_num_workers=workers, remove_unused_columns=False, group_by_length=bool(config.group_by_length),
        start_unmuxed_layers=config.start_unmuxed_layers, num_unmuxed_layers=config.num_unmuxed_layers,
    )


def _train(config: TrainConfig, model, tokenizer, train_set, collate, evaluate, loss, resume_from: Path | None,
           best_metric: tuple[str, bool], facts: dict[str, Any]) -> dict[str, Any]:
    """Train with MuxTrainer, then publish the final model and ``train_results.json``."""
    from transformers import EarlyStoppingCallback

    args = training_arguments(config, len(train_set) if hasattr(train_set, "__len__") else None,
                              best_metric if evaluate else None)
    if config.recipe and config.stage != "finetune":
        model.config.training_recipe = config.recipe  # the next stage started from it takes it too
    provenance = {"source_hash": source_hash(),
                  "init_encoder_sha256": folder_hash(config.init_encoder) if config.init_encoder else None}
    trainer = MuxTrainer(
        model=model, args=args, train_dataset=train_set, data_collator=collate, processing_class=tokenizer,
        loss=loss, evaluator=evaluate, description=config.stage,
        run_facts={"config": json.loads(json.dumps(config.to_dict(), default=str)), **provenance},
        callbacks=[EarlyStoppingCallback(config.early_stopping_patience)] if config.early_stopping_patience else None)
    if args.should_save:
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(config.output_dir) / "train_config.json").write_text(json.dumps(config.to_dict(), indent=1, default=str))
    start = ckpt.run_record(resume_from)["step"] if resume_from else 0  # before rotation may remove it
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    summary = _summary(trainer, config, start, best_metric, {**facts, **provenance})
    trainer.accelerator.wait_for_everyone()  # no rank may still read the run folder while it is swapped
    if args.should_save:
        def write(folder: Path) -> None:
            trainer.accelerator.unwrap_model(trainer.model).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            ckpt.write_json_atomic(folder / "train_results.json", summary)

        ckpt.publish_final(config.output_dir, write)
    trainer.accelerator.wait_for_everyone()
    return summary


def _summary(trainer: MuxTrainer, config: TrainConfig, start: int, best_metric: tuple[str, bool],
             facts: dict[str, Any]) -> dict[str, Any]:
    import torch
    from accelerate.utils import gather_object

    state, args = trainer.state, trainer.args
    run = trainer.run_state()
    trained = run.elapsed()
    session = trained - getattr(run, "_earlier", run.train_seconds)
    evaluations = {record["step"]: {k.removeprefix("eval_"): v for k, v in record.items() if k.startswith("eval_")}
                   for record in state.log_history if any(k.startswith("eval_") for k in record)}
    losses = [record["loss"] for record in state.log_history if "loss" in record]
    samples_per_step = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
    first_ids = None  # the examples of this session's first micro-batch (not known for a stream)
    if hasattr(trainer.train_dataset, "__len__"):
        batches = ShardedBatches(len(trainer.train_dataset), args.per_device_train_batch_size, args.world_size,
                                 args.process_index, args.seed)
        epoch, update = divmod(start, math.ceil(batches.batches_per_epoch / args.gradient_accumulation_steps))
        first_ids = batches.indices(epoch * batches.batches_per_epoch + update * args.gradient_accumulation_steps)
    # Every rank's sum of its weights: equal on all ranks when gradients were synchronised.
    model = trainer.accelerator.unwrap_model(trainer.model)
    weight_sum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    summary = {
        "stage": config.stage, "final_step": state.global_step, "total_steps": state.max_steps,
        "resumed_from_step": start, "world_size": args.world_size, "train_seconds": trained,
        "session_seconds": session,
        "train_samples_per_s": (state.global_step - start) * samples_per_step / max(session, 1e-9),
        "final_loss": losses[-1] if losses else None,
        "eval": evaluations.get(state.global_step) or (evaluations[max(evaluations)] if evaluations else None),
        "stopped_early": state.global_step < state.max_steps,
        "first_batch_ids_per_rank": gather_object([first_ids]),
        "weight_sum_per_rank": trainer.accelerator.gather(weight_sum.to(args.device)).tolist(),
        "code": code_version(), **facts,
    }
    if not config.init_encoder:
        summary.pop("init_encoder_sha256", None)
    if state.best_model_checkpoint and state.best_global_step:
        summary["best_checkpoint"] = {"path": state.best_model_checkpoint, "step": state.best_global_step,
                                      "metric": best_metric[0], "value": state.best_metric,
                                      "greater_is_better": best_metric[1]}
        if args.load_best_model_at_end and state.best_global_step != state.global_step:
            summary["eval"], summary["loaded_best"] = evaluations.get(state.best_global_step), True
    return summary


# --------------------------------------------------------------------------- primed pre-training


def after_priming(priming: TrainConfig, then: TrainConfig) -> dict[str, Any]:
    """Two stages from one command: ``priming`` (into its own folder; skipped when it finished
    there before), then ``then`` started from it. Returns the second stage's summary."""
    folder = Path(priming.output_dir)
    if not (folder / "train_results.json").is_file():
        run_stage(dataclasses.replace(priming, resume=priming.resume and folder.is_dir()))
    # The second stage starts from the primed model: the settings that build a fresh one are done with.
    return run_stage(dataclasses.replace(then, init=str(folder), init_encoder=None, preset=None, keep_layers=None,
                                         model_overrides=type(then.model_overrides)(), family=None))


def primed_pretraining(config: TrainConfig) -> tuple[TrainConfig, TrainConfig] | None:
    """The priming and the pre-training of ``pretrain --recipe paper-SIZE`` for a fresh model of
    that size (``None`` when the command trains one stage: another recipe, an ``--init`` or
    ``--stage retrieval``, or N = 1, which has nothing to retrieve)."""
    if config.recipe not in PRIMED_RECIPES or config.stage == "retrieval" or config.init or config.init_encoder:
        return None
    fresh = dataclasses.replace(config, preset=config.preset or config.recipe.removeprefix("paper-"))
    if (config.num_instances or 1) == 1:  # unset: a fresh model is plain (N = 1), as for one stage
        return None if config.preset else (fresh, fresh)
    priming = dataclasses.replace(fresh, stage="retrieval", output_dir=str(Path(config.output_dir) / "priming"))
    return priming, fresh


def run_command(config: TrainConfig) -> dict[str, Any]:
    """What ``muxplm pretrain`` / ``finetune`` run: one stage, or the paper's priming and
    pre-training (``--recipe paper-SIZE``)."""
    stages = primed_pretraining(config)
    if stages is None:
        return run_stage(config)
    priming, then = stages
    return run_stage(then) if priming is then else after_priming(priming, then)


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
