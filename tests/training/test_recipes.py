"""Every recipe lives in ``muxplm.training.recipes``, by name, and the modules that run one read it
from there."""

from __future__ import annotations

import pytest

from muxplm.bench import reproduce
from muxplm.training import config, convert, demo, recipes


def test_the_runners_read_the_registry(tmp_path, monkeypatch):
    assert config.TINY_RECIPE is recipes.RECIPES["stages/tiny"]
    assert config.PAPER_RECIPE is recipes.RECIPES["stages/paper"]
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


def test_get_recipe_hands_out_copies_and_names_the_known_ones():
    mine = recipes.get_recipe("stages/tiny")
    mine["finetune"]["lr"] = 1.0
    assert recipes.TINY_RECIPE["finetune"]["lr"] != 1.0
    with pytest.raises(ValueError, match="stages/tiny"):
        recipes.get_recipe("no-such-recipe")
