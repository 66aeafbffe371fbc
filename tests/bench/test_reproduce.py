"""The reproduction driver end to end on a micro recipe, and its bookkeeping on known numbers."""

import copy
import json
from pathlib import Path

import pytest

from muxplm.bench.analysis import load_records
from muxplm.training.evaluate import changed_fraction
from muxplm.bench.reproduce import (
    MODELS,
    PAPER_MODELS,
    _baseline_of,
    check_targets,
    finetune_model,
    report_text,
    resolve_models,
    resolve_recipe,
    run_reproduction,
    summarize_results,
    table1_markdown,
)

from reproduce_testing import MICRO

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("reproduce")
    results = run_reproduction(root / "out", "quick", models=["bert", "mux-bert-2"], tasks=["sentiment", "ner"],
                               seeds=2, overrides=MICRO, runs_dir=root / "runs", log=lambda *_: None)
    return root / "out", results


def test_micro_run_writes_every_output(micro_run):
    out, results = micro_run
    for name in ("results.json", "table.md", "points.json", "pareto.png", "records.json", "lottery.md", "ensemble.md"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    saved = json.loads((out / "results.json").read_text())
    assert set(saved["rows"]) == {"bert", "mux-bert-2"}
    assert saved["environment"]["torch"] and saved["recipe"]["max_length"] == 16
    # The points file is what `muxplm analyze pareto` reads.
    points = load_records([str(out / "points.json")])
    assert {p["name"] for p in points} == {"BERT", "MUX-BERT N=2"}
    assert all(p["throughput"] > 0 and 0 <= p["score"] <= 100 for p in points)
    # MUX-BERT N=2 is in the quick recipe's ensemble list: its ensembled score is recorded.
    assert results["evaluations"]["mux-bert-2"]["sentiment"]["ensemble"] is not None
    assert "MUX-BERT N=2" in (out / "ensemble.md").read_text()
    # Every stage names the code that trained it: the package's source hash and the commit.
    from muxplm.provenance import git, source_hash

    stages = [stage for key in saved["models"] for name, stage in saved["training"][key].items() if name != "wall_seconds"]
    assert set(saved["training"]["mux-bert-2"]) >= {"retrieval", "mlm", "finetune-sentiment", "finetune-ner"}
    assert stages and all(stage["code"]["source_hash"] == source_hash() for stage in stages)
    assert all(stage["code"]["git_commit"] == git("rev-parse", "HEAD") for stage in stages)


def test_micro_table_has_table1_shape(micro_run):
    out, _ = micro_run
    lines = (out / "table.md").read_text().strip().splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == ["model", "N", "sentiment", "ner", "sentence avg", "token avg", "throughput gain",
                      "retention (sent / token)", "changed by composition", "train min", "wall min"]
    assert len(lines) == 4 and lines[2].startswith("| BERT | 1 |") and lines[3].startswith("| MUX-BERT N=2 | 2 |")
    assert all(len(line.strip("|").split("|")) == len(header) for line in lines[2:])


def test_micro_stability_is_measured_for_mux_rows(micro_run):
    _, results = micro_run
    for task in ("sentiment", "ner"):
        changed = results["evaluations"]["mux-bert-2"][task]["changed_across_seeds"]
        assert 0.0 <= changed <= 1.0
        assert results["rows"]["mux-bert-2"]["scores"][task]["changed_across_seeds"] == changed
        assert results["evaluations"]["bert"][task]["changed_across_seeds"] == 0.0  # one composition


def test_changed_fraction_counts_units_that_differ_between_seeds():
    assert changed_fraction([[0, 1, 1, 2], [0, 1, 0, 2], [0, 2, 1, 2]]) == 0.5
    assert changed_fraction([[3, 4]]) == 0.0


def test_micro_retention_and_gain_come_from_measured_values(micro_run):
    _, results = micro_run
    rows, speeds = results["rows"], results["throughput"]
    for task in ("sentiment", "ner"):
        mux = results["evaluations"]["mux-bert-2"][task]["summary"]["main"]["mean"]
        plain = results["evaluations"]["bert"][task]["summary"]["main"]["mean"]
        if plain > 0:
            assert rows["mux-bert-2"]["retention"][task] == pytest.approx(mux / plain)
    for head in ("sentence", "token"):
        measured = speeds[head]["mux-bert-2"]["samples_per_s"] / speeds[head]["bert"]["samples_per_s"]
        assert rows["mux-bert-2"]["throughput_gain"][head] == pytest.approx(measured)
        assert rows["bert"]["throughput_gain"][head] == pytest.approx(1.0)
    assert len(results["evaluations"]["mux-bert-2"]["ner"]["seeds"]) == 2


def _evaluation(mean, std=0.0, seeds=(0, 1)):
    summary = {"main": {"mean": mean, "std": std, "max": mean + std, "min": mean - std, "best_minus_worst": 2 * std}}
    return {"summary": summary, "main_metric": "accuracy", "seeds": list(seeds), "num_instances": 2,
            "per_seed": [{"main": mean} for _ in seeds], "ensemble": None}


def test_summary_targets_and_table_on_known_numbers():
    tasks = ["sentiment", "trec", "pos"]
    evaluations = {
        "bert": {"sentiment": _evaluation(0.80), "trec": _evaluation(0.60), "pos": _evaluation(0.90)},
        "mux-bert-2": {"sentiment": _evaluation(0.77), "trec": _evaluation(0.57), "pos": _evaluation(0.90)},
        "tmux-2": {"sentiment": _evaluation(0.60), "trec": _evaluation(0.50), "pos": _evaluation(0.40)},
    }
    throughput = {"sentence": {"bert": {"samples_per_s": 100.0}, "mux-bert-2": {"samples_per_s": 190.0},
                               "tmux-2": {"samples_per_s": 180.0}}}
    training = {"bert": {"mlm": {"train_seconds": 60.0}, "finetune-pos": {"train_seconds": 120.0}, "wall_seconds": 189.0}}
    rows = summarize_results(["bert", "mux-bert-2", "tmux-2"], tasks, evaluations, throughput, training)
    mux = rows["mux-bert-2"]
    assert mux["sentence_avg"] == pytest.approx(67.0) and mux["token_avg"] == pytest.approx(90.0)
    assert mux["retention"]["sentence_avg"] == pytest.approx(67.0 / 70.0)
    assert rows["bert"]["train_minutes"] == pytest.approx(3.0) and "train_minutes" not in mux
    assert rows["bert"]["wall_minutes"] == pytest.approx(3.15) and "wall_minutes" not in mux
    assert mux["retention"]["trec"] == pytest.approx(0.95)
    assert mux["throughput_gain"]["sentence"] == pytest.approx(1.9)
    checks = {(c["model"], c["what"]): c for c in check_targets(rows)}
    assert not checks[("mux-bert-2", "sentence retention")]["met"]  # 95.7% < 96%
    assert "short by 0.3 points" in checks[("mux-bert-2", "sentence retention")]["message"]
    assert checks[("mux-bert-2", "token retention")]["met"]
    assert checks[("mux-bert-2", "gap over T-MUX N=2")]["value"] == pytest.approx(12.0)
    assert checks[("mux-bert-2", "token ahead of tmux-2")]["met"]  # the paper's ordering, 90.0 vs 40.0
    assert ("contextual-5", "token ahead of mux-bert-5") not in checks  # rows not in the run
    assert ("tmux-2", "sentence retention") not in checks  # prefix demux has no retention target
    table = table1_markdown(rows, tasks)
    expected = ("| MUX-BERT N=2 | 2 | 77.0 ± 0.0 (77.0) | 57.0 ± 0.0 (57.0) | 90.0 ± 0.0 (90.0) | 67.0 (67.0) "
                "| 90.0 (90.0) | 1.90x | 95.7% / 100.0% |")
    assert expected in table and "| train min | wall min |" in table and table.splitlines()[2].endswith("| 3 | 3 |")
    # A wall time that does not hold all of the row's training is left blank, not summed short:
    # a stage reused from an earlier run or resumed after a stop, or a record shorter than its training.
    for edit in ({"mlm": {"train_seconds": 60.0, "reused": True}},
                 {"mlm": {"train_seconds": 60.0, "resumed_from_step": 40}}, {"wall_seconds": 179.0}):
        blank = summarize_results(["bert"], tasks, evaluations, throughput, {"bert": {**training["bert"], **edit}})
        assert "wall_minutes" not in blank["bert"] and blank["bert"]["train_minutes"] == pytest.approx(3.0)
    evaluations["tmux-2"]["pos"] = _evaluation(0.95)  # T-MUX ahead on the token task: the ordering missed
    rows = summarize_results(["bert", "mux-bert-2", "tmux-2"], tasks, evaluations, throughput)
    checks = {(c["model"], c["what"]): c for c in check_targets(rows)}
    assert not checks[("mux-bert-2", "token ahead of tmux-2")]["met"]
    assert checks[("mux-bert-2", "sentence ahead of tmux-2")]["met"]


def test_recipe_overrides_and_errors():
    recipe = resolve_recipe("gpu", {"pretrain.max_steps": 7, "seeds": 2})
    assert recipe["pretrain"]["max_steps"] == 7 and recipe["seeds"] == 2
    assert recipe["device"] == "cuda" and recipe["throughput"]["clock"] == "wall"
    assert resolve_recipe("quick")["pretrain"]["max_steps"] != 7  # presets are not mutated
    overrides = {"pretrain": {"max_steps": 3, "lr": 1e-3}, "pretrain.max_steps": 5}
    assert resolve_recipe("quick", overrides)["pretrain"] == {"max_steps": 5, "lr": 1e-3}
    assert overrides["pretrain"] == {"max_steps": 3, "lr": 1e-3}  # nor are the caller's overrides
    with pytest.raises(ValueError, match="unknown preset"):
        resolve_recipe("huge")
    with pytest.raises(ValueError, match="unknown recipe setting"):
        resolve_recipe("quick", {"optimizer.lr": 1.0})
    with pytest.raises(ValueError, match="unknown model"):
        run_reproduction("/nonexistent", "quick", models=["gpt"])
    with pytest.raises(ValueError, match="keep_layers cuts to k >= 1"):  # refused before any folder is touched
        finetune_model("bert", "sentiment", "/nonexistent", resolve_recipe("quick"), Path("/nonexistent"), None,
                       keep_layers=0)


def test_the_gpu_preset_is_the_full_rule_three_times_as_long():
    full, gpu = resolve_recipe("full"), resolve_recipe("gpu")
    assert gpu["finetune"]["max_steps"] == 3 * full["finetune"]["max_steps"]
    assert gpu["finetune"]["max_steps"] // gpu["finetune"]["eval_steps"] == 6  # still the best of six
    same = ("retrieval", "pretrain", "task_finetune", "sizes", "seeds", "preset", "corpus_max_words", "mixed_precision")
    assert {k: gpu[k] for k in same} == {k: full[k] for k in same}
    differing = {k for k in gpu["finetune"] if gpu["finetune"][k] != full["finetune"][k]}
    assert differing == {"max_steps", "eval_steps", "save_steps"}


def test_stable_adds_the_same_levers_to_the_cpu_and_the_gpu_rule():
    """``--stable`` is one change made to either rule: one unmuxed layer and consistency on the
    sentence tasks; on the CPU also the shorter grid (900 steps, 150 of them warm-up, weight 8), on
    the GPU its three times longer fine-tuning as it was, at weight 4. Nothing else."""
    from muxplm.bench.cli import _reproduction_preset
    from muxplm.cli import build_parser

    for base, stable, weight, finetune in (("full", "stable", 8.0, {"max_steps": 900, "warmup_steps": 150}),
                                            ("gpu", "gpu-stable", 4.0, {})):
        plain, levers = resolve_recipe(base), resolve_recipe(stable)
        assert levers["retrieval"] == {**plain["retrieval"], "num_unmuxed_layers": 1}
        assert levers["finetune"] == {**plain["finetune"], **finetune}
        for task in ("sentiment", "trec"):
            assert levers["task_finetune"][task] == {**plain["task_finetune"][task], "consistency_weight": weight}
        assert levers["task_finetune"]["ner"] == plain["task_finetune"]["ner"]
        # the larger size's trec weight on the CPU (the next test); its rates unchanged
        small = copy.deepcopy(levers["sizes"]["small"])
        assert small["task_finetune"].pop("trec", None) == ({"consistency_weight": 12.0} if stable == "stable" else None)
        assert {**levers["sizes"], "small": small} == plain["sizes"]
        changed = ("retrieval", "finetune", "task_finetune", "sizes")
        assert {k: v for k, v in levers.items() if k not in changed} == \
            {k: v for k, v in plain.items() if k not in changed}
    assert resolve_recipe("gpu-stable")["finetune"]["max_steps"] == 4500
    assert resolve_recipe("full")["finetune"]["max_steps"] == 1500  # the rule without the levers keeps its grid

    def preset(*flags):
        args = build_parser().parse_args(["reproduce", *flags])
        return _reproduction_preset(args.preset, args.stable)

    assert (preset(), preset("--full"), preset("--stable"), preset("--full", "--stable"),
            preset("--gpu", "--stable")) == ("quick", "full", "stable", "stable", "gpu-stable")
    with pytest.raises(SystemExit, match="--stable applies to --full or --gpu, not --quick"):
        preset("--quick", "--stable")


def test_a_row_of_its_own_size_fine_tunes_at_that_sizes_rate(monkeypatch, tmp_path):
    """The full rule's learning rates are the tiny size's; BERT-small stays at chance with them, so a
    row of the larger size takes its size's rates (over the task's), everything else unchanged."""
    from muxplm.bench import reproduce

    monkeypatch.setattr(reproduce.run, "_run", lambda config: config)
    recipe = resolve_recipe("full")

    def settings(key, task):
        return finetune_model(key, task, str(tmp_path / "init"), recipe, tmp_path, None)[1]

    assert (settings("bert", "sentiment").lr, settings("bert", "ner").lr) == (2e-4, 1e-3)
    for key in ("bert-small", "mux-bert-small-2"):
        sentiment, ner = settings(key, "sentiment"), settings(key, "ner")
        assert (sentiment.lr, ner.lr) == (1e-4, 5e-4)
        assert sentiment.sentence_pooling == "mean" and sentiment.max_steps == settings("bert", "sentiment").max_steps
    recipe["sizes"] = {}  # without a rate of its own, the size takes the rule's
    assert settings("bert-small", "ner").lr == 1e-3


def test_the_stable_cpu_rule_gives_the_larger_size_more_consistency_on_trec(monkeypatch, tmp_path):
    """On the CPU `--stable` fine-tunes the larger size's MUX row on trec at weight 12 (8 elsewhere);
    its N = 1 row has no composition and drops the weight; the GPU's stable rule is unchanged."""
    from muxplm.bench import reproduce

    monkeypatch.setattr(reproduce.run, "_run", lambda config: config)

    def weight(preset, key, task):
        return finetune_model(key, task, str(tmp_path / "init"), resolve_recipe(preset), tmp_path, None)[1].consistency_weight

    assert weight("stable", "mux-bert-small-2", "trec") == 12.0
    assert weight("stable", "mux-bert-small-2", "sentiment") == weight("stable", "mux-bert-2", "trec") == 8.0
    assert weight("stable", "bert-small", "trec") in (None, 0.0)  # the N = 1 row: nothing to agree over
    small = resolve_recipe("stable")["sizes"]["small"]
    assert small["finetune"] == {"lr": 1e-4} and small["task_finetune"]["ner"] == {"lr": 5e-4}  # the size's rates kept
    assert weight("gpu-stable", "mux-bert-small-2", "trec") == weight("gpu-stable", "mux-bert-2", "trec") == 4.0


def test_a_row_of_its_own_size_pre_trains_by_that_sizes_settings(monkeypatch, tmp_path):
    """``sizes`` reaches the priming and pre-training stages too, for that size's rows only."""
    from muxplm.bench import reproduce

    monkeypatch.setattr(reproduce.run, "_run", lambda config: config)
    recipe = resolve_recipe("full")
    recipe["sizes"] = {"small": {"pretrain": {"max_steps": 7, "lr": 3e-5, "warmup_ratio": 0.5},
                                 "retrieval": {"max_steps": 9}}}

    def stages(key):
        return reproduce.pretrain_model(key, recipe, tmp_path, None)[1]

    plain, own = stages("mux-bert-2"), stages("mux-bert-small-2")
    assert (plain["retrieval"].max_steps, plain["mlm"].max_steps) == (recipe["retrieval"]["max_steps"],
                                                                      recipe["pretrain"]["max_steps"])
    assert (own["retrieval"].max_steps, own["mlm"].max_steps, own["mlm"].lr, own["mlm"].warmup_ratio) == (9, 7, 3e-5, 0.5)
    assert plain["mlm"].warmup_ratio == recipe["warmup_ratio"]
    assert own["retrieval"].lr == plain["retrieval"].lr and own["mlm"].batch_size == plain["mlm"].batch_size
    assert own["mlm"].retrieval_loss_weight == plain["mlm"].retrieval_loss_weight  # the N > 1 settings kept
    assert stages("bert-small")["mlm"].max_steps == 7 and stages("bert")["mlm"].max_steps == recipe["pretrain"]["max_steps"]
    assert "retrieval" not in stages("bert-small")  # an N = 1 row is not primed unless its size asks
    recipe["sizes"]["small"]["retrieval"]["prime_plain_rows"] = True
    primed = stages("bert-small")
    assert primed["retrieval"].num_instances == 1 and primed["retrieval"].max_steps == 9
    assert primed["mlm"].init == primed["retrieval"].output_dir
    # and keeps the retrieval term through its pre-training, which a plain N = 1 row does not have
    assert primed["mlm"].retrieval_loss_weight == plain["mlm"].retrieval_loss_weight > 0
    assert stages("bert")["mlm"].retrieval_loss_weight is None
    assert "retrieval" not in stages("bert") and stages("mux-bert-small-2")["retrieval"].max_steps == 9


def test_rerun_reuses_finished_stages_and_retrains_what_changed(micro_run, tmp_path):
    """A second run reuses every stage trained with the same settings; a changed setting
    retrains that stage, everything downstream of it, and its evaluations, and nothing else."""
    import shutil

    out, _ = micro_run
    runs = tmp_path / "runs"
    shutil.copytree(out.parent / "runs", runs)

    def rerun(overrides):
        return run_reproduction(tmp_path / "out", "quick", models=["bert", "mux-bert-2"], tasks=["sentiment", "ner"],
                                seeds=2, overrides=overrides, runs_dir=runs, log=lambda *_: None)

    def trained(stage):
        path = runs / stage if stage.endswith(".json") else runs / stage / "train_results.json"
        return path.stat().st_mtime_ns

    before = {stage: trained(stage) for stage in ("bert/2-pretrain", "bert/3-ner", "mux-bert-2/1-retrieval",
                                                  "mux-bert-2/2-pretrain", "mux-bert-2/3-ner",
                                                  "mux-bert-2/eval-ner.json")}
    assert all("wall_minutes" in row for row in micro_run[1]["rows"].values())
    results = rerun(MICRO)
    assert {stage: trained(stage) for stage in before} == before
    # every stage marked reused, so no row claims this run's few seconds as its wall time
    assert all(stage["reused"] for key in results["models"] for name, stage in results["training"][key].items()
               if name != "wall_seconds")
    assert not any("wall_minutes" in row for row in results["rows"].values())
    assert "| train min | wall min |" not in (tmp_path / "out" / "table.md").read_text()
    # The auxiliary retrieval loss only concerns MUX models: BERT keeps all its stages. (Unset,
    # the tiny recipe gives MUX pre-training r = 0.2: another value is a change.)
    rerun({**MICRO, "pretrain.retrieval_loss_weight": 0.5})
    after = {stage: trained(stage) for stage in before}
    for stage in ("bert/2-pretrain", "bert/3-ner", "mux-bert-2/1-retrieval"):
        assert after[stage] == before[stage], stage
    for stage in ("mux-bert-2/2-pretrain", "mux-bert-2/3-ner", "mux-bert-2/eval-ner.json"):
        assert after[stage] > before[stage], stage
    saved = json.loads((runs / "mux-bert-2" / "2-pretrain" / "train_config.json").read_text())
    assert saved["retrieval_loss_weight"] == 0.5
    # An explicit None that the recipe does not fill is a value: max_train_examples=None = all data.
    rerun({**MICRO, "pretrain.retrieval_loss_weight": 0.5, "finetune.max_train_examples": None})
    assert trained("bert/2-pretrain") == after["bert/2-pretrain"]
    assert trained("bert/3-ner") > after["bert/3-ner"]
    assert json.loads((runs / "bert" / "2-pretrain" / "train_config.json").read_text())["retrieval_loss_weight"] is None


def test_a_stage_is_replaced_only_once_its_new_version_has_finished(micro_run, tmp_path, monkeypatch):
    """A retrained stage trains beside the old one, which a stop midway leaves whole and reusable;
    a finished stage keeps its final model, not its checkpoints; a stop between the two renames of
    the swap is completed by the next run."""
    import shutil

    from muxplm.bench import reproduce

    out, _ = micro_run
    runs = tmp_path / "runs"
    shutil.copytree(out.parent / "runs", runs)
    assert list(runs.glob("*/*/model.safetensors")) and not list(runs.glob("*/*/checkpoint-*"))

    def rerun(overrides):
        run_reproduction(tmp_path / "out", "quick", models=["bert", "mux-bert-2"], tasks=["sentiment", "ner"],
                         seeds=2, overrides=overrides, runs_dir=runs, log=lambda *_: None)

    def stopped(config):
        Path(config.output_dir).mkdir(parents=True)
        (Path(config.output_dir) / "log.jsonl").write_text("{}\n")
        raise KeyboardInterrupt

    stage = runs / "mux-bert-2" / "2-pretrain"
    before = (stage / "train_results.json").stat().st_mtime_ns
    with monkeypatch.context() as patch:
        patch.setattr(reproduce.run, "run_stage", stopped)
        with pytest.raises(KeyboardInterrupt):
            rerun({**MICRO, "pretrain.retrieval_loss_weight": 0.5})
    assert (runs / "mux-bert-2" / ".2-pretrain.training" / "log.jsonl").is_file()
    assert (stage / "train_results.json").stat().st_mtime_ns == before
    # Stopped after training, between the swap's renames: the new stage is published, not retrained.
    ner = runs / "bert" / "3-ner"
    trained = (ner / "train_results.json").stat().st_mtime_ns
    ner.rename(runs / "bert" / ".3-ner.training")
    rerun(MICRO)  # the old settings: every stage reused, the debris cleared
    assert (stage / "train_results.json").stat().st_mtime_ns == before
    assert (ner / "train_results.json").stat().st_mtime_ns == trained
    assert not list(runs.glob("*/.*.training"))


def test_a_stopped_stage_continues_from_its_checkpoint_only_with_its_settings_and_code(tmp_path, monkeypatch):
    """A stage stopped midway (a session's end) continues from its last checkpoint to the weights
    an uninterrupted run ends with; asked with another setting, or under other code, it starts over."""
    import torch
    from safetensors.torch import load_file

    from muxplm import provenance
    from muxplm.bench import reproduce
    from muxplm.training import TrainConfig
    from muxplm.training.checkpoint import run_record
    from muxplm.training.trainer import MuxTrainer

    settings = dict(stage="mlm", preset="tiny", max_length=32, batch_size=8, corpus_sources=["moby_dick"],
                    corpus_max_words=6000, logging_steps=1, progress=False, max_steps=6, save_steps=2,
                    save_total_limit=1, model_overrides={"num_hidden_layers": 2, "hidden_size": 64,
                                                         "num_attention_heads": 2, "intermediate_size": 128})
    whole = tmp_path / "whole"
    reproduce._run(TrainConfig(output_dir=str(whole), **settings))
    save = MuxTrainer._save_checkpoint

    def stop_at_step_4(self, model, trial):
        save(self, model, trial)
        if self.state.global_step == 4:
            raise KeyboardInterrupt

    def stopped(name, **changed):
        with monkeypatch.context() as patch:
            patch.setattr(MuxTrainer, "_save_checkpoint", stop_at_step_4)
            with pytest.raises(KeyboardInterrupt):
                reproduce._run(TrainConfig(output_dir=str(tmp_path / name), **settings, **changed))
        assert (tmp_path / f".{name}.training" / "checkpoint-4").is_dir() and not (tmp_path / name).exists()
        return tmp_path / name

    stage = stopped("stage")
    before_stop = run_record(tmp_path / ".stage.training" / "checkpoint-4")["train_seconds"]
    summary = reproduce._run(TrainConfig(output_dir=str(stage), **settings))
    assert summary["resumed_from_step"] == 4 and summary["final_step"] == 6
    # its training time is both sessions', to the checkpoint it resumed from
    assert before_stop > 0 and summary["train_seconds"] == pytest.approx(before_stop + summary["session_seconds"])
    expected, resumed = load_file(whole / "model.safetensors"), load_file(stage / "model.safetensors")
    assert expected.keys() == resumed.keys() and all(torch.equal(expected[k], resumed[k]) for k in expected)
    assert not list(stage.glob("checkpoint-*")) and not (tmp_path / ".stage.training").exists()

    other = stopped("other", lr=1e-3)
    assert reproduce._run(TrainConfig(output_dir=str(other), **settings, lr=2e-3))["resumed_from_step"] == 0
    newer = stopped("newer")
    monkeypatch.setattr(provenance, "source_hash", lambda: "other code")
    assert reproduce._run(TrainConfig(output_dir=str(newer), **settings))["resumed_from_step"] == 0


@pytest.fixture
def stage_settings(monkeypatch):
    """Every stage's TrainConfig, checked valid, from a reproduction that trains, scores and times
    nothing (the recipes too long to run in the suite)."""
    from muxplm.bench import reproduce
    from muxplm.training.config import validate

    stages = []

    def fake_run(config):
        validate(config)
        stages.append(config)
        folder = Path(config.output_dir)
        folder.mkdir(parents=True, exist_ok=True)  # what the fine-tuning reads of its start point
        (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 6,
                                                        "num_unmuxed_layers": config.num_unmuxed_layers or 0}))
        return {"final_step": config.max_steps, "final_loss": 1.0}

    def fake_evaluate(key, task, checkpoint, recipe, root, ensemble):
        n = reproduce.MODELS[key].num_instances
        seeds = list(range(recipe["seeds"] if n > 1 else 1))
        stats = {"mean": 0.5, "std": 0.0, "max": 0.5, "min": 0.5}
        return {"num_instances": n, "main_metric": "accuracy", "seeds": seeds, "summary": {"main": stats},
                "per_seed": [{"main": 0.5}] * len(seeds), "ensemble": {"main": 0.6} if ensemble else None}

    def fake_throughput(checkpoints, **kwargs):
        return {key: {"samples_per_s": 100.0 * reproduce.MODELS[key].num_instances} for key in checkpoints}

    monkeypatch.setattr(reproduce.run, "_run", fake_run)
    monkeypatch.setattr(reproduce.run, "evaluate", fake_evaluate)
    monkeypatch.setattr(reproduce.run, "measure_side_by_side", fake_throughput)
    return stages


@pytest.mark.parametrize("preset", ["quick", "full", "gpu", "convert"])
def test_every_preset_builds_valid_stage_settings_for_every_row(preset, tmp_path, stage_settings):
    """The recipes too long to run in the suite (the full CPU one, the GPU one) still hand every
    model's every stage settings that the training code accepts, with the retrieval loss only
    where there is something to retrieve."""
    from muxplm.bench import reproduce

    stages = stage_settings
    results = run_reproduction(tmp_path, preset, device="cpu", log=lambda *_: None)
    if preset == "convert":
        assert list(results["rows"]) == reproduce.CONVERT_MODELS
        by_dir = {(Path(c.output_dir).parent.name, Path(c.output_dir).name): c for c in stages}
        for key in reproduce.CONVERT_MODELS[1:]:
            n = reproduce.MODELS[key].num_instances
            convert = by_dir[(key, "1-convert")]
            assert convert.stage == "retrieval" and convert.init_encoder and convert.teacher is None
            assert convert.num_instances == n and convert.num_unmuxed_layers == 2
            assert Path(by_dir[(key, "3-sentiment")].init).name == "1-convert"
        # One fine-tuning length for every row: the plain baseline trains as long as the MUX rows.
        assert len({c.num_epochs for c in stages if c.stage == "finetune"}) == 1
        assert results["rows"]["convert-minilm-2"]["baseline_used"] == "minilm"
        assert by_dir[("minilm", "3-ner")].lr == 5e-4 and by_dir[("minilm", "3-pos")].encoder_lr == 5e-5
        # sentence tasks: the encoder at 1e-4, for the plain row and the converted ones alike
        assert {by_dir[(key, "3-sentiment")].encoder_lr for key in reproduce.CONVERT_MODELS} == {1e-4}
        return
    assert set(results["rows"]) == set(reproduce.DEFAULT_MODELS)
    by_dir = {(Path(c.output_dir).parent.name, Path(c.output_dir).name): c for c in stages}
    recipe = resolve_recipe(preset)
    for key, model in reproduce.MODELS.items():
        if key not in reproduce.DEFAULT_MODELS:
            continue
        pretrain = by_dir.get((key, "2-pretrain"))
        if model.warm_start and model.num_instances == 1:
            assert pretrain is None  # plain MiniLM is fine-tuned from the packaged encoder
            continue
        assert ((key, "1-retrieval") in by_dir) == (model.num_instances > 1), key
        if not model.pretrained:  # T-MUX, DataMUX recipe: fine-tuned from the primed model
            assert pretrain is None
            assert all(Path(by_dir[(key, f"3-{t}")].init).name == "1-retrieval" for t in reproduce.DEFAULT_TASKS)
            continue
        weight = recipe["pretrain"]["retrieval_loss_weight"] if model.num_instances > 1 else None
        assert pretrain.retrieval_loss_weight == weight, key
        for task in reproduce.DEFAULT_TASKS:
            stage = by_dir[(key, f"3-{task}")]
            assert stage.task == task and Path(stage.init).name == "2-pretrain"
            baseline = by_dir[("bert", f"3-{task}")]
            for setting in ("num_epochs", "max_steps", "eval_steps", "load_best_at_end"):  # one rule for all
                assert getattr(stage, setting) == getattr(baseline, setting), (key, task, setting)
            # The full recipe gives the sentence tasks all their data (the warm-start rows keep their cap).
            if preset == "full" and task == "sentiment":
                assert stage.max_train_examples == (2000 if model.warm_start else None)
                assert stage.load_best_at_end and stage.eval_steps == stage.save_steps < stage.max_steps


@pytest.mark.parametrize("asked, trained", [("bf16", "bf16"), ("fp16", "no"), ("auto", "no"), ("no", "no")])
def test_a_cpu_run_trains_every_stage_in_bf16_only_where_asked(asked, trained, tmp_path, stage_settings, native_bf16):
    """bf16 autocast is a CPU's half precision (AVX-512 BF16 runs it natively); a GPU recipe's fp16
    or auto trains in float32 there, and timing stays float32 either way."""
    results = run_reproduction(tmp_path, "stable", models=["bert", "mux-bert-2"], tasks=["trec"], device="cpu",
                               overrides={"mixed_precision": asked}, log=lambda *_: None)
    assert {c.mixed_precision for c in stage_settings} == {trained} and len(stage_settings) == 5  # BERT: 2 stages, MUX-BERT: 3
    assert results["recipe"]["mixed_precision"] == trained and results["recipe"]["throughput"]["dtype"] == "float32"


def test_bf16_on_a_cpu_without_native_bf16_is_refused_before_any_stage(tmp_path, stage_settings, monkeypatch):
    from muxplm import devices

    monkeypatch.setattr(devices, "cpu_runs_bf16_natively", lambda: False)
    with pytest.raises(ValueError, match=r'mixed_precision="bf16" on this CPU: it has no native bf16'):
        run_reproduction(tmp_path, "stable", models=["bert"], tasks=["trec"], device="cpu",
                         overrides={"mixed_precision": "bf16"}, log=lambda *_: None)
    assert stage_settings == []
    run_reproduction(tmp_path, "stable", models=["bert"], tasks=["trec"], device="cpu",
                     overrides={"mixed_precision": "auto"}, log=lambda *_: None)  # a GPU recipe's auto: float32
    assert {c.mixed_precision for c in stage_settings} == {"no"}


def test_a_stage_is_reused_only_with_every_setting_and_the_code_it_ran(tmp_path):
    from muxplm.bench.reproduce import _finished_with
    from muxplm.provenance import source_hash
    from muxplm.training import TrainConfig
    from muxplm.training.stages import resolve_run

    folder = tmp_path / "stage"
    folder.mkdir()
    asked = dict(output_dir=str(folder), task="sentiment", preset="tiny")
    trained = TrainConfig(**asked, lr=0.5, num_epochs=99, batch_size=999, consistency_weight=9)
    (folder / "train_config.json").write_text(json.dumps(resolve_run(trained)[0].to_dict()))
    (folder / "train_results.json").write_text(json.dumps({"code": {"source_hash": source_hash()}}))
    assert _finished_with(TrainConfig(**asked, lr=0.5, num_epochs=99, batch_size=999, consistency_weight=9))
    assert _finished_with(TrainConfig(**asked, lr=0.5, num_epochs=99, batch_size=999, consistency_weight=9,
                                      eval_steps=7, progress=False))  # bookkeeping only
    assert not _finished_with(TrainConfig(**asked))  # the recipe's defaults are other settings
    for differing in (dict(lr=0.4), dict(num_epochs=98), dict(batch_size=998), dict(consistency_weight=8),
                      dict(seed=1), dict(max_train_examples=10)):
        settings = {**dict(lr=0.5, num_epochs=99, batch_size=999, consistency_weight=9), **differing}
        assert not _finished_with(TrainConfig(**asked, **settings)), differing
    # Where the stage ends with its best evaluated weights, the evaluation and save steps pick
    # them: no longer bookkeeping.
    best = dict(lr=0.5, num_epochs=99, load_best_at_end=True, eval_steps=10, save_steps=10)
    (folder / "train_config.json").write_text(json.dumps(resolve_run(TrainConfig(**asked, **best))[0].to_dict()))
    assert _finished_with(TrainConfig(**asked, **best))
    assert not _finished_with(TrainConfig(**asked, **{**best, "eval_steps": 20, "save_steps": 20}))
    (folder / "train_config.json").write_text(json.dumps(resolve_run(trained)[0].to_dict()))
    (folder / "train_results.json").write_text(json.dumps({"code": {"source_hash": "other code"}}))
    assert not _finished_with(TrainConfig(**asked, lr=0.5, num_epochs=99, batch_size=999, consistency_weight=9))
    (folder / "train_results.json").write_text("{}")  # trained before the code was recorded
    assert not _finished_with(TrainConfig(**asked, lr=0.5, num_epochs=99, batch_size=999, consistency_weight=9))


def test_a_warm_started_stage_is_reused_only_from_the_same_encoder_files(tmp_path):
    """Two encoders with one config and folder name but other weights are other starting points;
    a stage that was trained from one is retrained for the other, wherever each is installed."""
    from transformers import BertConfig

    from muxplm.bench.reproduce import _finished_with
    from muxplm.provenance import folder_hash, source_hash
    from muxplm.training import TrainConfig
    from muxplm.training.stages import resolve_run

    encoders = []
    for place, weights in (("a", b"one"), ("b", b"two")):
        encoder = tmp_path / place / "encoder"
        BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64).save_pretrained(encoder)
        (encoder / "model.safetensors").write_bytes(weights)
        encoders.append(encoder)
    folder = tmp_path / "stage"
    folder.mkdir()

    def asked(encoder):
        return TrainConfig(output_dir=str(folder), stage="retrieval", init_encoder=str(encoder), num_instances=2,
                           lr=0.5, max_steps=3, batch_size=4)

    (folder / "train_config.json").write_text(json.dumps(resolve_run(asked(encoders[0]))[0].to_dict()))
    summary = {"code": {"source_hash": source_hash()}, "init_encoder_sha256": folder_hash(encoders[0])}
    (folder / "train_results.json").write_text(json.dumps(summary))
    assert _finished_with(asked(encoders[0]))
    assert not _finished_with(asked(encoders[1]))  # the same config.json, other weights
    (encoders[0] / "model.safetensors").write_bytes(b"changed")
    assert not _finished_with(asked(encoders[0]))
    # A stage that did not start from an encoder is not one that did.
    fresh = TrainConfig(output_dir=str(folder), stage="retrieval", preset="tiny", num_instances=2, lr=0.5, max_steps=3,
                        batch_size=4)
    assert not _finished_with(fresh)


def test_the_paper_group_names_every_system_at_every_n():
    assert resolve_models(["paper"], "full") == PAPER_MODELS
    assert resolve_models(["bert", "paper"], "full") == PAPER_MODELS  # each model once, in order
    for family in ("mux-bert", "mux-electra", "tmux", "prefix", "contextual"):
        assert {MODELS[f"{family}-{n}"].num_instances for n in (2, 5, 10)} == {2, 5, 10}
    assert MODELS["contextual-5"].mux_type == "contextual" and MODELS["prefix-5"].demux_type == "prefix"
    assert not MODELS["tmux-10"].pretrained and MODELS["prefix-10"].pretrained
    assert resolve_models(None, "convert")[0] == "minilm"
    with pytest.raises(ValueError, match="unknown model.*or a group \\(default, convert, paper\\)"):
        resolve_models(["nope"], "full")


def test_a_larger_size_trains_its_own_shape_against_its_own_baseline(tmp_path):
    results = run_reproduction(tmp_path / "out", "quick", models=["bert-small", "mux-bert-small-2"], tasks=["sentiment"],
                               seeds=2, overrides=MICRO, runs_dir=tmp_path / "runs", log=lambda *_: None)
    for key in ("bert-small", "mux-bert-small-2"):
        config = json.loads((tmp_path / "runs" / key / "3-sentiment" / "config.json").read_text())
        # the small size, not the micro recipe's 1 x 32 override of the tiny one
        assert (config["num_hidden_layers"], config["hidden_size"]) == (4, 512)
    mux, plain = (results["evaluations"][k]["sentiment"]["summary"]["main"]["mean"] for k in ("mux-bert-small-2", "bert-small"))
    assert results["rows"]["mux-bert-small-2"]["retention"]["sentiment"] == pytest.approx(mux / plain)
    # never measured against the tiny BERT row when its own is missing
    assert _baseline_of("mux-bert-small-2", {"bert": {}}) is None and _baseline_of("mux-bert-5", {"bert": {}}) == "bert"


def test_parts_run_apart_merge_into_one_table_timed_side_by_side(micro_run, tmp_path):
    """Shards of one reproduction run in different sessions (their checkpoints gone) merge into
    one table: scores and training summaries as the parts measured them, retention against a
    baseline from another part, every row timed again from its kept config."""
    import shutil

    from muxplm.bench.reproduce import merge_reproductions
    from muxplm.training import load_classifier
    from muxplm.training.models import classifier_class

    first, first_results = micro_run
    assert {p.name for p in (first / "configs").iterdir()} == {
        "bert-sentence", "bert-token", "mux-bert-2-sentence", "mux-bert-2-token"}
    second = tmp_path / "second"
    run_reproduction(second, "quick", models=["mux-bert-5"], tasks=["sentiment", "ner"], seeds=2, overrides=MICRO,
                     runs_dir=tmp_path / "runs", log=lambda *_: None)
    shutil.rmtree(tmp_path / "runs")  # the session's checkpoints are gone; the results folders stay
    merged = merge_reproductions([second, first], tmp_path / "merged", log=lambda *_: None)
    assert merged["models"] == ["bert", "mux-bert-2", "mux-bert-5"]  # the paper's order
    assert merged["evaluations"]["bert"] == first_results["evaluations"]["bert"]
    rows = merged["rows"]
    assert rows["mux-bert-5"]["baseline_used"] == "bert"
    assert rows["mux-bert-5"]["scores"]["sentiment"]["mean"] / rows["bert"]["scores"]["sentiment"]["mean"] == \
        pytest.approx(rows["mux-bert-5"]["retention"]["sentiment"])
    for head in ("sentence", "token"):
        assert set(merged["throughput"][head]) == {"bert", "mux-bert-2", "mux-bert-5"}
        assert all(m["samples_per_s"] > 0 for m in merged["throughput"][head].values())
    assert (tmp_path / "merged" / "table.md").read_text().count("\n") == 2 + 3
    # Its log names its own minutes as the timing's, not the reproduction's.
    assert report_text(merged).splitlines()[0].endswith(
        f"3 models x 2 tasks, merged from 2 parts and timed in {merged['wall_seconds'] / 60:.1f} min")
    assert report_text(first_results).splitlines()[0].endswith(f"tasks, {first_results['wall_seconds'] / 60:.1f} min")
    assert (tmp_path / "merged" / "configs" / "mux-bert-5-token" / "config.json").is_file()  # merged again later
    # A row rebuilt from its kept config has its checkpoint's architecture (so its speed).
    kept = first / "configs" / "mux-bert-2-token"
    fresh = classifier_class(kept)(classifier_class(kept).config_class.from_pretrained(kept))
    trained = load_classifier(first.parent / "runs" / "mux-bert-2" / "3-ner")[0]
    assert {k: v.shape for k, v in fresh.state_dict().items()} == {k: v.shape for k, v in trained.state_dict().items()}


def test_a_merge_times_by_its_own_settings_and_changes_nothing_else(micro_run, tmp_path):
    """``--merge ... --set throughput.trials=5 --set throughput.statistic=median``: the merge's
    timing over the parts' recipe; any other setting is the parts' own and is refused."""
    import statistics

    from muxplm.bench.reproduce import merge_reproductions
    from muxplm.cli import main

    first, first_results = micro_run
    merged = merge_reproductions([first], tmp_path / "merged", log=lambda *_: None,
                                 timing=dict(trials=5, statistic="median"))
    assert merged["timing"]["trials"] == 5 and merged["timing"]["statistic"] == "median"
    assert merged["recipe"] == first_results["recipe"]  # what the parts trained by, unchanged
    for by_key in merged["throughput"].values():
        for measured in by_key.values():
            assert len(measured["trials"]) == 5
            assert measured["samples_per_s"] == statistics.median(measured["trials"])
    with pytest.raises(ValueError, match="sets only its timing"):
        merge_reproductions([first], tmp_path / "x", log=lambda *_: None, timing=dict(lr=0.1))
    with pytest.raises(ValueError, match="unknown statistic"):
        merge_reproductions([first], tmp_path / "x", log=lambda *_: None, timing=dict(statistic="mode"))
    assert main(["reproduce", "--merge", str(first), "--output-dir", str(tmp_path / "x"),
                 "--set", "finetune.lr=0.1"]) == 2  # the CLI's one-line error
    assert not (tmp_path / "x").exists()


def test_a_merge_refuses_parts_of_different_reproductions(micro_run, tmp_path):
    import shutil

    from muxplm.bench.reproduce import merge_reproductions

    first, _ = micro_run

    def part(name, edit):
        folder = tmp_path / name
        shutil.copytree(first, folder)
        results = json.loads((folder / "results.json").read_text())
        results["models"] = ["mux-bert-5"]
        for field in ("evaluations", "training"):
            results[field] = {"mux-bert-5": results[field]["mux-bert-2"]}
        shutil.copytree(folder / "configs" / "mux-bert-2-sentence", folder / "configs" / "mux-bert-5-sentence")
        shutil.copytree(folder / "configs" / "mux-bert-2-token", folder / "configs" / "mux-bert-5-token")
        edit(results, folder)
        (folder / "results.json").write_text(json.dumps(results))
        return folder

    def merge(other):
        merge_reproductions([first, other], tmp_path / "merged", log=lambda *_: None)

    with pytest.raises(ValueError, match=r"differ in their recipe \(finetune\)"):
        merge(part("recipe", lambda r, _: r["recipe"]["finetune"].update(max_steps=3)))
    with pytest.raises(ValueError, match="mux-bert-2 on sentiment is in more than one part"):
        merge(part("twice", lambda r, _: r.update(models=["mux-bert-2"], **{
            field: {"mux-bert-2": r[field]["mux-bert-5"]} for field in ("evaluations", "training")})))

    def other_code(results, _):
        for stage in results["training"]["mux-bert-5"].values():
            if isinstance(stage, dict) and stage.get("code"):
                stage["code"]["source_hash"] = "0" * 64
    with pytest.raises(ValueError, match="trained by different code.*CODE=COMMIT"):
        merge(part("code", other_code))
    with pytest.raises(ValueError, match="mux-bert-5-token/config.json is missing"):
        merge(part("configs", lambda _, folder: shutil.rmtree(folder / "configs" / "mux-bert-5-token")))
    merge(part("fine", lambda *_: None))  # the same part unedited merges


def test_a_merge_times_rows_trained_on_a_gpu_on_the_device_asked_for(micro_run, tmp_path):
    """Rows trained on a GPU (their recipe's device) can be timed on the CPU that serves them."""
    import shutil

    from muxplm.bench.reproduce import merge_reproductions

    first, _ = micro_run
    trained_on_gpu = tmp_path / "gpu-part"
    shutil.copytree(first, trained_on_gpu)
    results = json.loads((trained_on_gpu / "results.json").read_text())
    results["recipe"]["device"] = "cuda"
    results["recipe"]["throughput"]["dtype"] = "bfloat16"  # how the GPU recipe times
    (trained_on_gpu / "results.json").write_text(json.dumps(results))
    merged = merge_reproductions([trained_on_gpu], tmp_path / "merged", log=lambda *_: None, device="cpu")
    assert merged["environment"]["device"] == "cpu" and merged["recipe"]["device"] == "cuda"
    assert merged["timing"]["device"] == "cpu" and merged["timing"]["dtype"] == "float32"
    assert all(m["samples_per_s"] > 0 for by_key in merged["throughput"].values() for m in by_key.values())


def test_a_row_fine_tuned_a_few_tasks_a_session_merges_when_its_pretraining_is_the_same(micro_run, tmp_path):
    import shutil

    from muxplm.bench.reproduce import merge_reproductions

    first, whole = micro_run

    def part(name, task, head, edit=lambda results: None):
        folder = tmp_path / name
        shutil.copytree(first, folder)
        shutil.rmtree(folder / "configs")
        results = json.loads((folder / "results.json").read_text())
        results["tasks"] = [task]
        for key in results["models"]:
            results["evaluations"][key] = {task: results["evaluations"][key][task]}
            results["training"][key] = {name: stage for name, stage in results["training"][key].items()
                                        if not name.startswith("finetune-") or name == f"finetune-{task}"}
            shutil.copytree(first / "configs" / f"{key}-{head}", folder / "configs" / f"{key}-{head}")
        results["throughput"] = {head: results["throughput"][head]}
        edit(results)
        (folder / "results.json").write_text(json.dumps(results))
        return folder

    sentence, token = part("sentence", "sentiment", "sentence"), part("token", "ner", "token")
    merged = merge_reproductions([sentence, token], tmp_path / "merged", log=lambda *_: None)
    assert merged["tasks"] == ["sentiment", "ner"]
    for key in ("bert", "mux-bert-2"):
        assert merged["evaluations"][key] == whole["evaluations"][key]
        assert set(merged["training"][key]) == set(whole["training"][key])
        # a row made in two parts took the time of both
        assert merged["rows"][key]["wall_minutes"] == pytest.approx(2 * whole["training"][key]["wall_seconds"] / 60)
    assert merged["rows"]["mux-bert-2"]["retention"] == pytest.approx(whole["rows"]["mux-bert-2"]["retention"])
    assert set(merged["throughput"]) == {"sentence", "token"}

    def reused_pretraining(results):  # the token part found the pre-training the sentence part trained
        for key in results["models"]:
            results["training"][key]["mlm"]["reused"] = True
    merged = merge_reproductions([sentence, part("reused", "ner", "token", reused_pretraining)], tmp_path / "m1",
                                 log=lambda *_: None)
    assert not merged["training"]["bert"]["mlm"].get("reused") and "wall_minutes" in merged["rows"]["bert"]
    # a part without a row's wall time (an earlier merge's, or made before wall times were kept)
    unwalled = part("unwalled", "ner", "token", lambda results: results["training"]["bert"].pop("wall_seconds"))
    merged = merge_reproductions([sentence, unwalled], tmp_path / "m4", log=lambda *_: None)
    assert "wall_minutes" not in merged["rows"]["bert"] and "wall_minutes" in merged["rows"]["mux-bert-2"]
    merged = merge_reproductions([unwalled, sentence], tmp_path / "m5", log=lambda *_: None)
    assert "wall_minutes" not in merged["rows"]["bert"]

    def other_pretraining(results):
        results["training"]["mux-bert-2"]["mlm"]["final_loss"] += 0.01
    with pytest.raises(ValueError, match="mux-bert-2's mlm stage in .* ended otherwise"):
        merge_reproductions([sentence, part("other", "ner", "token", other_pretraining)], tmp_path / "m2",
                            log=lambda *_: None)
    with pytest.raises(ValueError, match="bert has no part with ner: every row needs every task"):
        merge_reproductions([sentence, part("mux-only", "ner", "token", lambda r: r.update(models=["mux-bert-2"]))],
                            tmp_path / "m3", log=lambda *_: None)



@pytest.mark.parametrize("script, results_variable, settings", [
    ("run_reproduce_paper.sh", "OUT", {}),
    # on the GPU's script the merge times the rows on DEVICE, here the CPU
    ("run_reproduce_gpu.sh", "RESULTS", {"DEVICE": "cpu", "STABLE": "1"}),
])
def test_the_paper_scripts_merge_the_parts_in_so_far(micro_run, tmp_path, script, results_variable, settings):
    """`MERGE=1 bash benchmarks/run_reproduce_paper.sh` (or `_gpu.sh`): every part under the
    results folder's parts/ in one table, those of earlier runs included."""
    import os
    import shutil
    import subprocess
    import sys

    first, _ = micro_run
    out = tmp_path / "paper"
    shutil.copytree(first, out / "parts" / "shard-0")
    script = Path(__file__).resolve().parents[2] / "benchmarks" / script
    env = dict(os.environ, MERGE="1", **{results_variable: str(out)}, **settings,
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "results.json").read_text())["models"] == ["bert", "mux-bert-2"]
    assert "MUX-BERT N=2" in (out / "table.md").read_text() and "Verdict" in (out / "log.txt").read_text()
    # A merge that fails (here a part without results) leaves the last merge's log as it was.
    (out / "parts" / "shard-1").mkdir()
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "Verdict" in (out / "log.txt").read_text()
    shutil.rmtree(out / "parts" / "shard-1")
    shutil.rmtree(out / "parts" / "shard-0")
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "no parts under" in done.stderr


def test_the_finetune_again_script_runs_a_row_again_with_settings_changed(micro_run, tmp_path):
    """`bash benchmarks/run_stable_finetune_again.sh`: a row's fine-tuning on a task again from its
    encoder, the settings of a variant changed and every other one the row's, scored as the row's
    own run is and plotted beside it."""
    import os
    import subprocess
    import sys

    runs = micro_run[0].parent / "runs"
    out = tmp_path / "again"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "run_stable_finetune_again.sh"
    env = dict(os.environ, ROW="mux-bert-2", VARIANTS="lr=0.0003,seed=1 lr=0.0003", CODE="", RUNS=str(runs), OUT=str(out),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    table = json.loads((runs / "mux-bert-2" / "3-ner" / "train_config.json").read_text())
    again = json.loads((out / "mux-bert-2-lr0.0003-seed1-config.json").read_text())
    assert again["lr"] == 0.0003 != table["lr"] and again["seed"] == 1 != table["seed"]
    assert again["init"] == table["init"]
    changed = ("lr", "seed", "output_dir")
    assert {k: v for k, v in again.items() if k not in changed} == {k: v for k, v in table.items() if k not in changed}
    for name in ("mux-bert-2-lr0.0003-seed1-eval.json", "mux-bert-2-table-eval.json"):
        scored = json.loads((out / name).read_text())
        assert scored["task"] == "ner" and len(scored["seeds"]) == 5 and "changed_across_seeds" in scored
    # the table's run scored by this evaluation gives the figure the table has
    assert json.loads((out / "mux-bert-2-table-eval.json").read_text())["summary"]["main"]["mean"] == \
        pytest.approx(micro_run[1]["evaluations"]["mux-bert-2"]["ner"]["summary"]["main"]["mean"])
    assert (out / "mux-bert-2-table.jsonl").read_text() == (runs / "mux-bert-2" / "3-ner" / "log.jsonl").read_text()
    assert all((out / name).stat().st_size > 0 for name in ("mux-bert-2-lr0.0003-seed1.jsonl", "ner-f1.png",
                                                            "ner-train-loss.png"))
    summary = (out / "ner-again.md").read_text()
    assert "| mux-bert-2-table | (the row's own run) |" in summary
    assert "| mux-bert-2-lr0.0003-seed1 | lr=0.0003, seed=1 |" in summary
    # grouped by the settings other than the seed: the two lr runs, their mean and range
    seeds = [json.loads((out / f"mux-bert-2-{name}-eval.json").read_text()) for name in ("lr0.0003", "lr0.0003-seed1")]
    scores = [100 * scored["summary"]["main"]["mean"] for scored in seeds]
    assert (f"| mux-bert-2 | lr=0.0003 | 2 (0, 1) | {sum(scores) / 2:.1f} ({min(scores):.1f}-{max(scores):.1f}) |"
            in summary)
    done = subprocess.run(["bash", str(script)], env=dict(env, ROW="no-such-row"), capture_output=True, text=True)
    assert done.returncode == 2 and "train the row first" in done.stderr


def test_the_stable_preset_runs_one_unmuxed_layer_and_consistency_on_sentence_tasks_only(tmp_path):
    """``--stable``: MUX rows get one unmuxed layer and composition consistency on sentence tasks;
    token tasks and the N = 1 row (nothing to compose) train as under ``full``."""
    # The micro recipe's values key by key, so the preset's own settings stay where it sets none.
    micro = {}
    for section, values in MICRO.items():
        if isinstance(values, dict) and section != "model_overrides":
            micro.update({f"{section}.{key}": value for key, value in values.items()})
        else:
            micro[section] = values
    run_reproduction(tmp_path / "out", "stable", models=["bert", "mux-bert-2"], tasks=["sentiment", "pos"], seeds=2,
                     overrides=micro, runs_dir=tmp_path / "runs", log=lambda *_: None)

    def trained(key, task):
        folder = tmp_path / "runs" / key / f"3-{task}"
        return json.loads((folder / "train_config.json").read_text()), json.loads((folder / "config.json").read_text())

    assert trained("mux-bert-2", "sentiment")[0]["consistency_weight"] == 8.0
    # the CPU grid's warm-up reaches every fine-tuning, N = 1 and token tasks included
    assert {trained(key, task)[0]["warmup_steps"] for key in ("bert", "mux-bert-2") for task in ("sentiment", "pos")} == {150}
    assert trained("mux-bert-2", "pos")[0]["consistency_weight"] == 0.0
    assert trained("bert", "sentiment")[0]["consistency_weight"] == 0.0
    assert trained("mux-bert-2", "sentiment")[1]["num_unmuxed_layers"] == 1
    assert trained("bert", "sentiment")[1].get("num_unmuxed_layers", 0) == 0
    assert resolve_recipe("full")["retrieval"].get("num_unmuxed_layers") is None  # the table's rule unchanged
