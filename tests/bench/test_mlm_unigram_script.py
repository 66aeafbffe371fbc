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
    for name, instances in (("n1", 1), ("n2", 2)):  # N = 1 keeps its step-1 checkpoint too
        run_stage(TrainConfig(**micro, stage="mlm", num_instances=instances, output_dir=str(tmp_path / name),
                              save_steps=1 if instances == 1 else None))
    out = tmp_path / "scores.json"
    assert script.main([str(tmp_path / "n1"), str(tmp_path / "n2"), "--output", str(out), "--initial"]) == 0
    rows = json.loads(out.read_text())
    n1, n2 = rows[str(tmp_path / "n1")], rows[str(tmp_path / "n2")]
    assert n1["unigram"] == n2["unigram"] and 0 < n1["unigram"]["accuracy"] < 1 and n1["unigram"]["loss"] > 0
    assert n1["model"] == json.loads((tmp_path / "n1" / "train_results.json").read_text())["eval"]
    assert (n1["num_instances"], n1["loss_includes_retrieval"]) == (1, False)
    assert (n2["num_instances"], n2["loss_includes_retrieval"]) == (2, True)  # the tiny recipe's retrieval term
    # an N = 1 model that keeps the retrieval term (a primed base row's pre-training) has it in its loss too
    run_stage(TrainConfig(**micro, stage="mlm", num_instances=1, retrieval_loss_weight=0.2,
                          output_dir=str(tmp_path / "n1-kept")))
    assert script.main([str(tmp_path / "n1-kept"), "--output", str(tmp_path / "kept.json")]) == 0
    kept = json.loads((tmp_path / "kept.json").read_text())[str(tmp_path / "n1-kept")]
    assert (kept["num_instances"], kept["loss_includes_retrieval"]) == (1, True)
    assert all(-1.0 <= row["outputs_cosine"] < 1.0 for row in (n1, n2))  # per instance, also through a mixture
    assert all(-1.0 <= row["initial_outputs_cosine"] < 1.0 and row["initial_outputs_cosine"] != row["outputs_cosine"]
               for row in (n1, n2))
    # A priming stage gets its similarity and its own accuracy only: no masked-LM loss to compare.
    run_stage(TrainConfig(**micro, stage="retrieval", num_instances=1, output_dir=str(tmp_path / "prime")))
    assert script.main([str(tmp_path / "prime"), "--output", str(out)]) == 0
    prime = json.loads(out.read_text())[str(tmp_path / "prime")]
    assert prime["stage"] == "retrieval" and -1.0 <= prime["outputs_cosine"] < 1.0
    assert prime["model"] == json.loads((tmp_path / "prime" / "train_results.json").read_text())["eval"]
    # An intermediate checkpoint: its step and similarity, read from its trainer state; no scores.
    checkpoint = tmp_path / "n1" / "checkpoint-1"
    assert script.main([str(checkpoint), "--output", str(out)]) == 0
    early = json.loads(out.read_text())[str(checkpoint)]
    assert (early["steps"], early["stage"], early["model"]) == (1, "mlm", None)
    assert -1.0 <= early["outputs_cosine"] < 1.0 and early["outputs_cosine"] != n1["outputs_cosine"]
    with pytest.raises(SystemExit, match="neither a train_config.json"):
        script.main([str(tmp_path), "--output", str(out)])
    (tmp_path / "n1" / "train_config.json").write_text(json.dumps({"stage": "finetune"}))
    with pytest.raises(SystemExit, match="not masked-LM pre-training or retrieval priming"):
        script.main([str(tmp_path / "n1"), "--output", str(out)])


def test_output_similarity_is_one_for_an_encoder_that_gives_every_token_the_same_vector(script):
    import torch
    from types import SimpleNamespace

    class Tokenizer:  # the two methods output_similarity reads: [PAD] 0 and [CLS] 1 are special
        all_special_ids = [0, 1]

        def pad(self, features, return_tensors):
            ids = features["input_ids"]
            width = max(map(len, ids))
            return {"input_ids": torch.tensor([row + [0] * (width - len(row)) for row in ids]),
                    "attention_mask": torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])}

    def encoder(vectors):
        return lambda input_ids, attention_mask: SimpleNamespace(last_hidden_state=vectors(input_ids))

    blocks = [[1, 5, 6, 7], [1, 8, 9]]
    same = encoder(lambda ids: torch.ones(*ids.shape, 4))
    assert script.output_similarity(same, blocks, Tokenizer(), batch_size=1) == pytest.approx(1.0)
    # each token its own axis, [CLS] along them all: only the real tokens are compared, so 0
    axes = encoder(lambda ids: torch.nn.functional.one_hot(ids, 16).float() + (ids == 1)[..., None].float())
    assert script.output_similarity(axes, blocks, Tokenizer()) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="two real tokens"):
        script.output_similarity(same, [[1, 5]], Tokenizer())
