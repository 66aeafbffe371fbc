"""``muxplm bench`` / ``muxplm analyze`` end to end on tiny inputs."""

from __future__ import annotations

import json

from muxplm.cli import main


def test_bench_throughput_writes_json_and_plot(tmp_path, capsys):
    out = tmp_path / "results" / "tp.json"
    code = main([
        "bench", "throughput", "--sizes", "tiny", "--instances", "1,2", "--mux", "gaussian_hadamard",
        "--demux", "rsa", "--heads", "sentence", "--batch-size", "4", "--seq-len", "8", "--warmup", "0",
        "--trials", "1", "--batches", "1", "--device", "cpu", "--threads", "2", "--output", str(out),
    ])
    assert code == 0
    report = json.loads(out.read_text())
    assert {r["name"] for r in report["results"]} == {
        "tiny/N=1", "tiny/transformers.BertModel", "tiny/N=2/gaussian_hadamard+rsa"}
    assert (tmp_path / "results" / "tp.png").exists()
    printed = capsys.readouterr().out
    assert "Targets:" in printed and "tiny/N=2/gaussian_hadamard+rsa (sentence)" in printed


def test_bench_profile_prints_stages(capsys):
    code = main(["bench", "profile", "--sizes", "tiny", "--instances", "2", "--mux", "contextual", "--demux", "prefix",
                 "--batch-size", "4", "--seq-len", "8", "--repeats", "1", "--device", "cpu"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "tiny/N=2/contextual+prefix" in printed and "demux" in printed


def test_bad_variant_is_a_one_line_error(capsys):
    code = main(["bench", "throughput", "--sizes", "tiny", "--variants", "fp8", "--device", "cpu"])
    assert code == 2
    assert "unknown variant 'fp8'" in capsys.readouterr().err


def test_analyze_tables_and_pareto(tmp_path, capsys):
    records = [dict(model="m", task="t", seed=s, score=0.5 + 0.1 * s, ensemble=False) for s in range(3)]
    records.append(dict(model="m", task="t", seed=0, score=0.8, ensemble=True))
    (tmp_path / "seeds.json").write_text(json.dumps(records))
    assert main(["analyze", "lottery", str(tmp_path / "seeds.json"), "--output", str(tmp_path / "lottery")]) == 0
    lottery = json.loads((tmp_path / "lottery.json").read_text())
    assert abs(lottery[0]["best_minus_worst"] - 0.2) < 1e-9
    assert (tmp_path / "lottery.md").read_text().startswith("| model |")
    assert main(["analyze", "ensemble", str(tmp_path / "seeds.json")]) == 0
    assert "0.2000" in capsys.readouterr().out  # gain 0.8 - 0.6

    points = [dict(name=f"N={n}", size="tiny", num_instances=n, score=90 - n, throughput=100.0 * n) for n in (1, 2, 5)]
    (tmp_path / "points.json").write_text(json.dumps(points))
    assert main(["analyze", "pareto", str(tmp_path / "points.json"), "--output", str(tmp_path / "pareto.png")]) == 0
    frontier = json.loads((tmp_path / "pareto.json").read_text())["frontier"]
    assert [p["name"] for p in frontier] == ["N=5", "N=2", "N=1"]
    assert main(["analyze", "pareto", str(tmp_path / "nope.json"), "--output", str(tmp_path / "x.png")]) == 2


def test_analyze_muxology_from_text_file(tmp_path):
    text = tmp_path / "held_out.txt"
    text.write_text("\n".join(f"sentence number {i} about multiplexing ." for i in range(12)))
    out = tmp_path / "mux.json"
    code = main(["analyze", "muxology", "--text-file", str(text), "--instances", "1,2", "--max-length", "12",
                 "--batch-size", "6", "--device", "cpu", "--output", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["num_sentences"] == 12 and [m["num_instances"] for m in report["models"]] == [1, 2]
    assert (tmp_path / "mux.png").exists()
