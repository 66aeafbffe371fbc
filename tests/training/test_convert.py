"""``muxplm convert``: a few steps of the conversion recipe on a micro plain BERT, from Python
and from the command line, and the settings it refuses."""

from __future__ import annotations

import json
import math

import pytest
import torch
from training_utils import micro_flags, read_log, run_cli
from transformers import BertConfig, BertModel

from muxplm import MuxBertForRetrieval, MuxBertModel
from muxplm.training.config import build_config, validate
from muxplm.training.convert import conversion_config, convert

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data

FAST = dict(max_steps=3, batch_groups=4, corpus_sources=["moby_dick"], corpus_max_words=6000, logging_steps=1,
            eval_steps=3, save_steps=3, progress=False)


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("plain") / "bert"
    config = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64)
    BertModel(config, add_pooling_layer=False).save_pretrained(path)
    return path


def test_the_recipe_adapts_to_the_encoder_and_takes_overrides(plain_dir, tmp_path):
    config = conversion_config(plain_dir, 5, tmp_path)
    assert config.stage == "retrieval" and config.init_encoder == str(plain_dir) and config.teacher is None
    assert config.mux_key_norm == pytest.approx(math.sqrt(64))
    assert config.num_unmuxed_layers <= 1  # at least one layer of the 2 runs on the mixtures
    BertConfig(num_hidden_layers=6).save_pretrained(tmp_path / "six")  # MiniLM's depth: the measured 3
    assert conversion_config(tmp_path / "six", 5, tmp_path).num_unmuxed_layers == 3
    assert conversion_config(plain_dir, 2, tmp_path, num_unmuxed_layers=0).num_unmuxed_layers == 0
    with pytest.raises(ValueError, match="N >= 2"):
        conversion_config(plain_dir, 1, tmp_path)
    with pytest.raises(ValueError, match="--init/--preset"):
        conversion_config(plain_dir, 2, tmp_path, preset="tiny")


def test_convert_primes_a_mux_model_from_the_plain_weights(plain_dir, tmp_path):
    summary = convert(plain_dir, 2, tmp_path / "mux", teacher=str(plain_dir), **FAST)  # with state distillation
    assert summary["final_step"] == 3
    records = read_log(tmp_path / "mux")
    assert len(records) == 3 and all(-1 <= r["similarity"] <= 1 for r in records)
    model = MuxBertForRetrieval.from_pretrained(tmp_path / "mux")
    assert model.config.num_instances == 2 and model.config.demux_type == "unbind"
    assert model.config.num_unmuxed_layers == 1


def test_a_curriculum_over_n_goes_on_from_a_mux_checkpoint_at_another_n(plain_dir, tmp_path):
    """`muxplm convert MUX_CHECKPOINT --num-instances M`: the N = 2 conversion's encoder and
    demultiplexer layers carry over to N = 3, only the per-instance keys start afresh, and its
    own layout (unmuxed layers, demultiplexer) is kept unless given."""
    from safetensors.torch import load_file

    convert(plain_dir, 2, tmp_path / "n2", num_unmuxed_layers=0, **FAST)
    config = conversion_config(tmp_path / "n2", 3, tmp_path / "n3")
    assert config.init == str(tmp_path / "n2") and config.regroup_instances and config.init_encoder is None
    grown = MuxBertForRetrieval.from_pretrained(tmp_path / "n2", num_instances=3, regroup=True)
    before = load_file(tmp_path / "n2" / "model.safetensors")
    after = grown.state_dict()
    fresh = {k for k in before if before[k].shape != after[k].shape or not torch.equal(before[k], after[k])}
    assert fresh == {"bert.mux.keys", "bert.demux.keys", "bert.demux.unbind_keys"}
    assert after["bert.mux.keys"].shape[0] == 3 and not grown.bert.mux.keys.requires_grad
    with pytest.raises(ValueError, match="regroup=True"):  # without asking, another N is refused
        MuxBertForRetrieval.from_pretrained(tmp_path / "n2", num_instances=3)

    done = run_cli("convert", str(tmp_path / "n2"), "--num-instances", "3", "--output-dir", str(tmp_path / "n3"),
                   "--max-steps", "2", "--batch-groups", "4", "--eval-steps", "2", "--save-steps", "2",
                   "--corpus-sources", "moby_dick", "--corpus-max-words", "6000", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "starts from scratch" not in done.stderr  # a retrieval head has no labels to restart
    model = MuxBertForRetrieval.from_pretrained(tmp_path / "n3")
    assert (model.config.num_instances, model.config.num_unmuxed_layers, model.config.demux_type) == (3, 0, "unbind")
    refused = run_cli("convert", str(tmp_path / "n2"), "--num-instances", "3", "--keep-layers", "1",
                      "--output-dir", str(tmp_path / "x"))
    assert refused.returncode != 0 and "a MUX checkpoint keeps its layers" in refused.stderr


def test_a_curriculum_over_n_restarts_the_per_instance_adapters(plain_dir, tmp_path):
    """An adapter multiplexer's adapters are per instance: regrouped to another N they start afresh
    (as an untrained adapter multiplexer: zero up-projections), the encoder carries over."""
    convert(plain_dir, 2, tmp_path / "n2", num_unmuxed_layers=0, mux_type="adapter", **FAST)
    before = MuxBertForRetrieval.from_pretrained(tmp_path / "n2")
    assert before.bert.mux.adapters["up"].abs().sum() > 0  # trained away from zero
    grown = MuxBertForRetrieval.from_pretrained(tmp_path / "n2", num_instances=3, regroup=True)
    assert grown.config.mux_type == "adapter" and grown.bert.mux.adapters["up"].shape[0] == 3
    assert grown.bert.mux.adapters["up"].abs().sum() == 0
    same = before.bert.encoder.state_dict()
    assert all(torch.equal(value, same[key]) for key, value in grown.bert.encoder.state_dict().items())


def test_convert_cli_then_finetune(plain_dir, tmp_path):
    out = tmp_path / "mux"
    done = run_cli("convert", str(plain_dir), "--num-instances", "2", "--output-dir", str(out), "--max-steps", "2",
                   "--batch-groups", "4", "--eval-steps", "2", "--save-steps", "2", *micro_flags()[6:])
    assert done.returncode == 0, done.stderr
    assert "muxplm finetune --init" in done.stdout
    assert json.loads((out / "config.json").read_text())["num_instances"] == 2
    tuned = run_cli("finetune", "--task", "sentiment", "--init", str(out), "--output-dir", str(tmp_path / "tuned"),
                    "--max-steps", "2", "--max-train-examples", "32", "--max-eval-examples", "16", "--eval-steps", "2",
                    *micro_flags("finetune")[2:])
    assert tuned.returncode == 0, tuned.stderr
    # A 2-label sentiment classifier fine-tuned on 6-label trec: the head restarts, and says so.
    other = run_cli("finetune", "--task", "trec", "--init", str(tmp_path / "tuned"), "--output-dir",
                    str(tmp_path / "trec"), "--max-steps", "1", "--max-train-examples", "16", "--max-eval-examples", "8",
                    "--eval-steps", "1", *micro_flags("finetune")[2:])
    assert other.returncode == 0, other.stderr
    assert "head for 2 labels; this task has 6, so the classifier head starts from scratch" in other.stderr
    refused = run_cli("convert", str(plain_dir), "--output-dir", str(tmp_path / "x"))
    assert refused.returncode != 0 and "N >= 2" in refused.stderr


def test_the_gpu_recipe_needs_cuda_and_is_the_measured_recipe_in_bf16(plain_dir, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="needs a CUDA device"):
        conversion_config(plain_dir, 2, tmp_path, gpu=True)
    refused = run_cli("convert", str(plain_dir), "--num-instances", "2", "--output-dir", str(tmp_path / "x"), "--gpu")
    assert refused.returncode != 0 and "needs a CUDA device" in refused.stderr
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the settings only: nothing runs
    cpu, gpu = conversion_config(plain_dir, 5, tmp_path), conversion_config(plain_dir, 5, tmp_path, gpu=True)
    assert gpu.mixed_precision == "bf16" and cpu.mixed_precision == "no"
    assert {**vars(gpu), "mixed_precision": "no"} == vars(cpu)  # everything else as measured
    assert conversion_config(plain_dir, 5, tmp_path, gpu=True, max_steps=7).max_steps == 7  # flags still win


def test_a_cut_encoder_keeps_the_plain_models_first_layers(tmp_path):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    plain = BertModel(config, add_pooling_layer=False).eval()
    plain.save_pretrained(tmp_path / "four")
    ids = torch.randint(5, 200, (3, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        states = plain(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for k in (1, 3):
        cut = MuxBertModel.from_encoder(tmp_path / "four", keep_layers=k, num_instances=1, mux_type="identity",
                                        demux_type="identity").eval()
        assert cut.config.num_hidden_layers == k and len(cut.encoder.layer) == k
        with torch.no_grad():
            out = cut(ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(out[mask.bool()], states[k][mask.bool()], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"keep_layers must lie in \[1, 4\]"):
        MuxBertModel.from_encoder(tmp_path / "four", keep_layers=5, num_instances=1)


def test_cut_encoders_from_the_command_line_and_in_the_conversion_recipe(plain_dir, tmp_path):
    BertConfig(num_hidden_layers=6).save_pretrained(tmp_path / "six")
    assert conversion_config(tmp_path / "six", 2, tmp_path, keep_layers=2).num_unmuxed_layers == 1  # <= k - 1
    with pytest.raises(ValueError, match="keep_layers"):
        validate(build_config(stage="finetune", task="sentiment", preset="tiny", keep_layers=2))  # nothing to cut
    out = tmp_path / "cut"
    tuned = run_cli("finetune", "--task", "sentiment", "--init-encoder", str(plain_dir), "--keep-layers", "1",
                    "--num-instances", "1", "--output-dir", str(out), "--max-steps", "2", "--max-train-examples",
                    "32", "--max-eval-examples", "16", "--eval-steps", "2", *micro_flags("finetune")[2:])
    assert tuned.returncode == 0, tuned.stderr
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 1
    converted = run_cli("convert", str(plain_dir), "--num-instances", "2", "--keep-layers", "1", "--output-dir",
                        str(tmp_path / "mux"), "--max-steps", "1", "--batch-groups", "4", "--eval-steps", "1",
                        "--save-steps", "1", *micro_flags()[6:])
    assert converted.returncode == 0, converted.stderr
    saved = json.loads((tmp_path / "mux" / "config.json").read_text())
    assert saved["num_hidden_layers"] == 1 and saved["num_unmuxed_layers"] == 0


def test_a_muxplm_checkpoint_is_cut_with_init(tmp_path):
    """`--init DIR --keep-layers k`: a pre-trained muxplm encoder (the reproduction's N = 1 rows)
    fine-tuned with its first k layers, exactly those weights, the rest left out."""
    from muxplm import MuxBertConfig, MuxBertForMaskedLM
    from muxplm.training.models import build_model, tokenizer_for

    torch.manual_seed(0)
    pretrained = MuxBertForMaskedLM(MuxBertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, num_instances=1, mux_type="identity", demux_type="identity")).eval()
    pretrained.save_pretrained(tmp_path / "three")
    config = build_config(stage="finetune", task="sentiment", init=str(tmp_path / "three"), keep_layers=2)
    tokenizer = tokenizer_for(config, tmp_path / "three")
    cut = build_model(config, "sentence", tokenizer, dict(num_labels=2), None).eval()
    assert cut.config.num_hidden_layers == 2 and len(cut.base_model.encoder_layers()) == 2
    ids = torch.randint(5, 1000, (2, 9))
    with torch.no_grad():
        states = pretrained.base_model(ids, output_hidden_states=True).hidden_states
        torch.testing.assert_close(cut.base_model(ids).last_hidden_state, states[2], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"keep_layers must lie in \[1, 3\]"):
        build_model(build_config(stage="finetune", task="sentiment", init=str(tmp_path / "three"), keep_layers=4),
                    "sentence", tokenizer, dict(num_labels=2), None)
    # A MUX checkpoint's unmuxed layers must fit in the cut (Transformers would not check it).
    MuxBertForMaskedLM(MuxBertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, num_instances=2, num_unmuxed_layers=2)).save_pretrained(tmp_path / "mux")
    with pytest.raises(ValueError, match="cuts below the 2 unmuxed layers"):
        build_model(build_config(stage="finetune", task="sentiment", init=str(tmp_path / "mux"), keep_layers=1),
                    "sentence", tokenizer, dict(num_labels=2), None)
    cut = build_model(build_config(stage="finetune", task="sentiment", init=str(tmp_path / "mux"), keep_layers=2),
                      "sentence", tokenizer, dict(num_labels=2), None)
    assert (cut.config.num_hidden_layers, cut.config.num_unmuxed_layers) == (2, 2)


def test_progressive_multiplexing_moves_the_mixture_down_during_the_run(plain_dir, tmp_path, monkeypatch):
    from muxplm.modeling_mux import MuxBackboneMixin
    from muxplm.training.trainer import unmuxed_layers_at

    # 5 -> 0 over the first 3/4 of 1,000 steps: 150 steps at each count, the last quarter at 0.
    assert [unmuxed_layers_at(step, 1000, 5, 0) for step in (0, 149, 150, 599, 600, 749, 750, 999)] == \
        [5, 5, 4, 2, 1, 1, 0, 0]
    assert unmuxed_layers_at(0, 10, 2, 2) == 2
    seen = []
    encode = MuxBackboneMixin.encode_slots

    def spy(self, *args, **kwargs):
        seen.append((self.training, self.config.num_unmuxed_layers))
        return encode(self, *args, **kwargs)

    monkeypatch.setattr(MuxBackboneMixin, "encode_slots", spy)
    convert(plain_dir, 2, tmp_path / "mux", start_unmuxed_layers=2, num_unmuxed_layers=0, **{**FAST, "max_steps": 4})
    assert [count for training, count in seen if training] == [2, 2, 1, 0]  # 1.5 steps at 2 and at 1
    assert MuxBertForRetrieval.from_pretrained(tmp_path / "mux").config.num_unmuxed_layers == 0
    with pytest.raises(ValueError, match="progressive multiplexing"):
        validate(conversion_config(plain_dir, 2, tmp_path, start_unmuxed_layers=0, num_unmuxed_layers=1))


def test_progressive_fine_tuning_starts_at_the_conversions_own_layout(plain_dir, tmp_path):
    convert(plain_dir, 2, tmp_path / "mux", **FAST)  # the recipe's layout: K = 1 on a 2-layer encoder
    tuned = run_cli("finetune", "--task", "sentiment", "--init", str(tmp_path / "mux"), "--output-dir",
                    str(tmp_path / "tuned"), "--max-steps", "4", "--max-train-examples", "32", "--max-eval-examples",
                    "16", "--eval-steps", "4", "--start-unmuxed-layers", "1", "--num-unmuxed-layers", "0",
                    *micro_flags("finetune")[2:])
    assert tuned.returncode == 0, tuned.stderr
    assert json.loads((tmp_path / "tuned" / "config.json").read_text())["num_unmuxed_layers"] == 0
    # Without the progressive start, asking a K = 1 checkpoint for K = 0 is refused, as before.
    refused = run_cli("finetune", "--task", "sentiment", "--init", str(tmp_path / "mux"), "--output-dir",
                      str(tmp_path / "x"), "--max-steps", "1", "--num-unmuxed-layers", "0", *micro_flags("finetune")[2:])
    assert refused.returncode != 0 and "num_unmuxed_layers" in refused.stderr


def test_fine_tuning_a_conversion_takes_its_recorded_recipe(plain_dir, tmp_path):
    """The converted checkpoint records its recipe; `finetune --init` takes the conversion's
    learning rates from it (nothing retyped), a flag still wins, and --recipe names another."""
    convert(plain_dir, 2, tmp_path / "mux", **FAST)
    assert json.loads((tmp_path / "mux" / "config.json").read_text())["training_recipe"] == "convert"
    common = ["--task", "sentiment", "--init", str(tmp_path / "mux"), "--max-steps", "1", "--max-train-examples", "16",
              "--max-eval-examples", "8", *micro_flags("finetune")[2:]]

    def settings(name, *flags):
        done = run_cli("finetune", *common, "--output-dir", str(tmp_path / name), *flags)
        assert done.returncode == 0, done.stderr
        return json.loads((tmp_path / name / "train_config.json").read_text())

    recorded = settings("recorded")
    assert (recorded["recipe"], recorded["lr"], recorded["encoder_lr"]) == ("convert", 2e-4, 1e-4)
    assert settings("flag", "--lr", "3e-4")["lr"] == 3e-4
    paper = settings("paper", "--recipe", "paper")
    assert (paper["recipe"], paper["lr"], paper["encoder_lr"]) == ("paper", 5e-5, None)
