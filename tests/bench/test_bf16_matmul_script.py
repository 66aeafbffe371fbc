"""benchmarks/experiments/bf16_matmul.py: bf16 against float32 matrix products on this CPU."""

import json

from script_testing import load_script


def test_every_product_is_timed_in_both_precisions_and_the_cpu_named(tmp_path, monkeypatch):
    from muxplm import devices

    script = load_script("bf16_matmul")
    monkeypatch.setattr(devices, "cpu_runs_bf16_natively", lambda: False)
    assert script.main(["--output", str(tmp_path / "r.json"), "--scale", "0.01", "--min-run-time", "0.01"]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["native_bf16"] is False and len(report["products"]) == len(script.SHAPES)
    for row, (_, m, k, n) in zip(report["products"], script.SHAPES):
        assert row["shape"] == [max(1, int(m * 0.01)), k, n]
        assert row["float32_s"] > 0 and row["bf16_s"] > 0
        assert row["bf16_over_float32"] == row["bf16_s"] / row["float32_s"]
