"""Helpers of the `muxplm predict` tests: texts of spread lengths, JSONL in and out, the command run
in this process."""

from __future__ import annotations

import contextlib
import io
import json
import random

import pyarrow.parquet as pq

from muxplm.cli import main

WORDS = "the a film plot actor scene great dull long short moving funny slow bright dark very not quite".split()


def make_texts(count: int, seed: int = 0, most_words: int = 40) -> list[str]:
    """Texts of 1 to ``most_words`` words: lengths spread as in a real file."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, most_words))) for _ in range(count)]


def write_jsonl(path, records) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_predict(*args: str) -> tuple[int, str, str]:
    """``muxplm predict ARGS`` in this process: exit status, stdout, stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            status = main(["predict", *args, "--no-progress"])
        except SystemExit as exit_:
            status = exit_.code
    return status, stdout.getvalue(), stderr.getvalue()


def predict(model, inputs, output, *flags: str) -> list[dict]:
    status, _, stderr = run_predict(str(model), "--input", *map(str, inputs), "--output", str(output), *flags)
    assert status == 0, stderr
    if str(output).endswith(".parquet"):
        return pq.read_table(output).to_pylist()
    return read_jsonl(output)
