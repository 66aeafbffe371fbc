"""Pre-training from files and hub datasets: ``--train-file`` (globs, several kinds) and
``--dataset`` reach the blocks a stage trains on, prepared in the data cache once."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from training_utils import MICRO_MODEL, run_cli


def test_pretrain_from_files_and_a_hub_dataset(tmp_path):
    text = " ".join(f"word{i % 50} and some text number {i}." for i in range(400))
    (tmp_path / "a.txt").write_text(text + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": text}) + "\n")
    hub_like = tmp_path / "hub"  # what load_dataset(NAME) reads, here from a local folder
    hub_like.mkdir()
    pq.write_table(pa.table({"text": [text, text]}), hub_like / "train.parquet")
    common = ["--stage", "retrieval", "--preset", "tiny", "--num-instances", "2", "--model-overrides",
              json.dumps(MICRO_MODEL), "--max-length", "32", "--batch-size", "8", "--max-steps", "1", "--no-progress",
              "--cache-dir", str(tmp_path / "cache"), "--preprocessing-num-workers", "2"]
    done = run_cli("pretrain", "--train-file", str(tmp_path / "*.txt"), str(tmp_path / "b.jsonl"),
                   "--dataset", str(hub_like), "--output-dir", str(tmp_path / "run"), *common)
    assert done.returncode == 0, done.stderr
    first = json.loads((tmp_path / "run" / "train_results.json").read_text())["train_blocks"]
    prepared = sorted(path.name for path in (tmp_path / "cache" / "datasets").rglob("cache-*.arrow"))
    assert first > 0 and prepared
    done = run_cli("pretrain", "--train-file", str(tmp_path / "*.txt"), str(tmp_path / "b.jsonl"),
                   "--dataset", str(hub_like), "--output-dir", str(tmp_path / "again"), *common)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "again" / "train_results.json").read_text())["train_blocks"] == first
    assert sorted(path.name for path in (tmp_path / "cache" / "datasets").rglob("cache-*.arrow")) == prepared
