"""Checkpoint bookkeeping: which checkpoints rotation keeps, which one is the best, and the final
model replaced whole or not at all whatever the point of a crash."""

import json

import pytest
import torch
from safetensors.torch import save_file

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


# ------------------------------------------------------------------ the final model, replaced whole


def _run_folder(root):
    """A finished run: two checkpoints, logs, and a final model saved earlier (with its manifest)."""
    run = root / "run"
    _fake_checkpoints(run, {2: None, 4: None})
    (run / "log.jsonl").write_text('{"step": 1}\n')
    (run / "config.json").write_text('{"old": true}')
    (run / "pytorch_model.bin").write_bytes(b"old weights")  # a file the new save does not write
    (run / ckpt.FINAL_MANIFEST).write_text(json.dumps(["config.json", "pytorch_model.bin"]))
    return run


def _write_new(folder):
    (folder / "config.json").write_text('{"new": true}')
    save_file({"weight": torch.ones(3)}, folder / "model.safetensors")


def test_publish_final_replaces_the_final_files_and_keeps_the_run(tmp_path):
    run = _run_folder(tmp_path)
    ckpt.publish_final(run, _write_new)
    assert json.loads((run / "config.json").read_text()) == {"new": True}
    assert not (run / "pytorch_model.bin").exists()  # the earlier save's stale file is gone
    assert (run / "log.jsonl").read_text() == '{"step": 1}\n'
    assert _names(run) == ["checkpoint-2", "checkpoint-4"]
    assert json.loads((run / ckpt.FINAL_MANIFEST).read_text()) == ["config.json", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging or old folder left
    assert ckpt.verify_final(run) is None
    (run / "model.safetensors").unlink()
    assert "model.safetensors is missing" in ckpt.verify_final(run)
    assert "no final model" in ckpt.verify_final(tmp_path / "elsewhere")


class Crash(Exception):
    pass


def _crash_on_replace(monkeypatch, when):
    real = ckpt.os.replace

    def replace(source, target):
        if when(str(source), str(target)):
            raise Crash
        return real(source, target)

    monkeypatch.setattr(ckpt.os, "replace", replace)


def test_a_crash_at_any_point_of_the_final_save_leaves_the_old_or_the_new_run_whole(tmp_path, monkeypatch):
    def crash_in_write(folder):
        (folder / "config.json").write_text('{"new": true}')
        raise Crash

    outcomes = {}
    points = {
        "while writing": dict(write=crash_in_write),
        "before the first rename": dict(replace=lambda s, t: s.endswith("run")),
        "between the two renames": dict(replace=lambda s, t: s.endswith(".final-new")),
    }
    for name, point in points.items():
        root = tmp_path / name.replace(" ", "-")
        run = _run_folder(root)
        with monkeypatch.context() as patch:
            if "replace" in point:
                _crash_on_replace(patch, point["replace"])
            try:
                ckpt.publish_final(run, point.get("write", _write_new))
            except Crash:
                pass
            else:
                raise AssertionError(f"no crash {name}")
        ckpt.recover_run_folder(run)  # what the next run does first
        assert sorted(p.name for p in root.iterdir()) == ["run"], name
        assert _names(run) == ["checkpoint-2", "checkpoint-4"], name
        assert (run / "log.jsonl").is_file(), name
        outcomes[name] = json.loads((run / "config.json").read_text())
        stale = (run / "pytorch_model.bin").exists()
        assert stale == ("old" in outcomes[name]), name  # never old weights with a new config
    assert outcomes == {"while writing": {"old": True}, "before the first rename": {"old": True},
                        "between the two renames": {"new": True}}


def test_recovery_leaves_a_whole_folder_alone(tmp_path):
    run = _run_folder(tmp_path)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    ckpt.recover_run_folder(run)
    ckpt.recover_run_folder(tmp_path / "never-created")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_a_folder_that_cannot_be_swapped_gets_its_files_replaced_in_place(tmp_path, monkeypatch):
    """The working directory itself (``--output-dir .``): renaming it would pull the ground from
    under the process, so the files are replaced one by one, the stale ones dropped."""
    run = _run_folder(tmp_path)
    monkeypatch.chdir(run)
    ckpt.publish_final(".", _write_new)
    assert json.loads((run / "config.json").read_text()) == {"new": True}
    assert not (run / "pytorch_model.bin").exists() and not (run / ".tmp-final").exists()
    assert ckpt.verify_final(run) is None and _names(run) == ["checkpoint-2", "checkpoint-4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_recovering_another_runs_folder_removes_nothing(tmp_path):
    run = _run_folder(tmp_path)
    publishing = tmp_path / ".run.final-new"  # another process may be filling it right now
    publishing.mkdir()
    ckpt.recover_run_folder(run, clean=False)
    assert publishing.is_dir()
    ckpt.recover_run_folder(run)  # this run's own folder: debris of a swap that never started
    assert not publishing.exists()


# ------------------------------------------------------------------ checkpoint state carries no code


class _Payload:
    """A pickle that, unpickled in full, creates ``marker``: what a crafted checkpoint file would
    do with a shell command instead."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _real_checkpoint(folder):
    """What ``accelerator.save_state`` writes for a run like ours (optimizer, the registered
    scheduler, RNG states), plus the state file and weights of a checkpoint."""
    from accelerate import Accelerator
    from transformers import get_linear_schedule_with_warmup

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = get_linear_schedule_with_warmup(optimizer, 2, 10)
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    accelerator.save_state(str(folder))
    (folder / ckpt.STATE_FILE).write_text(json.dumps({"step": 1}))
    return accelerator, scheduler


@pytest.mark.parametrize("name", ["optimizer.bin", "custom_checkpoint_0.pkl", "random_states_0.pkl", "scaler.pt"])
def test_a_crafted_pickle_in_a_checkpoint_is_refused_and_never_run(tmp_path, name):
    import pickle

    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    _real_checkpoint(folder)
    assert ckpt.verify(folder) is None  # real state loads weights_only (numpy RNG state included)
    marker = tmp_path / "ran"
    (folder / name).write_bytes(pickle.dumps({"state": _Payload(marker)}))
    problem = ckpt.verify(folder)
    assert problem is not None and name in problem and "weights-only" in problem, problem
    assert ckpt.resumable_checkpoint(tmp_path, lambda message: None) is None
    assert not marker.exists()


def test_resume_loads_every_file_weights_only(tmp_path):
    """Accelerate's ``load_state`` unpickles the registered scheduler in full; the training loop
    runs it under ``weights_only_loads``, where a crafted file is refused unrun and a real one loads."""
    import pickle

    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    accelerator, scheduler = _real_checkpoint(folder)
    with ckpt.weights_only_loads():
        accelerator.load_state(str(folder))
    assert scheduler.last_epoch == 1
    marker = tmp_path / "ran"
    (folder / "custom_checkpoint_0.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(Exception, match="(?i)weights only"):
        with ckpt.weights_only_loads():
            accelerator.load_state(str(folder))
    assert not marker.exists()
    with pytest.raises(Exception):  # the plain torch.load of the same file is refused too
        with ckpt.weights_only_loads():
            torch.load(folder / "custom_checkpoint_0.pkl", weights_only=False)
    assert not marker.exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in __import__("os").environ  # restored afterwards
