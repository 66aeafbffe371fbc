"""benchmarks/experiments/retention_against.py: a table's retention against N = 1 rows trained otherwise."""

import json

import pytest

from script_testing import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("retention_against")


def _row(label, n, baseline, sentence, token, reference=(80.0, 50.0)):
    scores = {task: {"mean": value, "changed_across_seeds": 0.01 if n > 1 else None}
              for task, value in (("sentiment", sentence), ("trec", sentence), ("pos", token), ("ner", token))}
    return dict(label=label, num_instances=n, baseline_used=baseline, scores=scores, sentence_avg=sentence,
                token_avg=token, retention={"sentence_avg": sentence / reference[0], "token_avg": token / reference[1]})


TASKS = ["sentiment", "trec", "pos", "ner"]


def _table():
    rows = {"bert": _row("BERT", 1, "bert", 80.0, 50.0), "mux-bert-2": _row("MUX-BERT N=2", 2, "bert", 79.0, 50.5),
            "electra": _row("ELECTRA", 1, "electra", 80.0, 50.0),
            "mux-electra-2": _row("MUX-ELECTRA N=2", 2, "electra", 79.0, 49.5)}
    return {"tasks": TASKS, "rows": rows}


def test_rows_measured_against_a_replaced_baseline_get_their_retention_again_and_the_checks_say_what_changed(
        script, tmp_path, capsys):
    probe = {"tasks": TASKS, "rows": {"bert": _row("BERT", 1, "bert", 80.0, 52.0)}}
    rows, replaced, _, notes = script.against(_table(), [probe])
    assert notes == []  # no seed folders: every score is the run's own
    assert replaced == ["bert"]
    assert rows["mux-bert-2"]["retention"]["token_avg"] == pytest.approx(50.5 / 52.0)  # was 101 %
    assert rows["mux-bert-2"]["retention"]["sentence_avg"] == pytest.approx(79.0 / 80.0)
    assert rows["mux-electra-2"]["retention"] == _table()["rows"]["mux-electra-2"]["retention"]  # another family
    paths = [tmp_path / "table.json", tmp_path / "probe.json"]
    for path, run in zip(paths, (_table(), probe)):
        path.write_text(json.dumps(run))
    script.main([str(paths[0]), str(paths[1]), "--label", "primed", "--output", str(tmp_path / "r.md")])
    text = (tmp_path / "r.md").read_text()
    assert text == capsys.readouterr().out
    assert "| BERT (the table's) | 80.0 | 50.0 |" in text and "| BERT (primed) | 80.0 | 52.0 |" in text
    assert "| MUX-BERT N=2 | BERT | 98.8% / 98.8% | 101.0% / 97.1% |" in text
    assert "MUX-ELECTRA" not in text and "| BERT | BERT |" not in text
    # N = 2's token target is 98 %: met against the table's BERT, missed against the primed one
    assert "Retention checks of these rows met: 2 of 2 against the table's N = 1 rows, 1 against primed." in text
    assert "- now MISSED: MUX-BERT N=2: token retention 97.1% (target >= 98.0%)" in text


def test_a_probe_it_cannot_set_beside_the_table_is_refused(script):
    with pytest.raises(SystemExit, match="not the same tasks"):
        script.against(_table(), [{"tasks": ["sentiment"], "rows": {}}])
    with pytest.raises(SystemExit, match="no such row"):
        script.against(_table(), [{"tasks": TASKS, "rows": {"bert-small": _row("BERT-small", 1, "bert-small", 1, 1)}}])
    with pytest.raises(SystemExit, match="nothing to measure against"):
        script.against(_table(), [{"tasks": TASKS, "rows": {"mux-bert-2": _row("MUX-BERT N=2", 2, "bert", 1, 1)}}])


def _seed_folder(folder, key, f1s, other=None):
    """A fine-tuning-again folder of ``key``'s NER runs: its own run (seed 0) and seeds 1.. with
    ``f1s``; ``other``: one more run that changed its learning rate too."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"task": "ner", "seed": 0, "lr": 1e-3, "output_dir": "x"}
    runs = [("table", config, f1s[0])] + [(f"seed{i}", {**config, "seed": i}, f1) for i, f1 in enumerate(f1s[1:], 1)]
    if other is not None:
        runs.append(("lr0.1", {**config, "lr": 0.1}, other))
    for name, settings, f1 in runs:
        (folder / f"{key}-{name}-config.json").write_text(json.dumps(settings))
        (folder / f"{key}-{name}-eval.json").write_text(json.dumps(
            {"task": "ner", "main_metric": "f1", "changed_across_seeds": 0.01,
             "summary": {"main": {"mean": f1 / 100, "max": (f1 + 1) / 100}}}))
    return folder


def _with_max(run):
    for row in run["rows"].values():
        for score in row["scores"].values():
            score["max"] = score["mean"]
    return run


def test_seed_means_replace_a_rows_single_run_on_both_sides_and_the_retention_reads_them(script, tmp_path):
    table = _with_max(_table())
    probe = _with_max({"tasks": TASKS, "rows": {"bert": _row("BERT", 1, "bert", 80.0, 52.0)}})
    # the table's MUX-BERT NER runs average 48.5 (its own run, 50.5, is its luckiest); the primed BERT's 51.0
    seeds = {"mux-bert-2": _seed_folder(tmp_path / "mux", "mux-bert-2", [50.5, 47.5, 47.5], other=99.0)}
    probe_seeds = {"bert": _seed_folder(tmp_path / "primed", "bert", [52.0, 50.0, 51.0])}
    rows, replaced, own, notes = script.against(table, [probe], seeds, probe_seeds, "primed")
    # the run that changed its learning rate is not a seed of the row's settings
    assert own["mux-bert-2"]["scores"]["ner"]["mean"] == pytest.approx(48.5)
    assert own["mux-bert-2"]["token_avg"] == pytest.approx((50.5 + 48.5) / 2)
    assert own["mux-bert-2"]["scores"]["ner"]["max"] == pytest.approx(49.5)
    assert own["mux-bert-2"]["retention"]["token_avg"] == pytest.approx(49.5 / 50.0)
    assert own["mux-bert-2"]["retention"]["ner"] == pytest.approx(48.5 / 50.0)
    assert rows["bert"]["token_avg"] == pytest.approx((52.0 + 51.0) / 2)
    assert rows["mux-bert-2"]["retention"]["token_avg"] == pytest.approx(49.5 / 51.5)
    assert table["rows"]["mux-bert-2"]["scores"]["ner"]["mean"] == 50.5  # the table itself is left as it was
    assert notes == [f"MUX-BERT N=2 (the table's), ner: 48.5, the mean of 3 runs (data-order seeds 0, 1, 2; 47.5-50.5) "
                     f"in {seeds['mux-bert-2']}",
                     f"BERT (primed), ner: 51.0, the mean of 3 runs (data-order seeds 0, 1, 2; 50.0-52.0) "
                     f"in {probe_seeds['bert']}"]
    paths = [tmp_path / "table.json", tmp_path / "probe.json"]
    for path, run in zip(paths, (table, probe)):
        path.write_text(json.dumps(run))
    script.main([str(paths[0]), str(paths[1]), "--label", "primed", "--seeds", f"mux-bert-2={tmp_path / 'mux'}",
                 "--probe-seeds", f"bert={tmp_path / 'primed'}", "--output", str(tmp_path / "r.md")])
    text = (tmp_path / "r.md").read_text()
    assert text.startswith("- MUX-BERT N=2 (the table's), ner: 48.5, the mean of 3 runs")
    assert "| MUX-BERT N=2 | BERT | 98.8% / 98.8% | 99.0% / 96.1% |" in text


def test_seed_folders_it_cannot_read_are_refused(script, tmp_path):
    table = _with_max(_table())
    probe = _with_max({"tasks": TASKS, "rows": {"bert": _row("BERT", 1, "bert", 80.0, 52.0)}})
    folder = _seed_folder(tmp_path / "mux", "mux-bert-2", [50.5, 47.5])
    with pytest.raises(SystemExit, match="no run of mux-electra-2"):
        script.against(table, [probe], {"mux-electra-2": folder})
    with pytest.raises(SystemExit, match="no such row"):
        script.against(table, [probe], {"tmux-2": folder})
    with pytest.raises(SystemExit, match="expected KEY=DIR"):
        script.main([str(tmp_path), str(tmp_path), "--seeds", str(folder)])


def test_without_a_probe_it_reads_the_table_with_seed_means_against_its_one_run_per_task(script, tmp_path, capsys):
    table = _with_max(_table())
    paths = {"electra": _seed_folder(tmp_path / "electra", "electra", [50.0, 52.0, 54.0]),
             "mux-electra-2": _seed_folder(tmp_path / "mux", "mux-electra-2", [49.5, 47.5, 48.5])}
    (tmp_path / "table.json").write_text(json.dumps(table))
    script.main([str(tmp_path / "table.json"), "--seeds", *(f"{key}={path}" for key, path in paths.items())])
    text = capsys.readouterr().out
    assert "| ELECTRA (one run) | 80.0 | 50.0 |" in text and "| ELECTRA (seed means) | 80.0 | 51.0 |" in text
    # 49.5 / 50 with one run per task, 49.0 / 51.0 with the seed means
    assert "| MUX-ELECTRA N=2 | ELECTRA | 98.8% / 98.8% | 99.0% / 96.1% |" in text
    assert "MUX-BERT" not in text  # neither it nor its baseline has seed runs
    assert "Retention checks of these rows met: 2 of 2 with one run per task, 1 with the seed means." in text
    assert "- now MISSED: MUX-ELECTRA N=2: token retention 96.1% (target >= 98.0%)" in text
    with pytest.raises(SystemExit, match="nothing to read again"):
        script.against(table, [])
