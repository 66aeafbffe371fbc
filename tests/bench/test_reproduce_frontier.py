"""benchmarks/experiments/reproduce_frontier.py on a micro reproduction: the N = 1 row's encoder cut
and fine-tuned by the reproduction's rule, int8 copies scored, every shape timed and judged by
pareto.py against the paper's targets, and a runs folder that is not the results' refused."""

import json
import os

import pytest

from muxplm.bench.reproduce import run_reproduction

from script_testing import load_script
from reproduce_testing import MICRO as REPRODUCTION_MICRO

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data

# The reproduction tests' micro recipe with two layers, so that there is a layer to cut.
MICRO = {**REPRODUCTION_MICRO, "model_overrides": {**REPRODUCTION_MICRO["model_overrides"], "num_hidden_layers": 2}}


@pytest.fixture(scope="module")
def frontier(tmp_path_factory):
    root = tmp_path_factory.mktemp("frontier")
    run_reproduction(root / "results", "quick", models=["bert", "mux-bert-2"], tasks=["sentiment", "trec"], seeds=2,
                     overrides=MICRO, runs_dir=root / "runs", log=lambda *_: None)
    script = load_script("reproduce_frontier")
    args = ["--runs", str(root / "runs"), "--results", str(root / "results"), "--keep", "1", "--out",
            str(root / "out"), "--jobs", "1", "--trials", "1", "--batches", "1"]
    assert script.main(args) == 0
    return root, script, args


def test_cuts_and_int8_copies_join_the_tables_rows(frontier):
    root, _, _ = frontier
    table = json.loads((root / "results" / "results.json").read_text())["rows"]
    entries = [json.loads(line) for line in (root / "out" / "rows.jsonl").read_text().splitlines()]
    assert {(e["row"], e["precision"]) for e in entries} == {
        ("bert", "fp32"), ("mux-bert-2", "fp32"), ("bert-cut1", "fp32"),
        ("bert", "int8"), ("mux-bert-2", "int8"), ("bert-cut1", "int8")}
    for e in entries:  # the table's own fp32 scores; every row on both tasks
        if e["precision"] == "fp32" and e["row"] in table:
            assert e["mean"] == table[e["row"]]["scores"][e["task"]]["mean"]
    assert sorted(e["task"] for e in entries if e["row"] == "bert-cut1") == ["sentiment", "sentiment", "trec", "trec"]
    cut = json.loads((root / "runs" / "bert-cut1" / "3-trec" / "config.json").read_text())
    assert cut["num_hidden_layers"] == 1 and cut["num_instances"] == 1
    tuned = json.loads((root / "runs" / "bert-cut1" / "3-trec" / "train_config.json").read_text())
    assert tuned["keep_layers"] == 1 and tuned["init"].endswith("bert/2-pretrain")
    assert tuned["max_steps"] == MICRO["finetune"]["max_steps"]  # the reproduction's fine-tuning rule
    int8 = json.loads((root / "runs" / "mux-bert-2" / "eval-sentiment-int8.json").read_text())
    assert int8["quantize"] == "int8" and len(int8["seeds"]) == 2


def test_every_shape_is_timed_and_judged_against_the_cuts(frontier):
    root, _, _ = frontier
    results = json.loads((root / "out" / "results.json").read_text())
    assert set(results["speeds"]) == {"N1-K0-L2", "N1-K0-L1", "N2-K0-L2"}
    assert {"bert", "bert int8", "bert-cut1", "bert-cut1 int8", "mux-bert-2", "mux-bert-2 int8"} == set(results["rows"])
    assert results["rows"]["bert"]["speedup"] == 1.0
    [verdict] = [line for line in results["checks"] if line.split()[1] == "mux-bert-2:"]
    assert "x (>=" not in verdict  # no speed minimum
    ahead = all(results["rows"]["mux-bert-2"]["ahead"].values())
    assert verdict.split("ahead of the cut encoders: ")[1].startswith("yes" if ahead else "no (")
    assert "(>= 96 / 98 %" in verdict  # the paper's N = 2 retention targets
    assert (root / "out" / "pareto.png").stat().st_size > 0
    assert json.loads((root / "out" / "encoder" / "config.json").read_text())["model_type"] == "bert"


def test_a_finished_cut_is_reused_and_other_runs_are_refused(frontier):
    root, script, args = frontier
    trained = root / "runs" / "bert-cut1" / "3-sentiment" / "train_results.json"
    before = trained.stat().st_mtime_ns
    assert script.main(args) == 0
    assert trained.stat().st_mtime_ns == before
    with pytest.raises(SystemExit, match=r"--keep takes layer counts in \[1, 1\]"):
        script.main([*args[:5], "2", *args[6:]])
    cached = root / "runs" / "bert" / "eval-trec.json"
    saved = cached.read_text()
    evaluation = json.loads(saved)
    evaluation["summary"]["main"]["mean"] += 0.01
    cached.write_text(json.dumps(evaluation))
    try:
        with pytest.raises(SystemExit, match="not the checkpoints the results came from"):
            script.main(args)
    finally:
        cached.write_text(saved)


def test_a_retrained_pretraining_and_a_converted_family_are_refused(frontier):
    root, script, args = frontier
    with pytest.raises(SystemExit, match="not pre-trained from scratch"):
        script.family_rows({"rows": {"minilm": {"num_instances": 1}}}, "minilm")
    pretrained = root / "runs" / "bert" / "2-pretrain" / "train_results.json"
    stamp = pretrained.stat()
    try:
        os.utime(pretrained, (stamp.st_atime, stamp.st_mtime + 10 ** 6))  # as if pre-trained again since
        with pytest.raises(SystemExit, match="trained again after"):
            script.main(args)
    finally:
        os.utime(pretrained, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


def test_a_variants_rows_join_with_their_own_shape_and_int8_copies(frontier, tmp_path):
    """A re-run with one unmuxed layer (its own runs folder) joins the table's rows as mux-bert-2-k1:
    its fp32 scores from its results, int8 copies of its checkpoints, its shape timed."""
    _, script, args = frontier
    k1 = {**MICRO, "retrieval": {**MICRO["retrieval"], "num_unmuxed_layers": 1}}
    run_reproduction(tmp_path / "results", "quick", models=["mux-bert-2"], tasks=["sentiment"], seeds=2,
                     overrides=k1, runs_dir=tmp_path / "runs", log=lambda *_: None)
    rerun = json.loads((tmp_path / "results" / "results.json").read_text())["rows"]["mux-bert-2"]
    out = args.index("--out") + 1
    variant = ["--variant", f"k1={tmp_path / 'runs'}:{tmp_path / 'results'}"]
    assert script.main([*args[:out], str(tmp_path / "out"), *args[out + 1:], *variant]) == 0
    entries = {(e["row"], e["task"], e["precision"]): e
               for e in map(json.loads, (tmp_path / "out" / "rows.jsonl").read_text().splitlines())}
    assert {key for key in entries if key[0] == "mux-bert-2-k1"} == {
        ("mux-bert-2-k1", "sentiment", "fp32"), ("mux-bert-2-k1", "sentiment", "int8")}
    fp32, int8 = (entries["mux-bert-2-k1", "sentiment", p] for p in ("fp32", "int8"))
    assert fp32["mean"] == rerun["scores"]["sentiment"]["mean"] and fp32["unmuxed"] == int8["unmuxed"] == 1
    assert (tmp_path / "runs" / "mux-bert-2" / "eval-sentiment-int8.json").is_file()  # scored in its own runs
    assert entries["mux-bert-2", "sentiment", "fp32"]["unmuxed"] == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "N2-K1-L2" in results["speeds"] and "mux-bert-2-k1 int8" in results["rows"]
    with pytest.raises(SystemExit, match="--variant takes NAME=RUNS:RESULTS"):
        script.main([*args, "--variant", f"k1={tmp_path / 'results'}"])
    cached = tmp_path / "runs" / "mux-bert-2" / "eval-sentiment.json"
    evaluation = json.loads(cached.read_text())
    evaluation["summary"]["main"]["mean"] += 0.01  # as if retrained since the results were written
    cached.write_text(json.dumps(evaluation))
    with pytest.raises(SystemExit, match="not the checkpoints the results came from"):
        script.main([*args, *variant])


def test_a_table_trained_with_unmuxed_layers_is_timed_at_its_shape(frontier, tmp_path):
    """A table whose recipe runs a layer per input (the stable preset) has its MUX rows timed with
    that layer, in fp32 and int8, not as rows with every layer on the mixture."""
    _, script, _ = frontier
    k1 = {**MICRO, "retrieval": {**MICRO["retrieval"], "num_unmuxed_layers": 1}}
    run_reproduction(tmp_path / "results", "quick", models=["bert", "mux-bert-2"], tasks=["sentiment", "trec"], seeds=2,
                     overrides=k1, runs_dir=tmp_path / "runs", log=lambda *_: None)
    assert script.main(["--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--keep", "1",
                        "--out", str(tmp_path / "out"), "--jobs", "1", "--trials", "1", "--batches", "1"]) == 0
    entries = [json.loads(line) for line in (tmp_path / "out" / "rows.jsonl").read_text().splitlines()]
    assert {e["unmuxed"] for e in entries if e["row"] == "mux-bert-2"} == {1}
    assert {e["unmuxed"] for e in entries if e["row"] != "mux-bert-2"} == {0}
    assert "N2-K1-L2" in json.loads((tmp_path / "out" / "results.json").read_text())["speeds"]


def test_a_variant_with_fewer_layers_joins_an_earlier_frontier_as_scored(frontier, tmp_path):
    """Multiplexing stacked on a cut: a re-run whose model has one layer (`model_overrides`) joins
    the rows an earlier run scored (`--scored`: its rows.jsonl and encoder shape, no checkpoints of
    theirs needed), timed at its own layer count beside them."""
    root, script, args = frontier
    one_layer = {**MICRO, "model_overrides": {**MICRO["model_overrides"], "num_hidden_layers": 1}}
    run_reproduction(tmp_path / "results", "quick", models=["mux-bert-2"], tasks=["sentiment"], seeds=2,
                     overrides=one_layer, runs_dir=tmp_path / "runs", log=lambda *_: None)
    earlier = (root / "out" / "rows.jsonl").read_text().splitlines()
    stacked = ["--scored", str(root / "out"), "--results", str(root / "results"), "--out", str(tmp_path / "out"),
               "--jobs", "1", "--trials", "1", "--batches", "1", "--variant", f"l1={tmp_path / 'runs'}:{tmp_path / 'results'}"]
    assert script.main(stacked) == 0
    lines = (tmp_path / "out" / "rows.jsonl").read_text().splitlines()
    assert lines[:len(earlier)] == earlier  # the earlier rows as they were scored
    joined = [json.loads(line) for line in lines[len(earlier):]]
    assert {(e["row"], e["precision"], e["keep"]) for e in joined} == {("mux-bert-2-l1", "fp32", 1),
                                                                        ("mux-bert-2-l1", "int8", 1)}
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {"N1-K0-L2", "N1-K0-L1", "N2-K0-L2", "N2-K0-L1"} == set(results["speeds"])
    assert results["rows"]["mux-bert-2-l1"]["layers"] == 1 and results["rows"]["bert"]["speedup"] == 1.0
    with pytest.raises(SystemExit):  # the rows come from checkpoints or from an earlier run, not both
        script.main([*stacked, "--runs", str(root / "runs")])
