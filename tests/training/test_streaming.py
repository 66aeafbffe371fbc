"""``--streaming``: a corpus read as a stream, each process its own share, shuffled within windows,
and resumed exactly from a checkpoint (its position saved beside it: no shuffle buffer to lose)."""

from __future__ import annotations

import json
import shutil

import pytest
from datasets import Dataset
from datasets.distributed import split_dataset_by_node
from training_utils import MICRO_MODEL, read_log, run_cli

from muxplm.training.streams import ShuffledStream


def _stream(rows: int = 100, shards: int = 4):
    return Dataset.from_dict({"i": list(range(rows))}).to_iterable_dataset(num_shards=shards)


def _ids(iterable, count=None):
    out = []
    for row in iterable:
        out.append(row["i"])
        if count is not None and len(out) == count:
            break
    return out


def test_each_process_reads_its_own_share_and_together_they_cover_the_stream():
    shares = [_ids(ShuffledStream(split_dataset_by_node(_stream(), rank=rank, world_size=2), seed=1, window=16))
              for rank in (0, 1)]
    assert not set(shares[0]) & set(shares[1]) and sorted(shares[0] + shares[1]) == list(range(100))
    assert shares[0] != sorted(shares[0])  # shuffled within its windows


@pytest.mark.parametrize("stop", [5, 16, 37])  # inside the first window, at its end, in the third
def test_a_stream_resumes_exactly_where_its_state_was_taken(stop):
    whole = ShuffledStream(_stream(), seed=3, window=16)
    expected = _ids(whole)
    stream = ShuffledStream(_stream(), seed=3, window=16)
    assert _ids(stream, stop) == expected[:stop]
    state = json.loads(json.dumps(stream.state_dict()))  # as the checkpoint keeps it
    resumed = ShuffledStream(_stream(), seed=3, window=16)
    resumed.load_state_dict(state)
    assert _ids(resumed) == expected[stop:]
    again = ShuffledStream(_stream(), seed=3, window=16)
    again.set_epoch(1)
    assert sorted(_ids(again)) == list(range(100)) and _ids(again) != expected  # another order each epoch


@pytest.mark.usefixtures("builtin_data")
def test_pretrain_from_a_stream_resumes_to_the_same_losses(tmp_path):
    (tmp_path / "corpus.txt").write_text("\n".join(f"line {i} of the text, word{i % 97} and word{i % 13}."
                                                   for i in range(6000)))
    common = ["pretrain", "--stage", "mlm", "--preset", "tiny", "--num-instances", "2", "--model-overrides",
              json.dumps(MICRO_MODEL), "--max-length", "32", "--batch-size", "8", "--max-steps", "6", "--save-steps",
              "3", "--eval-steps", "6", "--save-total-limit", "3", "--no-progress", "--logging-steps", "1",
              "--train-file", str(tmp_path / "corpus.txt"), "--streaming", "--cache-dir", str(tmp_path / "cache")]
    done = run_cli(*common, "--output-dir", str(tmp_path / "whole"))
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "whole" / "train_results.json").read_text())
    assert summary["train_blocks"] is None and "loss" in summary["eval"]  # a stream; its first blocks held out
    assert json.loads((tmp_path / "whole" / "checkpoint-3" / "stream_state_0.json").read_text())["taken"] == 24
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    shutil.rmtree(tmp_path / "cut" / "checkpoint-6")  # as if killed after step 3's checkpoint
    done = run_cli(*common, "--output-dir", str(tmp_path / "cut"), "--resume")
    assert done.returncode == 0, done.stderr
    assert [r["loss"] for r in read_log(tmp_path / "cut")] == [r["loss"] for r in read_log(tmp_path / "whole")]
