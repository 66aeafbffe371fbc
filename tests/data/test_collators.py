"""Collators: padding, MLM 15% / 80-10-10 statistics, replaced-token labels."""

import pytest
import torch

from muxplm.data.collators import MLMCollator, PaddingCollator, ReplacedTokenCollator
from muxplm.data.tokenization import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def make_batch(tok, n=512, seed=0, min_len=3, max_len=128):
    """Instances [CLS] w_1..w_k [SEP] of random non-special words, of varied lengths."""
    g = torch.Generator().manual_seed(seed)
    special = set(tok.all_special_ids)
    feats = []
    for _ in range(n):
        k = int(torch.randint(min_len - 2, max_len - 1, (1,), generator=g))
        words = torch.randint(1000, len(tok), (k,), generator=g).tolist()
        assert not special & set(words)
        ids = [tok.cls_token_id, *words, tok.sep_token_id]
        feats.append(
            {
                "input_ids": ids,
                "attention_mask": [1] * len(ids),
                "token_type_ids": [0] * len(ids),
                "special_tokens_mask": [1] + [0] * k + [1],
            }
        )
    return feats


def padded_originals(tok, feats):
    return PaddingCollator(tok)([{"input_ids": f["input_ids"]} for f in feats])["input_ids"]


def test_padding_sentence_and_token_labels(tok):
    pad = PaddingCollator(tok)
    b = pad(
        [
            {
                "input_ids": [101, 7, 102],
                "attention_mask": [1, 1, 1],
                "token_type_ids": [0, 0, 0],
                "labels": 1,
            },
            {"input_ids": [101, 102], "attention_mask": [1, 1], "token_type_ids": [0, 0], "labels": 0},
        ]
    )
    assert b["input_ids"].tolist() == [[101, 7, 102], [101, 102, tok.pad_token_id]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert b["labels"].tolist() == [1, 0] and b["labels"].dtype == torch.long
    r = PaddingCollator(tok)([{"input_ids": [1], "labels": 0.5}, {"input_ids": [1, 2], "labels": 1}])
    assert r["labels"].dtype == torch.float32 and r["labels"].tolist() == [0.5, 1.0]
    t = PaddingCollator(tok, pad_to_multiple_of=4)(
        [
            {"input_ids": [101, 5, 102], "labels": [-100, 3, -100]},
            {"input_ids": [101, 102], "labels": [-100, -100]},
        ]
    )
    assert t["labels"].tolist() == [[-100, 3, -100, -100], [-100] * 4]
    assert t["input_ids"].shape == (2, 4)
    with pytest.raises(ValueError):
        pad([])
    with pytest.raises(TypeError, match="'text'"):
        pad([{"input_ids": [1], "text": "x"}])


def test_mlm_rates_and_80_10_10(tok):
    feats = make_batch(tok)
    orig = padded_originals(tok, feats)
    coll = MLMCollator(tok, seed=0)
    b = coll(feats)
    assert "special_tokens_mask" not in b
    ids, labels, attn = b["input_ids"], b["labels"], b["attention_mask"]
    chosen = labels != -100
    real = (attn == 1) & ~torch.isin(orig, torch.tensor(tok.all_special_ids))
    # Exactly round(15% of real tokens) per instance, at least one.
    n_real = real.sum(1)
    expected = torch.clamp(torch.round(n_real * 0.15).long(), min=1)
    assert torch.equal(chosen.sum(1), expected)
    # Never special or padding positions; labels are the original ids.
    assert not (chosen & ~real).any()
    assert torch.equal(labels[chosen], orig[chosen])
    assert torch.equal(ids[~chosen], orig[~chosen])
    # 80 / 10 / 10 over ~4.9k chosen tokens (binomial sd ~0.6% / 0.4%).
    n = chosen.sum().item()
    masked = (ids[chosen] == tok.mask_token_id).float().mean().item()
    unchanged = (ids[chosen] == orig[chosen]).float().mean().item()
    randomized = 1 - masked - unchanged
    assert n > 4000
    assert 0.77 < masked < 0.83 and 0.08 < randomized < 0.12 and 0.08 < unchanged < 0.12
    # Random replacements are never special tokens.
    assert not torch.isin(ids[chosen & (ids != tok.mask_token_id)], torch.tensor(tok.all_special_ids)).any()
    # Same seed -> same masks; the generator advances between batches.
    again = MLMCollator(tok, seed=0)
    assert torch.equal(again(feats)["input_ids"], ids)
    assert not torch.equal(again(feats)["input_ids"], ids)


def test_mlm_masks_short_instance_and_uses_tokenizer_specials(tok):
    coll = MLMCollator(tok, seed=1)
    feats = [
        {"input_ids": [tok.cls_token_id, 2000, tok.sep_token_id], "attention_mask": [1, 1, 1]},
        {"input_ids": [tok.cls_token_id, tok.sep_token_id], "attention_mask": [1, 1]},
    ]
    b = coll(feats)
    assert b["labels"].tolist() == [[-100, 2000, -100], [-100, -100, -100]]
    assert b["input_ids"][1].tolist() == [tok.cls_token_id, tok.sep_token_id, tok.pad_token_id]


def test_replaced_token_labels_match_differences(tok):
    feats = make_batch(tok, n=256, seed=3)
    orig = padded_originals(tok, feats)
    b = ReplacedTokenCollator(tok, seed=0)(feats)
    ids, labels, attn = b["input_ids"], b["labels"], b["attention_mask"]
    special = torch.isin(orig, torch.tensor(tok.all_special_ids))
    real = (attn == 1) & ~special
    # Labels: exactly "differs from the original" on real tokens, -100 on specials and padding.
    assert torch.equal(labels[real], (ids != orig)[real].long())
    assert (labels[~real] == -100).all()
    assert torch.equal(ids[~real], orig[~real])
    frac = (labels == 1).sum().item() / real.sum().item()
    assert 0.14 < frac < 0.16
    assert (labels == 1).sum(1).min() >= 1
    assert not torch.isin(ids[real], torch.tensor(tok.all_special_ids)).any()
