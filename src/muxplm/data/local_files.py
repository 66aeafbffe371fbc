"""Tasks from a user's own files: CSV / TSV / JSONL sentence tasks, CoNLL-style token tasks, and
plain text for pre-training."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

from datasets import DatasetDict

from .rows import TaskSpec, split_fixed, to_dataset


def _read_table(path: Path) -> list[dict]:
    """Rows of a CSV / TSV / JSONL (or JSON list) file as dicts."""
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    content = _read_utf8(path)
    if not content.strip():
        raise ValueError(f"{path}: file is empty")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        if content.lstrip().startswith("["):
            rows = json.loads(content)
        else:
            rows = []
            for i, line in enumerate(content.splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{i}: invalid JSON ({e.msg})") from None
        if not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{path}: every JSON row must be an object")
    elif suffix in (".csv", ".tsv", ".tab", ".txt"):
        delim = "," if suffix == ".csv" else "\t"
        rows = _read_csv(path, content, delim)
    else:
        raise ValueError(f"{path}: unsupported extension {suffix!r} (use .csv, .tsv or .jsonl)")
    if not rows:
        raise ValueError(f"{path}: file has no data rows")
    return rows


def _read_utf8(path: Path) -> str:
    """The text of a user's file; one that is not UTF-8 is named, with where it stops being UTF-8."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); save the file as UTF-8") from None


def _read_csv(path: Path, content: str, delimiter: str) -> list[dict]:
    """Rows of a CSV / TSV text; a field may be as long as the file (the csv module's default
    limit, 131,072 characters, would refuse a long document), a malformed line is named."""
    previous = csv.field_size_limit()
    csv.field_size_limit(max(previous, len(content) + 1))
    reader = csv.DictReader(content.splitlines(), delimiter=delimiter)
    try:
        return list(reader)
    except csv.Error as error:
        raise ValueError(f"{path}:{reader.line_num}: not valid {'CSV' if delimiter == ',' else 'TSV'} ({error})") from None
    finally:
        csv.field_size_limit(previous)


def _check_columns(path: Path, rows: list[dict], required: Sequence[str]) -> None:
    present = set().union(*(r.keys() for r in rows[:1]))
    missing = [c for c in required if c not in present]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; found {sorted(present)}")
    for i, r in enumerate(rows, 1):
        for c in required:
            if r.get(c) is None or (isinstance(r[c], str) and not r[c].strip() and c == "label"):
                raise ValueError(f"{path}: row {i} has no value in column {c!r}")


def _check_finite_labels(path: Path, rows: list[dict]) -> None:
    """A non-finite label (``nan``, ``inf``) names its row: it would otherwise turn the labels
    into floats (a regression task) and the training loss into NaN."""
    for i, row in enumerate(rows, 1):
        value = row["label"]
        if isinstance(value, (bool, int)):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue  # a class name
        if not math.isfinite(number):
            raise ValueError(f"{path}: row {i}: label {value!r} is not a finite number")


def _label_kind(values: list) -> str:
    """'int', 'float' or 'str' for raw label values (numbers written as CSV text count too)."""
    kinds = set()
    for v in values:
        if isinstance(v, bool):
            kinds.add("str")
        elif isinstance(v, int):
            kinds.add("int")
        elif isinstance(v, float):
            kinds.add("float")
        elif re.fullmatch(r"\s*[+-]?\d+\s*", str(v)):
            kinds.add("int")
        else:
            try:
                float(v)
                kinds.add("float")
            except (TypeError, ValueError):
                kinds.add("str")
    return "str" if "str" in kinds else ("float" if "float" in kinds else "int")


def _label_key(v):
    """Canonical form of a class label so 1, "1" and 1.0 are the same class."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(int(v)) if float(v).is_integer() else str(v)
    return str(v).strip()


def load_local_sentence_task(
    train_file: str | Path, validation_file: str | Path | None = None,
    label_names: Sequence[str] | None = None, is_regression: bool | None = None,
    name: str | None = None, seed: int = 0,
) -> tuple[TaskSpec, DatasetDict]:
    """Sentence(-pair) task from CSV / TSV / JSONL files with ``text``, [``text_pair``], ``label``.

    Labels: floats (any non-integer value) or ``is_regression=True`` -> regression. Otherwise
    classes: with ``label_names`` given, a label is a name from it or an integer index into it;
    without, the names are the distinct training labels in sorted order (numerically for integer
    labels), and each label becomes its index. A validation label absent from training is an
    error. Without ``validation_file`` a fixed 10% of the training file is held out.
    Returns ``(spec, DatasetDict(train, validation))``.
    """
    train_path = Path(train_file)
    files = {"train": _read_table(train_path)}
    paths = {"train": train_path}
    if validation_file is not None:
        paths["validation"] = Path(validation_file)
        files["validation"] = _read_table(paths["validation"])
    has_pair = "text_pair" in files["train"][0]
    cols = ["text", "text_pair", "label"] if has_pair else ["text", "label"]
    for split, rows in files.items():
        _check_columns(paths[split], rows, cols)
        _check_finite_labels(paths[split], rows)

    train_labels = [r["label"] for r in files["train"]]
    kind = _label_kind(train_labels)
    regression = is_regression if is_regression is not None else (kind == "float" and not label_names)

    def convert(split: str) -> list[dict]:
        out = []
        for i, r in enumerate(files[split], 1):
            row = {c: str(r[c]) for c in cols if c != "label"}
            v = r["label"]
            if regression:
                try:
                    row["label"] = float(v)
                except (TypeError, ValueError):
                    raise ValueError(f"{paths[split]}: row {i}: label {v!r} is not a number "
                                     "(regression task)") from None
            else:
                key = _label_key(v)
                if key in index:
                    row["label"] = index[key]
                elif label_names and key.lstrip("-").isdigit() and 0 <= int(key) < len(names):
                    row["label"] = int(key)
                elif label_names:
                    raise ValueError(f"{paths[split]}: row {i}: label {v!r} is not one of "
                                     f"label_names {list(names)}")
                else:
                    raise ValueError(f"{paths[split]}: row {i}: label {v!r} does not occur in the "
                                     f"training file (training labels: {list(names)})")
            out.append(row)
        return out

    if regression:
        names, index = [], {}
    else:
        if label_names:
            names = [str(x) for x in label_names]
        else:
            keys = {_label_key(v) for v in train_labels}
            names = sorted(keys, key=float) if kind == "int" else sorted(keys)
        index = {n: i for i, n in enumerate(names)}
    train_rows = convert("train")
    if "validation" in files:
        dd = DatasetDict({"train": to_dataset(train_rows),
                          "validation": to_dataset(convert("validation"))})
    else:
        dd = split_fixed(train_rows, seed=seed)
    spec = TaskSpec(
        name or train_path.stem, "sentence", names, regression,
        ("text", "text_pair") if has_pair else ("text",),
        "pearson" if regression else "accuracy",
        f"local sentence task from {train_path}",
    )
    return spec, dd


def read_conll(path: Path) -> list[tuple[list[str], list[str], int]]:
    """Sentences of a CoNLL-style file as (tokens, tags, first line number).

    One token per line: columns separated by a tab (or, if the line has no tab, by whitespace);
    the first column is the token and the last is the tag. Blank lines end sentences;
    ``-DOCSTART-`` lines (CoNLL-2003 document markers) are skipped.
    """
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    sentences, toks, tags, start = [], [], [], 0
    with io.StringIO(_read_utf8(path)) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                if toks:
                    sentences.append((toks, tags, start))
                    toks, tags = [], []
                continue
            if line.startswith("-DOCSTART-"):
                continue
            cols = line.split("\t") if "\t" in line else line.split()
            cols = [c.strip() for c in cols]
            if len(cols) < 2 or not cols[0] or not cols[-1]:
                raise ValueError(f"{path}:{lineno}: malformed line {line!r}; expected "
                                 "'token<TAB>tag' (or 'token tag')")
            if not toks:
                start = lineno
            toks.append(cols[0])
            tags.append(cols[-1])
    if toks:
        sentences.append((toks, tags, start))
    if not sentences:
        raise ValueError(f"{path}: file is empty (no sentences)")
    return sentences


def load_local_token_task(
    train_file: str | Path, validation_file: str | Path | None = None,
    label_names: Sequence[str] | None = None, name: str | None = None, seed: int = 0,
) -> tuple[TaskSpec, DatasetDict]:
    """Token-classification task from CoNLL-style files (see ``read_conll`` for the format).

    Tag names are ``label_names`` if given, else the training tags in sorted order. A validation
    tag unseen in training is an error naming the tag and its file:line. Without
    ``validation_file`` a fixed 10% of the sentences is held out. The main metric is seqeval F1
    (for tags without B-/I- prefixes that equals token accuracy).
    """
    train_path = Path(train_file)
    splits = {"train": (train_path, read_conll(train_path))}
    if validation_file is not None:
        splits["validation"] = (Path(validation_file), read_conll(Path(validation_file)))
    if label_names:
        names = [str(x) for x in label_names]
    else:
        names = sorted({t for _, tags, _ in splits["train"][1] for t in tags})
    index = {t: i for i, t in enumerate(names)}

    def convert(path: Path, sentences) -> list[dict]:
        rows = []
        for toks, tags, start in sentences:
            for k, t in enumerate(tags):
                if t not in index:
                    where = "label_names" if label_names else "the training file"
                    raise ValueError(f"{path}:{start + k}: tag {t!r} does not occur in {where} "
                                     f"(known tags: {names})")
            rows.append({"tokens": toks, "tags": [index[t] for t in tags]})
        return rows

    train_rows = convert(*splits["train"])
    if "validation" in splits:
        dd = DatasetDict({"train": to_dataset(train_rows),
                          "validation": to_dataset(convert(*splits["validation"]))})
    else:
        dd = split_fixed(train_rows, seed=seed)
    spec = TaskSpec(name or train_path.stem, "token", names, False, ("tokens",), "f1",
                    f"local token task from {train_path}")
    return spec, dd
