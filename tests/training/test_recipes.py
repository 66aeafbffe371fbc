"""Every recipe lives in ``muxplm.training.recipes``, by name, and the modules that run one read it
from there."""

from __future__ import annotations

import pytest
from script_testing import load_script

from muxplm.bench import reproduce
from muxplm.training import config, convert, demo, recipes


def test_the_runners_read_the_registry(tmp_path, monkeypatch):
    assert config.stage_defaults is recipes.stage_defaults and config.TRAINING_RECIPES is recipes.TRAINING_RECIPES
    assert recipes.stage_defaults("mlm", "tiny") == recipes.RECIPES["stages/tiny"]["mlm"]
    assert recipes.stage_defaults("mlm", "base") == recipes.RECIPES["stages/paper"]["mlm"]
    assert convert.CONVERT_RECIPE is recipes.RECIPES["convert"]
    assert demo.DEMO_FULL is recipes.RECIPES["demo"] and demo.DEMO_QUICK is recipes.RECIPES["demo/quick"]
    for name, preset in recipes.REPRODUCTION_PRESETS.items():
        assert recipes.RECIPES[f"reproduce/{name}"] is preset
        assert reproduce.resolve_recipe(name)["seeds"] == preset["seeds"]
    # A change to the registry is what the runner uses.
    monkeypatch.setitem(recipes.CONVERT_RECIPE, "max_steps", 7)
    from transformers import BertConfig

    BertConfig(num_hidden_layers=2).save_pretrained(tmp_path)
    assert convert.conversion_settings(tmp_path, 2)["max_steps"] == 7


def test_named_recipes_cover_their_stages_over_the_size_defaults():
    converted = recipes.TRAINING_RECIPES["convert"]("finetune", "sentiment", None)
    assert (converted["lr"], converted["encoder_lr"]) == (2e-4, 1e-4) and converted["batch_size"] == 32
    demo_mlm = recipes.TRAINING_RECIPES["demo"]("mlm", None, None)
    assert demo_mlm["max_steps"] == recipes.DEMO_FULL["mlm"]["max_steps"] and demo_mlm["max_length"] == 48
    for name, stages in recipes.RECIPE_STAGES.items():
        for stage in ("retrieval", "mlm", "electra", "finetune"):
            if stage in stages:
                assert recipes.TRAINING_RECIPES[name](stage, None, None)
            else:
                with pytest.raises(ValueError, match=f"not --stage {stage}"):
                    recipes.TRAINING_RECIPES[name](stage, None, None)


def test_a_recipe_may_set_its_own_values_for_one_n():
    """The demo fine-tunes N = 2 with composition consistency for 6 epochs, N = 5 and N = 1 without
    it for 8 (benchmarks/results/demo/stable.json)."""
    finetune = recipes.DEMO_FULL["finetune"]
    two, five, one = (recipes.for_instances(finetune, n) for n in (2, 5, 1))
    assert (two["num_epochs"], two["consistency_weight"]) == (6.0, recipes.CONSISTENCY_WEIGHT)
    assert (five["num_epochs"], five["consistency_weight"]) == (8.0, 0.0)
    assert one["num_epochs"] == 8.0 and "consistency_weight" not in one
    assert not any("by_instances" in settings for settings in (two, five, one))


def test_get_recipe_hands_out_copies_and_names_the_known_ones():
    mine = recipes.get_recipe("stages/tiny")
    mine["finetune"]["lr"] = 1.0
    assert recipes.TINY_RECIPE["finetune"]["lr"] != 1.0
    with pytest.raises(ValueError, match="stages/tiny"):
        recipes.get_recipe("no-such-recipe")


def test_the_sweeps_read_the_registry(tmp_path, monkeypatch):
    """benchmarks/experiments: the conversion grid's fine-tuning and conversion flags and the recipe
    sweep's warm fine-tuning come from the registry, so changing a recipe there changes the runs."""
    monkeypatch.setitem(recipes.CONVERT_GRID["finetune"], "lr", 3e-4)
    monkeypatch.setitem(recipes.CONVERT_GRID["convert"], "batch_groups", 8)
    monkeypatch.setitem(recipes.CONVERT_GRID["task_epochs"], "trec", 7.0)
    monkeypatch.setitem(recipes.SWEEP_WARM_FINETUNE, "encoder_lr", 1e-5)
    grid, sweep = load_script("convert_grid"), load_script("sweep")  # (a fresh clone has no runs/ to read)
    assert sweep.WARM_FINETUNE["encoder_lr"] == 1e-5 and sweep.GRIDS["convert"]["n1-plain"]["chain"][0]["encoder_lr"] == 1e-5
    # A run that re-runs a stage not on disk loads as a placeholder and is refused when asked for.
    monkeypatch.setattr(sweep, "CURVES", tmp_path / "curves")
    monkeypatch.setitem(sweep.GRIDS, "again", {"run": sweep.reproduced(tmp_path / "nowhere", num_epochs=2.0)})
    with pytest.raises(SystemExit):
        sweep.main(["again"])
    assert not (tmp_path / "curves" / "again" / "run.jsonl").exists()
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "config.json").write_text('{"num_hidden_layers": 6}')
    rows = [grid.Row("plain"), grid.Row("n2-k0", 2, 0, steps=4)]
    jobs = {job.key: job.command for job in grid.jobs_for(rows, ["trec"], str(tmp_path / "plain"), tmp_path / "runs",
                                                           tmp_path / "out", "cpu", smoke=False)}
    assert "--lr=0.0003" in jobs["plain/trec"] and "--num-epochs=7.00" in jobs["plain/trec"]
    assert "--num-epochs=14.00" in jobs["n2-k0/trec"]  # N x the N = 1 row's epochs (K = 0 at N = 2)
    assert "--batch-groups=8" in jobs["n2-k0/convert"] and "--encoder-lr=0.0001" in jobs["n2-k0/convert"]


def test_the_demo_and_the_reproduction_take_every_stage_setting_from_the_registry(tmp_path, monkeypatch):
    """The warm-up and the MUX models' retrieval loss are the recipes' (the demo gives the plain
    model none: it has nothing to retrieve)."""
    monkeypatch.setitem(recipes.DEMO_QUICK, "warmup_ratio", 0.3)
    monkeypatch.setitem(recipes.DEMO_QUICK, "mlm", {**recipes.DEMO_QUICK["mlm"], "retrieval_loss_weight": 0.4})
    trained = []

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(demo, "run_stage", lambda config: trained.append(config) or {})
    monkeypatch.setattr(demo, "evaluate_checkpoint", lambda *args, **kwargs: {})
    monkeypatch.setattr(demo, "_throughput_side_by_side", stop)
    with pytest.raises(Stop):
        demo.run_demo(tmp_path, quick=True, progress=False)
    mlm = {config.num_instances or 2: config for config in trained if config.stage == "mlm"}
    assert mlm[1].retrieval_loss_weight is None and mlm[2].retrieval_loss_weight == 0.4
    assert {config.warmup_ratio for config in trained} == {0.3}

    monkeypatch.setitem(recipes.REPRODUCTION_PRESETS["full"], "warmup_ratio", 0.2)
    recipe = reproduce.resolve_recipe("full")
    assert reproduce._common(recipe, tmp_path, "finetune", 0, False)["warmup_ratio"] == 0.2


def test_the_settings_only_multiplexed_models_use_are_left_out_at_one_instance():
    settings = dict(lr=1e-3, retrieval_loss_weight=0.2, consistency_weight=4.0)
    assert recipes.for_instances(settings, 2) == settings
    assert recipes.for_instances(settings, 1) == dict(lr=1e-3)
    assert settings["retrieval_loss_weight"] == 0.2  # the recipe itself is left as it was
