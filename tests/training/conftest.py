"""Session fixtures of the training tests: one small three-stage chain reused by many tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from transformers import TrainerCallback
from transformers.integrations import INTEGRATION_TO_CALLBACK

sys.path.insert(0, str(Path(__file__).parent))  # the shared helpers module next to this file
from training_utils import MICRO  # noqa: E402


class RecordingCallback(TrainerCallback):
    """A reporting integration (registered with transformers as ``recording``, so that
    ``--report-to recording`` picks it) that keeps what it is given in
    ``OUTPUT/trackers/recording.json``."""

    def __init__(self):
        self.calls: dict = {"config": None, "log": [], "finished": False}

    def on_train_begin(self, args, state, control, **kwargs):
        self.calls["config"] = args.to_dict()

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.calls["log"].append({"step": state.global_step, **(logs or {})})

    def on_train_end(self, args, state, control, **kwargs):
        self.calls["finished"] = True
        path = Path(args.output_dir) / "trackers" / "recording.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.calls))


INTEGRATION_TO_CALLBACK["recording"] = RecordingCallback


@pytest.fixture(scope="session")
def primed(tmp_path_factory) -> Path:
    """A stage-1 (retrieval) N=2 checkpoint, trained once for the session."""
    from muxplm.training import TrainConfig, run_stage

    out = tmp_path_factory.mktemp("stages") / "retrieval"
    run_stage(TrainConfig(stage="retrieval", output_dir=str(out), num_instances=2, max_steps=3, **MICRO))
    return out


@pytest.fixture(scope="session")
def pretrained(primed) -> Path:
    """A stage-2 (MLM) checkpoint started from the stage-1 one."""
    from muxplm.training import TrainConfig, run_stage

    out = primed.parent / "mlm"
    settings = {k: v for k, v in MICRO.items() if k not in ("preset", "model_overrides")}
    run_stage(TrainConfig(stage="mlm", output_dir=str(out), init=str(primed), max_steps=3, **settings))
    return out


@pytest.fixture(scope="session")
def finetuned(pretrained) -> Path:
    """A stage-3 sentiment classifier (N=2) from the stage-2 checkpoint."""
    from muxplm.training import TrainConfig, run_stage

    out = pretrained.parent / "sentiment"
    settings = {k: v for k, v in MICRO.items() if k not in ("preset", "model_overrides")}
    run_stage(TrainConfig(stage="finetune", task="sentiment", output_dir=str(out), init=str(pretrained),
                          max_steps=4, max_train_examples=64, max_eval_examples=45, report_to=["recording"],
                          **settings))
    return out
