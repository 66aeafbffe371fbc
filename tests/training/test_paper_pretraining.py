"""The paper's pre-training as one command (``pretrain --recipe paper-SIZE``: priming, then MLM or
ELECTRA) and a conversion with continued MLM on mixtures (``convert --mlm-steps S``), at micro
size; the second under two gloo processes, as ``accelerate launch`` runs it on GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from training_utils import MICRO_MODEL, run_cli
from transformers import BertConfig, BertModel

from muxplm.training import TrainConfig, resolve

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains on the built-in corpus

CORPUS = ["--corpus-sources", "moby_dick", "--corpus-max-words", "6000", "--no-progress", "--logging-steps", "1"]


@pytest.mark.parametrize("size, layers, hidden", [("small", 4, 512), ("base", 12, 768), ("large", 24, 1024)])
def test_the_paper_recipes_resolve_to_its_settings(size, layers, hidden):
    recipe = f"paper-{size}"
    for stage, steps, warmup in (("retrieval", 10_000, 1_000), ("mlm", 1_000_000, 10_000), ("electra", 1_000_000, 10_000)):
        config = resolve(TrainConfig(stage=stage, preset=size, recipe=recipe, output_dir="x"), size, 5, world_size=8)
        assert (config.lr, config.max_steps, config.warmup_steps, config.max_length) == (1e-4, steps, warmup, 512)
        assert (config.batch_size, config.adam_eps, config.dropout) == (32, 1e-6, 0.1)  # 256 over 8 processes
    with pytest.raises(ValueError, match="global batch of 256 does not split over 3 processes"):
        resolve(TrainConfig(stage="mlm", preset=size, recipe=recipe, output_dir="x"), size, 5, world_size=3)
    from muxplm.choices import SIZE_PRESETS

    assert (SIZE_PRESETS[size]["num_hidden_layers"], SIZE_PRESETS[size]["hidden_size"]) == (layers, hidden)


def test_pretrain_with_a_paper_recipe_primes_then_pre_trains(tmp_path):
    out = tmp_path / "mux-small"
    done = run_cli("pretrain", "--recipe", "paper-small", "--stage", "mlm", "--num-instances", "2",
                   "--model-overrides", json.dumps(MICRO_MODEL), "--max-length", "32", "--batch-size", "8",
                   "--max-steps", "2", "--output-dir", str(out), *CORPUS)
    assert done.returncode == 0, done.stderr
    primed, trained = (json.loads((folder / "train_config.json").read_text()) for folder in (out / "priming", out))
    assert primed["stage"] == "retrieval" and primed["preset"] == "small" and primed["lr"] == 1e-4
    assert trained["stage"] == "mlm" and trained["init"] == str(out / "priming") and trained["recipe"] == "paper-small"
    config = json.loads((out / "config.json").read_text())
    assert config["training_recipe"] == "paper-small" and config["num_hidden_layers"] == 2  # the primed model's
    # Run again: the finished priming is kept, and the pre-training resumes from its checkpoint.
    again = run_cli("pretrain", "--recipe", "paper-small", "--stage", "mlm", "--num-instances", "2",
                    "--model-overrides", json.dumps(MICRO_MODEL), "--max-length", "32", "--batch-size", "8",
                    "--max-steps", "3", "--output-dir", str(out), "--resume", *CORPUS)
    assert again.returncode == 0, again.stderr
    summary = json.loads((out / "train_results.json").read_text())
    assert (summary["resumed_from_step"], summary["final_step"]) == (2, 3)
    assert json.loads((out / "priming" / "train_results.json").read_text())["final_step"] == 2


def test_convert_with_mlm_steps_under_two_processes(tmp_path):
    torch.manual_seed(0)
    plain = tmp_path / "bert"
    BertModel(BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=128, max_position_embeddings=64), add_pooling_layer=False).save_pretrained(plain)
    out = tmp_path / "converted"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_port", str(31500 + os.getpid() % 1000), "-m", "muxplm.cli", "convert", str(plain),
               "--num-instances", "2", "--output-dir", str(out), "--max-steps", "2", "--mlm-steps", "2",
               "--batch-groups", "4", "--max-length", "32", *CORPUS]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    primed, trained = (json.loads((folder / "train_results.json").read_text()) for folder in (out / "priming", out))
    assert primed["stage"] == "retrieval" and trained["stage"] == "mlm"
    assert primed["world_size"] == trained["world_size"] == 2 and trained["final_step"] == 2
    settings = json.loads((out / "train_config.json").read_text())
    assert (settings["recipe"], settings["lr"], settings["encoder_lr"], settings["retrieval_loss_weight"]) == \
        ("convert", 5e-4, 1e-4, 0.2)
    assert json.loads((out / "config.json").read_text())["training_recipe"] == "convert"  # fine-tunes with its rates
