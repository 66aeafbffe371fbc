"""benchmarks/experiments/plot_length_grid.py: each row's dev curve is read from its stage logs,
the best step is marked, and a row whose best is its last evaluation is flagged as still rising."""

import json

import pytest

from script_testing import load_script


@pytest.fixture(scope="module")
def grid():
    return load_script("plot_length_grid")


def write_log(folder, scores):
    folder.mkdir(parents=True)
    records = [{"kind": "train", "step": 1, "loss": 0.7}]
    records += [{"kind": "eval", "step": step, "main": score} for step, score in scores]
    (folder / "log.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")


def test_best_steps_and_still_rising_rows(grid, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    write_log(runs / "bert" / "3-sentiment", [(250, 0.80), (500, 0.82), (750, 0.79)])
    write_log(runs / "mux-bert-10" / "3-sentiment", [(250, 0.50), (500, 0.61), (750, 0.70)])
    write_log(runs / "mux-bert-10" / "3-trec", [(250, 0.40), (500, 0.40)])  # a tie: the earlier step
    (runs / "mux-bert-10" / "2-pretrain").mkdir()  # no fine-tuning log: ignored
    assert grid.main(["--runs", str(runs), "--out", str(out)]) == 0
    table = (out / "length-grid.md").read_text()
    assert "| bert | sentiment | 80.0 | **82.0** | 79.0 | 500 |" in table
    assert "| mux-bert-10 | sentiment | 50.0 | 61.0 | **70.0** | 750 (last: still rising) |" in table
    assert "| mux-bert-10 | trec | **40.0** | 40.0 | - | 250 |" in table
    assert (out / "length-grid.png").stat().st_size > 0


def test_no_logs_is_an_error(grid, tmp_path):
    with pytest.raises(SystemExit):
        grid.main(["--runs", str(tmp_path), "--out", str(tmp_path / "out")])


def test_early_stopping_replays_the_logged_curves(grid, tmp_path):
    """Patience P stops after P evaluations without a new best and keeps the best: on the logged
    curves, the time it would have spent (weighted by each stage's seconds per step) and the
    points it would have lost."""
    assert grid.stopping_point([(250, 80.0), (500, 82.0), (750, 79.0), (1000, 83.0)], 1) == (750, 82.0)
    assert grid.stopping_point([(250, 80.0), (500, 82.0), (750, 79.0), (1000, 83.0)], 2) == (1000, 83.0)
    assert grid.stopping_point([(250, 50.0), (500, 50.0), (750, 70.0)], 1) == (500, 50.0)  # at chance: stopped early
    runs, out = tmp_path / "runs", tmp_path / "out"
    write_log(runs / "bert" / "3-sentiment", [(250, 0.80), (500, 0.82), (750, 0.79), (1000, 0.78)])
    write_log(runs / "mux-bert-10" / "3-sentiment", [(250, 0.50), (500, 0.50), (750, 0.70), (1000, 0.71)])
    (runs / "bert" / "3-sentiment" / "train_results.json").write_text(json.dumps({"train_seconds": 3000, "final_step": 1000}))
    (runs / "mux-bert-10" / "3-sentiment" / "train_results.json").write_text(json.dumps({"train_seconds": 1000, "final_step": 1000}))
    assert grid.main(["--runs", str(runs), "--out", str(out)]) == 0
    table = (out / "length-grid.md").read_text()
    # patience 1: bert stops at 750 (3 s a step), mux-bert-10 at 500 having lost 21 points
    assert "| 1 | 69 % | 75 % | 1 | 21.0; mux-bert-10 sentiment |" in table
    # patience 2: bert stops at 1000 (its last), mux-bert-10 runs on to the end and keeps 71
    assert "| 2 | 100 % | 100 % | 0 | 0.0; - |" in table
