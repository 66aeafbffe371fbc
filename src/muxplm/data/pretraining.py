"""Pre-training text of any size: files (txt, jsonl, parquet; several, globs) and hub datasets,
read with ``datasets`` into memory-mapped Arrow tables and packed into token blocks by a batched
``map`` over ``num_proc`` processes, all cached on disk.

The cache lives under ``cache_dir`` (default: muxplm's user cache, not a run's folder), keyed by
what determines the blocks: the input files (path, size, modification time) or the hub dataset,
the tokenizer, and the block length (``datasets``' fingerprints of the load and of the map). A
later run over the same inputs, whatever its output folder, reads the prepared blocks instead of
tokenizing again, and memory-maps them: the corpus never has to fit in the process's memory.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path

from .sources import default_cache_dir

# The ``datasets`` builder that reads each kind of file.
BUILDER_OF_SUFFIX = {".txt": "text", ".text": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def _cache(cache_dir) -> str:
    return str(Path(cache_dir or default_cache_dir()) / "datasets")


def expand_files(patterns: Sequence[str | Path]) -> dict[str, list[str]]:
    """The files the patterns name (each a path or a glob), by ``datasets`` builder; a pattern
    that matches nothing, or a file of an unknown kind, is an error naming it."""
    by_builder: dict[str, list[str]] = {}
    for pattern in map(str, patterns):
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise ValueError(f"--train-file {pattern}: no file matches")
        for file in matches:
            path = Path(file)
            if not path.is_file():
                raise ValueError(f"{file}: file not found")
            builder = BUILDER_OF_SUFFIX.get(path.suffix.lower())
            if builder is None:
                raise ValueError(f"{file}: a pre-training file is .txt, .jsonl or .parquet, not {path.suffix or 'without a suffix'}")
            by_builder.setdefault(builder, []).append(str(path.resolve()))
    return by_builder


def load_corpus(train_files: Sequence[str | Path] = (), datasets: Sequence[str] = (), cache_dir=None,
                num_proc: int | None = None, streaming: bool = False):
    """The pre-training text of ``train_files`` and hub ``datasets`` (``NAME`` or
    ``NAME:CONFIG``, their ``train`` split), one ``text`` column, memory-mapped from the cache;
    with ``streaming``, an ``IterableDataset`` read as it goes (nothing prepared or cached).

    Text files give a row per line (blocks are packed from the token stream, so line breaks do not
    matter); JSONL and parquet files, and hub datasets, need a ``text`` column."""
    from datasets import concatenate_datasets, load_dataset

    parts = []
    for builder, files in expand_files(train_files).items():
        options = {"sample_by": "line"} if builder == "text" else {}
        if streaming:
            options["streaming"] = True
        else:  # files are read in parallel, one process per file at most
            workers = min(num_proc or 1, len(files))
            options["num_proc"] = workers if workers > 1 else None
        part = load_dataset(builder, data_files=files, split="train", cache_dir=_cache(cache_dir), **options)
        parts.append(_text_column(part, ", ".join(files)))
    for name in datasets:
        path, _, config = str(name).partition(":")
        options = {"streaming": True} if streaming else {"num_proc": num_proc if num_proc and num_proc > 1 else None}
        part = load_dataset(path, config or None, split="train", cache_dir=_cache(cache_dir), **options)
        parts.append(_text_column(part, f"--dataset {name}"))
    if not parts:
        raise ValueError("no pre-training text: give --train-file or --dataset")
    return parts[0] if len(parts) == 1 else concatenate_datasets(parts)


def _text_column(part, source: str):
    if part.column_names is not None and "text" not in part.column_names:  # a stream may not know its columns
        raise ValueError(f"{source}: no 'text' column (found {', '.join(part.column_names)})")
    return part.select_columns(["text"])
