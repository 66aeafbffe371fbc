"""Mixed precision on the CPU: a bf16-autocast training run and forward pass work; fp16, which
needs a GPU, and bf16 on a CPU without native bf16 are refused with a clear message."""

from __future__ import annotations

import math

import pytest
import torch
from training_utils import MICRO, read_log

from muxplm.training import TrainConfig, run_stage

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data


@pytest.fixture
def fresh_accelerate_state():
    """Accelerate keeps one process-wide state whose precision cannot change once set: start
    and leave this test with none."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_bf16_autocast_trains_on_the_cpu(tmp_path, fresh_accelerate_state, native_bf16):
    summary = run_stage(TrainConfig(**MICRO, stage="mlm", num_instances=2, max_steps=2, mixed_precision="bf16",
                                    output_dir=str(tmp_path)))
    assert summary["final_step"] == 2
    assert all(math.isfinite(record["loss"]) for record in read_log(tmp_path))


def test_bf16_on_a_cpu_without_native_bf16_is_refused_before_training(tmp_path, fresh_accelerate_state,
                                                                     monkeypatch):
    from muxplm import devices

    monkeypatch.setattr(devices, "cpu_runs_bf16_natively", lambda: False)
    with pytest.raises(ValueError, match=r"--mixed-precision bf16 on this CPU: it has no native bf16.*--mixed-precision no"):
        run_stage(TrainConfig(**MICRO, stage="mlm", max_steps=2, mixed_precision="bf16", output_dir=str(tmp_path)))
    assert not (tmp_path / "log.jsonl").exists()
    # auto never picks bf16 on a CPU: it trains in float32 there.
    summary = run_stage(TrainConfig(**MICRO, stage="mlm", max_steps=1, mixed_precision="auto", output_dir=str(tmp_path)))
    assert summary["final_step"] == 1


def test_bf16_autocast_forward_matches_float32_closely():
    from muxplm import MuxBertConfig, MuxBertForSequenceClassification

    from mux_testing import MICRO as MICRO_CONFIG
    from mux_testing import random_batch

    torch.manual_seed(0)
    model = MuxBertForSequenceClassification(MuxBertConfig(**MICRO_CONFIG, num_instances=2, num_labels=3)).eval()
    batch = random_batch(5)
    with torch.no_grad():
        full = model(**batch).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = model(**batch).logits
    assert half.dtype == torch.bfloat16 and torch.allclose(half.float(), full, atol=0.05)


def test_more_processes_than_gpus_are_refused_by_name(monkeypatch):
    from muxplm.training.stages import process_state

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the check only: nothing runs on it
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"2 processes on this machine but 1 GPU\(s\).*--nproc-per-node 1"):
        process_state()  # what a run sets up first (its first barrier would fail on rank 1)


def test_fp16_on_the_cpu_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="fp16 needs a CUDA GPU"):
        run_stage(TrainConfig(**MICRO, stage="mlm", num_instances=2, max_steps=1, mixed_precision="fp16",
                              output_dir=str(tmp_path)))
