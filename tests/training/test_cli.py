"""The command line: config files vs flags, local task files, evaluate, the quick demo, and
clear errors for bad input."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
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
    """`muxplm` and `python -m muxplm` (its own process) import what the command runs with and then
    freeze the modules, which the collector would otherwise walk at exit; `main` called from Python
    freezes nothing, and neither does a help screen (it imports nothing heavy)."""
    import gc
    import sys
    from importlib.metadata import entry_points

    from muxplm import cli

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    assert main(["data"]) == 2  # `muxplm data` without an action prints its help
    assert frozen == []
    monkeypatch.setattr(sys, "argv", ["muxplm", "finetune", "--help"])
    with pytest.raises(SystemExit):
        cli.entry_point()
    assert frozen == []
    monkeypatch.setattr(sys, "argv", ["muxplm", "data"])
    assert cli.entry_point() == 2 and frozen == [True]
    assert all(command.runs is None or importlib.util.find_spec(command.runs) for command in cli.COMMANDS.values())
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
    from muxplm.training.config import build_config, load_config_file, resolve

    settings = load_config_file(_write(tmp_path / "run.json", json.dumps({"task": "trec", setting: value})))
    with pytest.raises(ValueError, match=f"{setting} must be one of .*got '{value}'"):
        resolve(build_config(settings, output_dir="x"), "tiny")


def _shown_flags(parser) -> dict[str, argparse.Action]:
    """The options a parser's --help lists, by their first spelling."""
    return {action.option_strings[0]: action for action in parser._actions
            if action.option_strings and action.help != argparse.SUPPRESS}


def _command_parser(command):
    from muxplm.cli import build_parser

    parser = build_parser([command])
    return next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction)).choices[command]


@pytest.mark.parametrize("command", ["pretrain", "finetune", "convert"])
def test_each_training_command_shows_exactly_its_own_settings_in_kebab_case(command, capsys):
    import dataclasses

    from muxplm.cli import main
    from muxplm.training.config import TrainConfig, command_settings

    own = [setting.name for setting in command_settings(command)]
    expected = {f"--{name.replace('_', '-')}" for name in own if name != "progress"} | {"--no-progress"}
    extra = {"-h", "--config"} | ({"--gpu"} if command == "convert" else set())
    shown = _shown_flags(_command_parser(command))
    assert set(shown) == expected | extra
    assert all(shown[flag].help.strip() for flag in shown)  # help on every option
    with pytest.raises(SystemExit):
        main([command, "--help"])
    screen = capsys.readouterr().out
    assert not re.search(r"--[a-z0-9-]*_", screen), "snake_case in the help"
    other = {f"--{field.name.replace('_', '-')}" for field in dataclasses.fields(TrainConfig)} - expected
    assert not [flag for flag in other if re.search(rf"^\s+{flag}\b", screen, re.MULTILINE)]
    for section in ("run arguments", "model arguments", "data arguments", "training arguments"):
        assert f"\n{section}:\n" in screen


def test_the_settings_each_command_takes():
    from muxplm.training.config import PRETRAIN_STAGES, command_settings

    takes = {command: {setting.name for setting in command_settings(command)}
             for command in ("pretrain", "finetune", "convert")}
    # convert starts from the plain encoder it is given, and runs retrieval priming
    assert not {"stage", "preset", "init", "init_encoder", "family", "task", "recipe"} & takes["convert"]
    # finetune runs its one stage on a task: no stage, corpus or pre-training objective
    assert not {"stage", "corpus_sources", "corpus_max_words", "mlm_probability", "retrieval_loss_weight",
                "distill_pooling"} & takes["finetune"]
    assert not {"task", "task_kind", "validation_file", "consistency_weight", "sentence_pooling"} & takes["pretrain"]
    assert {"output_dir", "num_instances", "train_file", "max_steps", "lr", "resume", "progress",
            "model_overrides"} <= takes["pretrain"] & takes["finetune"] & takes["convert"]
    assert _shown_flags(_command_parser("pretrain"))["--stage"].choices == PRETRAIN_STAGES


def test_flags_keep_their_snake_case_spellings_and_the_bare_switches(tmp_path):
    from muxplm.cli import build_parser

    def parse(*argv):
        return vars(build_parser(argv).parse_args(argv))

    kebab = parse("pretrain", "--stage", "mlm", "--max-steps", "3", "--corpus-sources", "a", "b", "--output-dir", "x",
                  "--model-overrides", '{"num_hidden_layers": 2}', "--resume", "--no-progress")
    snake = parse("pretrain", "--stage", "mlm", "--max_steps", "3", "--corpus_sources", "a", "b", "--output_dir", "x",
                  "--model_overrides", '{"num_hidden_layers": 2}', "--resume", "--no_progress")
    assert kebab == snake
    assert (kebab["max_steps"], kebab["corpus_sources"], kebab["resume"], kebab["progress"]) == (3, ["a", "b"], True,
                                                                                               False)
    assert kebab["model_overrides"] == {"num_hidden_layers": 2}
    assert parse("finetune", "--resume", "false", "--progress", "false", "--task_kind", "token")["resume"] is False
    assert parse("convert", "plain", "--keep_layers", "2", "--gpu")["keep_layers"] == 2
    assert "seed" not in parse("finetune", "--task", "trec")  # a flag not given leaves a config file's value alone


def test_a_setting_of_another_command_is_refused_by_name(capsys):
    from muxplm.cli import build_parser

    for argv, flag, owners in ((["pretrain", "--stage", "mlm", "--task", "sentiment"], "--task", "`muxplm finetune`"),
                               (["finetune", "--stage", "mlm"], "--stage", "`muxplm pretrain`"),
                               (["finetune", "--corpus_sources", "a"], "--corpus_sources",
                                "`muxplm pretrain` and `muxplm convert`"),
                               (["convert", "plain", "--preset", "tiny"], "--preset",
                                "`muxplm pretrain` and `muxplm finetune`")):
        with pytest.raises(SystemExit):
            build_parser(argv).parse_args(argv)
        assert f"{flag} is a setting of {owners}, not of `muxplm {argv[0]}`" in capsys.readouterr().err


def test_a_config_file_takes_every_setting_of_its_command_and_refuses_the_others(tmp_path):
    from muxplm.cli import build_parser
    from muxplm.training.cli import _file_settings
    from muxplm.training.config import command_settings

    for command in ("pretrain", "finetune", "convert"):
        own = {setting.name: None for setting in command_settings(command)}
        file = _write(tmp_path / f"{command}.json", json.dumps(own))
        argv = [command, *(["plain"] if command == "convert" else []), "--config", file]
        assert set(_file_settings(build_parser(argv).parse_args(argv))) == set(own)
    for command, settings, message in (
            ("finetune", {"corpus_sources": ["moby_dick"]}, "corpus_sources is a setting of `muxplm pretrain` and "
                                                            "`muxplm convert`, not of `muxplm finetune`"),
            ("convert", {"task": "trec"}, "task is a setting of `muxplm finetune`, not of `muxplm convert`"),
            ("pretrain", {"stage": "mlm", "consistency_weight": 4}, "consistency_weight is a setting of"),
            ("finetune", {"stage": "mlm"}, "stage 'mlm' is a pre-training stage; use `muxplm pretrain --stage mlm`"),
            ("convert", {"stage": "mlm"}, "convert runs the retrieval stage, not 'mlm'")):
        file = _write(tmp_path / "run.json", json.dumps(settings))
        argv = [command, *(["plain"] if command == "convert" else []), "--config", file]
        with pytest.raises(ValueError, match=re.escape(f"{file}: {message}")):
            _file_settings(build_parser(argv).parse_args(argv))
    # A run's own record of its settings (every one, the other commands' included) runs it again.
    record = TrainConfig(stage="finetune", task="trec", output_dir="x", corpus_sources=["moby_dick"]).to_dict()
    for name in ("run.json", "train_config.json"):
        (tmp_path / name).write_text(json.dumps(record))
    argv = ["finetune", "--config", str(tmp_path / "train_config.json")]
    assert config_from_args(build_parser(argv).parse_args(argv)).corpus_sources is None
    argv = ["finetune", "--config", str(tmp_path / "run.json")]
    with pytest.raises(ValueError, match=r"run.json: \w+ is a setting of `muxplm pretrain`"):
        config_from_args(build_parser(argv).parse_args(argv))
    file = _write(tmp_path / "own.json", json.dumps({"stage": "finetune", "task": "trec", "output_dir": "x"}))
    config = config_from_args(build_parser(["finetune"]).parse_args(["finetune", "--config", file]))
    assert (config.stage, config.task, config.output_dir) == ("finetune", "trec", "x")


def test_every_option_of_every_command_has_help():
    from muxplm.cli import build_parser

    def options(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions), path
                for name, sub in action.choices.items():
                    yield from options(sub, f"{path} {name}")
            else:
                yield path, action

    missing = [f"{path} {action.option_strings or action.dest}" for path, action in options(build_parser(), "muxplm")
               if not action.help]
    assert missing == []


def test_flags_override_a_config_file_and_keep_today_s_spellings(tmp_path, capsys):
    from muxplm.cli import build_parser

    parser = build_parser()
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
    with pytest.raises(SystemExit):
        parser.parse_args(["finetune", "--model-overrides", "{not json", "--output-dir", "x"])
    assert "--model-overrides" in capsys.readouterr().err


def test_finetune_local_files_then_evaluate_via_cli(tmp_path, sentiment_files):
    train, valid = sentiment_files
    out = tmp_path / "local"
    done = run_cli("finetune", "--train-file", train, "--validation-file", valid, "--preset", "tiny",
                   "--num-instances", "2", "--output-dir", str(out), *micro_flags("finetune", max_steps=2))
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}
    result_file = tmp_path / "eval.json"
    done = run_cli("evaluate", str(out), "--validation-file", valid, "--seeds", "3", "--output", str(result_file))
    assert done.returncode == 0, done.stderr
    assert "best-worst" in done.stdout and "accuracy" in done.stdout
    result = json.loads(result_file.read_text())
    assert result["num_examples"] == 7 and len(result["per_seed"]) == 3


def test_training_into_a_file_logs_its_progress_every_few_percent(tmp_path, sentiment_files):
    train, valid = sentiment_files
    done = run_cli("finetune", "--train-file", train, "--validation-file", valid, "--preset", "tiny",
                   "--output-dir", str(tmp_path / "run"), *micro_flags("finetune", max_steps=60, eval_steps=60,
                                                                         save_steps=60), "--progress", "true")
    assert done.returncode == 0, done.stderr
    bar = [line for line in done.stderr.splitlines() if line.startswith("finetune:")]
    assert "\r" not in done.stderr and 15 <= len(bar) <= 25 and "60/60" in bar[-1], done.stderr[-2000:]


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

    monkeypatch.setattr(sources, "download", no_download)
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
    """The full demo's N = 1 baseline gets as many fine-tuning epochs as the multiplexed rows without
    composition consistency; the N = 2 row, with it, encodes its data at least as often (each of its
    steps encodes the batch twice). Stages replaced by recorders: only the recipe is under test."""
    from muxplm.training import demo
    from muxplm.training.recipes import for_instances

    epochs = {}

    def record(recipe, stage, output_dir, seed, progress, instances, **settings):
        if stage == "finetune":
            own = {**for_instances(recipe["finetune"], instances), **settings}
            epochs[output_dir.parent.name] = (own["num_epochs"], own.get("consistency_weight") or 0.0)
        return {"final_step": 1}

    evaluation = {"main_metric": "accuracy", "summary": {"accuracy": {"mean": 0.5}}}
    monkeypatch.setattr(demo, "_stage", record)
    monkeypatch.setattr(demo, "evaluate_checkpoint", lambda *args, **kwargs: evaluation)
    monkeypatch.setattr(demo, "_throughput_side_by_side", lambda paths, **kwargs: [{"samples_per_s": 1.0}] * len(paths))
    monkeypatch.setattr(demo, "_print_table", lambda results: None)
    demo.run_demo(tmp_path, quick=False, progress=False)
    assert set(epochs) == {"n1", "n2", "n5"}, epochs
    baseline = epochs["n1"][0]
    assert epochs["n1"][1] == 0 and epochs["n5"] == (baseline, 0.0)
    assert epochs["n2"][1] > 0 and 2 * epochs["n2"][0] >= baseline
