"""The serve-bench load generator: what it counts as a server's requests/s."""

from __future__ import annotations

import json

from muxplm.serving.loadgen import run_serve_bench, steady_rate


def test_the_steady_rate_leaves_out_the_ramp_and_the_drain():
    # 2 clients; a request answered every 0.1 s from t = 1.0 to 2.0, the first client idle at
    # 1.95, then two slow answers of the drain.
    completions = [1.0 + 0.1 * i for i in range(11)] + [2.5, 3.0]
    rate = steady_rate(completions, concurrency=2, first_idle=1.95)
    assert abs(rate - 8 / 0.85) < 1e-9  # the 8 answers 1.2 .. 1.9 after the pipeline filled at 1.1
    overall = len(completions) / 3.0
    assert rate > 2 * overall
    assert steady_rate(completions[:2], concurrency=2, first_idle=1.95) is None  # nothing in the window
    assert steady_rate(completions, concurrency=2, first_idle=1.05) is None  # drain before the ramp ended


def test_serve_bench_runs_servers_and_reports_both_rates(tmp_path):
    report = run_serve_bench(tmp_path, num_instances=(1, 2), concurrency=(1, 4), requests_per_level=40,
                             time_limit=20.0, words=8, num_layers=1, tag="t")
    assert json.loads((tmp_path / "t.json").read_text())["summary"] == report["summary"]
    assert (tmp_path / "t.png").stat().st_size > 0
    assert len(report["runs"]) == 4
    for run in report["runs"]:
        assert run["errors"] == 0 and run["requests"] == 40
        assert run["requests_per_s"] > 0 and run["requests_per_s_overall"] > 0
    assert report["summary"]["torch"]["by_num_instances"]["1"]["speedup_vs_n1"] == 1.0


def test_serve_bench_takes_server_defaults_and_flags_for_a_gpu(monkeypatch):
    from muxplm.cli import build_parser
    from muxplm.serving import loadgen

    args = build_parser().parse_args(["serve-bench", "--max-batch", "auto",
                                      "--server-flags", "--device cuda --dtype bfloat16 --compile reduce-overhead"])
    assert args.max_batch is None
    assert args.server_flags == ["--device", "cuda", "--dtype", "bfloat16", "--compile", "reduce-overhead"]
    launched = []
    monkeypatch.setattr(loadgen.subprocess, "Popen", lambda command, **_: launched.append(command))
    loadgen.ServerProcess("model", threads=1, max_batch=None, max_wait_ms=5, max_queue=None, max_length=64,
                          server_flags=tuple(args.server_flags))
    command = launched[0]
    assert "--max-batch" not in command and "--max-queue" not in command  # the server's device defaults
    assert command[-6:] == args.server_flags
