"""The row format every task loader produces, so tokenization and training never special-case
a source, and the fixed train/validation split.

- sentence tasks: ``text`` (str), optional ``text_pair`` (str), ``label`` (int class id, or float
  for regression);
- token tasks: ``tokens`` (list[str]), ``tags`` (list[int] indexing ``TaskSpec.label_names``).

Fixed splits: where a source has no validation split, all examples (in file order, after the
de-duplication a loader documents) are permuted with ``numpy.random.default_rng(seed)`` (PCG64,
identical on every machine) and the first ``round(10% * n)`` of the permutation become
``validation``; both splits are then put back in file order. ``max_examples`` keeps only the first
``max_examples`` of that same permutation before splitting, so a capped task is a fixed subset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from datasets import Dataset, DatasetDict, Features, Sequence as HFSequence, Value


@dataclass(frozen=True)
class TaskSpec:
    """What a task is: enough for models (num labels), training (loss) and metrics."""

    name: str
    kind: str  # "sentence" | "token"
    label_names: list[str] = field(default_factory=list)  # empty for regression
    is_regression: bool = False
    text_columns: tuple[str, ...] = ("text",)  # ("text", "text_pair") for pair tasks
    metric: str = "accuracy"  # key of compute_task_metrics() that is the task's main score
    description: str = ""

    @property
    def num_labels(self) -> int:
        return 1 if self.is_regression else len(self.label_names)


_SENTENCE_FEATURES = Features({"text": Value("string"), "label": Value("int64")})
_PAIR_FEATURES = Features({"text": Value("string"), "text_pair": Value("string"),
                           "label": Value("int64")})
TOKEN_FEATURES = Features({"tokens": HFSequence(Value("string")), "tags": HFSequence(Value("int64"))})


def _features_for(rows: list[dict]) -> Features | None:
    keys = set(rows[0]) if rows else set()
    if keys == {"tokens", "tags"}:
        return TOKEN_FEATURES
    if "label" in keys and isinstance(rows[0]["label"], float):
        feats = {k: Value("string") for k in keys if k != "label"}
        return Features({**feats, "label": Value("float64")})
    if keys == {"text", "label"}:
        return _SENTENCE_FEATURES
    if keys == {"text", "text_pair", "label"}:
        return _PAIR_FEATURES
    return None


def to_dataset(rows: list[dict], like: list[dict] | None = None) -> Dataset:
    """Rows -> Dataset; ``like`` gives the columns/types when ``rows`` is empty."""
    template = rows or like or []
    feats = _features_for(template)
    columns = {k: [r[k] for r in rows] for k in (template[0] if template else {})}
    return Dataset.from_dict(columns, features=feats)


def split_fixed(
    rows: list[dict], seed: int = 0, validation_fraction: float = 0.1,
    max_examples: int | None = None,
) -> DatasetDict:
    """Deterministic train/validation split of ``rows`` (see the module docstring)."""
    n = len(rows)
    perm = np.random.default_rng(seed).permutation(n)
    if max_examples is not None:
        perm = perm[:max_examples]
    n_val = int(round(len(perm) * validation_fraction))
    if len(perm) >= 2:
        n_val = min(max(n_val, 1), len(perm) - 1)  # both splits non-empty
    val_idx, train_idx = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    return DatasetDict({
        "train": to_dataset([rows[i] for i in train_idx], rows),
        "validation": to_dataset([rows[i] for i in val_idx], rows),
    })
