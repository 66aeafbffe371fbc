"""Metrics against hand-computed values."""

import math

import numpy as np
import pytest
import torch

from muxplm.data import TaskSpec
from muxplm.metrics import (
    accuracy,
    binary_f1,
    compute_task_metrics,
    macro_f1,
    matthews,
    pearson_spearman,
    seqeval_f1,
    seqeval_scores,
    token_predictions_to_tags,
)


def test_classification_metrics_by_hand():
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    # class 0: P 1/2 R 1 F 2/3; class 1: P 1 R 2/3 F 4/5; class 2: F 1.
    assert macro_f1([0, 0, 1, 1, 2], [0, 1, 1, 1, 2]) == pytest.approx((2 / 3 + 4 / 5 + 1) / 3)
    assert binary_f1([1, 1, 0, 0], [1, 0, 1, 0]) == pytest.approx(0.5)  # tp 1, fp 1, fn 1
    assert matthews([1, 1, 0, 0], [1, 0, 1, 0]) == pytest.approx(0.0)
    # tp 2, tn 1, fp 0, fn 1: (2*1 - 0*1) / sqrt(2 * 3 * 1 * 2)
    assert matthews([1, 1, 0, 0], [1, 1, 0, 1]) == pytest.approx(2 / math.sqrt(12))
    assert accuracy(torch.tensor([2, 2]), np.array([2, 1])) == 0.5


def test_correlations_by_hand():
    assert pearson_spearman([1, 2, 3, 4], [2, 4, 6, 8]) == pytest.approx((1.0, 1.0))
    # deviations (-1.5,-.5,.5,1.5)·(-2.5,-.5,-1.5,4.5) = 10; sums of squares 5 and 29.
    # ranks of y (1,3,2,4): rho = 1 - 6*2 / (4*15) = 0.8
    assert pearson_spearman([1, 2, 3, 4], [1, 3, 2, 8]) == pytest.approx((10 / math.sqrt(145), 0.8))
    assert pearson_spearman([1, 1, 1], [1, 2, 3]) == (0.0, 0.0)


def test_seqeval_chunks_and_plain_tags():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["B-PER", "I-PER", "O", "O"]]
    assert seqeval_scores(pred, gold) == pytest.approx({"precision": 1.0, "recall": 0.5, "f1": 2 / 3})
    # A chunk with a wrong boundary is wrong as a whole.
    assert seqeval_f1([["B-PER", "O", "O", "B-LOC"]], gold) == pytest.approx(0.5)
    # POS-style tags without prefixes: one chunk per token -> F1 = token accuracy.
    assert seqeval_f1([["NOUN", "NOUN", "DET"]], [["NOUN", "VERB", "DET"]]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="differ"):
        seqeval_f1([["O"]], [["O", "O"]])


def test_token_predictions_to_tags_keeps_first_subwords():
    names = ["O", "B-PER", "I-PER"]
    logits = torch.zeros(2, 5, 3)
    logits[0, :, 1] = 1.0  # predicts B-PER everywhere in row 0
    logits[1, :, 0] = 1.0
    labels = torch.tensor([[-100, 1, -100, 2, -100], [-100, 0, 0, -100, -100]])
    pred, gold = token_predictions_to_tags(logits, labels, names)
    assert gold == [["B-PER", "I-PER"], ["O", "O"]]
    assert pred == [["B-PER", "B-PER"], ["O", "O"]]
    # ids as ragged per-example rows work too
    pred, _ = token_predictions_to_tags([[0, 2, 0], [0, 0]], [[-100, 2, -100], [-100, 0]], names)
    assert pred == [["I-PER"], ["O"]]


def test_compute_task_metrics_per_kind():
    spec = TaskSpec("s", "sentence", ["neg", "pos"], metric="accuracy")
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [0.0, 3.0], [1.0, 0.0]])
    m = compute_task_metrics(spec, logits, [0, 1, 0, 0])
    assert m["accuracy"] == 0.75 and m["main"] == 0.75
    assert m["f1"] == pytest.approx(2 / 3) and set(m) == {"accuracy", "macro_f1", "matthews", "f1", "main"}

    three = TaskSpec("t", "sentence", ["a", "b", "c"], metric="macro_f1")
    m = compute_task_metrics(three, [0, 1, 2], [0, 1, 1])
    assert "f1" not in m and m["main"] == m["macro_f1"]

    reg = TaskSpec("r", "sentence", [], is_regression=True, metric="pearson_spearman")
    m = compute_task_metrics(reg, torch.tensor([[1.0], [2.0], [3.0], [4.0]]), [1, 3, 2, 8])
    assert m["pearson"] == pytest.approx(10 / math.sqrt(145)) and m["spearman"] == pytest.approx(0.8)
    assert m["mse"] == pytest.approx((0 + 1 + 1 + 16) / 4)
    assert m["main"] == pytest.approx((m["pearson"] + 0.8) / 2)

    tok = TaskSpec("n", "token", ["O", "B-PER", "I-PER"], metric="f1")
    m = compute_task_metrics(tok, [[0, 1, 2, 0]], [[-100, 1, 2, 0]])
    assert m["f1"] == 1.0 and m["accuracy"] == 1.0 and m["main"] == 1.0
    m = compute_task_metrics(tok, [[0, 1, 0, 0]], [[-100, 1, 2, 0]])
    assert m["f1"] == 0.0 and m["accuracy"] == pytest.approx(2 / 3)


def test_empty_inputs_raise():
    for fn in (accuracy, macro_f1, binary_f1, matthews, pearson_spearman):
        with pytest.raises(ValueError, match="empty"):
            fn([], [])
    with pytest.raises(ValueError, match="empty"):
        seqeval_f1([], [])
    spec = TaskSpec("s", "sentence", ["a", "b"])
    with pytest.raises(ValueError):
        compute_task_metrics(spec, np.zeros((0, 2)), [])
    with pytest.raises(ValueError):
        compute_task_metrics(TaskSpec("n", "token", ["O"], metric="f1"), [], [])
    with pytest.raises(ValueError, match="predictions but"):
        accuracy([1, 2], [1])
