"""The offline pre-training corpus: State of the Union addresses, Moby Dick, the Brown corpus,
Austen and cleaned English Wikipedia text, packed into paragraphs of at most a few hundred words."""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from datasets import Dataset

from .sources import fetch_sources, read_r_lazyload


def brown_sentences(folder: Path):
    """Yield (file id, [(word, brown tag), ...]) for every sentence (one per non-blank line)."""
    for f in sorted((folder / "package").glob("c[a-r][0-9][0-9]")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield f.name, [tok.rsplit("/", 1) for tok in line.split()]


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


def paragraphs(lines: Iterable[str]) -> list[str]:
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
    return paragraphs((folder / "package/data/data.txt").read_text(encoding="utf-8").splitlines())


_BROWN_QUOTES = {"``": '"', "''": '"'}
_SPACE_BEFORE_PUNCT = re.compile(r" ([,.;:!?)'])")


def _brown_detok(words: Iterable[str]) -> str:
    """Undo the corpus' token spacing well enough for plain-text pre-training."""
    text = " ".join(_BROWN_QUOTES.get(w, w) for w in words)
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text).replace("( ", "(")


def _brown_texts(folder: Path) -> list[str]:
    out, cur_file, cur = [], None, []
    for fid, sent in brown_sentences(folder):
        if fid != cur_file and cur:
            out.extend(_pack(cur))
            cur = []
        cur_file = fid
        cur.append(_brown_detok(w for w, _ in sent))
    out.extend(_pack(cur))
    return out


def _austen_texts(folder: Path) -> list[str]:
    books = read_r_lazyload(folder / "usr/lib/R/site-library/janeaustenr/data/Rdata")
    return [p for name in sorted(books) for p in paragraphs(x or "" for x in books[name])]


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
    folders = fetch_sources(names, cache_dir=cache_dir)
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
