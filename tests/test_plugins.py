"""Variants registered from outside the package are first-class: the config accepts them, the
model builds, trains, saves and loads with them, and their prefix length is honoured."""

from __future__ import annotations

import pytest
import torch

from muxplm import (
    DEMUX_REGISTRY,
    MUX_REGISTRY,
    MuxBertConfig,
    MuxBertForSequenceClassification,
    register_demux,
    register_mux,
)
from muxplm.demux import PrefixDemux
from muxplm.mux import GaussianHadamardMux

from mux_testing import micro_config, random_batch

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data


@pytest.fixture
def plugins():
    @register_mux("test_doubled_keys")
    class DoubledKeys(GaussianHadamardMux):
        calls = 0

        def forward(self, x, mask):
            DoubledKeys.calls += 1
            return 2 * super().forward(x, mask)

    @register_demux("test_long_prefix")
    class LongPrefix(PrefixDemux):
        @classmethod
        def prefix_length(cls, config):
            return config.num_instances + 1

        def prefix_embeddings(self, slot_index):
            markers = super().prefix_embeddings(slot_index)
            return torch.cat([markers, markers[:, -1:]], dim=1)  # one more filler position

    yield DoubledKeys, LongPrefix
    MUX_REGISTRY.unregister("test_doubled_keys")
    DEMUX_REGISTRY.unregister("test_long_prefix")


def test_registered_variants_build_run_save_and_load(plugins, tmp_path):
    doubled, long_prefix = plugins
    config = micro_config(num_instances=2, mux_type="test_doubled_keys", demux_type="test_long_prefix", num_labels=2)
    assert config.num_prefix_tokens == 3
    torch.manual_seed(0)
    model = MuxBertForSequenceClassification(config).eval()
    assert isinstance(model.bert.mux, doubled) and isinstance(model.bert.demux, long_prefix)
    batch = random_batch(5)
    hidden = model.bert(**batch, output_hidden_states=True).hidden_states
    assert hidden[0].shape[1] == batch["input_ids"].shape[1] + 3
    model.save_pretrained(tmp_path)
    loaded = MuxBertForSequenceClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.allclose(model(**batch).logits, loaded(**batch).logits, atol=1e-6)


def test_a_registered_variant_trains_through_the_stages(plugins, tmp_path):
    from muxplm import MuxBertForRetrieval
    from muxplm.training import TrainConfig, run_stage

    doubled, _ = plugins

    run_stage(TrainConfig(stage="retrieval", output_dir=str(tmp_path), preset="tiny", num_instances=2,
                          mux_type="test_doubled_keys", demux_type="unbind", max_steps=2, batch_size=4,
                          max_length=16, corpus_sources=["moby_dick"], corpus_max_words=4000, progress=False,
                          model_overrides={"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
                                           "intermediate_size": 64}))
    assert doubled.calls >= 2  # the registered multiplexer ran in every training step
    loaded = MuxBertForRetrieval.from_pretrained(tmp_path)
    assert type(loaded.bert.mux) is doubled  # and the saved model is rebuilt with it


def test_unknown_names_list_what_is_registered(plugins):
    with pytest.raises(ValueError, match="test_doubled_keys"):
        MuxBertConfig(mux_type="no_such_mux")
    with pytest.raises(ValueError, match="test_long_prefix"):
        MuxBertConfig(demux_type="no_such_demux")
