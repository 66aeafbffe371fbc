"""Resuming from damaged output folders: a broken newest checkpoint is named and skipped for
the previous whole one, a torn log line is tolerated, a changed data layout is refused."""

from __future__ import annotations

import logging
import shutil

import pytest
from training_utils import MICRO, read_log

from muxplm.training import TrainConfig, run_stage
from muxplm.training import checkpoint as ckpt

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data


def settings(output_dir, **extra):
    return TrainConfig(**{**MICRO, "stage": "mlm", "num_instances": 2, "save_steps": 2, "eval_steps": 1000,
                          "save_total_limit": None, "output_dir": str(output_dir), **extra})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("resume") / "run"
    run_stage(settings(out, max_steps=4))
    return out


def copy_of(finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


@pytest.mark.parametrize("damage", ["truncated weights", "garbled optimizer", "garbled rng", "garbled state"])
def test_a_broken_newest_checkpoint_falls_back_to_the_previous_one(finished, tmp_path, caplog, damage):
    out = copy_of(finished, tmp_path)
    newest = out / "checkpoint-4"
    if damage == "truncated weights":
        weights = newest / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-100])
        named = "model.safetensors"
    elif damage == "garbled optimizer":
        (newest / "optimizer.pt").write_bytes(b"not a pickle")
        named = "optimizer.pt"
    elif damage == "garbled rng":
        (newest / "rng_state.pth").write_bytes(b"\x80\x04garbage")
        named = "rng_state.pth"
    else:
        (newest / "trainer_state.json").write_text('{"global_step": 4, ')
        named = "trainer_state.json"
    assert named in ckpt.verify(newest)
    with caplog.at_level(logging.WARNING):
        summary = run_stage(settings(out, max_steps=6, resume=True))
    assert summary["resumed_from_step"] == 2 and summary["final_step"] == 6
    assert any(named in record.getMessage() and "falling back" in record.getMessage() for record in caplog.records)


def test_no_whole_checkpoint_is_an_error_not_a_fresh_start(finished, tmp_path):
    out = copy_of(finished, tmp_path)
    for step in (2, 4):
        (out / f"checkpoint-{step}" / "optimizer.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="no checkpoint .* is whole"):
        run_stage(settings(out, max_steps=6, resume=True))


def test_a_torn_log_line_does_not_stop_resume(finished, tmp_path):
    out = copy_of(finished, tmp_path)
    with open(out / "log.jsonl", "a") as handle:
        handle.write('{"kind": "train", "step": 5, "lo')  # the crash came mid-write
    run_stage(settings(out, max_steps=6, resume=True))
    assert [r["step"] for r in read_log(out)] == list(range(1, 7))


def test_resuming_with_another_batch_size_is_refused(finished, tmp_path):
    out = copy_of(finished, tmp_path)
    with pytest.raises(ValueError, match="batch size 8 -> 4 would skip or repeat"):
        run_stage(settings(out, max_steps=6, resume=True, batch_size=4))
