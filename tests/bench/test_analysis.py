"""Muxology, Pareto, ensemble and lottery analyses on tiny inputs."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import BertConfig, BertModel

from muxplm import MuxBertConfig, MuxBertForSequenceClassification, MuxBertModel
from muxplm.bench.analysis import (
    ensemble_table,
    load_records,
    lottery_table,
    muxology,
    muxology_models,
    pareto_frontier,
    plot_muxology,
    plot_pareto,
    read_sentences,
    table_markdown,
)
from muxplm.data import load_tokenizer

SENTENCES = [
    "the cat sat on the mat .",
    "multiplexing runs several inputs through one forward pass .",
    "a short one .",
    "throughput grows almost linearly with the number of instances multiplexed together .",
    "attention entropy tells how peaky the attention distribution is .",
    "layers near the output behave differently .",
    "seven sentences make two uneven groups .",
]
SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def test_pareto_frontier_keeps_undominated_points(tmp_path):
    points = [
        dict(name="a", size="small", num_instances=1, score=80.0, throughput=100.0),
        dict(name="b", size="small", num_instances=2, score=78.0, throughput=200.0),
        dict(name="c", size="small", num_instances=5, score=70.0, throughput=150.0),  # dominated by b
        dict(name="d", size="base", num_instances=1, score=85.0, throughput=50.0),
        dict(name="e", size="base", num_instances=10, score=60.0, throughput=900.0),
    ]
    assert [p["name"] for p in pareto_frontier(points)] == ["e", "b", "a", "d"]
    plot_pareto(points, str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="lacks throughput"):
        pareto_frontier([dict(name="x", score=1.0)])


def _records():
    records = []
    for seed, (s2, s5) in enumerate([(0.80, 0.70), (0.82, 0.74), (0.81, 0.72)]):
        records.append(dict(model="mux2", task="sst", seed=seed, score=s2, ensemble=False, num_instances=2))
        records.append(dict(model="mux5", task="sst", seed=seed, score=s5, ensemble=False, num_instances=5))
    records.append(dict(model="mux5", task="sst", seed=0, score=0.76, ensemble=True, num_instances=5))
    return records


def test_lottery_table_reports_best_minus_worst_seed():
    rows = {r["model"]: r for r in lottery_table(_records())}
    assert rows["mux5"]["best_minus_worst"] == pytest.approx(0.04)
    assert (rows["mux5"]["best_seed"], rows["mux5"]["worst_seed"]) == (1, 0)
    assert rows["mux2"]["mean"] == pytest.approx(0.81) and rows["mux2"]["seeds"] == 3
    assert "| mux5 | sst | 5 | 3 |" in table_markdown(list(rows.values()))


def test_ensemble_table_reports_gain_over_seed_mean():
    rows = ensemble_table(_records())
    assert [r["model"] for r in rows] == ["mux5"]  # mux2 has no ensembled run
    assert rows[0]["gain"] == pytest.approx(0.76 - 0.72)
    with pytest.raises(ValueError, match="both"):
        ensemble_table([r for r in _records() if not r["ensemble"]])


def test_load_records_reads_evaluate_output_and_directories(tmp_path):
    evaluate_result = {
        "checkpoint": "/runs/mux-n2-sst", "task": "sentiment", "num_instances": 2, "seeds": [0, 1, 2],
        "per_seed": [{"main": 0.8, "accuracy": 0.8}, {"main": 0.9, "accuracy": 0.9}, {"main": 0.85, "accuracy": 0.85}],
        "summary": {}, "ensemble": {"main": 0.93, "accuracy": 0.93},
    }
    (tmp_path / "a.json").write_text(json.dumps(evaluate_result))
    (tmp_path / "b.json").write_text(json.dumps(_records()))
    records = load_records([str(tmp_path)])
    assert len(records) == 4 + len(_records())
    lottery = {r["model"]: r for r in lottery_table(records)}
    assert lottery["mux-n2-sst"]["best_minus_worst"] == pytest.approx(0.1)
    gains = {r["model"]: r["gain"] for r in ensemble_table(records)}
    assert gains["mux-n2-sst"] == pytest.approx(0.93 - 0.85)
    with pytest.raises(FileNotFoundError):
        load_records([str(tmp_path / "missing.json")])
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_records([str(tmp_path / "bad.json")])


def test_muxology_entropy_matches_attention_weights_of_a_plain_checkpoint(tmp_path, tokenizer):
    """On a plain BERT checkpoint the hook-captured entropies equal those computed from
    ``output_attentions``, and activations equal the hidden states' mean |value|."""
    torch.manual_seed(0)
    plain = BertModel(BertConfig(**SMALL, attn_implementation="eager"), add_pooling_layer=False).eval()
    plain.save_pretrained(tmp_path / "plain")
    models = muxology_models([str(tmp_path / "plain")])
    report = muxology(models, SENTENCES, tokenizer=tokenizer, max_length=16, batch_size=4)
    entry = report["models"][0]
    assert entry["num_instances"] == 1 and len(entry["attention_entropy"]) == 2

    batch = tokenizer(SENTENCES, padding=True, truncation=True, max_length=16, return_tensors="pt")
    with torch.no_grad():
        out = plain(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    output_attentions=True, output_hidden_states=True)
    mask = batch["attention_mask"].bool()
    for layer, (probs, hidden) in enumerate(zip(out.attentions, out.hidden_states[1:])):
        entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)  # [B, heads, queries]
        expected = entropy.permute(0, 2, 1)[mask].mean()
        assert entry["attention_entropy"][layer] == pytest.approx(float(expected), rel=1e-4)
        assert entry["mean_abs_activation"][layer] == pytest.approx(float(hidden.abs().mean(-1)[mask].mean()), rel=1e-4)


def test_muxology_on_fresh_and_saved_mux_models(tmp_path, tokenizer):
    config = MuxBertConfig(**SMALL, num_instances=2, num_labels=2, attn_implementation="eager")
    MuxBertForSequenceClassification(config).save_pretrained(tmp_path / "mux2")
    models = muxology_models([str(tmp_path / "mux2")]) + muxology_models([], preset="tiny", instances=[1, 5])
    report = muxology(models, SENTENCES, tokenizer=tokenizer, max_length=16, batch_size=5)
    names = [m["name"] for m in report["models"]]
    assert names == ["mux2 (N=2)", "tiny N=1 (plain)", "tiny N=5"]
    for entry in report["models"]:
        assert all(a > 0 for a in entry["mean_abs_activation"])
        # Entropy of a distribution over at most 16 (+ prefix) keys.
        assert all(0 < e <= math.log(16 + 5) for e in entry["attention_entropy"])
    plot_muxology(report, str(tmp_path / "m.png"))
    assert (tmp_path / "m.png").stat().st_size > 1000

    sdpa = MuxBertConfig(**SMALL, num_instances=2)
    with pytest.raises(ValueError, match="eager"):
        muxology([("sdpa", MuxBertModel(sdpa))], SENTENCES, tokenizer=tokenizer)


def test_muxology_of_a_model_with_unmuxed_layers_reads_each_layer_on_what_it_saw(tokenizer):
    """A layer run on each instance alone is measured on the instances' own positions, so its
    statistics do not depend on which inputs share a mixture; the layers after it do."""
    torch.manual_seed(0)
    model = MuxBertModel(MuxBertConfig(**SMALL, num_instances=2, num_unmuxed_layers=1, attn_implementation="eager"))
    model.eval()
    shifted = SENTENCES[1:] + SENTENCES[:1]  # other pairs in the mixtures
    a, b = (muxology([("k1", model)], sentences, tokenizer=tokenizer, max_length=16, batch_size=len(SENTENCES))
            ["models"][0] for sentences in (SENTENCES, shifted))
    assert len(a["attention_entropy"]) == len(a["mean_abs_activation"]) == SMALL["num_hidden_layers"]
    assert a["mean_abs_activation"][0] == pytest.approx(b["mean_abs_activation"][0], rel=1e-5)
    assert a["attention_entropy"][0] == pytest.approx(b["attention_entropy"][0], rel=1e-5)
    assert a["mean_abs_activation"][1] != pytest.approx(b["mean_abs_activation"][1], rel=1e-5)


def test_read_sentences_from_files(tmp_path):
    (tmp_path / "a.txt").write_text("one\n\n two \nthree\n")
    assert read_sentences([str(tmp_path / "a.txt")], limit=2) == ["one", "two"]
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        read_sentences([str(tmp_path / "empty.txt")])
