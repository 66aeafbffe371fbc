"""The throughput benchmark's code paths on tiny inputs (never its speed targets)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from muxplm.bench.profile import STAGES, stage_breakdown
from muxplm.bench.throughput import (
    ModelSpec,
    build_model,
    build_specs,
    environment,
    filler_ceiling,
    format_table,
    plot_throughput,
    run_throughput,
    speedup_target,
    summarise,
)
from muxplm.timing import random_inputs

CPU = torch.device("cpu")


def test_grid_holds_baselines_and_every_combination():
    specs = build_specs(["tiny"], [1, 2, 5], ["gaussian_hadamard", "contextual"], ["rsa"], ["default", "int8"])
    names = [s.name for s in specs]
    assert len(specs) == 2 * (2 + 2 * 2)  # per variant: N=1, transformers, 2 N x 2 mux
    assert "tiny/N=1" in names and "tiny/transformers.BertModel[int8]" in names
    assert "tiny/N=5/contextual+rsa[int8]" in names
    with pytest.raises(ValueError, match="variant"):
        build_specs(["tiny"], variants=["fp8"])
    with pytest.raises(ValueError, match="preset"):
        build_specs(["huge"])


def test_targets_and_filler_ceiling():
    assert speedup_target(1, "sentence") is None
    assert speedup_target(2, "sentence") == pytest.approx(1.94)
    assert speedup_target(5, "sentence") == pytest.approx(4.85)
    assert speedup_target(10, "sentence") == pytest.approx(9.5)
    assert speedup_target(5, "token") == pytest.approx(4.75)
    assert filler_ceiling(128, 10) == pytest.approx(128 / 13)
    assert filler_ceiling(120, 10) == 10


def test_reference_model_matches_n1_muxplm_model():
    """The transformers reference computes exactly what the N=1 muxplm model computes."""
    for head in ("sentence", "token"):
        torch.manual_seed(0)
        mux = build_model(ModelSpec("tiny"), head, CPU, torch.float32)
        plain = build_model(ModelSpec("tiny", implementation="transformers"), head, CPU, torch.float32)
        missing, unexpected = plain.load_state_dict(mux.state_dict(), strict=False)
        assert not missing, missing
        inputs = random_inputs(3, 12, CPU)
        with torch.inference_mode():
            torch.testing.assert_close(plain(**inputs), mux(**inputs).logits, atol=1e-5, rtol=1e-5)


def test_run_throughput_on_tiny_grid(tmp_path):
    specs = build_specs(["tiny"], [1, 2], ["gaussian_hadamard"], ["rsa"], ["default", "int8"])
    logs = []
    report = run_throughput(specs, ("sentence", "token"), batch_size=4, seq_len=8, warmup=0, trials=2,
                            batches=1, device="cpu", log=logs.append)
    rows = report["results"]
    assert len(rows) == 2 * len(specs)
    assert all(r["throughput"] > 0 and len(r["trial_throughputs"]) == 2 for r in rows)
    for r in rows:
        if r["implementation"] == "muxplm" and r["num_instances"] == 1:
            assert r["speedup_vs_n1"] == pytest.approx(1.0)
        if r["variant"] == "default":
            assert r["speedup_vs_default_n1"] == pytest.approx(r["speedup_vs_n1"])
    mux_rows = [r for r in rows if r["num_instances"] == 2]
    assert all(r["target_speedup"] == pytest.approx(1.94 if r["head"] == "sentence" else 1.9) for r in mux_rows)
    # one check per MUX row, one N=1-vs-transformers check per (variant, head)
    assert len(report["checks"]) == len(mux_rows) + 4
    assert report["settings"]["batch_size"] == 4 and report["environment"]["torch"] == torch.__version__
    assert "tiny/N=2/gaussian_hadamard+rsa[int8]" in format_table(report)
    json.dumps(report)  # serialisable as is
    png = plot_throughput(report, str(tmp_path / "t.png"))
    assert (tmp_path / "t.png").stat().st_size > 1000 and png.endswith(".png")
    plot_throughput(report, str(tmp_path / "stacked.png"), against="default_n1")
    assert (tmp_path / "stacked.png").stat().st_size > 1000


def test_process_clock_and_invalid_settings():
    specs = build_specs(["tiny"], [1], [], [], with_transformers=False)
    report = run_throughput(specs, ("sentence",), batch_size=2, seq_len=4, warmup=0, trials=1, batches=1,
                            clock="process", log=lambda _: None)
    assert report["results"][0]["cpu_throughput"] > 0 and report["settings"]["clock"] == "process"
    with pytest.raises(ValueError, match="clock"):
        run_throughput(specs, clock="gpu-time")
    with pytest.raises(ValueError, match="batches"):
        run_throughput(specs, batches=0)
    with pytest.raises(ValueError, match="dtype"):
        run_throughput(specs, dtype="int4")


def test_int8_outside_cpu_float32_is_recorded_as_failure():
    specs = [ModelSpec("tiny", variant="int8")]
    report = run_throughput(specs, ("sentence",), batch_size=2, seq_len=4, warmup=0, trials=1, batches=1,
                            dtype="bfloat16", log=lambda _: None)
    assert "float32 only" in report["results"][0]["error"]


def test_cuda_graphs_off_a_gpu_are_recorded_as_failure_and_timed_passes_read_nothing_back(monkeypatch):
    from muxplm import devices, timing

    specs = [ModelSpec("tiny", variant="graphs"), ModelSpec("tiny")]
    report = run_throughput(specs, ("sentence",), batch_size=2, seq_len=4, warmup=0, trials=1, batches=1,
                            log=lambda _: None)
    errors = {row["variant"]: row.get("error") for row in report["results"]}
    assert "needs --device cuda" in errors["graphs"] and errors["default"] is None
    # The timer runs passes as the Predictor does: inputs checked on the host, none read back.
    seen = []
    model = lambda **_: seen.append(devices.host_checks_wanted(torch.zeros(1), training=False))  # noqa: E731
    timing.time_batches(model, {}, 2, "cpu")
    assert seen == [False, False]


def _row(size, n, throughput, implementation="muxplm", head="sentence"):
    mux = ("identity", "identity") if n == 1 else ("gaussian_hadamard", "rsa")
    spec = ModelSpec(size, n, *mux, implementation=implementation)
    return dict(size=size, num_instances=n, mux_type=mux[0], demux_type=mux[1], implementation=implementation,
                variant="default", name=spec.name, head=head, throughput=throughput)


def test_summarise_reports_misses_and_their_size():
    rows = [_row("tiny", 1, 100.0), _row("tiny", 1, 110.0, "transformers"), _row("tiny", 10, 900.0),
            _row("tiny", 2, 199.0)]
    report = summarise(rows, dict(batch_size=32), {})
    by_name = {c["name"]: c for c in report["checks"]}
    assert not by_name["tiny/N=1"]["met"] and "9.1% slower" in by_name["tiny/N=1"]["message"]
    ten = by_name["tiny/N=10/gaussian_hadamard+rsa"]
    assert not ten["met"] and ten["value"] == pytest.approx(9.0)
    assert "short by 5.3%" in ten["message"] and "filler ceiling 8.00x" in ten["message"]
    assert by_name["tiny/N=2/gaussian_hadamard+rsa"]["met"]
    assert rows[2]["speedup_vs_transformers"] == pytest.approx(900 / 110)


def test_stage_breakdown_accounts_for_the_forward_pass():
    model = build_model(ModelSpec("tiny", 2, "gaussian_hadamard", "rsa"), "token", CPU, torch.float32)
    times = stage_breakdown(model, random_inputs(4, 8, CPU), CPU, repeats=2)
    assert set(STAGES) <= set(times) and times["encoder"] > 0 and times["demux"] > 0
    assert times["other"] == pytest.approx(times["total"] - sum(times[s] for s in STAGES))
    assert math.isfinite(times["total"]) and times["total"] > times["encoder"]


def test_environment_records_machine_and_versions():
    env = environment("cpu")
    assert env["cpu_cores"] >= 1 and env["transformers"] and env["date"].startswith("20")
    assert "git_commit" in env


def test_round_robin_times_every_model_each_trial_and_rates_use_the_chosen_clock():
    from muxplm.timing import rates, round_robin

    calls = []

    class Recorder(torch.nn.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def forward(self, **inputs):
            calls.append(self.name)

    models = {"a": Recorder("a"), "b": Recorder("b")}
    timings = round_robin(models, {}, batches=2, trials=3, device="cpu", warmup=1)
    assert {key: len(timed) for key, timed in timings.items()} == {"a": 3, "b": 3}
    # warm-up once each, then trial 1 a-first, trial 2 b-first, trial 3 a-first (2 batches per timing)
    assert calls == ["a", "b", *"aabb", *"bbaa", *"aabb"]
    measured = rates([(2.0, 1.0), (4.0, 2.0)], samples=8, clock="process")
    assert measured["trials"] == [8.0, 4.0] and measured["wall_samples_per_s"] == 3.0
    assert measured["samples_per_s"] == 6.0 and measured["std"] == 2.0
    with pytest.raises(ValueError, match="unknown clock"):
        rates([(1.0, 1.0)], samples=1, clock="gpu")
    # The median: one trial slowed by a burst of load moves the mean, not the median.
    bursty = [(1.0, 1.0), (1.0, 1.0), (4.0, 4.0)]
    assert rates(bursty, samples=8, statistic="median")["samples_per_s"] == 8.0
    assert rates(bursty, samples=8)["samples_per_s"] == pytest.approx(6.0)
    assert rates(bursty, samples=8, statistic="median")["cpu_samples_per_s"] == 8.0
    with pytest.raises(ValueError, match="unknown statistic"):
        rates(bursty, samples=8, statistic="mode")


# --------------------------------------------------------------------------- user checkpoints


@pytest.fixture(scope="module")
def checkpoint_dirs(tmp_path_factory):
    """Two fine-tuned-style classifiers (N = 1 and N = 2) in runs/<name>/3-sentiment, the layout
    `muxplm finetune` leaves, and an MLM checkpoint that is not a classifier."""
    from transformers import AutoTokenizer

    from muxplm import MuxBertConfig, MuxBertForMaskedLM, MuxBertForSequenceClassification
    from muxplm.serving.predictor import default_tokenizer_path

    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_path())
    root = tmp_path_factory.mktemp("runs")
    tiny = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    folders = {}
    for n in (1, 2):
        torch.manual_seed(n)
        config = MuxBertConfig.from_preset("tiny", **tiny, num_instances=n, num_labels=2,
                                           demux_type="unbind" if n > 1 else "identity")
        folders[n] = root / f"n{n}" / "3-sentiment"
        MuxBertForSequenceClassification(config).save_pretrained(folders[n])
        tokenizer.save_pretrained(folders[n])
    folders["mlm"] = root / "n2" / "2-mlm"
    MuxBertForMaskedLM(MuxBertConfig.from_preset("tiny", **tiny, num_instances=2)).save_pretrained(folders["mlm"])
    return folders


def test_checkpoint_labels_are_directory_names_made_distinct(tmp_path):
    from muxplm.bench.throughput import checkpoint_labels

    assert list(checkpoint_labels([tmp_path / "a", tmp_path / "b"])) == ["a", "b"]
    assert list(checkpoint_labels([tmp_path / "n2" / "ft", tmp_path / "n5" / "ft"])) == ["n2/ft", "n5/ft"]
    with pytest.raises(ValueError, match="given twice"):
        checkpoint_labels([tmp_path / "a", str(tmp_path / "a") + "/"])


def test_bench_throughput_times_checkpoints_and_their_int8_copies(checkpoint_dirs, tmp_path, capsys):
    from muxplm.cli import main

    out = tmp_path / "checkpoints.json"
    code = main(["bench", "throughput", "--model", str(checkpoint_dirs[1]), "--model", str(checkpoint_dirs[2]),
                 "--quantize", "none,int8", "--batch-size", "4", "--seq-len", "8", "--batches", "2", "--trials", "1",
                 "--warmup", "0", "--device", "cpu", "--output", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    rows = report["results"]
    assert [r["label"] for r in rows] == ["n1/3-sentiment", "n1/3-sentiment int8", "n2/3-sentiment",
                                          "n2/3-sentiment int8"]
    assert [r["precision"] for r in rows] == ["fp32", "int8", "fp32", "int8"]
    assert rows[0]["speedup"] == 1.0 and all(r["samples_per_s"] > 0 and len(r["trials"]) == 1 for r in rows)
    assert rows[3]["speedup"] == pytest.approx(rows[3]["samples_per_s"] / rows[0]["samples_per_s"])
    assert rows[2]["checkpoint"] == str(checkpoint_dirs[2]) and report["settings"]["quantize"] == ["none", "int8"]
    printed = capsys.readouterr().out
    assert "n2/3-sentiment int8" in printed and "speed-up" in printed


def test_bench_throughput_refuses_a_checkpoint_that_is_not_a_classifier(checkpoint_dirs, capsys):
    from muxplm.cli import main

    code = main(["bench", "throughput", "--model", str(checkpoint_dirs[1]), "--model", str(checkpoint_dirs["mlm"]),
                 "--batches", "1", "--trials", "1", "--device", "cpu"])
    assert code == 2
    error = capsys.readouterr().err
    assert str(checkpoint_dirs["mlm"]) in error and "not a fine-tuned classifier" in error
    assert main(["bench", "throughput", "--model", str(checkpoint_dirs[1]), "--heads", "token"]) == 2
    assert "--heads pick models of the grid" in capsys.readouterr().err
    assert main(["bench", "throughput", "--sizes", "tiny", "--quantize", "int8"]) == 2
    assert "--quantize and --runtime go with --model" in capsys.readouterr().err


def test_time_checkpoints_takes_loaded_models_and_refuses_int8_off_the_cpu(checkpoint_dirs, tmp_path):
    from muxplm.bench.throughput import time_checkpoints
    from muxplm.training import load_classifier

    model = load_classifier(checkpoint_dirs[2])[0]
    bare = tmp_path / "weights-only"  # a checkpoint without tokenizer files: timing needs none
    model.save_pretrained(bare)
    results = time_checkpoints({"mine": model, "theirs": checkpoint_dirs[1], "bare": bare}, quantize=("int8",),
                               batch_size=4, seq_length=8, batches=1, trials=1, warmup=0)
    assert list(results) == ["mine int8", "theirs int8", "bare int8"] and results["mine int8"]["checkpoint"] is None
    assert not list(bare.glob("tokenizer*")) and results["bare int8"]["samples_per_s"] > 0
    fp32 = time_checkpoints({"mine": model}, batch_size=4, seq_length=8, batches=1, trials=1, warmup=0)["mine"]
    assert 0 < results["mine int8"]["weights_bytes"] < fp32["weights_bytes"]  # the weights as run
    with pytest.raises(ValueError, match="runs on the CPU"):
        time_checkpoints({"mine": model}, quantize=("none", "int8"), device="cuda")
    with pytest.raises(ValueError, match="distinct"):
        time_checkpoints({"mine": model}, quantize=("int8", "int8"))


def test_bench_throughput_times_checkpoints_in_onnx_runtime_beside_pytorch(checkpoint_dirs, tmp_path, capsys):
    from muxplm.cli import main

    out = tmp_path / "onnx.json"
    code = main(["bench", "throughput", "--model", str(checkpoint_dirs[1]), "--model", str(checkpoint_dirs[2]),
                 "--runtime", "torch,onnx", "--quantize", "none,int8", "--batch-size", "5", "--seq-len", "8",
                 "--batches", "1", "--trials", "1", "--warmup", "1", "--device", "cpu", "--output", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    rows = {r["label"]: r for r in report["results"]}
    assert list(rows)[:4] == ["n1/3-sentiment", "n1/3-sentiment int8", "n1/3-sentiment onnx",
                              "n1/3-sentiment onnx int8"]
    assert len(rows) == 8 and report["settings"]["runtimes"] == ["torch", "onnx"]
    assert [(r["runtime"], r["precision"]) for r in report["results"][4:]] == [
        ("torch", "fp32"), ("torch", "int8"), ("onnx", "fp32"), ("onnx", "int8")]
    assert all(r["samples_per_s"] > 0 for r in rows.values())
    assert "n2/3-sentiment onnx int8" in capsys.readouterr().out
    assert main(["bench", "throughput", "--model", str(checkpoint_dirs[1]), "--runtime", "jax"]) == 2
    assert "runtimes must list distinct choices of torch, onnx" in capsys.readouterr().err
    assert main(["bench", "throughput", "--sizes", "tiny", "--runtime", "onnx"]) == 2
    assert "--quantize and --runtime go with --model" in capsys.readouterr().err


def test_an_onnx_runtime_classifier_gives_the_pytorch_logits(checkpoint_dirs, tmp_path):
    from muxplm.serving.onnx_export import OnnxRuntimeClassifier, export_graph
    from muxplm.timing import random_inputs
    from muxplm.training import load_classifier

    model = load_classifier(checkpoint_dirs[2])[0].eval()
    result = export_graph(model, tmp_path / "g.onnx")
    assert result["max_abs_diff"] < 1e-4 and not list(tmp_path.glob(".*tmp"))  # staged, then renamed
    inputs = random_inputs(7, 9, "cpu", vocab_size=model.config.vocab_size)  # 7: not a multiple of N = 2
    with torch.no_grad():
        expected = model(**inputs).logits
    got = OnnxRuntimeClassifier(result["path"], model.config, threads=1)(**inputs)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
