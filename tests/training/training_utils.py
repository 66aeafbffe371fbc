"""Shared settings and helpers for the training tests: a 2-layer, H=64 model on short sequences, so every
stage runs a few steps in seconds on a 2-core CPU."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from muxplm import cli

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MICRO_MODEL = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128}
# Settings every test run shares (as TrainConfig keyword arguments).
MICRO = dict(
    preset="tiny", model_overrides=MICRO_MODEL, max_length=32, batch_size=8, eval_batch_size=32,
    corpus_sources=["moby_dick"], corpus_max_words=6000, logging_steps=1, progress=False,
)


def micro_flags(command: str = "pretrain", **extra) -> list[str]:
    """The same settings as flags of ``command`` (finetune takes no corpus settings)."""
    flags = ["--model-overrides", json.dumps(MICRO_MODEL), "--max-length", "32", "--batch-size", "8",
             "--logging-steps", "1", "--no-progress"]
    if command != "finetune":
        flags += ["--corpus-sources", "moby_dick", "--corpus-max-words", "6000"]
    for key, value in extra.items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    return flags


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> CliResult:
    """``muxplm ARGS`` run in this process and reported as a child process would report it: the
    exit status and both streams, the library's warnings included. A child would spend ~11 s
    importing the CLI on each call; the tests that need a real process (the README's commands,
    kills, torchrun) start one themselves."""
    stdout, stderr = io.StringIO(), io.StringIO()
    # pytest's own handlers sit on the root logger, so Python's last-resort handler, which would
    # print a child's warnings to its stderr, never runs here: this handler stands in for it.
    warnings_to_stderr = logging.StreamHandler(stderr)
    warnings_to_stderr.setLevel(logging.WARNING)
    logging.getLogger().addHandler(warnings_to_stderr)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                returncode = cli.main(list(args))
            except SystemExit as exit_:  # argparse's usage errors
                returncode = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
            except Exception:  # as an uncaught exception ends a child: traceback, status 1
                traceback.print_exc()
                returncode = 1
    finally:
        logging.getLogger().removeHandler(warnings_to_stderr)
    return CliResult(returncode, stdout.getvalue(), stderr.getvalue())


def run_cli_process(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    """``python3 -m muxplm ARGS`` in a child process, as the README prints the commands."""
    return subprocess.run([sys.executable, "-m", "muxplm", *args], capture_output=True, text=True, timeout=timeout)


def read_log(output_dir: Path, kind: str = "train") -> list[dict]:
    lines = (Path(output_dir) / "log.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["kind"] == kind]


