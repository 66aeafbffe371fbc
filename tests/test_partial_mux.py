"""Partial multiplexing (``num_unmuxed_layers``): the leading encoder layers run on each
instance alone, the rest on the mixtures."""

from __future__ import annotations

import pytest
import torch

from muxplm import MuxBertConfig, MuxBertForSequenceClassification, MuxBertForTokenClassification, MuxBertModel

from mux_testing import micro_config, random_batch

TWO_LAYERS = dict(num_hidden_layers=2)


def build(model_class, **overrides):
    torch.manual_seed(0)
    return model_class(micro_config(**{**TWO_LAYERS, **overrides})).eval()


@pytest.mark.parametrize("unmuxed", [1, 2])
def test_with_one_instance_the_split_changes_nothing(unmuxed):
    plain = build(MuxBertModel, num_instances=1, mux_type="identity", demux_type="identity")
    split = build(MuxBertModel, num_instances=1, mux_type="identity", demux_type="identity",
                  num_unmuxed_layers=unmuxed)
    split.load_state_dict(plain.state_dict())
    batch = random_batch(5)
    with torch.no_grad():
        assert torch.allclose(split(**batch).last_hidden_state, plain(**batch).last_hidden_state, atol=1e-6)


def test_unmuxed_layers_see_each_instance_alone():
    """With every layer unmuxed, an instance's encoder states are its own: the companion in
    its group changes only what the mixture (and so the demux input) holds, never the layers'
    view of the instance. Checked by hooking the last unmuxed layer."""
    model = build(MuxBertModel, num_instances=2, mux_type="gaussian_hadamard", demux_type="unbind",
                  num_unmuxed_layers=2)
    seen = []
    model.encoder.layer[1].register_forward_hook(lambda module, args, output: seen.append(output))
    batch = random_batch(2)
    other = {key: value.clone() for key, value in batch.items()}
    other["input_ids"][1] = (other["input_ids"][1] + 7) % model.config.vocab_size
    with torch.no_grad():
        model(**batch)
        model(**other)
    first, second = (output[0] if isinstance(output, tuple) else output for output in seen)
    assert first.shape[0] == 2  # one row per instance: the layer ran before the mixture
    assert torch.allclose(first[0], second[0]) and not torch.allclose(first[1], second[1])


@pytest.mark.parametrize("n", [2, 5])
def test_shapes_fillers_and_gradients(n):
    model = build(MuxBertForTokenClassification, num_instances=n, demux_type="unbind", num_unmuxed_layers=1,
                  num_labels=3).train()
    batch = random_batch(7)  # fillers complete the last group
    labels = torch.randint(0, 3, batch["input_ids"].shape)
    output = model(**batch, labels=labels)
    assert output.logits.shape == (*batch["input_ids"].shape, 3) and torch.isfinite(output.logits).all()
    output.loss.backward()
    missing = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing


def test_save_load_and_refusing_another_split(tmp_path):
    model = build(MuxBertForSequenceClassification, num_instances=2, demux_type="unbind", num_unmuxed_layers=1,
                  num_labels=2)
    model.save_pretrained(tmp_path)
    loaded = MuxBertForSequenceClassification.from_pretrained(tmp_path).eval()
    assert loaded.config.num_unmuxed_layers == 1
    batch = random_batch(5)
    with torch.no_grad():
        assert torch.allclose(model(**batch).logits, loaded(**batch).logits, atol=1e-6)
    with pytest.raises(ValueError, match="num_unmuxed_layers=1"):
        MuxBertForSequenceClassification.from_pretrained(tmp_path, num_unmuxed_layers=0)


@pytest.mark.parametrize("bad", [-1, 3, 1.5, True])
def test_the_split_must_lie_within_the_encoder(bad):
    with pytest.raises(ValueError, match="num_unmuxed_layers"):
        MuxBertConfig(num_unmuxed_layers=bad, num_hidden_layers=2, hidden_size=32, num_attention_heads=2)
