"""Checkpoint bookkeeping: which checkpoints rotation keeps, and which one is the best."""

import json

from muxplm.training import checkpoint as ckpt


def _fake_checkpoints(root, scores, greater_is_better=True):
    for step, value in scores.items():
        path = root / f"checkpoint-{step}"
        path.mkdir(parents=True)
        score = None if value is None else {"metric": "m", "value": value, "greater_is_better": greater_is_better}
        (path / ckpt.STATE_FILE).write_text(json.dumps({"step": step, "score": score}))


def _names(root):
    return sorted((p.name for p in ckpt.checkpoint_dirs(root)), key=lambda name: int(name.split("-")[1]))


def test_best_checkpoint_by_direction_ties_and_missing_scores(tmp_path):
    _fake_checkpoints(tmp_path / "up", {10: 0.5, 20: 0.9, 30: 0.9, 40: None, 50: float("nan")})
    assert ckpt.best_checkpoint(tmp_path / "up").name == "checkpoint-20"  # the earliest of the tied best
    _fake_checkpoints(tmp_path / "down", {10: 3.0, 20: 1.0, 30: 2.0}, greater_is_better=False)
    assert ckpt.best_checkpoint(tmp_path / "down").name == "checkpoint-20"
    _fake_checkpoints(tmp_path / "unscored", {10: None, 20: None})
    assert ckpt.best_checkpoint(tmp_path / "unscored") is None


def test_rotation_keeps_the_newest_and_the_best(tmp_path):
    _fake_checkpoints(tmp_path, {10: 0.2, 20: 0.8, 30: 0.5, 40: 0.4})
    removed = ckpt.rotate(tmp_path, keep=1, protect=tmp_path / "checkpoint-40")
    assert _names(tmp_path) == ["checkpoint-20", "checkpoint-40"]
    assert sorted(p.name for p in removed) == ["checkpoint-10", "checkpoint-30"]
    # Without scores it is plain newest-first rotation.
    _fake_checkpoints(tmp_path / "plain", {1: None, 2: None, 3: None})
    ckpt.rotate(tmp_path / "plain", keep=2)
    assert _names(tmp_path / "plain") == ["checkpoint-2", "checkpoint-3"]
    assert ckpt.rotate(tmp_path / "plain", keep=None) == []
