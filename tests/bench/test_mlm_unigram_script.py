"""benchmarks/experiments/mlm_unigram.py: a pre-trained checkpoint's masked-LM scores beside the
unigram model of the same training blocks."""

import json
import math

import pytest

from script_testing import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("mlm_unigram")


def test_unigram_scores_count_the_training_tokens_and_skip_special_ones(script):
    # train: token 5 three times, 6 once (0 is special); add-one over the 2 seen tokens + 1 unseen slot
    scores = script.unigram_scores([[0, 5, 5, 6, 0], [5]], [[0, 5, 7]], special={0})
    assert scores["tokens"] == 2 and scores["train_tokens"] == 4 and scores["accuracy"] == 0.5
    assert scores["loss"] == pytest.approx(-(math.log(4 / 7) + math.log(1 / 7)) / 2)


@pytest.mark.usefixtures("builtin_data")
def test_a_pretrained_checkpoint_is_set_beside_its_corpus_unigram(script, tmp_path):
    from muxplm.training import TrainConfig, run_stage

    micro = dict(preset="tiny", model_overrides={"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
                                                 "intermediate_size": 64},
                 max_length=32, batch_size=8, eval_batch_size=32, corpus_sources=["moby_dick"],
                 corpus_max_words=6000, progress=False, max_steps=2, eval_steps=2)
    for name, instances in (("n1", 1), ("n2", 2)):
        run_stage(TrainConfig(**micro, stage="mlm", num_instances=instances, output_dir=str(tmp_path / name)))
    out = tmp_path / "scores.json"
    assert script.main([str(tmp_path / "n1"), str(tmp_path / "n2"), "--output", str(out)]) == 0
    rows = json.loads(out.read_text())
    n1, n2 = rows[str(tmp_path / "n1")], rows[str(tmp_path / "n2")]
    assert n1["unigram"] == n2["unigram"] and 0 < n1["unigram"]["accuracy"] < 1 and n1["unigram"]["loss"] > 0
    assert n1["model"] == json.loads((tmp_path / "n1" / "train_results.json").read_text())["eval"]
    assert (n1["num_instances"], n1["loss_includes_retrieval"]) == (1, False)
    assert (n2["num_instances"], n2["loss_includes_retrieval"]) == (2, True)  # the tiny recipe's retrieval term
    (tmp_path / "n1" / "train_config.json").write_text(json.dumps({"stage": "retrieval"}))
    with pytest.raises(SystemExit, match="not masked-LM pre-training"):
        script.main([str(tmp_path / "n1"), "--output", str(out)])
