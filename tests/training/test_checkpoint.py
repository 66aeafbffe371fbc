"""Checkpoint bookkeeping: the final model replaced whole or not at all whatever the point of a
crash, and no code run from any file of a checkpoint."""

import json

import pytest
import torch
from safetensors.torch import save_file

from muxplm.training import checkpoint as ckpt


def _fake_checkpoints(root, scores):
    for step in scores:
        path = root / f"checkpoint-{step}"
        path.mkdir(parents=True)
        (path / ckpt.STATE_FILE).write_text(json.dumps({"global_step": step}))


def _names(root):
    return [p.name for p in ckpt.checkpoint_dirs(root)]


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


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A run folder with one real Trainer checkpoint (optimizer, scheduler, RNG state)."""
    from training_utils import MICRO

    from muxplm.training import TrainConfig, run_stage

    out = tmp_path_factory.mktemp("real") / "run"
    run_stage(TrainConfig(stage="mlm", output_dir=str(out), num_instances=2, max_steps=2, save_steps=1,
                          save_total_limit=None, **MICRO))
    return out


@pytest.mark.usefixtures("builtin_data")
@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_a_crafted_pickle_in_a_checkpoint_is_refused_and_never_run(real_run, tmp_path, name):
    import pickle
    import shutil

    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    folder = run / "checkpoint-2"
    assert ckpt.verify(folder) is None  # real state loads weights_only (numpy RNG state included)
    marker = tmp_path / "ran"
    (folder / name).write_bytes(pickle.dumps({"state": _Payload(marker)}))
    problem = ckpt.verify(folder)
    assert problem is not None and name in problem and "weights-only" in problem, problem
    assert ckpt.resumable_checkpoint(run, lambda message: None).name == "checkpoint-1"  # the previous one
    assert not marker.exists()


@pytest.mark.usefixtures("builtin_data")
@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_the_trainer_loads_every_checkpoint_file_weights_only(real_run, tmp_path, monkeypatch, name):
    """Past muxplm's own check (switched off here), the Trainer's loads of the optimizer,
    scheduler and RNG files refuse a crafted pickle unrun too."""
    import pickle
    import shutil

    from training_utils import MICRO

    from muxplm.training import TrainConfig, run_stage

    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    marker = tmp_path / "ran"
    (run / "checkpoint-2" / name).write_bytes(pickle.dumps({"state": _Payload(marker)}))
    monkeypatch.setattr(ckpt, "verify", lambda checkpoint: None)
    with pytest.raises(Exception, match="(?i)weights.only"):
        run_stage(TrainConfig(stage="mlm", output_dir=str(run), num_instances=2, max_steps=3, save_steps=1,
                              save_total_limit=None, resume=True, **MICRO))
    assert not marker.exists()
    assert not list(run.glob("checkpoint-*/training_args.bin"))  # no pickle of the arguments either
