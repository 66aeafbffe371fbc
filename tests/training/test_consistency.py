"""Composition consistency (``--consistency-weight``): the loss arithmetic on both task kinds,
that a single-instance model (nothing to disagree about) adds nothing, gradients, and a run
through the stage with teacher and consistency together."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from training_utils import MICRO, read_log

from muxplm import MuxBertConfig, MuxBertForSequenceClassification, MuxBertForTokenClassification
from muxplm.training import TrainConfig, run_stage
from muxplm.training.consistency import CompositionConsistency, second_composition, symmetric_kl

from mux_testing import MICRO as MICRO_CONFIG
from mux_testing import random_batch

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data


def classifier(model_class, n, seed=0, num_labels=3):
    torch.manual_seed(seed)
    mux = dict(mux_type="identity", demux_type="identity") if n == 1 else dict(demux_type="unbind")
    return model_class(MuxBertConfig(**MICRO_CONFIG, num_instances=n, num_labels=num_labels, **mux))


def two_compositions(model, batch, seed):
    """The logits of ``batch`` as it comes and of the shuffle CompositionConsistency draws after
    ``torch.manual_seed(seed)``, both in batch order, by two separate forward passes."""
    torch.manual_seed(seed)
    shuffle = torch.randperm(batch["input_ids"].shape[0])
    with torch.no_grad():
        first = model(**batch).logits
        second = torch.empty_like(first)
        second[shuffle] = model(**{key: value[shuffle] for key, value in batch.items()}).logits
    return first, second


def test_symmetric_kl_is_zero_for_equal_and_symmetric_otherwise():
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    assert torch.allclose(symmetric_kl(a, a), torch.zeros(4), atol=1e-6)
    assert torch.allclose(symmetric_kl(a, b), symmetric_kl(b, a))
    expected = 0.5 * (F.kl_div(F.log_softmax(b, -1), F.log_softmax(a, -1), log_target=True, reduction="none").sum(-1)
                      + F.kl_div(F.log_softmax(a, -1), F.log_softmax(b, -1), log_target=True, reduction="none").sum(-1))
    assert torch.allclose(symmetric_kl(a, b), expected, atol=1e-6)


@pytest.mark.parametrize("weight", [0.0, 2.0])
def test_sentence_loss_is_the_task_loss_of_both_compositions_plus_their_disagreement(weight):
    model = classifier(MuxBertForSequenceClassification, 2).eval()
    batch = dict(random_batch(6), labels=torch.tensor([0, 1, 2, 0, 1, 2]))
    torch.manual_seed(5)
    output = CompositionConsistency(weight)(model, batch)
    first, second = two_compositions(model, batch, seed=5)
    labels = batch["labels"]
    task = 0.5 * (F.cross_entropy(first, labels) + F.cross_entropy(second, labels))
    gap = symmetric_kl(first, second).mean()
    assert gap > 1e-4  # the companions do move an untrained N = 2 model's predictions
    assert torch.allclose(output.loss, task + weight * gap, atol=1e-5)
    assert torch.allclose(output.disagreement, gap, atol=1e-5)
    assert torch.allclose(output.logits, first, atol=1e-5)


def test_a_single_instance_model_never_disagrees_with_itself():
    model = classifier(MuxBertForSequenceClassification, 1).eval()
    batch = dict(random_batch(5), labels=torch.tensor([0, 1, 2, 0, 1]))
    output = CompositionConsistency(1.0)(model, batch)
    assert output.disagreement.abs() < 1e-6


def test_token_disagreement_counts_labelled_positions_only_and_trains_the_model():
    model = classifier(MuxBertForTokenClassification, 2).eval()
    batch = random_batch(4, length=6)
    labels = torch.randint(0, 3, (4, 6))
    labels[:, 3:] = -100
    torch.manual_seed(1)
    output = CompositionConsistency(1.0)(model, dict(batch, labels=labels))
    first, second = two_compositions(model, batch, seed=1)
    assert torch.allclose(output.disagreement, symmetric_kl(first[:, :3], second[:, :3]).mean(), atol=1e-5)
    output.loss.backward()
    assert all(p.grad is not None for p in model.bert.encoder.parameters())


def test_finetune_with_consistency_and_a_teacher_logs_the_disagreement(tmp_path):
    settings = dict(MICRO, task="sentiment", max_train_examples=48, max_eval_examples=20, max_steps=3)
    run_stage(TrainConfig(stage="finetune", output_dir=str(tmp_path / "teacher"), num_instances=1, **settings))
    run_stage(TrainConfig(stage="finetune", output_dir=str(tmp_path / "student"), num_instances=2,
                          teacher=str(tmp_path / "teacher"), consistency_weight=1.0, **settings))
    records = read_log(tmp_path / "student")
    assert len(records) == 3
    assert all(record["disagreement"] >= 0 and torch.isfinite(torch.tensor(record["loss"])) for record in records)
    with pytest.raises(ValueError, match="consistency weight"):
        CompositionConsistency(-1.0)


def test_the_tiny_recipe_fine_tunes_mux_models_with_consistency_and_plain_ones_without():
    from muxplm.training.config import resolve
    from muxplm.training.recipes import CONSISTENCY_WEIGHT

    tune = dict(stage="finetune", task="sentiment")
    assert resolve(TrainConfig(**tune), "tiny", num_instances=5).consistency_weight == CONSISTENCY_WEIGHT > 0
    assert resolve(TrainConfig(**tune), "tiny", num_instances=1).consistency_weight == 0.0
    assert resolve(TrainConfig(**tune), None, num_instances=2).consistency_weight == 0.0  # paper recipe: off
    assert resolve(TrainConfig(**tune, consistency_weight=0.0), "tiny", num_instances=2).consistency_weight == 0.0
    with pytest.raises(ValueError, match="consistency_weight"):
        resolve(TrainConfig(**tune, consistency_weight=-1.0), "tiny", num_instances=2)


@pytest.mark.parametrize("size,n", [(7, 2), (11, 5), (13, 5), (9, 10), (10, 5)])
def test_no_example_shares_a_group_with_its_own_second_copy(size, n):
    """The doubled batch is grouped N consecutive slots at a time; its straddling group must not
    hold an example twice (it did with a plain permutation: e.g. size 7, N = 2, whenever the
    shuffle put example 6 first)."""
    for seed in range(200):
        torch.manual_seed(seed)
        shuffle = second_composition(size, n)
        assert sorted(shuffle.tolist()) == list(range(size))
        slots = list(range(size)) + shuffle.tolist()
        groups = [slots[start:start + n] for start in range(0, len(slots), n)]
        if size >= n:
            assert all(len(set(group)) == len(group) for group in groups), (seed, groups)
    torch.manual_seed(0)
    plain = torch.randperm(size)
    torch.manual_seed(0)
    if size % n == 0:  # nothing straddles: the permutation as drawn
        assert torch.equal(second_composition(size, n), plain)
