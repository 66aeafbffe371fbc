"""Shared settings and helpers for the training tests: a 2-layer, H=64 model on short sequences, so every
stage runs a few steps in seconds on a 2-core CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MICRO_MODEL = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128}
# Settings every test run shares (as TrainConfig keyword arguments).
MICRO = dict(
    preset="tiny", model_overrides=MICRO_MODEL, max_length=32, batch_size=8, eval_batch_size=32,
    corpus_sources=["moby_dick"], corpus_max_words=6000, logging_steps=1, progress=False,
)


def micro_flags(**extra) -> list[str]:
    """The same settings as command-line flags."""
    flags = ["--model-overrides", json.dumps(MICRO_MODEL), "--max-length", "32", "--batch-size", "8",
             "--corpus-sources", "moby_dick", "--corpus-max-words", "6000", "--logging-steps", "1", "--no-progress"]
    for key, value in extra.items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    return flags


def run_cli(*args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "muxplm.cli", *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def read_log(output_dir: Path, kind: str = "train") -> list[dict]:
    lines = (Path(output_dir) / "log.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["kind"] == kind]


