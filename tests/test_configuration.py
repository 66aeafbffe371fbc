import pytest

from muxplm import SIZE_PRESETS, MuxBertConfig, MuxElectraConfig


def test_presets_match_the_paper_sizes():
    base = MuxBertConfig.from_preset("base")
    assert (base.num_hidden_layers, base.hidden_size, base.num_attention_heads, base.intermediate_size) == (
        12, 768, 12, 3072,
    )
    large = MuxBertConfig.from_preset("large", num_instances=10)
    assert (large.num_hidden_layers, large.hidden_size, large.num_instances) == (24, 1024, 10)
    small = MuxElectraConfig.from_preset("small")
    assert (small.hidden_size, small.embedding_size, small.intermediate_size) == (512, 512, 2048)
    assert set(SIZE_PRESETS) == {"tiny", "small", "base", "large"}


def test_overrides_beat_the_preset():
    assert MuxBertConfig.from_preset("tiny", hidden_size=128, num_attention_heads=2).hidden_size == 128


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_instances=0), "num_instances"),
        (dict(num_instances=2, mux_type="identity"), "identity"),
        (dict(num_instances=3, demux_type="identity"), "identity"),
        (dict(num_instances=1, mux_type="identity", demux_type="rsa"), "identity"),
        (dict(mux_type="sum"), "unknown mux_type"),
        (dict(demux_type="mlp"), "unknown demux_type"),
        (dict(hidden_size=100, num_attention_heads=12), "multiple of num_attention_heads"),
        (dict(num_instances=10, demux_type="prefix", max_position_embeddings=10), "prefix"),
        (dict(mux_key_norm=0), "mux_key_norm"),
        (dict(num_demux_layers=0), "num_demux_layers"),
        (dict(retrieval_loss_weight=1.5), "retrieval_loss_weight"),
    ],
)
def test_invalid_combinations_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MuxBertConfig(**kwargs)
    with pytest.raises(ValueError, match=message):
        MuxElectraConfig(**kwargs)


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown size preset"):
        MuxBertConfig.from_preset("huge")


def test_config_round_trips_through_json(tmp_path):
    config = MuxBertConfig.from_preset("tiny", num_instances=5, mux_type="contextual", retrieval_loss_weight=0.2)
    config.save_pretrained(tmp_path)
    loaded = MuxBertConfig.from_pretrained(tmp_path)
    for field in ("num_instances", "mux_type", "demux_type", "retrieval_loss_weight", "hidden_size"):
        assert getattr(loaded, field) == getattr(config, field)
