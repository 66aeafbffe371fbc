"""Tasks from the Hugging Face hub (GLUE, CoNLL-2003, Universal Dependencies) converted to the
common rows; needs network access to the hub (the conversions are tested offline)."""

from __future__ import annotations

from collections.abc import Sequence

from datasets import Dataset, DatasetDict, Value

from .rows import TOKEN_FEATURES, TaskSpec


# task -> (text columns in the hub dataset, label names (empty = regression), main metric)
GLUE_TASKS: dict[str, tuple[tuple[str, ...], list[str], str]] = {
    "cola": (("sentence",), ["unacceptable", "acceptable"], "matthews"),
    "sst2": (("sentence",), ["negative", "positive"], "accuracy"),
    "mrpc": (("sentence1", "sentence2"), ["not_equivalent", "equivalent"], "f1"),
    "qqp": (("question1", "question2"), ["not_duplicate", "duplicate"], "f1"),
    "stsb": (("sentence1", "sentence2"), [], "pearson_spearman"),
    "mnli": (("premise", "hypothesis"), ["entailment", "neutral", "contradiction"], "accuracy"),
    "qnli": (("question", "sentence"), ["entailment", "not_entailment"], "accuracy"),
    "rte": (("sentence1", "sentence2"), ["entailment", "not_entailment"], "accuracy"),
    "wnli": (("sentence1", "sentence2"), ["not_entailment", "entailment"], "accuracy"),
}
CONLL2003_NER = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def _glue_spec(task: str) -> TaskSpec:
    cols, names, metric = GLUE_TASKS[task]
    return TaskSpec(f"glue/{task}", "sentence", list(names), not names,
                    ("text", "text_pair") if len(cols) == 2 else ("text",), metric,
                    f"GLUE {task}")


def _map_splits(ds, fn):
    if isinstance(ds, DatasetDict):
        return DatasetDict({k: fn(v) for k, v in ds.items()})
    return fn(ds)


def glue_to_rows(ds: Dataset | DatasetDict, task: str) -> Dataset | DatasetDict:
    """Rename a GLUE split's columns to ``text`` [``text_pair``] ``label``; drop everything else.

    Test splits (labels -1) are dropped from a DatasetDict; MNLI's ``validation_matched`` becomes
    ``validation`` (``validation_mismatched`` is kept under its own name).
    """
    if task not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; known: {sorted(GLUE_TASKS)}")
    cols, names, _ = GLUE_TASKS[task]
    target = ["text", "text_pair"][: len(cols)]
    label_type = Value("float64") if not names else Value("int64")

    def one(d: Dataset) -> Dataset:
        missing = [c for c in (*cols, "label") if c not in d.column_names]
        if missing:
            raise ValueError(f"GLUE {task}: missing column(s) {missing}; found {d.column_names}")
        d = d.select_columns([*cols, "label"])
        d = d.rename_columns(dict(zip(cols, target)))
        return d.cast_column("label", label_type)

    if isinstance(ds, DatasetDict):
        keep = {k: v for k, v in ds.items() if not k.startswith("test")}
        if "validation" not in keep and "validation_matched" in keep:
            keep["validation"] = keep.pop("validation_matched")
        return DatasetDict({k: one(v) for k, v in keep.items()})
    return one(ds)


def _tag_names(d: Dataset, column: str) -> list[str] | None:
    feat = d.features[column]
    inner = getattr(feat, "feature", None)
    if inner is None and isinstance(feat, list) and feat:  # datasets' List[...] spelling
        inner = feat[0]
    return list(getattr(inner, "names", None) or []) or None


def _token_rows(ds, tag_column: str, label_names, fallback):
    """Shared conversion of hub token datasets: ``tokens`` + ``tags`` (int ids) only."""
    first = ds["train"] if isinstance(ds, DatasetDict) and "train" in ds else (
        next(iter(ds.values())) if isinstance(ds, DatasetDict) else ds)
    if tag_column not in first.column_names or "tokens" not in first.column_names:
        raise ValueError(f"missing column(s): need 'tokens' and {tag_column!r}; "
                         f"found {first.column_names}")
    names = list(label_names or _tag_names(first, tag_column) or [])
    sample = next((t for t in first[tag_column] if t), [])
    string_tags = bool(sample) and isinstance(sample[0], str)
    if not names and string_tags:
        names = sorted({t for seq in first[tag_column] for t in seq})
    if not names:
        names = list(fallback or [])
    if not names:
        raise ValueError(f"cannot tell the tag names of {tag_column!r}: pass label_names=")
    index = {t: i for i, t in enumerate(names)}

    def one(d: Dataset) -> Dataset:
        def conv(batch):
            tags = [[index[t] for t in seq] if string_tags else [int(t) for t in seq]
                    for seq in batch[tag_column]]
            return {"tokens": batch["tokens"], "tags": tags}

        return d.map(conv, batched=True, remove_columns=d.column_names, features=TOKEN_FEATURES)

    return _map_splits(ds, one), names


def conll2003_to_rows(ds: Dataset | DatasetDict, tag_column: str = "ner_tags",
                      label_names: Sequence[str] | None = None):
    """CoNLL-2003 (``tokens``, ``ner_tags``, ...) -> (``tokens``/``tags`` rows, tag names).

    Tag names come from ``label_names``, else the ClassLabel feature, else (for ``ner_tags``) the
    standard Hugging Face order ``CONLL2003_NER``. String tags are mapped by those names.
    """
    return _token_rows(ds, tag_column, label_names,
                       CONLL2003_NER if tag_column == "ner_tags" else None)


def ud_to_rows(ds: Dataset | DatasetDict, tag_column: str = "upos",
               label_names: Sequence[str] | None = None):
    """Universal Dependencies (``tokens``, ``upos``, ...) -> (``tokens``/``tags`` rows, names).

    Tag names come from ``label_names`` or the ClassLabel feature (or the strings themselves).
    """
    return _token_rows(ds, tag_column, label_names, None)


# Hub ids. CoNLL-2003 and UD are script-based datasets on the hub; current `datasets` releases
# cannot run loading scripts, so by default they are read from the hub's automatic parquet
# conversion (revision "refs/convert/parquet"). Override with hub_id=/revision= if needed.
HUB_IDS = {
    "glue": ("nyu-mll/glue", None),
    "conll2003": ("eriktks/conll2003", "refs/convert/parquet"),
    "ud": ("universal-dependencies/universal_dependencies", "refs/convert/parquet"),
}


def load_hub_task(name: str, hub_id: str | None = None, revision: str | None = None,
                  **load_kwargs) -> tuple[TaskSpec, DatasetDict]:
    """Load a task from the Hugging Face hub into the common row format (needs network).

    Names: GLUE tasks (``sst2``, ``mnli``, ``qqp``, ``qnli``, ``rte``, ``mrpc``, ``cola``,
    ``stsb``, ``wnli``, optionally written ``glue/<task>``) via
    ``datasets.load_dataset("nyu-mll/glue", task)``; ``conll2003`` (NER tags); and
    ``ud/<treebank>`` or ``universal_dependencies`` (= ``ud/en_ewt``), tagged with UPOS.
    Metrics follow GLUE: accuracy, F1 for MRPC/QQP, Matthews for CoLA, Pearson/Spearman for
    STS-B; seqeval F1 for token tasks. Returns ``(spec, DatasetDict)`` with the hub's splits
    (``train``, ``validation``, and ``test`` where it has labels; GLUE tests are dropped).
    Cannot run on machines without hub access; the conversions are tested offline.
    """
    import datasets

    n = name.lower()
    if n.startswith("glue/"):
        n = n[5:]
    if n in GLUE_TASKS:
        rid, rev = HUB_IDS["glue"]
        raw = datasets.load_dataset(hub_id or rid, n, revision=revision or rev, **load_kwargs)
        return _glue_spec(n), glue_to_rows(raw, n)
    if n == "conll2003":
        rid, rev = HUB_IDS["conll2003"]
        raw = datasets.load_dataset(hub_id or rid, revision=revision or rev, **load_kwargs)
        dd, names = conll2003_to_rows(raw)
        return TaskSpec("conll2003", "token", names, False, ("tokens",), "f1",
                        "CoNLL-2003 English NER"), dd
    if n == "universal_dependencies":
        n = "ud/en_ewt"
    if n.startswith("ud/"):
        treebank = n[3:]
        rid, rev = HUB_IDS["ud"]
        raw = datasets.load_dataset(hub_id or rid, treebank, revision=revision or rev,
                                    **load_kwargs)
        dd, names = ud_to_rows(raw)
        return TaskSpec(f"ud/{treebank}", "token", names, False, ("tokens",), "f1",
                        f"Universal Dependencies {treebank}, UPOS tags"), dd
    raise ValueError(f"unknown hub task {name!r}; known: {hub_task_names()}")


def hub_task_names() -> list[str]:
    return [*(f"glue/{t}" for t in GLUE_TASKS), "conll2003", "ud/<treebank>"]
