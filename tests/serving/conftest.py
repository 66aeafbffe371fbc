"""Shared fixtures of the serving tests: tiny checkpoints saved to disk, and a retrieval-primed
model whose output identifies its own input (for routing checks)."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoTokenizer, BertTokenizerFast

from muxplm import (
    MuxBertConfig,
    MuxBertForRetrieval,
    MuxBertForSequenceClassification,
    MuxBertForTokenClassification,
)
from muxplm.serving.predictor import default_tokenizer_path

SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=30522)

# Words that the uncased WordPiece vocabulary keeps as single tokens.
ROUTING_WORDS = (
    "apple river stone cloud tiger piano garden window bridge candle forest rocket silver winter "
    "summer castle doctor engine planet violin harbor island jacket ladder market needle orange "
    "pencil rabbit saddle tunnel valley wagon yellow zebra anchor basket camera dragon feather "
    "guitar hammer kettle lemon mirror napkin pillow rocket shadow thunder"
).split()


@pytest.fixture(scope="session")
def tokenizer():
    return AutoTokenizer.from_pretrained(default_tokenizer_path())


@pytest.fixture(scope="session")
def sentence_dir(tmp_path_factory):
    """N=5 sentence classifier with 3 labels, saved WITHOUT tokenizer files (default fallback)."""
    torch.manual_seed(0)
    config = MuxBertConfig.from_preset(
        "tiny", **SMALL, num_instances=5, num_labels=3,
        id2label={0: "neg", 1: "neu", 2: "pos"}, label2id={"neg": 0, "neu": 1, "pos": 2},
    )
    folder = tmp_path_factory.mktemp("sentence")
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def token_dir(tmp_path_factory, tokenizer):
    """N=2 token classifier with tokenizer files, with the unbinding demux (what training gives
    new MUX models)."""
    torch.manual_seed(1)
    config = MuxBertConfig.from_preset(
        "tiny", **SMALL, num_instances=2, num_labels=3, demux_type="unbind",
        id2label={0: "O", 1: "B-X", 2: "I-X"}, label2id={"O": 0, "B-X": 1, "I-X": 2},
    )
    folder = tmp_path_factory.mktemp("token")
    MuxBertForTokenClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def prefix_dir(tmp_path_factory):
    """N=3 T-MUX (prefix demux) sentence classifier, saved without tokenizer files."""
    torch.manual_seed(4)
    config = MuxBertConfig.from_preset("tiny", **SMALL, num_instances=3, demux_type="prefix", num_labels=2)
    folder = tmp_path_factory.mktemp("prefix")
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def pooled_dir(tmp_path_factory):
    """N=4 sentence classifier that reads each instance's mean over its tokens (unbinding demux)."""
    torch.manual_seed(5)
    config = MuxBertConfig.from_preset("tiny", **SMALL, num_instances=4, demux_type="unbind",
                                       sentence_pooling="mean", num_labels=2)
    folder = tmp_path_factory.mktemp("pooled")
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def partial_dir(tmp_path_factory):
    """N=3 token classifier whose first encoder layer runs on each instance alone."""
    torch.manual_seed(6)
    config = MuxBertConfig.from_preset("tiny", **SMALL, num_instances=3, demux_type="unbind",
                                       num_unmuxed_layers=1, num_labels=4)
    folder = tmp_path_factory.mktemp("partial")
    MuxBertForTokenClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def regression_dir(tmp_path_factory):
    torch.manual_seed(2)
    config = MuxBertConfig.from_preset("tiny", **SMALL, num_instances=2, num_labels=1)
    folder = tmp_path_factory.mktemp("regression")
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    return folder


def routing_sentence(rng: random.Random, words: int = 6) -> str:
    return " ".join(rng.choice(ROUTING_WORDS) for _ in range(words))


@pytest.fixture(scope="session")
def retrieval_dir(tmp_path_factory):
    """A tiny N=2 MuxBertForRetrieval primed until it reconstructs random sentences over
    ROUTING_WORDS (fresh sentences every step, so it retrieves any of them, not a memorised set).
    Its WordPiece vocabulary holds only those words, so the priming takes seconds on a CPU."""
    folder = tmp_path_factory.mktemp("retrieval")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(ROUTING_WORDS))]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(folder / "vocab.txt"))
    torch.manual_seed(3)
    config = MuxBertConfig.from_preset(
        "tiny", num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
        vocab_size=len(vocab), pad_token_id=0, num_instances=2, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = MuxBertForRetrieval(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    rng = random.Random(0)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: extra threads only add overhead
    for _ in range(300):
        batch = tokenizer([routing_sentence(rng) for _ in range(32)], return_tensors="pt", padding=True)
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
