"""benchmarks/experiments/plot_churn.py: composition churn against speed, for a table's rows,
their re-fine-tunings and the plain encoder's cuts."""

import json

import pytest

from script_testing import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("plot_churn")


def _score(mean, changed):
    return {"mean": mean, "std": 0.5, "metric": "accuracy", "changed_across_seeds": changed}


def _row(label, n, gain, changed):
    return {"label": label, "num_instances": n, "throughput_gain": {"sentence": gain, "token": gain},
            "scores": {"sentiment": _score(80.0, changed), "trec": _score(82.0, None if n == 1 else changed + 0.05)}}


TABLE = {"rows": {"bert": _row("BERT", 1, 1.0, None), "mux-bert-2": _row("MUX-BERT N=2", 2, 2.4, 0.20),
                  "mux-bert-5": _row("MUX-BERT N=5", 5, 5.1, 0.08)}}
FRONTIER = {"speeds": {"N1-K0-L4": {"fp32": 100.0, "int8": 150.0}, "N1-K0-L1": {"fp32": 400.0, "int8": 600.0}},
            "timing": {"clock": "process"},
            "rows": {key: {"num_instances": 1, "precision": precision, "layers": layers,
                           "scores": {"sentiment": {"mean": 81.0}, "trec": {"mean": 84.0}}}
                     for key, precision, layers in (("bert", "fp32", 4), ("bert-cut1", "fp32", 1),
                                                    ("bert-cut1 int8", "int8", 1))}}


def test_only_multiplexed_rows_are_points_and_the_checks_take_the_most_changed_task(script):
    points = script.table_points(TABLE, ["sentiment", "trec"])
    assert [p["row"] for p in points] == ["mux-bert-2", "mux-bert-5"]
    assert points[0]["tasks"]["trec"]["changed"] == pytest.approx(25.0)
    verdicts = script.checks(points)
    assert verdicts[0].startswith("MISSED MUX-BERT N=2: at most 25.0 %")  # trec, not sentiment's 20 %
    assert verdicts[1].startswith("MISSED MUX-BERT N=5: at most 13.0 %")  # 8 % sentiment is under 10, trec is not


def test_a_variant_is_drawn_at_its_rows_speed_with_its_own_tasks(script):
    first = {"rows": {"mux-bert-5": {"scores": {"sentiment": _score(81.0, 0.04)}}}}
    second = {"rows": {"mux-bert-5": {"scores": {"trec": _score(83.0, 0.09), "pos": _score(90.0, 0.01)}}}}
    point = script.variant_point("consistency 4", "mux-bert-5", [first, second], TABLE, ["sentiment", "trec"])
    assert point["speedup"] == 5.1 and point["label"] == "MUX-BERT N=5 + consistency 4"
    assert set(point["tasks"]) == {"sentiment", "trec"} and point["tasks"]["trec"]["changed"] == pytest.approx(9.0)
    assert script.checks([point])[0].startswith("met MUX-BERT N=5 + consistency 4: at most 9.0 %")
    with pytest.raises(ValueError, match="no row 'mux-bert-9'"):
        script.variant_point("x", "mux-bert-9", [first], TABLE, ["sentiment"])
    with pytest.raises(ValueError, match="none of the tasks"):
        script.variant_point("x", "mux-bert-5", [second], TABLE, ["sentiment"])
    with pytest.raises(ValueError, match="LABEL=ROW:RESULTS"):
        script.parse_variant("consistency=mux-bert-5")


def test_token_tasks_are_judged_and_retention_needs_every_task_of_its_group(script):
    table = json.loads(json.dumps(TABLE))
    for row, ner in (("bert", 20.0), ("mux-bert-5", 19.0)):
        table["rows"][row]["scores"]["ner"] = _score(ner, None if row == "bert" else 0.12)
    sentence, token = ["sentiment", "trec"], ["ner"]
    points = script.table_points(table, sentence + token)
    variant = script.variant_point("k1", "mux-bert-5", [{"rows": {"mux-bert-5": {"scores": {
        "sentiment": _score(80.0, 0.02), "trec": _score(73.9, 0.03)}}}}], table, sentence + token)
    script.add_retention(points + [variant], table, {"sentence": sentence, "token": token})
    row5 = points[1]
    assert row5["retention"] == {"sentence": pytest.approx(100.0), "token": pytest.approx(95.0)}
    assert points[0]["retention"] == {"sentence": pytest.approx(100.0)}  # mux-bert-2 has no ner
    assert variant["retention"] == {"sentence": pytest.approx(95.0)}  # (80 + 73.9) / (80 + 82)
    # the most-changed task of either group decides: trec (13 %) over ner (12 %), then ner once it is worse
    assert script.checks([row5])[0].startswith("MISSED MUX-BERT N=5: at most 13.0 %")
    row5["tasks"]["ner"]["changed"] = 14.0
    assert script.checks([row5])[0].startswith("MISSED MUX-BERT N=5: at most 14.0 %")
    assert "| 95.0 % / - |" in script.table_markdown([variant], sentence + token)
    table["rows"]["electra"] = _row("ELECTRA", 1, 1.0, None)
    table["rows"]["electra"]["scores"]["sentiment"]["mean"] = 70.0
    table["rows"]["mux-electra-2"] = dict(_row("MUX-ELECTRA N=2", 2, 2.4, 0.2), baseline_used="electra")
    electra = script.table_points(table, sentence)[-1]
    script.add_retention([electra], table, {"sentence": sentence})
    assert electra["retention"]["sentence"] == pytest.approx(100 * 162 / 152)  # against ELECTRA, not BERT


def test_cuts_change_nothing_and_are_timed_against_the_whole_encoder(script):
    points = script.cut_points(FRONTIER, ["sentiment", "trec"])
    assert {p["row"]: p["speedup"] for p in points} == {"bert": 1.0, "bert-cut1": 4.0}  # fp32 only
    assert all(t["changed"] == 0.0 for p in points for t in p["tasks"].values())


def test_main_writes_the_table_the_checks_and_the_plot(script, tmp_path):
    table, frontier, variant = tmp_path / "table.json", tmp_path / "frontier.json", tmp_path / "variant.json"
    table.write_text(json.dumps(TABLE))
    frontier.write_text(json.dumps(FRONTIER))
    variant.write_text(json.dumps({"rows": {"mux-bert-2": {"scores": {"sentiment": _score(81.0, 0.03),
                                                                      "trec": _score(83.0, 0.04)}}}}))
    out = tmp_path / "out"
    assert script.main(["--table", str(table), "--cuts", str(frontier), "--output-dir", str(out),
                        "--variant", f"consistency 4=mux-bert-2:{variant}"]) == 0
    saved = json.loads((out / "churn.json").read_text())
    assert [p["kind"] for p in saved["points"]] == ["table", "table", "variant", "cut", "cut"]
    assert "met MUX-BERT N=2 + consistency 4: at most 4.0 %" in saved["checks"][2]
    markdown = (out / "churn.md").read_text()
    assert "| bert-cut1 (1 layer) | 1 | 4.00x | 81.0 / 0.0 % | 84.0 / 0.0 % | - | - | 101.9 % / - |" in markdown
    assert (out / "churn.png").stat().st_size > 10_000


def test_with_a_timing_every_point_is_timed_in_that_one_run_over_the_plain_row(script, tmp_path):
    runs = tmp_path / "runs"
    table = json.loads(json.dumps(TABLE))
    table["evaluations"] = {key: {"sentiment": {"checkpoint": str(runs / key / "3-sentiment")}} for key in TABLE["rows"]}
    variant = {"rows": {"mux-bert-2": {"scores": {"sentiment": _score(81.0, 0.03)}}},
               "evaluations": {"mux-bert-2": {"sentiment": {"checkpoint": str(tmp_path / "k1" / "mux-bert-2" / "3-sentiment")}}}}
    speeds = {"bert": 100.0, "mux-bert-2": 150.0, "mux-bert-5": 420.0, "bert-cut1": 390.0, "k1": 130.0}

    def entry(key, precision="fp32"):
        folder = tmp_path / "k1" / "mux-bert-2" if key == "k1" else runs / key
        return {"checkpoint": str(folder / "3-sentiment"), "precision": precision, "runtime": "torch",
                "samples_per_s": speeds[key] * (2 if precision == "int8" else 1)}

    timed = {"results": [entry(key) for key in speeds if key != "bert-cut1"] + [entry("bert", "int8")]}
    paths = {name: tmp_path / f"{name}.json" for name in ("table", "frontier", "variant", "timed")}
    for name, content in zip(paths, (table, FRONTIER, variant, timed)):
        paths[name].write_text(json.dumps(content))
    arguments = ["--table", str(paths["table"]), "--cuts", str(paths["frontier"]), "--speeds", str(paths["timed"]),
                 "--variant", f"1 unmuxed layer=mux-bert-2:{paths['variant']}", "--output-dir", str(tmp_path / "out")]
    with pytest.raises(ValueError, match=r"no fp32 entry for bert-cut1 \(1 layer\)"):  # the cut was not timed
        script.main(arguments)
    timed["results"].append(entry("bert-cut1"))
    paths["timed"].write_text(json.dumps(timed))
    assert script.main(arguments) == 0
    saved = json.loads((tmp_path / "out" / "churn.json").read_text())
    assert {p["label"]: round(p["speedup"], 2) for p in saved["points"]} == {
        "MUX-BERT N=2": 1.5, "MUX-BERT N=5": 4.2, "MUX-BERT N=2 + 1 unmuxed layer": 1.3,  # its own checkpoint's speed
        "bert (4 layers)": 1.0, "bert-cut1 (1 layer)": 3.9}
    assert list(saved["timing"]) == ["every point"]
