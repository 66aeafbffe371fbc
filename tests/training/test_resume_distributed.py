"""Crash safety and multi-process runs: resume after SIGKILL (mid-step and at each point of saving),
and a 2-process gloo run."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from training_utils import micro_flags, read_log, run_cli

from muxplm.training import checkpoint as ckpt

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data

MLM = ["pretrain", "--stage", "mlm", "--preset", "tiny", "--num-instances", "2", "--seed", "7"]
# Two gloo processes on the CPU wherever the suite runs (a one-GPU machine cannot hold two ranks).
CPU_PROCESSES = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


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


# Runs the CLI in a child process that kills itself (os._exit: no clean-up, as SIGKILL) at one
# point of saving; which point is chosen by patching the call made there.
KILLER = """
import os, sys, torch
from muxplm.training import checkpoint as ckpt
point, argv = sys.argv[1], sys.argv[2:]
real_save, real_replace, real_json = torch.save, os.replace, ckpt.write_json_atomic
def save(obj, path, *args, **kwargs):
    if point == "mid-checkpoint" and str(path).endswith("checkpoint-8/optimizer.pt"):
        os._exit(9)
    return real_save(obj, path, *args, **kwargs)
def replace(source, target):
    if point == "between-final-renames" and str(source).endswith(".final-new"):
        os._exit(9)
    return real_replace(source, target)
def write_json(path, payload):
    if point == "mid-final-save" and path.name == "train_results.json":
        os._exit(9)
    return real_json(path, payload)
torch.save, os.replace, ckpt.write_json_atomic = save, replace, write_json
from muxplm.cli import main
sys.exit(main(argv))
"""


@pytest.mark.parametrize("point", ["mid-checkpoint", "mid-final-save", "between-final-renames"])
def test_a_kill_while_saving_leaves_a_run_that_resumes_to_the_end(tmp_path, point):
    steps, every = 8, 4
    flags = [*MLM, *micro_flags(max_steps=steps, save_steps=every, eval_steps=1000), "--output-dir", str(tmp_path / "run")]
    killed = subprocess.run([sys.executable, "-c", KILLER, point, *flags], capture_output=True, text=True, timeout=240)
    assert killed.returncode == 9, killed.stderr[-3000:]
    run = tmp_path / "run"
    resumed = run_cli(*flags, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((run / "train_results.json").read_text())
    assert summary["final_step"] == steps
    assert summary["resumed_from_step"] == (every if point == "mid-checkpoint" else steps)
    assert sorted(r["step"] for r in read_log(run)) == list(range(1, steps + 1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging or old folder left
    assert not list(run.glob(".tmp-*"))
    assert ckpt.verify_final(run) is None  # the final model is whole: config, weights, manifest


def test_two_processes_train_as_one_with_the_doubled_batch(tmp_path):
    """Gradient synchronisation really works: two processes of batch 8 end with identical
    weights on both ranks, equal to one process of batch 16 (a plain N = 1 model without
    dropout sees the same 16 examples a step either way, and the mean of the two ranks' mean
    gradients is the mean over the 16)."""
    flags = ["finetune", "--task", "sentiment", "--preset", "tiny", "--num-instances", "1", "--dropout", "0",
             "--max-train-examples", "64", "--max-eval-examples", "16", "--max-steps", "3", "--save-steps", "3",
             "--eval-steps", "3", "--lr", "1e-3", "--seed", "5",
             *micro_flags("finetune")]  # its --batch-size is overridden below (argparse keeps the last one)
    two = tmp_path / "two"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_port", str(30500 + os.getpid() % 1000), "-m", "muxplm.cli", *flags, "--batch-size", "8",
               "--output-dir", str(two)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env={**os.environ, **CPU_PROCESSES})
    assert done.returncode == 0, done.stderr[-3000:]
    one = run_cli(*flags, "--batch-size", "16", "--output-dir", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-3000:]
    split, whole = (json.loads((tmp_path / name / "train_results.json").read_text()) for name in ("two", "one"))
    assert split["world_size"] == 2 and whole["world_size"] == 1
    rank0, rank1 = split["weight_sum_per_rank"]
    assert rank0 == rank1  # bit-identical on both ranks
    assert rank0 == pytest.approx(whole["weight_sum_per_rank"][0], rel=1e-6)
    from safetensors.torch import load_file

    weights_two, weights_one = (load_file(tmp_path / name / "model.safetensors") for name in ("two", "one"))
    assert set(weights_two) == set(weights_one)
    for name, tensor in weights_one.items():
        assert torch.allclose(weights_two[name], tensor, atol=1e-5), name
    # The logged loss of the two processes is the mean over both ranks: the 16 examples' mean.
    assert [r["loss"] for r in read_log(two)] == pytest.approx([r["loss"] for r in read_log(tmp_path / "one")], rel=1e-5)


def test_two_process_gloo_run(tmp_path):
    out = tmp_path / "ddp"
    env = CPU_PROCESSES
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
    assert {p.name for p in (out / "checkpoint-4").glob("rng_state*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert done.stdout.count("model saved to") == 1
    # Evaluation ran sharded over both processes and gathered: the logged held-out figures at
    # the last step equal one process scoring the final model alone.
    from dataclasses import fields

    from muxplm import MuxBertForMaskedLM
    from muxplm.data import load_tokenizer
    from muxplm.training import TrainConfig
    from muxplm.training.inputs import pretraining_blocks, pretraining_evaluator

    saved = json.loads((out / "train_config.json").read_text())
    config = TrainConfig(**{f.name: saved[f.name] for f in fields(TrainConfig) if f.name in saved})
    tokenizer, model = load_tokenizer(out), MuxBertForMaskedLM.from_pretrained(out).eval()
    _, blocks = pretraining_blocks(config, tokenizer)
    alone = pretraining_evaluator("mlm", tokenizer, model, config, blocks)(model)
    logged = [r for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if r["kind"] == "eval"][-1]
    assert logged["step"] == 4
    assert logged["loss"] == pytest.approx(alone["loss"], rel=1e-5)
    assert logged["accuracy"] == pytest.approx(alone["accuracy"], abs=1e-9)
