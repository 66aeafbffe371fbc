"""The three training stages: building the model and data for each, then running the loop.

1. ``retrieval``: token-retrieval priming (auto-encoding) from a preset or a checkpoint;
2. ``mlm`` (MUX-BERT) / ``electra`` (MUX-ELECTRA): pre-training, normally ``--init`` from
   stage 1;
3. ``finetune``: a task head on a stage-2 checkpoint, on any MUX checkpoint, or on a plain
   BERT/ELECTRA encoder (warm start, ``init_encoder``).

Every run writes a self-contained model directory (config with ``id2label``, safetensors
weights, tokenizer files) that the next stage's ``init`` points at.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from ..configuration import SIZE_PRESETS, MuxBertConfig, MuxElectraConfig
from ..data import (
    MLMCollator,
    PaddingCollator,
    ReplacedTokenCollator,
    TaskSpec,
    get_task,
    load_local_sentence_task,
    load_local_token_task,
    load_pretraining_corpus,
    load_text_files,
    load_tokenizer,
    tokenize_pretraining,
    tokenize_sentence_task,
    tokenize_token_task,
)
from ..modeling_bert import (
    MuxBertForMaskedLM,
    MuxBertForRetrieval,
    MuxBertForSequenceClassification,
    MuxBertForTokenClassification,
)
from ..modeling_electra import (
    MuxElectraForPreTraining,
    MuxElectraForRetrieval,
    MuxElectraForSequenceClassification,
    MuxElectraForTokenClassification,
)
from . import checkpoint as ckpt
from .config import TrainConfig, resolve
from .distill import StateDistillation, TaskDistillation
from .evaluate import evaluate_model
from .loop import TrainingRun, make_accelerator, train

CONFIG_CLASSES = {"bert": MuxBertConfig, "electra": MuxElectraConfig}
FAMILY_OF_MODEL_TYPE = {"mux_bert": "bert", "mux_electra": "electra", "bert": "bert", "electra": "electra"}
# (family, head) -> model class; head = the stage for pre-training, the task kind for fine-tuning.
MODEL_CLASSES = {
    ("bert", "retrieval"): MuxBertForRetrieval,
    ("bert", "mlm"): MuxBertForMaskedLM,
    ("bert", "sentence"): MuxBertForSequenceClassification,
    ("bert", "token"): MuxBertForTokenClassification,
    ("electra", "retrieval"): MuxElectraForRetrieval,
    ("electra", "electra"): MuxElectraForPreTraining,
    ("electra", "sentence"): MuxElectraForSequenceClassification,
    ("electra", "token"): MuxElectraForTokenClassification,
}
TOKEN_FILE_SUFFIXES = (".conll", ".conllu", ".bio", ".iob", ".iob2", ".txt")
PRETRAIN_EVAL_BLOCKS = 256
DEFAULT_NEW_DEMUX = "unbind"

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- checkpoints


def read_model_config(path: str | Path) -> dict[str, Any]:
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{path} is not a model directory (no config.json)")
    try:
        return json.loads(config_file.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{config_file} is not valid JSON: {error}") from None


def _tokenizer_for(config: TrainConfig, model_dir: str | Path | None):
    """``--tokenizer`` if given, else the tokenizer saved with the model, else the default."""
    if config.tokenizer:
        return load_tokenizer(config.tokenizer)
    if model_dir is not None and any((Path(model_dir) / name).is_file() for name in ("tokenizer.json", "vocab.txt")):
        return load_tokenizer(model_dir)
    return load_tokenizer()


def load_classifier(checkpoint: str | Path):
    """A fine-tuned sequence/token classifier and its tokenizer from a checkpoint directory.
    Raises ``ValueError`` for a checkpoint without a classification head (e.g. an MLM one)."""
    saved = read_model_config(checkpoint)
    if saved.get("model_type") not in ("mux_bert", "mux_electra"):
        raise ValueError(f"{checkpoint} holds a {saved.get('model_type')!r} model, not a MUX model")
    architectures = saved.get("architectures") or []
    kind = next((k for k, marker in (("sentence", "ForSequenceClassification"), ("token", "ForTokenClassification"))
                 if any(marker in a for a in architectures)), None)
    if kind is None:
        found = ", ".join(architectures) or "unknown"
        raise ValueError(
            f"{checkpoint} is not a fine-tuned classifier (it holds {found}); evaluate needs the output of "
            f"`muxplm finetune`"
        )
    family = FAMILY_OF_MODEL_TYPE[saved["model_type"]]
    model = MODEL_CLASSES[(family, kind)].from_pretrained(checkpoint)
    return model, load_tokenizer(checkpoint)


def size_of(model_config) -> str | None:
    """The preset a model config matches, for picking default hyper-parameters; small models
    that match none get the CPU (``tiny``) recipe."""
    for name, sizes in SIZE_PRESETS.items():
        if all(getattr(model_config, key, None) == value for key, value in sizes.items()):
            return name
    return "tiny" if getattr(model_config, "hidden_size", 0) <= 256 else None


# --------------------------------------------------------------------------- data


def _subset(dataset, limit: int | None, seed: int = 0):
    """A fixed random subset of ``limit`` rows (all rows when ``limit`` is None or larger)."""
    if limit is None or limit >= len(dataset):
        return dataset
    return dataset.shuffle(seed=seed).select(range(limit))


def load_task_features(
    tokenizer,
    *,
    task: str | None = None,
    train_file: list[str] | str | None = None,
    validation_file: str | None = None,
    task_kind: str | None = None,
    label_names: list[str] | None = None,
    max_length: int = 128,
    cache_dir: str | None = None,
    splits: tuple[str, ...] = ("train", "validation"),
    max_examples: dict[str, int | None] | None = None,
    seed: int = 0,
) -> tuple[TaskSpec, dict[str, Any]]:
    """Load a task (built-in, hub or local files) and tokenize the requested splits.

    Returns ``(spec, {split: tokenized dataset})``; sentence rows get ``labels`` per example,
    token rows a label on the first sub-word of every word.
    """
    if isinstance(train_file, str):
        train_file = [train_file]
    files = list(train_file or [])
    if files or validation_file:
        first = files[0] if files else validation_file
        kind = task_kind or ("token" if Path(first).suffix.lower() in TOKEN_FILE_SUFFIXES else "sentence")
        if len(files) > 1:
            raise ValueError("fine-tuning takes one --train-file (give the validation data with --validation-file)")
        # Evaluation may give only the validation file: it then also defines the label set check.
        primary = files[0] if files else validation_file
        if kind == "token":
            spec, data = load_local_token_task(primary, validation_file, label_names=label_names, name=task, seed=seed)
        else:
            regression = True if label_names is not None and label_names == ["LABEL_0"] else None
            names = None if regression else label_names
            spec, data = load_local_sentence_task(primary, validation_file, label_names=names,
                                                  is_regression=regression, name=task, seed=seed)
    elif task:
        spec, data = get_task(task, cache_dir=cache_dir)
    else:
        raise ValueError("give a task name (--task) or data files (--train-file / --validation-file)")
    features = {}
    limits = max_examples or {}
    for split in splits:
        if split not in data:
            raise ValueError(f"task {spec.name!r} has no {split!r} split (it has {', '.join(data)})")
        rows = _subset(data[split], limits.get(split), seed=seed)
        if len(rows) == 0:
            raise ValueError(f"the {split} split of task {spec.name!r} is empty")
        tokenize = tokenize_token_task if spec.kind == "token" else tokenize_sentence_task
        features[split] = tokenize(rows, tokenizer, max_length=max_length)
    return spec, features


def _pretraining_blocks(config: TrainConfig, tokenizer):
    if config.train_file:
        texts = load_text_files(config.train_file)
    else:
        texts = load_pretraining_corpus(cache_dir=config.cache_dir, max_words=config.corpus_max_words,
                                        sources=config.corpus_sources)
    texts = texts.select_columns(["text"])
    blocks = tokenize_pretraining(texts, tokenizer, max_length=config.max_length)
    if len(blocks) == 0:
        raise ValueError("the pre-training text gave no token blocks")
    # A fixed held-out slice for evaluation (not when the corpus is tiny).
    held_out = min(PRETRAIN_EVAL_BLOCKS, len(blocks) // 20)
    if held_out == 0:
        return blocks, None
    split = blocks.train_test_split(test_size=held_out, seed=0, shuffle=True)
    return split["train"], split["test"]


class _DropColumns:
    """Padding collator that drops columns the model does not take."""

    def __init__(self, tokenizer, drop=("special_tokens_mask",)):
        self.pad = PaddingCollator(tokenizer)
        self.drop = drop

    def __call__(self, rows):
        return self.pad([{k: v for k, v in row.items() if k not in self.drop} for row in rows])


def _pretraining_collator(stage: str, tokenizer, model, config: TrainConfig, seed: int):
    if stage == "retrieval":
        return _DropColumns(tokenizer)
    if stage == "mlm":
        return MLMCollator(tokenizer, mlm_probability=config.mlm_probability, seed=seed)
    return ReplacedTokenCollator(tokenizer, replace_probability=model.config.replace_probability, seed=seed)


def _pretraining_evaluator(stage, tokenizer, model, config, blocks):
    """Held-out loss and accuracy (retrieval accuracy, masked-token accuracy, or replaced-token
    detection accuracy), with a fixed corruption so steps are comparable."""

    def evaluate(model) -> dict[str, float]:
        collate = _pretraining_collator(stage, tokenizer, model, config, seed=0)
        device = next(model.parameters()).device
        total_loss, correct, counted, batches = 0.0, 0, 0, 0
        torch.manual_seed(0)  # retrieval samples its targets from the global RNG (restored by the loop)
        with torch.inference_mode():
            for start in range(0, len(blocks), config.eval_batch_size):
                rows = [blocks[i] for i in range(start, min(start + config.eval_batch_size, len(blocks)))]
                batch = {k: v.to(device) for k, v in collate(rows).items()}
                output = model(**batch)
                total_loss += float(output.loss)
                batches += 1
                if stage == "retrieval":
                    hits, count = (output.logits.argmax(-1) == output.labels), output.labels.numel()
                elif stage == "mlm":
                    targets = batch["labels"][batch["labels"] != -100]
                    hits, count = (output.logits.argmax(-1) == targets), targets.numel()
                else:
                    keep = batch["labels"] != -100
                    hits = (output.logits[keep] > 0).long() == batch["labels"][keep]
                    count = int(keep.sum())
                correct += int(hits.sum())
                counted += count
        return {"loss": total_loss / max(batches, 1), "accuracy": correct / max(counted, 1)}

    return evaluate


# --------------------------------------------------------------------------- models


def _family(config: TrainConfig, saved: dict[str, Any] | None) -> str:
    if saved is not None:
        family = FAMILY_OF_MODEL_TYPE.get(saved.get("model_type"))
        if family is None:
            raise ValueError(f"cannot start from a {saved.get('model_type')!r} checkpoint; need a MUX-BERT/ELECTRA one")
        if config.family and config.family != family:
            raise ValueError(f"--family {config.family} disagrees with the {family} checkpoint given")
        return family
    return config.family or ("electra" if config.stage == "electra" else "bert")


def _mux_settings(config: TrainConfig) -> dict[str, Any]:
    """The multiplexing fields given by the user. N = 1 defaults to the plain identity model; a
    new MUX model (N > 1, fresh or warm-started) to the unbinding demultiplexer, which primes
    in hundreds of steps where the paper's RSA demultiplexer needs thousands."""
    settings = {}
    if config.num_instances is not None:
        settings["num_instances"] = config.num_instances
    mux, demux = config.mux_type, config.demux_type
    if config.num_instances == 1 or mux == "identity":
        mux, demux = mux or "identity", demux or "identity"
    elif (config.preset or config.init_encoder) and not config.init:
        demux = demux or DEFAULT_NEW_DEMUX
    if mux is not None:
        settings["mux_type"] = mux
    if demux is not None:
        settings["demux_type"] = demux
    return settings


def _config_overrides(config: TrainConfig, labels: dict[str, Any]) -> dict[str, Any]:
    overrides = dict(config.model_overrides)
    if config.dropout is not None:
        overrides.update(hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout)
    for field in ("retrieval_loss_weight", "retrieval_softmax", "sentence_pooling", "num_unmuxed_layers",
                  "mux_key_norm"):
        if getattr(config, field) is not None:
            overrides[field] = getattr(config, field)
    overrides.update(labels)
    return overrides


def build_model(config: TrainConfig, head: str, tokenizer, labels: dict[str, Any], resume_from: Path | None):
    """The model for a run: from the resume checkpoint, ``init``, ``init_encoder`` or a preset."""
    source = resume_from or config.init
    saved = read_model_config(source) if source else None
    if config.init_encoder:
        saved_plain = read_model_config(config.init_encoder)
        family = FAMILY_OF_MODEL_TYPE.get(saved_plain.get("model_type"))
        if family is None or saved_plain.get("model_type", "").startswith("mux_"):
            raise ValueError(
                f"--init-encoder needs a plain BERT or ELECTRA checkpoint; {config.init_encoder} holds "
                f"{saved_plain.get('model_type')!r} (use --init for MUX checkpoints)"
            )
    else:
        family = _family(config, saved)
    key = (family, head)
    if key not in MODEL_CLASSES:
        raise ValueError(f"stage {config.stage!r} does not apply to a MUX-{family.upper()} model"
                         + (" (MUX-BERT pre-trains with --stage mlm, MUX-ELECTRA with --stage electra)"
                            if head in ("mlm", "electra") else ""))
    model_class = MODEL_CLASSES[key]
    overrides = _config_overrides(config, labels)
    mux = _mux_settings(config)
    classifier = head in ("sentence", "token")
    if resume_from is not None:
        model = model_class.from_pretrained(resume_from)
    elif config.init:
        if config.model_overrides:
            raise ValueError("--model-overrides only applies to a fresh --preset model")
        model = model_class.from_pretrained(config.init, **mux, **overrides, ignore_mismatched_sizes=classifier)
        _say_if_head_restarts(saved, model, config.init)
    elif config.init_encoder:
        mux.setdefault("num_instances", 2)
        model = model_class.from_encoder(config.init_encoder, **mux, **overrides)
    elif config.preset:
        model_config = CONFIG_CLASSES[family].from_preset(
            config.preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **mux, **overrides
        )
        model = model_class(model_config)
    else:
        raise ValueError("choose the model: --preset tiny|small|base|large, --init CHECKPOINT_DIR or "
                         "--init-encoder PLAIN_BERT_DIR")
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary holds only "
                         f"{model.config.vocab_size}")
    return model


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


def _say_if_head_restarts(saved: dict[str, Any], model, init: str) -> None:
    """Transformers' own notice is silenced (``_quiet_libraries``): a classifier whose trained
    head does not fit the new task, and so starts from scratch, is announced here."""
    wanted = type(model).__name__
    previous = len(saved.get("id2label") or {})
    if wanted in (saved.get("architectures") or []) and previous != model.config.num_labels:
        logger.warning("%s holds a %s head for %d labels; this task has %d, so the classifier head starts from "
                       "scratch (the encoder is kept)", init, wanted, previous, model.config.num_labels)


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
    resume_from = _resume_point(config)
    model_dir = resume_from or config.init or config.init_encoder
    tokenizer = _tokenizer_for(config, model_dir)
    if config.stage == "finetune":
        return _finetune(config, tokenizer, resume_from)
    return _pretrain(config, tokenizer, resume_from)


def _resolved(config: TrainConfig, resume_from: Path | None) -> TrainConfig:
    """Defaults for the size of the model being trained, read from the checkpoint/preset."""
    if config.preset:
        return resolve(config, config.preset, config.num_instances or MuxBertConfig.num_instances)
    source = resume_from or config.init or config.init_encoder
    saved = read_model_config(source) if source else {}
    instances = config.num_instances or saved.get("num_instances") or (2 if config.init_encoder else 1)
    return resolve(config, size_of(_Attrs(saved)), instances)


class _Attrs:
    def __init__(self, values: dict[str, Any]):
        self.__dict__.update(values)


def _pretrain(config: TrainConfig, tokenizer, resume_from: Path | None) -> dict[str, Any]:
    from accelerate.utils import set_seed

    config = _resolved(config, resume_from)
    accelerator = make_accelerator(config)
    set_seed(config.seed)
    model = build_model(config, config.stage, tokenizer, {}, resume_from)
    with accelerator.main_process_first():  # one process fetches and tokenizes; the others read its cache
        train_blocks, eval_blocks = _pretraining_blocks(config, tokenizer)
    collate = _pretraining_collator(config.stage, tokenizer, model, config, seed=config.seed)
    evaluate = _pretraining_evaluator(config.stage, tokenizer, model, config, eval_blocks) if eval_blocks else None
    loss_fn = None
    if config.teacher:
        if config.stage != "retrieval":
            raise ValueError(f"--teacher applies to fine-tuning and to retrieval priming, not to --stage {config.stage}")
        loss_fn = StateDistillation(config.teacher, model, weight=config.distill_weight, device=accelerator.device)
    run = TrainingRun(
        model=model, tokenizer=tokenizer, train_set=train_blocks, collate=collate, evaluate=evaluate,
        resume_from=resume_from, best_metric=("loss", False), loss_fn=loss_fn,
        summary={"num_instances": model.config.num_instances, "train_blocks": len(train_blocks)},
    )
    return train(run, config, accelerator)


def _finetune(config: TrainConfig, tokenizer, resume_from: Path | None) -> dict[str, Any]:
    from accelerate.utils import set_seed

    config = _resolved(config, resume_from)
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

    def evaluate(model) -> dict[str, float]:
        return evaluate_model(model, spec, validation, tokenizer, config.eval_batch_size, composition_seed=0)

    loss_fn = None
    if config.teacher:
        loss_fn = TaskDistillation(config.teacher, model, temperature=config.distill_temperature,
                                   weight=config.distill_weight, device=accelerator.device)
    run = TrainingRun(
        model=model, tokenizer=tokenizer, train_set=features["train"], collate=PaddingCollator(tokenizer),
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
