"""Pre-training text of any size: text, JSONL and parquet files (globs too) and hub datasets read
through ``datasets`` into its on-disk cache, tokenized into blocks once and reused from there."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from muxplm.data import load_corpus, load_tokenizer, tokenize_pretraining


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


@pytest.fixture
def files(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("The first line.\nA wrapped\nsecond line.\n\nNew paragraph.\n")
    (folder / "b.txt").write_text("one more line\n")
    (folder / "c.jsonl").write_text("".join(json.dumps({"text": f"json row {i}", "id": i}) + "\n" for i in range(4)))
    pq.write_table(pa.table({"text": [f"parquet row {i}" for i in range(3)]}), folder / "d.parquet")
    return folder


def test_every_kind_of_file_and_globs(files, tmp_path):
    texts = load_corpus([str(files / "*.txt"), files / "c.jsonl", files / "d.parquet"], cache_dir=tmp_path / "cache")
    assert texts.column_names == ["text"]
    rows = [row for row in texts["text"] if row.strip()]
    assert rows[:3] == ["The first line.", "A wrapped", "second line."] and "one more line" in rows
    assert [row for row in rows if row.startswith(("json", "parquet"))] == \
        [f"json row {i}" for i in range(4)] + [f"parquet row {i}" for i in range(3)]


def test_bad_files_are_named(files, tmp_path):
    with pytest.raises(ValueError, match="no file matches"):
        load_corpus([str(files / "*.csv")], cache_dir=tmp_path)
    (files / "e.csv").write_text("text\nx\n")
    with pytest.raises(ValueError, match=r"e.csv: a pre-training file is .txt, .jsonl or .parquet"):
        load_corpus([files / "e.csv"], cache_dir=tmp_path)
    (files / "f.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"f.jsonl: no 'text' column \(found body\)"):
        load_corpus([files / "f.jsonl"], cache_dir=tmp_path)
    with pytest.raises(ValueError, match="give --train-file or --dataset"):
        load_corpus([], cache_dir=tmp_path)


def test_blocks_are_prepared_once_and_read_from_the_cache(files, tmp_path, tokenizer):
    def prepare():
        return tokenize_pretraining(load_corpus([files / "a.txt", files / "c.jsonl"], cache_dir=tmp_path / "cache",
                                                num_proc=2), tokenizer, max_length=8, num_proc=2)

    first = prepare()
    again = prepare()  # another run: the same inputs, tokenizer and block length
    assert [f["filename"] for f in again.cache_files] == [f["filename"] for f in first.cache_files]
    assert again["input_ids"] == first["input_ids"] and all(len(ids) <= 8 for ids in first["input_ids"])
    assert first.cache_files[0]["filename"].startswith(str(tmp_path / "cache"))  # memory-mapped from the cache
    # Another block length, or a changed file, is prepared anew.
    other = tokenize_pretraining(load_corpus([files / "a.txt", files / "c.jsonl"], cache_dir=tmp_path / "cache"),
                                 tokenizer, max_length=16)
    assert other.cache_files[0]["filename"] != first.cache_files[0]["filename"]
    (files / "a.txt").write_text("entirely new text for the corpus\n")
    os.utime(files / "a.txt", (1, 1))
    changed = prepare()
    assert changed["input_ids"] != first["input_ids"]


def test_a_hub_dataset_goes_through_the_same_datasets_call(files, tmp_path):
    """Offline: ``load_dataset`` on a local folder is the call a hub name makes."""
    hub_like = tmp_path / "wiki"
    hub_like.mkdir()
    pq.write_table(pa.table({"text": ["a hub row", "another"], "title": ["x", "y"]}), hub_like / "train.parquet")
    texts = load_corpus(datasets=[str(hub_like)], train_files=[files / "b.txt"], cache_dir=tmp_path / "cache")
    assert sorted(texts["text"]) == ["a hub row", "another", "one more line"]
