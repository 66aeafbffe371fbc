"""Evaluation metrics (scikit-learn, scipy, seqeval; no hub access needed).

``compute_task_metrics(spec, predictions, labels)`` picks the right set for a TaskSpec:

- classification: accuracy, macro_f1, matthews (+ f1 of class 1 for two-label tasks, which
  is GLUE's F1 for MRPC/QQP);
- regression: pearson, spearman, their mean ``pearson_spearman`` (GLUE's STS-B score), mse;
- token tasks: seqeval precision / recall / f1 over entity chunks and token accuracy, on the
  first sub-word of each word (positions whose label is not -100).

Every result also has ``main``: the value of ``spec.metric``, the number to select models by.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "accuracy",
    "macro_f1",
    "binary_f1",
    "matthews",
    "pearson_spearman",
    "seqeval_scores",
    "seqeval_f1",
    "token_predictions_to_tags",
    "compute_task_metrics",
]

IGNORE_INDEX = -100  # label value the losses and metrics skip (as in Transformers)


def _to_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor, without importing torch here
        x = x.detach().cpu().float().numpy() if x.is_floating_point() else x.detach().cpu().numpy()
    return np.asarray(x)


def _pair(predictions, labels) -> tuple[np.ndarray, np.ndarray]:
    p, y = _to_numpy(predictions).reshape(-1), _to_numpy(labels).reshape(-1)
    if p.size == 0 or y.size == 0:
        raise ValueError("metrics need at least one prediction and label (got empty input)")
    if p.shape != y.shape:
        raise ValueError(f"{p.size} predictions but {y.size} labels")
    return p, y


def accuracy(predictions, labels) -> float:
    p, y = _pair(predictions, labels)
    return float(np.mean(p == y))


def macro_f1(predictions, labels) -> float:
    """Unweighted mean of per-class F1 over the classes present in labels or predictions."""
    from sklearn.metrics import f1_score

    p, y = _pair(predictions, labels)
    return float(f1_score(y, p, average="macro", zero_division=0))


def binary_f1(predictions, labels, pos_label: int = 1) -> float:
    """F1 of the positive class (GLUE's F1 for MRPC and QQP)."""
    from sklearn.metrics import f1_score

    p, y = _pair(predictions, labels)
    return float(f1_score(y, p, average="binary", pos_label=pos_label, zero_division=0))


def matthews(predictions, labels) -> float:
    """Matthews correlation coefficient (GLUE's CoLA metric); 0.0 when undefined."""
    from sklearn.metrics import matthews_corrcoef

    p, y = _pair(predictions, labels)
    return float(matthews_corrcoef(y, p))


def pearson_spearman(predictions, labels) -> tuple[float, float]:
    """(Pearson r, Spearman rho). Undefined correlations (a constant input, or a single pair)
    are reported as 0.0 rather than NaN so model selection never compares NaNs."""
    from scipy.stats import pearsonr, spearmanr

    p, y = _pair(predictions, labels)
    p, y = p.astype(np.float64), y.astype(np.float64)
    if p.size < 2 or np.all(p == p[0]) or np.all(y == y[0]):
        return 0.0, 0.0
    return float(pearsonr(p, y)[0]), float(spearmanr(p, y)[0])


def _check_seqs(pred_tag_seqs, gold_tag_seqs) -> tuple[list[list[str]], list[list[str]]]:
    pred, gold = [list(s) for s in pred_tag_seqs], [list(s) for s in gold_tag_seqs]
    if not gold or not any(gold):
        raise ValueError("seqeval metrics need at least one tagged word (got empty input)")
    if len(pred) != len(gold) or any(len(a) != len(b) for a, b in zip(pred, gold)):
        raise ValueError("predicted and gold tag sequences differ in number or length")
    return pred, gold


def _as_chunks(pred, gold):
    """Tag sets without B-/I- prefixes (POS) -> every token is its own one-token chunk.

    seqeval reads the first character of an unprefixed tag as a BIO marker ("NOUN" -> "N"), so
    such tags get a "B-" prefix; F1 then equals token accuracy, the usual POS score.
    """
    tags = {t for seq in (*pred, *gold) for t in seq}
    if any(t.startswith(("B-", "I-")) for t in tags):
        return pred, gold
    fix = lambda seq: [t if t == "O" else f"B-{t}" for t in seq]  # noqa: E731
    return [fix(s) for s in pred], [fix(s) for s in gold]


def seqeval_scores(pred_tag_seqs, gold_tag_seqs) -> dict[str, float]:
    """Micro precision / recall / F1 over chunks (seqeval's default, conlleval-compatible)."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    pred, gold = _as_chunks(*_check_seqs(pred_tag_seqs, gold_tag_seqs))
    return {
        "precision": float(precision_score(gold, pred, zero_division=0)),
        "recall": float(recall_score(gold, pred, zero_division=0)),
        "f1": float(f1_score(gold, pred, zero_division=0)),
    }


def seqeval_f1(pred_tag_seqs: Sequence[Sequence[str]], gold_tag_seqs: Sequence[Sequence[str]]) -> float:
    """Chunk-level micro F1 of predicted vs gold tag sequences (see :func:`seqeval_scores`)."""
    return seqeval_scores(pred_tag_seqs, gold_tag_seqs)["f1"]


def token_predictions_to_tags(logits_or_pred_ids, labels, label_names: Sequence[str]):
    """Per-word predicted and gold tag-name sequences from sub-word level outputs.

    ``logits_or_pred_ids``: ``[B, L, C]`` logits or ``[B, L]`` ids (array, tensor, or a list of
    per-example rows of different lengths); ``labels``: ``[B, L]`` with -100 on positions that
    are not the first sub-word of a word. Only labelled positions are kept, so the outputs are
    word-aligned. Returns ``(pred_tag_seqs, gold_tag_seqs)``.
    """
    pred_rows = [_to_numpy(r) for r in logits_or_pred_ids]
    label_rows = [_to_numpy(r) for r in labels]
    if not label_rows:
        raise ValueError("no examples given")
    if len(pred_rows) != len(label_rows):
        raise ValueError(f"{len(pred_rows)} prediction rows but {len(label_rows)} label rows")
    preds, golds = [], []
    for p, y in zip(pred_rows, label_rows):
        ids = p.argmax(-1) if p.ndim == 2 else p
        keep = np.nonzero(y != IGNORE_INDEX)[0]
        if keep.size and keep[-1] >= ids.shape[0]:
            raise ValueError("a labelled position lies beyond the prediction row")
        preds.append([label_names[int(i)] for i in ids[keep]])
        golds.append([label_names[int(i)] for i in y[keep]])
    return preds, golds


def compute_task_metrics(spec, predictions, labels) -> dict[str, float]:
    """Metrics for ``spec`` (a TaskSpec) from model outputs (logits or ids) and gold labels."""
    if spec.kind == "token":
        pred, gold = token_predictions_to_tags(predictions, labels, spec.label_names)
        out = seqeval_scores(pred, gold)
        flat_p = [t for s in pred for t in s]
        flat_g = [t for s in gold for t in s]
        out["accuracy"] = float(np.mean([a == b for a, b in zip(flat_p, flat_g)]))
    elif spec.is_regression:
        p = _to_numpy(predictions).reshape(-1).astype(np.float64)
        y = _to_numpy(labels).reshape(-1).astype(np.float64)
        pr, sr = pearson_spearman(p, y)
        out = {"pearson": pr, "spearman": sr, "pearson_spearman": (pr + sr) / 2,
               "mse": float(np.mean((p - y) ** 2))}
    else:
        p = _to_numpy(predictions)
        if p.ndim == 2:  # logits / probabilities
            p = p.argmax(-1)
        out = {"accuracy": accuracy(p, labels), "macro_f1": macro_f1(p, labels),
               "matthews": matthews(p, labels)}
        if len(spec.label_names) == 2:
            out["f1"] = binary_f1(p, labels)
    if spec.metric not in out:
        raise ValueError(f"task {spec.name!r} names main metric {spec.metric!r}, "
                         f"not among {sorted(out)}")
    out["main"] = out[spec.metric]
    return out
