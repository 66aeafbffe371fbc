"""The paper's released checkpoints: every kind loads from the authors' layout and reproduces the
logits the authors' own code computed (fixtures of ``scripts/make_released_fixtures.py``), every
quirk of that computation matters on the fixtures, the pickle weights run nothing, and a loaded
model saves to muxplm's own layout."""

from __future__ import annotations

import json
import os

import pytest
import torch

import muxplm
from muxplm import MuxBertForMaskedLM, MuxBertForSequenceClassification, MuxElectraForPreTraining
from muxplm.released import is_released_layout
from released_testing import (
    FIXTURES,
    KINDS,
    TOLERANCE,
    expected,
    model_class,
    our_logits,
    quirk_moves,
    released_folder,
)

MUXED = [name for name, kind in KINDS.items() if kind["muxing"] != "none"]
PLAIN = [name for name, kind in KINDS.items() if kind["muxing"] == "none"]


@pytest.mark.parametrize("name", list(KINDS))
def test_logits_match_the_authors_code(name):
    """With the attention arithmetic of the authors' Transformers version (eager), every kind is
    within 1e-5 of their logits; with the default SDPA kernel, within fp32 rounding of it."""
    cls = model_class(KINDS[name])
    ours, theirs = our_logits(cls.from_pretrained(FIXTURES / name, attn_implementation="eager").eval(), name)
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max() < TOLERANCE
    ours, theirs = our_logits(cls.from_pretrained(FIXTURES / name).eval(), name)
    assert (ours - theirs).abs().max() < 3 * TOLERANCE


@pytest.mark.parametrize("name", MUXED)
def test_every_quirk_moves_the_logits_far_beyond_the_tolerance(name):
    """Undoing any one quirk of the authors' forward (recorded with their code) moves the logits by
    at least 100x the tolerance, so a loader that skipped it would fail the test above."""
    kind, moves = KINDS[name], quirk_moves(name)
    wanted = {"embed_once", "encoder_mask"}
    if kind["head"] in ("sequence", "token"):
        wanted.add("token_types")
    if kind["muxing"] == "gaussian_hadamard":
        wanted.add("padding_in_mixture")
    if kind["demuxing"] == "index_pos" and kind["head"] != "mlm":
        wanted.add("demux_layer_norms")
    assert wanted <= set(moves)
    assert all(move >= 100 * TOLERANCE for move in moves.values()), moves


def test_the_fixtures_cover_every_released_kind():
    combos = {(k["family"], k["head"], k["muxing"], k["demuxing"]) for k in KINDS.values()}
    for needed in [("bert", "mlm", "gaussian_hadamard", "index_pos"), ("bert", "sequence", "gaussian_hadamard", "index_pos"),
                   ("bert", "token", "gaussian_hadamard", "index_pos"), ("bert", "mlm", "gaussian_attention_v2", "index_pos"),
                   ("bert", "sequence", "gaussian_attention_v2", "index_pos"), ("bert", "mlm", "gaussian_hadamard", "index"),
                   ("bert", "sequence", "gaussian_hadamard", "index"), ("electra", "pretraining", "gaussian_hadamard", "index_pos"),
                   ("electra", "sequence", "gaussian_hadamard", "index_pos"), ("bert", "mlm", "none", "index_pos"),
                   ("electra", "pretraining", "none", "index_pos")]:
        assert needed in combos
    assert {k["num_instances"] for k in KINDS.values()} == {1, 2, 5, 10}
    assert {"mask_value", "sentence_position", "first_token"} <= {q for name in MUXED for q in quirk_moves(name)}


@pytest.mark.parametrize("name", PLAIN)
def test_the_n1_baselines_are_plain_models(name):
    """Decided by their architecture: one embedding pass and the attention mask, no quirk."""
    model = model_class(KINDS[name]).from_pretrained(FIXTURES / name)
    assert model.config.num_instances == 1 and model.config.mux_type == "identity"
    assert model.config.forward_variant == "native"


def test_a_planted_pickle_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    folder = released_folder(tmp_path, "bert-sequence-hadamard-indexpos-2")
    torch.save({"bert.embeddings.word_embeddings.weight": Payload()}, folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pytorch_model.bin.*weights_only"):
        MuxBertForSequenceClassification.from_pretrained(folder)
    assert not marker.exists()


def test_a_loaded_model_saves_to_muxplms_own_layout(tmp_path):
    name = "bert-sequence-attention-indexpos-2"
    model = MuxBertForSequenceClassification.from_pretrained(FIXTURES / name).eval()
    model.save_pretrained(tmp_path / "native")
    saved = json.loads((tmp_path / "native" / "config.json").read_text())
    assert saved["model_type"] == "mux_bert" and saved["forward_variant"] == "released"
    assert not is_released_layout(saved)
    assert sorted(os.listdir(tmp_path / "native")) == ["config.json", "model.safetensors"]
    again = muxplm.AutoModelForSequenceClassification.from_pretrained(tmp_path / "native").eval()
    assert type(again) is MuxBertForSequenceClassification
    assert torch.equal(our_logits(again, name)[0], our_logits(model, name)[0])


def test_a_pretrained_checkpoint_into_a_classifier_keeps_the_encoder_and_starts_the_head():
    name = "bert-mlm-hadamard-indexpos-5"
    mlm = MuxBertForMaskedLM.from_pretrained(FIXTURES / name)
    classifier = MuxBertForSequenceClassification.from_pretrained(FIXTURES / name, num_labels=4)
    assert classifier.config.num_labels == 4 and classifier.classifier.weight.shape == (4, 32)
    ours, theirs = dict(classifier.bert.named_parameters()), dict(mlm.bert.named_parameters())
    assert set(ours) == set(theirs) and all(torch.equal(ours[key], theirs[key]) for key in ours)
    assert not classifier.bert.mux.keys.requires_grad  # the fixed keys stay frozen, as in the paper
    assert classifier.bert.demux.path == "token" and mlm.bert.demux.path == "mlm"


def test_labels_come_from_the_classifier_when_the_config_has_none(tmp_path):
    folder = released_folder(tmp_path, "bert-sequence-hadamard-indexpos-10")
    config = json.loads((folder / "config.json").read_text())
    for key in ("id2label", "label2id"):
        config.pop(key)
    (folder / "config.json").write_text(json.dumps(config))
    model = MuxBertForSequenceClassification.from_pretrained(folder)
    assert model.config.num_labels == 3 and model.config.id2label[2] == "LABEL_2"


def test_a_folder_saved_through_the_electra_wrapper_loads(tmp_path):
    """Their ELECTRA trainer saves the discriminator's tensors under ``discriminator.``."""
    name = "electra-pretraining-hadamard-indexpos-2"
    folder = released_folder(tmp_path, name)
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    torch.save({f"discriminator.{key}": value for key, value in state.items()}, folder / "pytorch_model.bin")
    model = MuxElectraForPreTraining.from_pretrained(folder, attn_implementation="eager").eval()
    ours, theirs = our_logits(model, name)
    assert (ours - theirs).abs().max() < TOLERANCE


def test_bad_released_folders_get_errors_that_name_them(tmp_path):
    folder = released_folder(tmp_path, "bert-sequence-hadamard-indexpos-2")
    with pytest.raises(ValueError, match="released bert checkpoint.*BERT classes, not MuxElectra"):
        muxplm.MuxElectraForSequenceClassification.from_pretrained(folder)
    with pytest.raises(ValueError, match="num_instances=2.*num_instances=5"):
        MuxBertForSequenceClassification.from_pretrained(folder, num_instances=5)
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    del state["demultiplexer.pre_decoder.weight"]
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="lacks weights.*bert.demux.pre_decoder.weight"):
        MuxBertForSequenceClassification.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "muxing_variant": "binary_hadamard"}))
    with pytest.raises(ValueError, match="config.json: muxing_variant 'binary_hadamard'"):
        MuxBertForSequenceClassification.from_pretrained(folder)


def test_a_hub_name_is_fetched_through_the_hugging_face_cache(tmp_path, monkeypatch):
    """The hub path offline: the same calls (config through Transformers' reader and its
    ``cached_file``, the folder through ``snapshot_download``) answered from a local copy."""
    import huggingface_hub
    import transformers.configuration_utils

    name = "bert-sequence-hadamard-indexpos-2"
    folder = released_folder(tmp_path, name)
    asked = []

    def cached_file(repo, filename, **kwargs):
        asked.append(("cached_file", repo, filename))
        return str(folder / filename)

    def snapshot_download(repo, **kwargs):
        asked.append(("snapshot_download", repo))
        return str(folder)

    monkeypatch.setattr(transformers.configuration_utils, "cached_file", cached_file)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    hub_id = "princeton-nlp/muxbert_base_sst2_gaussian_hadamard_index_pos_2"
    model = MuxBertForSequenceClassification.from_pretrained(hub_id, attn_implementation="eager").eval()
    assert ("cached_file", hub_id, "config.json") in asked and ("snapshot_download", hub_id) in asked
    assert model.name_or_path == hub_id
    ours, theirs = our_logits(model, name)
    assert (ours - theirs).abs().max() < TOLERANCE


def test_the_released_forward_computes_what_it_is_given():
    """No padding in the model: the same rows at another padded length give other logits (the
    encoder attends to padding), which is why the input path pads released models to 128."""
    name = "bert-sequence-hadamard-indexpos-2"
    model = MuxBertForSequenceClassification.from_pretrained(FIXTURES / name).eval()
    data = expected(name)
    inputs = {key: data[key] for key in ("input_ids", "attention_mask", "token_type_ids")}
    longer = {key: torch.nn.functional.pad(value, (0, 4)) for key, value in inputs.items()}
    with torch.no_grad():
        assert (model(**inputs).logits - model(**longer).logits).abs().max() > 1e-3


def test_fillers_copy_a_real_input_of_their_group():
    """A batch that is not a multiple of N: the empty slot of the last group holds a copy of the
    group's first input, so the others see a mixture of N real inputs, as in training."""
    name = "bert-sequence-hadamard-indexpos-10"
    model = MuxBertForSequenceClassification.from_pretrained(FIXTURES / name).eval()
    data = expected(name)
    inputs = {key: data[key][:19] for key in ("input_ids", "attention_mask", "token_type_ids")}
    copied = {key: torch.cat([value, value[10:11]]) for key, value in inputs.items()}
    with torch.no_grad():
        assert torch.allclose(model(**inputs).logits, model(**copied).logits[:19], atol=1e-6)


def test_the_fixture_script_is_kept_with_its_fixtures():
    made = json.loads((FIXTURES / "kinds.json").read_text())
    assert made["made_by"] == "scripts/make_released_fixtures.py" and made["authors_commit"] == "072989a"
    assert (FIXTURES.parents[2] / made["made_by"]).is_file()
    size = sum(file.stat().st_size for file in FIXTURES.rglob("*") if file.is_file())
    assert size < 8_000_000
