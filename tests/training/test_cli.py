"""The command line: config files vs flags, local task files, evaluate, the quick demo, and
clear errors for bad input."""

from __future__ import annotations

import json
import statistics

import pytest
from training_utils import MICRO_MODEL, micro_flags, run_cli, run_cli_process

from muxplm.cli import main
from muxplm.training import TrainConfig, run_stage
from muxplm.training.cli import config_from_args

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data


def _write(path, text):
    path.write_text(text)
    return str(path)


@pytest.fixture
def sentiment_files(tmp_path):
    rows = [("a wonderful , moving film", "pos"), ("dull and far too long", "neg"),
            ("a joy to watch", "pos"), ("the plot makes no sense", "neg")] * 6
    train = _write(tmp_path / "train.csv", "text,label\n" + "".join(f'"{t}",{y}\n' for t, y in rows))
    valid = _write(tmp_path / "valid.jsonl", "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows[:7]))
    return train, valid


def test_the_command_freezes_its_imports_for_the_collector_and_main_leaves_a_callers_objects_alone(monkeypatch):
    """`muxplm` and `python -m muxplm` (its own process) freeze the modules they import, which the
    collector would otherwise walk at exit; `main` called from Python freezes nothing."""
    import gc
    import sys
    from importlib.metadata import entry_points

    from muxplm import cli

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    with pytest.raises(SystemExit):
        main(["--version"])
    assert frozen == []
    monkeypatch.setattr(sys, "argv", ["muxplm", "--version"])
    with pytest.raises(SystemExit):
        cli.entry_point()
    assert frozen == [True]
    (script,) = [entry for entry in entry_points(group="console_scripts") if entry.name == "muxplm"]
    assert script.value == "muxplm.cli:entry_point"


def test_flags_override_the_config_file(tmp_path):
    from muxplm.cli import build_parser

    settings = _write(tmp_path / "run.json", json.dumps({"stage": "mlm", "lr": 3e-4, "max-steps": 50, "seed": 3}))
    args = build_parser().parse_args(["pretrain", "--config", settings, "--max-steps", "2", "--output-dir", "x"])
    config = config_from_args(args)
    assert (config.stage, config.lr, config.max_steps, config.seed, config.output_dir) == ("mlm", 3e-4, 2, 3, "x")
    yaml_file = _write(tmp_path / "run.yaml", "stage: retrieval\nbatch_size: 4\n")
    args = build_parser().parse_args(["pretrain", "--config", yaml_file, "--output-dir", "y"])
    assert config_from_args(args).batch_size == 4 and config_from_args(args).stage == "retrieval"


@pytest.mark.parametrize("setting, value", [("stage", "pretrain"), ("family", "gpt2"), ("mixed_precision", "fp8"),
                                            ("task_kind", "document"), ("sentence_pooling", "max")])
def test_a_config_file_is_held_to_the_flags_choices(tmp_path, setting, value):
    from muxplm.training.config import build_config, load_config_file

    settings = load_config_file(_write(tmp_path / "run.json", json.dumps({"task": "trec", setting: value})))
    with pytest.raises(ValueError, match=f"{setting} must be one of .*got '{value}'"):
        build_config(settings, output_dir="x")


def test_the_training_flags_are_built_from_the_config_dataclass(tmp_path, capsys):
    import dataclasses

    from muxplm.cli import build_parser
    from muxplm.training.config import TrainConfig

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["finetune", "--help"])
    shown = capsys.readouterr().out
    for field in dataclasses.fields(TrainConfig):
        assert f"--{field.name.replace('_', '-')}" in shown and f"--{field.name}" in shown, field.name
    # A flag given with its default's value still wins over the file; unset flags leave it alone.
    settings = _write(tmp_path / "run.json", json.dumps({"seed": 3, "progress": False, "lr": 1e-3}))
    args = parser.parse_args(["finetune", "--task", "sentiment", "--config", settings, "--seed", "42",
                              "--output-dir", "x", "--group-by-length", "--model-overrides", '{"num_hidden_layers": 2}'])
    config = config_from_args(args)
    assert (config.seed, config.progress, config.lr, config.group_by_length) == (42, False, 1e-3, True)
    assert config.model_overrides == {"num_hidden_layers": 2}
    assert config_from_args(parser.parse_args(["finetune", "--task", "sentiment", "--output-dir", "x",
                                               "--no-progress"])).progress is False
    assert config_from_args(parser.parse_args(["finetune", "--task", "sentiment", "--output_dir", "x"])).lr is None
    for argv, message in ((["pretrain", "--stage", "mlm", "--task", "sentiment", "--output-dir", "x"], "fine-tuning"),
                          (["finetune", "--stage", "mlm", "--task", "sentiment", "--output-dir", "x"], "pretrain")):
        with pytest.raises(ValueError, match=message):
            config_from_args(parser.parse_args(argv))
    args = parser.parse_args(["convert", "plain", "--num-instances", "2", "--task", "trec", "--output-dir", "x"])
    with pytest.raises(ValueError, match="fine-tuning setting"):
        args.func(args)
    with pytest.raises(SystemExit):
        parser.parse_args(["finetune", "--model-overrides", "{not json", "--output-dir", "x"])
    assert "--model-overrides" in capsys.readouterr().err


def test_finetune_local_files_then_evaluate_via_cli(tmp_path, sentiment_files):
    train, valid = sentiment_files
    out = tmp_path / "local"
    done = run_cli("finetune", "--train-file", train, "--validation-file", valid, "--preset", "tiny",
                   "--num-instances", "2", "--output-dir", str(out), *micro_flags(max_steps=2))
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}
    result_file = tmp_path / "eval.json"
    done = run_cli("evaluate", str(out), "--validation-file", valid, "--seeds", "3", "--output", str(result_file))
    assert done.returncode == 0, done.stderr
    assert "best-worst" in done.stdout and "accuracy" in done.stdout
    result = json.loads(result_file.read_text())
    assert result["num_examples"] == 7 and len(result["per_seed"]) == 3


def test_demo_quick_end_to_end(tmp_path):
    # A real process, as the README's first command runs: the entry point and its imports included.
    done = run_cli_process("demo", "--quick", "--no-progress", "--output-dir", str(tmp_path / "demo"))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "demo" / "demo_results.json").read_text())
    assert set(results["models"]) == {"N=1", "N=2"}
    assert "retrieval" not in results["models"]["N=1"]["stages"]  # no priming for the plain baseline
    assert set(results["models"]["N=2"]["stages"]) == {"retrieval", "mlm", "finetune"}
    for model in results["models"].values():
        assert 0.0 <= model["evaluation"]["summary"]["accuracy"]["mean"] <= 1.0
    assert results["models"]["N=1"]["speedup"] == 1.0 and results["models"]["N=1"]["retention"] == 1.0
    for timed in results["throughput"]:  # each model's figure: the median of its round-robin trials
        assert timed["statistic"] == "median" and timed["samples_per_s"] == statistics.median(timed["trials"])
    n2 = results["models"]["N=2"]
    assert n2["speedup"] > 0 and n2["retention"] == pytest.approx(
        n2["evaluation"]["summary"]["accuracy"]["mean"] / results["models"]["N=1"]["evaluation"]["summary"]["accuracy"]["mean"])
    assert "retention" in done.stdout and "speed-up" in done.stdout and "N=2" in done.stdout


def test_data_fetch_uses_the_cache(capsys, monkeypatch):
    from muxplm.data import sources

    assert main(["data", "fetch", "--only", "moby_dick"]) == 0  # fetched here if not yet cached
    capsys.readouterr()

    def no_download(*args, **kwargs):
        raise AssertionError("a cached source was downloaded again")

    monkeypatch.setattr(sources, "_download", no_download)
    assert main(["data", "fetch", "--only", "moby_dick"]) == 0
    out = capsys.readouterr()
    assert "moby_dick" in out.out and "fetching" not in out.err


# ----------------------------------------------------------------------------- bad input


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def test_unknown_task_is_a_clear_error(tmp_path, capsys):
    err = _error(capsys, ["finetune", "--task", "no-such-task", "--preset", "tiny", "--output-dir", str(tmp_path)])
    assert "unknown task 'no-such-task'" in err


def test_missing_column_and_empty_file(tmp_path, capsys):
    bad = _write(tmp_path / "bad.csv", "sentence,label\nhello,1\n")
    err = _error(capsys, ["finetune", "--train-file", bad, "--preset", "tiny", "--output-dir", str(tmp_path / "a")])
    assert "missing column" in err and "text" in err
    empty = _write(tmp_path / "empty.csv", "")
    err = _error(capsys, ["finetune", "--train-file", empty, "--preset", "tiny", "--output-dir", str(tmp_path / "b")])
    assert "empty" in err
    empty_text = _write(tmp_path / "empty.txt", "\n\n")
    err = _error(capsys, ["pretrain", "--stage", "mlm", "--train-file", empty_text, "--preset", "tiny",
                          "--output-dir", str(tmp_path / "c")])
    assert "empty" in err


def test_bad_model_choices(tmp_path, capsys):
    err = _error(capsys, ["pretrain", "--stage", "mlm", "--output-dir", str(tmp_path / "a")])
    assert "--preset" in err and "--init" in err
    err = _error(capsys, ["pretrain", "--stage", "mlm", "--preset", "tiny", "--num-instances", "2",
                          "--mux-type", "identity", "--output-dir", str(tmp_path / "b"),
                          "--model-overrides", json.dumps(MICRO_MODEL), "--corpus-sources", "moby_dick",
                          "--corpus-max-words", "3000"])
    assert "identity" in err
    err = _error(capsys, ["finetune", "--task", "sentiment", "--preset", "tiny", "--init", "x",
                          "--output-dir", str(tmp_path / "c")])
    assert "only one of" in err


def test_evaluate_rejects_non_classifiers_and_unknown_labels(tmp_path, capsys, finetuned, pretrained):
    err = _error(capsys, ["evaluate", str(pretrained), "--task", "sentiment"])
    assert "not a fine-tuned classifier" in err and "MuxBertForMaskedLM" in err
    err = _error(capsys, ["evaluate", str(finetuned), "--task", "pos"])
    assert "sentence-classification model" in err and "token-level" in err
    odd = _write(tmp_path / "odd.csv", "text,label\ngreat,positive\nmeh,neutral\n")
    err = _error(capsys, ["evaluate", str(finetuned), "--validation-file", odd])
    assert "neutral" in err and "negative" in err
    err = _error(capsys, ["evaluate", str(finetuned), "--task", "sentiment", "--device", "tpu9"])
    assert "unknown device 'tpu9'" in err


def test_existing_checkpoints_need_resume(tmp_path, capsys, pretrained):
    settings = dict(stage="mlm", output_dir=str(tmp_path), init=str(pretrained), max_steps=1, save_steps=1,
                    max_length=32, batch_size=4, corpus_sources=["moby_dick"], corpus_max_words=3000, progress=False)
    run_stage(TrainConfig(**settings))
    with pytest.raises(ValueError, match="--resume"):
        run_stage(TrainConfig(**settings))


def test_every_demo_row_fine_tunes_as_long_as_the_others(tmp_path, monkeypatch):
    """The full demo's N = 1 baseline gets the same fine-tuning epochs as the multiplexed rows
    (stages replaced by recorders: only the recipe is under test)."""
    from muxplm.training import demo

    epochs = {}

    def record(recipe, stage, output_dir, seed, progress, **settings):
        if stage == "finetune":
            epochs[output_dir.parent.name] = {**recipe["finetune"], **settings}["num_epochs"]
        return {"final_step": 1}

    evaluation = {"main_metric": "accuracy", "summary": {"accuracy": {"mean": 0.5}}}
    monkeypatch.setattr(demo, "_stage", record)
    monkeypatch.setattr(demo, "evaluate_checkpoint", lambda *args, **kwargs: evaluation)
    monkeypatch.setattr(demo, "_throughput_side_by_side", lambda paths, **kwargs: [{"samples_per_s": 1.0}] * len(paths))
    monkeypatch.setattr(demo, "_print_table", lambda results: None)
    demo.run_demo(tmp_path, quick=False, progress=False)
    assert set(epochs) == {"n1", "n2", "n5"} and len(set(epochs.values())) == 1, epochs
