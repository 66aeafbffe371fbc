"""Bad input gets a clear error that names the problem."""

from __future__ import annotations

import json

import pytest
import torch

from muxplm import (
    MuxBertForMaskedLM,
    MuxBertForSequenceClassification,
    MuxBertForTokenClassification,
    MuxElectraForSequenceClassification,
)

from mux_testing import micro_config, random_batch


@pytest.fixture(scope="module")
def classifier():
    return MuxBertForSequenceClassification(micro_config(num_instances=2, num_labels=3)).eval()


@pytest.mark.parametrize(
    "make_inputs, message",
    [
        (lambda b: {"input_ids": b["input_ids"][0]}, r"shape \[batch, seq_len\]"),
        (lambda b: {"input_ids": b["input_ids"][None]}, r"shape \[batch, seq_len\]"),
        (lambda b: {"input_ids": b["input_ids"].float()}, "integer token ids"),
        (lambda b: {"input_ids": b["input_ids"][:0]}, "empty"),
        (lambda b: {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"][:, :-1]}, "attention_mask has shape"),
        (lambda b: {"input_ids": b["input_ids"], "token_type_ids": b["token_type_ids"][:-1]}, "token_type_ids has shape"),
        (lambda b: {"input_ids": torch.randint(0, 100, (2, 41))}, "sequence length 41 is longer"),
        (lambda b: {"input_ids": b["input_ids"] + 1000}, "outside the vocabulary"),
        (lambda b: {"input_ids": b["input_ids"] - 100}, "outside the vocabulary"),
        (lambda b: {"input_ids": b["input_ids"], "token_type_ids": b["token_type_ids"] + 5}, "token_type_ids must lie"),
    ],
)
def test_bad_inputs(classifier, make_inputs, message):
    with pytest.raises(ValueError, match=message):
        classifier(**make_inputs(random_batch(4)))


def test_prefix_counts_against_the_position_table():
    model = MuxBertForSequenceClassification(micro_config(num_instances=5, demux_type="prefix", num_labels=2))
    with pytest.raises(ValueError, match="at most 35 tokens.*5-token demux prefix"):
        model(torch.randint(5, 100, (2, 36)))
    model(torch.randint(5, 100, (2, 35)))  # fits exactly


def test_bad_labels(classifier):
    batch = random_batch(4)
    with pytest.raises(ValueError, match="labels for sequence classification must have shape"):
        classifier(**batch, labels=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="label 7 is outside the model's 3 classes"):
        classifier(**batch, labels=torch.tensor([0, 1, 7, 2]))
    with pytest.raises(ValueError, match="integer class ids"):
        classifier(**batch, labels=torch.zeros(4))
    tagger = MuxBertForTokenClassification(micro_config(num_instances=2, num_labels=3))
    with pytest.raises(ValueError, match="labels for token classification must have shape"):
        tagger(**batch, labels=torch.zeros(4, dtype=torch.long))
    mlm = MuxBertForMaskedLM(micro_config(num_instances=2))
    with pytest.raises(ValueError, match="masked language modelling"):
        mlm(**batch, labels=torch.zeros(4, 3, dtype=torch.long))


def test_checkpoint_with_other_n_or_mux_type_is_refused(classifier, tmp_path):
    classifier.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="num_instances=2.*num_instances=5"):
        MuxBertForSequenceClassification.from_pretrained(tmp_path, num_instances=5)
    with pytest.raises(ValueError, match="mux_type='gaussian_hadamard'.*mux_type='contextual'"):
        MuxBertForSequenceClassification.from_pretrained(tmp_path, config=micro_config(mux_type="contextual"))
    # The same N is fine.
    MuxBertForSequenceClassification.from_pretrained(tmp_path, num_instances=2)


def test_checkpoint_of_another_family_is_refused(classifier, tmp_path):
    classifier.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="'mux_bert' checkpoint, not 'mux_electra'"):
        MuxElectraForSequenceClassification.from_pretrained(tmp_path)


def test_plain_checkpoint_points_to_warm_start(tmp_path):
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="from_encoder"):
        MuxBertForSequenceClassification.from_pretrained(tmp_path)


def test_corrupt_weights_and_config(classifier, tmp_path):
    classifier.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(ValueError, match="corrupt or incomplete"):
        MuxBertForSequenceClassification.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        MuxBertForSequenceClassification.from_pretrained(tmp_path)


def test_warm_start_refuses_a_mux_checkpoint(classifier, tmp_path):
    classifier.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "mux_bert"
    with pytest.raises(ValueError, match="needs a plain 'bert' checkpoint"):
        MuxBertForSequenceClassification.from_encoder(tmp_path, num_instances=2)


def test_mlm_labels_outside_the_vocabulary_are_refused():
    from muxplm import MuxBertForMaskedLM

    from mux_testing import micro_config, random_batch

    model = MuxBertForMaskedLM(micro_config(num_instances=2))
    batch = random_batch(4)
    labels = torch.full_like(batch["input_ids"], -100)
    labels[0, 1] = model.config.vocab_size  # one past the end
    with pytest.raises(ValueError, match=r"outside the model's 120 vocabulary ids"):
        model(**batch, labels=labels)
    labels[0, 1] = -5
    with pytest.raises(ValueError, match="label -5"):
        model(**batch, labels=labels)


def test_device_values_are_checked_on_the_host_except_in_a_training_step_on_an_accelerator():
    from muxplm.devices import host_checks_wanted

    assert host_checks_wanted(torch.zeros(2), training=True)  # CPU: free
    on_device = torch.zeros(2, device="meta")  # stands for a CUDA tensor: reading it would sync
    assert not host_checks_wanted(on_device, training=True)
    assert host_checks_wanted(on_device, training=False)  # a model in eval mode: a clear error is worth the sync
