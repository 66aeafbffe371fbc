"""benchmarks/experiments/pareto.py on any encoder family: shapes built from the encoder's own
config, the plain row found by its shape, and rows scored on the sentence tasks only judged on them."""

import json

import pytest

from muxplm import MuxDistilBertForSequenceClassification

from family_testing import save_plain
from script_testing import load_script


@pytest.fixture(scope="module")
def pareto():
    return load_script("pareto")


def entry(row, task, mean, num_instances=1, unmuxed=0, keep=None):
    return dict(row=row, task=task, precision="fp32", num_instances=num_instances, unmuxed=unmuxed, keep=keep,
                metric="accuracy", mean=mean, std=0.5 if num_instances > 1 else 0.0,
                changed=0.1 if num_instances > 1 else None)


def test_a_shape_of_another_family_is_built_from_its_config(pareto, tmp_path):
    save_plain("distilbert", tmp_path / "plain", max_position_embeddings=64)
    model = pareto.build_model(str(tmp_path / "plain"), num_instances=2, unmuxed=1, layers=2)
    assert isinstance(model, MuxDistilBertForSequenceClassification)
    assert (model.config.num_hidden_layers, model.config.num_instances, model.config.num_unmuxed_layers) == (2, 2, 1)
    assert len(model.base_model.encoder_layers()) == 2
    with pytest.raises(ValueError, match=r"keep_layers must lie in \[1, 3\]"):
        pareto.build_model(str(tmp_path / "plain"), num_instances=1, unmuxed=0, layers=5)


def test_sentence_only_rows_are_timed_and_judged_against_the_plain_row(pareto, tmp_path):
    save_plain("mpnet", tmp_path / "plain", max_position_embeddings=64)
    rows = [entry("plain", "sentiment", 90.0), entry("plain", "trec", 80.0),
            entry("plain-cut2", "sentiment", 88.0, keep=2), entry("plain-cut2", "trec", 78.0, keep=2),
            entry("plain-n2-k1", "sentiment", 85.0, 2, 1), entry("plain-n2-k1", "trec", 75.0, 2, 1)]
    rows += [dict(entry("plain-n2-k1", task, mean, 2, 1), precision="onnx-int8")  # convert_grid --onnx-int8
             for task, mean in (("sentiment", 84.0), ("trec", 73.0))]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert pareto.main(["--rows", str(tmp_path / "rows.jsonl"), "--out", str(out), "--encoder", str(tmp_path / "plain"),
                        "--precisions", "fp32,onnx-fp32,onnx-int8", "--trials", "1", "--batches", "1",
                        "--name", "TinyMPNet"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["speeds"]) == {"N1-K0-L3", "N1-K0-L2", "N2-K1-L3"}
    assert all(set(speed) == {"fp32", "onnx-fp32", "onnx-int8"} for speed in results["speeds"].values())
    # ONNX Runtime's fp32 rows carry PyTorch's fp32 scores; its int8 rows their own, where scored
    assert results["rows"]["plain-n2-k1 onnx"]["scores"] == results["rows"]["plain-n2-k1"]["scores"]
    assert {r["precision"] for r in results["rows"].values()} == {"fp32", "onnx-fp32", "onnx-int8"}
    int8_mux = results["rows"]["plain-n2-k1 onnx int8"]
    assert int8_mux["sentence_avg"] == pytest.approx(78.5) and "plain onnx int8" not in results["rows"]
    assert int8_mux["speedup"] == pytest.approx(results["speeds"]["N2-K1-L3"]["onnx-int8"] / results["speeds"]["N1-K0-L3"]["fp32"])
    onnx_mux = results["rows"]["plain-n2-k1 onnx"]
    assert onnx_mux["speedup"] == pytest.approx(results["speeds"]["N2-K1-L3"]["onnx-fp32"] / results["speeds"]["N1-K0-L3"]["fp32"])
    assert "onnx-int8" in (out / "table.md").read_text()
    plain, mux = results["rows"]["plain"], results["rows"]["plain-n2-k1"]
    assert plain["speedup"] == 1.0 and mux["baseline_used"] == "plain"
    assert mux["retention"] == {"sentence_avg": pytest.approx(80.0 / 85.0)}
    assert mux["token_avg"] is None and "token_avg" not in mux["retention"]
    # judged on the sentence tasks it was scored on: retention 94.1 % misses N = 2's 97 %
    [verdict] = [line for line in results["checks"] if "plain-n2-k1:" in line]
    assert verdict.startswith("MISSED") and "94.1 / -" in verdict and "token tasks not scored" in verdict
    assert (out / "pareto.png").stat().st_size > 0 and results["encoder"] == "TinyMPNet"


def test_the_plain_row_must_be_unambiguous(pareto):
    rows = [entry("a", "sentiment", 1.0), entry("b", "sentiment", 1.0), entry("c", "sentiment", 1.0, keep=2)]
    with pytest.raises(SystemExit, match="several rows of the whole plain encoder"):
        pareto.base_row(rows)
    assert pareto.base_row(rows[1:]) == "b"


def test_speed_ups_need_the_fp32_reference(pareto):
    with pytest.raises(SystemExit, match="must include fp32"):
        pareto.time_shapes([(1, 0, 1)], "unused", trials=1, batches=1, precisions=("int8",))


def test_targets_are_named_sets(pareto):
    from muxplm.bench.reproduce import RETENTION_TARGETS

    assert pareto.targets_of("convert") == pareto.CONVERSION_TARGETS
    assert [(n, speed) for n, speed, _, _ in pareto.targets_of("paper")] == [(n, None) for n in sorted(RETENTION_TARGETS)]
    with pytest.raises(ValueError, match="targets must be one of convert, paper"):
        pareto.targets_of("papers")
