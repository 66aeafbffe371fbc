"""benchmarks/experiments/compare_reproductions.py: two runs of the reproduction, row by row."""

import json

import pytest

from script_testing import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("compare_reproductions")


def _row(label, n, sentence, minutes, changed=(0.02, 0.05)):
    scores = {task: {"mean": sentence, "changed_across_seeds": share if n > 1 else None}
              for task, share in zip(("sentiment", "trec"), changed)}
    return dict(label=label, num_instances=n, scores=scores, sentence_avg=sentence, token_avg=50.0,
                retention={"sentence_avg": sentence / 80.0, "token_avg": 1.0}, train_minutes=minutes,
                wall_minutes=minutes + 1.0)


def test_rows_both_runs_trained_are_set_side_by_side_with_their_minutes(script, tmp_path, capsys):
    base = {"rows": {"bert": _row("BERT", 1, 80.0, 40.0), "mux-bert-2": _row("MUX-BERT N=2", 2, 79.0, 30.0),
                     "tmux-2": _row("T-MUX N=2", 2, 78.0, 60.0)}}
    other = {"rows": {"mux-bert-2": _row("MUX-BERT N=2", 2, 78.5, 20.0, changed=(0.03, 0.04)),
                      "bert": _row("BERT", 1, 80.0, 25.0)},
             "merged_from": ["shard-0", "shard-1"], "wall_seconds": 600.0}
    rows = script.compare(base, other)
    assert [row["key"] for row in rows] == ["bert", "mux-bert-2"]  # the base run's order, common rows only
    assert rows[1]["base"]["changed"] == 0.05 and rows[1]["other"]["changed"] == 0.04  # the worse sentence task
    assert rows[0]["base"]["changed"] is None  # one input: nothing to change
    paths = []
    for name, run in (("base", base), ("other", other)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(run))
    script.main([str(paths[0]), str(paths[1]), "--labels", "fp32,bf16", "--output", str(tmp_path / "t.md")])
    text = (tmp_path / "t.md").read_text()
    assert text == capsys.readouterr().out
    assert "| MUX-BERT N=2 | 79.0 / 78.5 (-0.5) |" in text and "| 30 / 20 (-10) | 0.67 |" in text
    assert "These 2 rows: 70 min of training (fp32) against 45 (bf16), 0.64 of the time." in text
    # two lanes: each row on its own, the longer one sets the time; the merge only where merged
    assert "wall minutes take 0.7 h (fp32) against 0.4 h (bf16) + 10 min of merge = 0.6 h." in text
    assert "Split evenly, at best: 72 min, 0.60 h (fp32) against 47 min, 0.39 h (bf16), before any merge." in text
    # a row only one run has (the base's T-MUX) is not compared but counts in its run's whole-run line
    assert "| T-MUX" not in text and "bf16's rows" not in text
    assert "All of fp32's rows with wall minutes (3; also T-MUX N=2): 1.2 h longest row first; " \
           "split evenly, 133 min, 1.11 h." in text
    script.main([str(paths[0]), str(paths[1]), "--lanes", "1"])
    assert "take 1.2 h (base) against 0.8 h (other) + 10 min" in capsys.readouterr().out
    # a row whose wall minutes are blank (its stages reused) is left out of its side only, and said so
    base["rows"]["bert"]["wall_minutes"] = None
    paths[0].write_text(json.dumps(base))
    script.main([str(paths[0]), str(paths[1])])
    text = capsys.readouterr().out
    assert "take 0.5 h (base, 1 of the 2 rows) against 0.4 h (other) + 10 min" in text
    # and the whole run estimated from train minutes at the timed rows' ratio, (31 + 61) / (30 + 60):
    # BERT at 40 x 1.022 = 40.9 shares a lane with MUX-BERT's 31, T-MUX's 61 has the other
    assert "base's rows without wall minutes at their train minutes times 1.022 (the wall-to-train ratio " \
           "of the 2 rows with both), all 3 rows: 1.20 h longest row first (an estimate)." in text
    assert "other's rows without wall minutes" not in text  # every row of it has wall minutes


def test_rows_are_packed_onto_lanes_longest_first(script):
    assert script.lanes_minutes([10.0, 30.0, 20.0], 2) == 30.0
    assert script.lanes_minutes([10.0, 30.0, 20.0], 1) == 60.0
    # greedy, not the best packing (9: 5 + 4 against 3 + 3 + 3), but within 4/3 of it
    assert script.lanes_minutes([3.0, 5.0, 3.0, 4.0, 3.0], 2) == 10.0


def test_runs_without_a_common_row_are_refused(script):
    with pytest.raises(SystemExit, match="no row in common"):
        script.compare({"rows": {"bert": _row("BERT", 1, 80.0, 1.0)}}, {"rows": {"electra": _row("E", 1, 80.0, 1.0)}})
