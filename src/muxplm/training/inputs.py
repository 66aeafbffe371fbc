"""Data for the training stages: a task's tokenized splits (built-in, hub or local files), the
pre-training blocks with their held-out slice, and the collator and evaluator of each
pre-training stage."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..data import (
    MLMCollator,
    PaddingCollator,
    ReplacedTokenCollator,
    TaskSpec,
    get_task,
    load_local_sentence_task,
    load_local_token_task,
    load_corpus,
    load_pretraining_corpus,
    tokenize_pretraining,
    tokenize_sentence_task,
    tokenize_token_task,
)
from .config import TrainConfig

TOKEN_FILE_SUFFIXES = (".conll", ".conllu", ".bio", ".iob", ".iob2", ".txt")
PRETRAIN_EVAL_BLOCKS = 256


def fixed_subset(dataset, limit: int | None, seed: int = 0):
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
        rows = fixed_subset(data[split], limits.get(split), seed=seed)
        if len(rows) == 0:
            raise ValueError(f"the {split} split of task {spec.name!r} is empty")
        tokenize = tokenize_token_task if spec.kind == "token" else tokenize_sentence_task
        features[split] = tokenize(rows, tokenizer, max_length=max_length)
    return spec, features


def pretraining_blocks(config: TrainConfig, tokenizer):
    """The pre-training blocks (and a held-out slice) of ``--train-file`` / ``--dataset`` or the built-in corpus:
    files of any size are read, tokenized and packed once into ``datasets``' on-disk cache
    (:func:`muxplm.data.load_corpus`) and memory-mapped from there by every later run."""
    workers = config.preprocessing_num_workers or preparation_processes()
    if config.streaming:
        return _streamed_blocks(config, tokenizer)
    if (config.train_file or config.dataset) and config.progress:
        import datasets  # its bars show the reading and tokenizing of a corpus (quiet otherwise: cached reads)

        datasets.enable_progress_bar()
        try:
            return _prepared_blocks(config, tokenizer, workers)
        finally:
            datasets.disable_progress_bar()
    return _prepared_blocks(config, tokenizer, workers)


def _prepared_blocks(config: TrainConfig, tokenizer, workers: int):
    if config.train_file or config.dataset:
        texts = load_corpus(config.train_file, config.dataset, cache_dir=config.cache_dir, num_proc=workers)
    else:
        texts = load_pretraining_corpus(cache_dir=config.cache_dir, max_words=config.corpus_max_words,
                                        sources=config.corpus_sources)
    texts = texts.select_columns(["text"])
    blocks = tokenize_pretraining(texts, tokenizer, max_length=config.max_length, num_proc=workers)
    if config.stage == "retrieval":  # only the corrupting collators read it
        blocks = blocks.remove_columns("special_tokens_mask")
    if len(blocks) == 0:
        raise ValueError("the pre-training text is empty: it gave no token blocks"
                         + (f" ({', '.join(map(str, config.train_file))})" if config.train_file else ""))
    # A fixed held-out slice for evaluation (not when the corpus is tiny).
    held_out = min(PRETRAIN_EVAL_BLOCKS, len(blocks) // 20)
    if held_out == 0:
        return blocks, None
    split = blocks.train_test_split(test_size=held_out, seed=0, shuffle=True)
    return split["train"], split["test"]


def _streamed_blocks(config: TrainConfig, tokenizer):
    """``--streaming``: the blocks of the stream as it is read (an ``IterableDataset``), after its
    first ``PRETRAIN_EVAL_BLOCKS`` blocks, which are held out for evaluation."""
    from datasets import Dataset

    if not (config.train_file or config.dataset):
        raise ValueError("--streaming reads --train-file or --dataset; the built-in corpus is prepared instead")
    texts = load_corpus(config.train_file, config.dataset, cache_dir=config.cache_dir, streaming=True)
    blocks = tokenize_pretraining(texts.select_columns(["text"]), tokenizer, max_length=config.max_length)
    if config.stage == "retrieval":
        blocks = blocks.remove_columns("special_tokens_mask")
    held_out = list(blocks.take(PRETRAIN_EVAL_BLOCKS))
    if not held_out:
        raise ValueError(f"the pre-training text is empty: it gave no token blocks ({', '.join(map(str, config.train_file or config.dataset))})")
    return blocks.skip(len(held_out)), Dataset.from_list(held_out)


def preparation_processes() -> int:
    """Processes that read and tokenize a corpus: every core this process may use."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def pretraining_collator(stage: str, tokenizer, model, config: TrainConfig, seed: int):
    if stage == "retrieval":
        return PaddingCollator(tokenizer)
    if stage == "mlm":
        return MLMCollator(tokenizer, mlm_probability=config.mlm_probability, seed=seed)
    return ReplacedTokenCollator(tokenizer, replace_probability=model.config.replace_probability, seed=seed)


def pretraining_evaluator(stage, tokenizer, model, config, blocks):
    """Held-out loss and accuracy (retrieval accuracy, masked-token accuracy, or replaced-token
    detection accuracy), with a fixed corruption so steps are comparable. ``shard=(rank, world)``
    scores every world-th batch and sums over the processes: the same figures for any world
    size, since each batch's corruption is seeded by its index."""

    def evaluate(model, shard: tuple[int, int] = (0, 1)) -> dict[str, float]:
        rank, world = shard
        collate = pretraining_collator(stage, tokenizer, model, config, seed=0)
        device = next(model.parameters()).device
        totals = torch.zeros(4, dtype=torch.float64, device=device)  # loss sum, batches, hits, counted
        with torch.inference_mode():
            for index, start in enumerate(range(0, len(blocks), config.eval_batch_size)):
                if index % world != rank:
                    continue
                torch.manual_seed(index)  # retrieval samples its targets from the global RNG (the loop restores it)
                if isinstance(getattr(collate, "generator", None), torch.Generator):
                    collate.generator.manual_seed(index)
                rows = [blocks[i] for i in range(start, min(start + config.eval_batch_size, len(blocks)))]
                batch = {k: v.to(device) for k, v in collate(rows).items()}
                output = model(**batch)
                if stage == "retrieval":
                    hits, count = (output.logits.argmax(-1) == output.labels), output.labels.numel()
                elif stage == "mlm":
                    targets = batch["labels"][batch["labels"] != -100]
                    hits, count = (output.logits.argmax(-1) == targets), targets.numel()
                else:
                    keep = batch["labels"] != -100
                    hits = (output.logits[keep] > 0).long() == batch["labels"][keep]
                    count = keep.sum()
                totals += torch.stack([output.loss.double(), torch.ones((), dtype=torch.float64, device=device),
                                       hits.sum().double(), torch.as_tensor(count, device=device).double()])
        if world > 1:
            torch.distributed.all_reduce(totals)
        loss_sum, batches, correct, counted = totals.tolist()
        return {"loss": loss_sum / max(batches, 1), "accuracy": correct / max(counted, 1)}

    return evaluate
