"""Tiny checkpoints and input files for the `muxplm predict` tests."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from muxplm import (
    MuxBertConfig,
    MuxBertForSequenceClassification,
    MuxBertForTokenClassification,
)
from muxplm.serving.predictor import default_tokenizer_path

SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=30522)


@pytest.fixture(scope="session")
def classifier_dir(tmp_path_factory):
    """N=2 sentence classifier with 3 labels, saved without tokenizer files (the default one)."""
    torch.manual_seed(0)
    config = MuxBertConfig.from_preset(
        "tiny", **SMALL, num_instances=2, num_labels=3,
        id2label={0: "neg", 1: "neu", 2: "pos"}, label2id={"neg": 0, "neu": 1, "pos": 2},
    )
    folder = tmp_path_factory.mktemp("classifier")
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tagger_dir(tmp_path_factory):
    """N=3 token classifier with its tokenizer files."""
    torch.manual_seed(1)
    config = MuxBertConfig.from_preset("tiny", **SMALL, num_instances=3, num_labels=3, demux_type="unbind",
                                       id2label={0: "O", 1: "B-X", 2: "I-X"}, label2id={"O": 0, "B-X": 1, "I-X": 2})
    folder = tmp_path_factory.mktemp("tagger")
    MuxBertForTokenClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(default_tokenizer_path()).save_pretrained(folder)
    return folder
