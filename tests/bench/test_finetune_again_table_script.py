"""benchmarks/experiments/finetune_again_table.py: the runs of a fine-tuning-again folder, grouped by setting."""

import json

import pytest

from script_testing import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("finetune_again_table")


def _run(folder, name, f1, **settings):
    config = {"task": "ner", "seed": 0, "lr": 1e-3, "init": "runs/a/mux-bert-5/2-pretrain", "output_dir": name,
              **settings}
    (folder / f"{name}-config.json").write_text(json.dumps(config))
    (folder / f"{name}-eval.json").write_text(json.dumps(
        {"task": "ner", "main_metric": "f1", "changed_across_seeds": 0.01,
         "summary": {"main": {"mean": f1 / 100, "max": f1 / 100}}}))


def test_runs_whose_encoder_sits_in_another_runs_folder_are_still_seeds_of_the_row(script, tmp_path):
    _run(tmp_path, "mux-bert-5-table", 23.5)
    # trained in an earlier session, from the same row's stage kept under another RUNS folder
    _run(tmp_path, "mux-bert-5-seed1", 24.5, seed=1, init="runs/reproduce-paper-stable/mux-bert-5/2-pretrain")
    _run(tmp_path, "mux-bert-5-seed2", 25.5, seed=2)
    # from another row's encoder: a setting changed, not a seed
    _run(tmp_path, "mux-bert-5-other", 30.0, init="runs/a/mux-bert-2/2-pretrain")
    runs = {run["name"]: run for run in script.load_runs(tmp_path)}
    assert runs["mux-bert-5-seed1"]["changed"] == {"seed": 1}
    assert runs["mux-bert-5-other"]["changed"] == {"init": "runs/a/mux-bert-2/2-pretrain"}
    text = script.table(list(runs.values()))
    assert "| mux-bert-5 | the row's | 3 (0, 1, 2) | 24.5 (23.5-25.5) | 1.00 % (1.00-1.00) |" in text
    assert "| mux-bert-5-table | (the row's own run) | 23.5 | 1.00 % |" in text
    assert "| mux-bert-5 | init=runs/a/mux-bert-2/2-pretrain | 1 (0) | 30.0 | 1.00 % |" in text


def test_a_scored_run_without_its_settings_is_refused(script, tmp_path):
    _run(tmp_path, "mux-bert-5-table", 23.5)
    (tmp_path / "mux-bert-5-seed1-eval.json").write_text("{}")
    with pytest.raises(SystemExit, match="keeps its settings"):
        script.load_runs(tmp_path)
