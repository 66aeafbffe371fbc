"""benchmarks/experiments/probe_pooling.py: linear probes of frozen sentence vectors, for a plain
encoder and for a MUX checkpoint (both poolings), on the fine-tuning's own subsets."""

import json

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from muxplm import MuxBertModel
from muxplm.training.inputs import fixed_subset

from script_testing import load_script

pytestmark = pytest.mark.usefixtures("builtin_data")  # probes the built-in sentiment task


def test_a_plain_and_a_mux_checkpoint_are_probed(tmp_path):
    from muxplm.data.tokenization import load_tokenizer

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config, add_pooling_layer=False).save_pretrained(tmp_path / "plain")
    MuxBertModel.from_encoder(tmp_path / "plain", num_instances=2, demux_type="unbind").save_pretrained(tmp_path / "mux")
    for folder in ("plain", "mux"):
        load_tokenizer().save_pretrained(tmp_path / folder)
    probe = load_script("probe_pooling")
    assert probe.main([f"plain={tmp_path / 'plain'}", f"mux={tmp_path / 'mux'}", "--train-examples", "120",
                       "--dev-examples", "60", "--seeds", "2", "--max-length", "16", "--out", str(tmp_path / "out")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "probes-sentiment.jsonl").read_text().splitlines()]
    assert [(row["checkpoint"], row["pooling"], row["seeds"]) for row in rows] == [
        ("plain", "mean", 1), ("mux", "pool-then-demux", 2), ("mux", "demux-then-pool", 2)]
    assert all(0 <= row["mean"] <= 100 and 0 <= row["between_class_share"] <= 1 for row in rows)


def test_the_between_class_share_is_the_variance_of_the_class_means():
    probe = load_script("probe_pooling")
    labels = np.array([0, 0, 1, 1])
    apart = np.array([[0.0, 1.0], [0.0, -1.0], [4.0, 1.0], [4.0, -1.0]])  # classes differ in x only
    assert probe.between_class_share(apart, labels) == pytest.approx(16 / (16 + 4))
    assert probe.between_class_share(apart, np.array([0, 1, 0, 1])) == pytest.approx(4 / 20)


def test_the_probe_reads_a_shuffled_subset_like_the_fine_tuning():
    """The sentiment file is sorted by label: its first rows are nearly all positive."""
    from muxplm.data.tasks import get_task

    _, data = get_task("sentiment")
    labels = fixed_subset(data["train"], 400)["label"]
    assert 0.3 < sum(labels) / len(labels) < 0.7
