"""Crash safety and multi-process runs: resume after SIGKILL, and a 2-process gloo run."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from training_utils import micro_flags, read_log, run_cli

MLM = ["pretrain", "--stage", "mlm", "--preset", "tiny", "--num-instances", "2", "--seed", "7"]


def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path):
    steps, every = 12, 4
    flags = micro_flags(max_steps=steps, save_steps=every, eval_steps=1000, save_total_limit=2)
    reference = tmp_path / "reference"
    done = run_cli(*MLM, *flags, "--output-dir", str(reference))
    assert done.returncode == 0, done.stderr

    crashed = tmp_path / "crashed"
    process = subprocess.Popen([sys.executable, "-m", "muxplm.cli", *MLM, *flags, "--output-dir", str(crashed)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = crashed / f"checkpoint-{every}" / "trainer_state.json"
    deadline = time.monotonic() + 120
    while not first.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not (crashed / "train_results.json").exists()
    # Debris a crash mid-save could leave: neither may be taken for a checkpoint.
    (crashed / ".tmp-checkpoint-99").mkdir()
    (crashed / "checkpoint-98").mkdir()
    (crashed / "checkpoint-98" / "config.json").write_text("{}")
    saved = max(int(p.name.split("-")[1]) for p in crashed.glob("checkpoint-*") if (p / "trainer_state.json").exists())

    resumed = run_cli(*MLM, *flags, "--output-dir", str(crashed), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((crashed / "train_results.json").read_text())
    assert summary["final_step"] == steps and summary["resumed_from_step"] == saved
    expected = {r["step"]: r["loss"] for r in read_log(reference)}
    got = {r["step"]: r["loss"] for r in read_log(crashed)}
    assert sorted(got) == list(range(1, steps + 1))  # every step logged exactly once
    for step in range(saved + 1, steps + 1):
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), step
    # Bounded checkpoints: the 2 newest complete ones (the fake incomplete one is not counted).
    complete = {p.name for p in crashed.glob("checkpoint-*") if (p / "trainer_state.json").exists()}
    assert complete == {f"checkpoint-{steps - every}", f"checkpoint-{steps}"}


def test_two_process_gloo_run(tmp_path):
    out = tmp_path / "ddp"
    env = {"OMP_NUM_THREADS": "1"}
    # `python -m torch.distributed.run` is torchrun, from this interpreter whatever the PATH.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_port", str(29500 + os.getpid() % 1000), "-m", "muxplm.cli", *MLM, *micro_flags(max_steps=4, save_steps=2, eval_steps=4),
               "--output-dir", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "train_results.json").read_text())
    assert summary["world_size"] == 2 and summary["final_step"] == 4
    assert math.isfinite(summary["final_loss"])
    rank0, rank1 = summary["first_batch_ids_per_rank"]
    assert len(rank0) == len(rank1) == 8 and not set(rank0) & set(rank1)  # each rank its own data
    events = [r["step"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())
              if r["kind"] == "checkpoint"]
    assert events == [2, 4]  # written once per save, by one process
    assert {p.name for p in (out / "checkpoint-4").glob("rng_state_*.pt")} == {"rng_state_0.pt", "rng_state_1.pt"}
    assert done.stdout.count("model saved to") == 1
