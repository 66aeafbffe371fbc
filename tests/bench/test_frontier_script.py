"""benchmarks/experiments/plot_frontier.py: rows scored on both sentence tasks meet the speed
of their own checkpoints, and each multiplexed point is judged against the cuts at least as fast."""

import json
from pathlib import Path

import pytest

from script_testing import load_script


@pytest.fixture(scope="module")
def frontier():
    return load_script("plot_frontier")


def entry(row, task, mean, num_instances=1, keep=None, precision="fp32"):
    return dict(row=row, task=task, precision=precision, num_instances=num_instances, keep=keep, unmuxed=0,
                mean=mean, std=1.0 if num_instances > 1 else 0.0, changed=0.2 if num_instances > 1 else 0.0)


def timed(checkpoint, speedup, precision="fp32"):
    return dict(checkpoint=checkpoint, precision=precision, speedup=speedup)


def test_mux_points_are_judged_against_cuts_as_fast(frontier, tmp_path):
    rows = tmp_path / "rows.jsonl"
    entries = [entry("cut1", "sentiment", 80.0, keep=1), entry("cut1", "trec", 84.0, keep=1),
               entry("cut2", "sentiment", 82.0, keep=2), entry("cut2", "trec", 88.0, keep=2),
               # slower than cut1 and less accurate: beaten
               entry("n5-full", "sentiment", 80.0, 5), entry("n5-full", "trec", 74.0, 5),
               # faster than every cut: nothing as fast to beat it
               entry("n5-cut3", "sentiment", 79.0, 5, keep=3), entry("n5-cut3", "trec", 75.0, 5, keep=3),
               entry("n5-cut3", "trec", 99.0, 5, keep=3, precision="int8"),  # fp32 scores only
               entry("sentiment-only", "sentiment", 90.0, 5)]  # one task: no sentence average
    rows.write_text("".join(json.dumps(e) + "\n" for e in entries))
    speed = tmp_path / "speed.json"
    speed.write_text(json.dumps({"results": [
        timed("runs/minilm-timing", 1.0), timed("runs/cut1/sentiment", 5.4), timed("runs/cut1/sentiment", 8.1, "int8"),
        timed("runs/cut2/trec", 2.8), timed("runs/n5-full/sentiment", 4.9), timed("runs/n5-cut3/trec", 9.0),
        timed("runs/sentiment-only/sentiment", 4.9)]}))
    assert frontier.main(["--rows", str(rows), "--speed", str(speed), "--out", str(tmp_path / "out")]) == 0
    points = {p["name"]: p for p in frontier.frontier(frontier.read_rows([rows]), frontier.read_speeds(speed))}
    assert set(points) == {"cut1", "cut2", "n5-full", "n5-cut3"}
    assert points["n5-full"]["beaten_by"] == ["cut1"] and points["n5-cut3"]["beaten_by"] == []
    assert points["n5-cut3"]["average"] == pytest.approx(77.0) and points["cut1"]["int8_speedup"] == 8.1
    table = (tmp_path / "out" / "frontier.md").read_text()
    assert "| n5-cut3 | 5 | 3 | 79.0 ± 1.0 | 75.0 ± 1.0 | 77.0 | 9.00x / - | 20 % | no |" in table
    assert table.index("n5-cut3") < table.index("cut1")  # fastest first
    assert (tmp_path / "out" / "frontier.png").stat().st_size > 0


def test_nothing_to_plot_is_an_error(frontier, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(entry("cut1", "sentiment", 80.0, keep=1)) + "\n")
    speed = tmp_path / "speed.json"
    speed.write_text(json.dumps({"results": [timed("runs/cut1/sentiment", 5.4)]}))
    with pytest.raises(SystemExit, match="no row"):
        frontier.main(["--rows", str(rows), "--speed", str(speed), "--out", str(tmp_path / "out")])
