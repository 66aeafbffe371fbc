"""Every encoder family (BERT, ELECTRA, RoBERTa / XLM-R / CamemBERT, DistilBERT, MPNet) through
the one multiplexed forward pass: N = 1 parity with the plain Transformers model, cut encoders,
multiplexing with every head, save/load, and the refusals that name the supported families."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    DebertaV2Config,
    DistilBertConfig,
    DistilBertForMaskedLM,
    MPNetForMaskedLM,
    RobertaForMaskedLM,
)
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

from muxplm import FAMILIES, MuxBertModel, MuxRobertaModel
from muxplm.families import family_of_plain_type
from muxplm.modeling_roberta import position_ids_after_padding_index

from family_testing import PLAIN, padded_batch, plain_config, save_plain

PLAIN_TYPES = list(PLAIN)
IDENTITY = dict(num_instances=1, mux_type="identity", demux_type="identity")


def mux_config(family, **overrides):
    """The family's MUX config over its tiny plain config."""
    settings = plain_config(family.plain_model_types[0]).to_dict()
    for key in ("model_type", "transformers_version", "architectures"):
        settings.pop(key, None)
    return family.config_class(**settings, **overrides)


@pytest.fixture(scope="module")
def plain_dirs(tmp_path_factory):
    """A saved random 3-layer plain checkpoint of every type, and the model itself."""
    saved = {}
    for model_type in PLAIN_TYPES:
        folder = tmp_path_factory.mktemp(model_type)
        saved[model_type] = (folder, save_plain(model_type, folder))
    return saved


@pytest.mark.parametrize("unmuxed", [0, 2])
@pytest.mark.parametrize("model_type", PLAIN_TYPES)
def test_with_one_instance_each_family_is_its_plain_model(plain_dirs, model_type, unmuxed):
    folder, plain = plain_dirs[model_type]
    base_class = family_of_plain_type(model_type).models["base"]
    model = base_class.from_encoder(folder, num_unmuxed_layers=unmuxed, **IDENTITY).eval()
    batch = padded_batch(plain.config.pad_token_id or 0)
    with torch.no_grad():
        expected = plain(**batch).last_hidden_state
        got = model(**batch).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("model_type", PLAIN_TYPES)
def test_a_cut_encoder_is_the_plain_models_first_layers(plain_dirs, model_type):
    folder, plain = plain_dirs[model_type]
    batch = padded_batch(plain.config.pad_token_id or 0, seed=1)
    for k in (1, 2):
        cut = family_of_plain_type(model_type).models["base"].from_encoder(folder, keep_layers=k, **IDENTITY).eval()
        assert cut.config.num_hidden_layers == k and len(cut.encoder_layers()) == k
        reference = AutoModel.from_pretrained(folder, num_hidden_layers=k).eval()  # the plain model, cut
        assert len(reference.get_submodule("transformer" if model_type == "distilbert" else "encoder").layer) == k
        with torch.no_grad():
            torch.testing.assert_close(cut(**batch).last_hidden_state, reference(**batch).last_hidden_state,
                                       atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"keep_layers must lie in \[1, 3\]"):
        family_of_plain_type(model_type).models["base"].from_encoder(folder, keep_layers=4, **IDENTITY)


@pytest.mark.parametrize("model_type", ["roberta", "distilbert", "mpnet"])
def test_a_warm_start_copies_the_plain_weights_under_the_plain_names(plain_dirs, model_type):
    folder, plain = plain_dirs[model_type]
    family = family_of_plain_type(model_type)
    model = family.models["sentence"].from_encoder(folder, num_instances=2, num_labels=3)
    ours = model.state_dict()
    prefix = model.base_model_prefix
    copied = {name: weight for name, weight in plain.state_dict().items() if not name.startswith("pooler.")}
    for name, weight in copied.items():
        torch.testing.assert_close(ours[f"{prefix}.{name}"], weight, atol=0, rtol=0)
    assert model.config.model_type == f"mux_{family.name}" and model.config.num_instances == 2


@pytest.mark.parametrize("family_name", list(FAMILIES))
@pytest.mark.parametrize("demux_type, unmuxed", [("unbind", 1), ("prefix", 0)])
def test_every_head_multiplexes_trains_saves_and_loads(family_name, demux_type, unmuxed, tmp_path):
    family = FAMILIES[family_name]
    config = mux_config(family, num_instances=2, demux_type=demux_type, num_unmuxed_layers=unmuxed, num_labels=3)
    pad = config.pad_token_id or 0
    batch = padded_batch(pad, batch=7)  # not a multiple of N: a filler completes the last group
    for head, model_class in family.models.items():
        if head == "base":
            continue
        torch.manual_seed(0)
        model = model_class(config).train()
        labels = {
            "sentence": torch.randint(0, 3, (7,)),
            "token": torch.randint(0, 3, batch["input_ids"].shape),
            "electra": torch.randint(0, 2, batch["input_ids"].shape),
            "mlm": batch["input_ids"].masked_fill(torch.rand(batch["input_ids"].shape) > 0.3, -100),
        }.get(head)
        output = model(**batch, **({} if labels is None else {"labels": labels}))
        assert torch.isfinite(output.loss)
        output.loss.backward()
        frozen_keys = {name for name, p in model.named_parameters() if not p.requires_grad}
        missing = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
        assert not missing, (head, missing)
        assert all(".mux." in name for name in frozen_keys)  # only the fixed multiplexing keys
        folder = tmp_path / head
        model.save_pretrained(folder)
        assert (folder / "model.safetensors").is_file()
        saved = json.loads((folder / "config.json").read_text())
        assert saved["model_type"] == f"mux_{family_name}" and saved["architectures"] == [model_class.__name__]
        loaded = model_class.from_pretrained(folder).eval()
        model.eval()
        if head == "retrieval":
            continue  # retrieval samples its targets: compared through the encoder below
        with torch.no_grad():
            torch.testing.assert_close(loaded(**batch, composition_seed=3).logits,
                                       model(**batch, composition_seed=3).logits)
    auto = {"sentence": AutoModelForSequenceClassification, "token": AutoModelForTokenClassification}
    for head, auto_class in auto.items():
        assert type(auto_class.from_pretrained(tmp_path / head)) is family.models[head]
    if "mlm" in family.models:
        assert type(AutoModelForMaskedLM.from_pretrained(tmp_path / "mlm")) is family.models["mlm"]


@pytest.mark.parametrize("family_name, plain_mlm",
                         [("roberta", RobertaForMaskedLM), ("distilbert", DistilBertForMaskedLM),
                          ("mpnet", MPNetForMaskedLM)])
def test_the_mlm_heads_are_the_plain_heads_tied_to_the_word_embeddings(family_name, plain_mlm, tmp_path):
    family = FAMILIES[family_name]
    plain_type = family.plain_model_types[0]
    model = family.models["mlm"](mux_config(family, num_instances=2))
    plain_names = set(plain_mlm(plain_config(plain_type)).state_dict())
    ours = {name for name in model.state_dict() if ".mux." not in name and ".demux." not in name}
    assert ours <= plain_names  # the plain MLM head's parameter names: its weights load as they are
    model.save_pretrained(tmp_path)
    loaded = family.models["mlm"].from_pretrained(tmp_path)
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight


def test_roberta_position_ids_with_and_without_a_prefix():
    ids = torch.tensor([[0, 7, 8, 9, 2], [0, 7, 2, 1, 1]])  # padding id 1
    plain = RobertaEmbeddings.create_position_ids_from_input_ids(ids, padding_idx=1)
    assert torch.equal(position_ids_after_padding_index(ids, 1, 0), plain)
    with_prefix = position_ids_after_padding_index(ids, 1, 2)
    assert with_prefix.tolist() == [[2, 3, 4, 5, 6, 7, 8], [2, 3, 4, 5, 6, 1, 1]]


@pytest.mark.parametrize("family_name", ["roberta", "mpnet"])
def test_a_tmux_prefix_is_numbered_before_the_tokens_as_the_family_numbers_them(family_name):
    family = FAMILIES[family_name]
    model = family.models["base"](mux_config(family, num_instances=2, demux_type="prefix")).eval()
    seen = []
    model.embeddings.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["position_ids"]),
                                               with_kwargs=True)
    ids = torch.tensor([[0, 7, 8, 2], [0, 9, 2, 1]])  # padding id 1
    with torch.no_grad():
        model(input_ids=ids, attention_mask=ids.ne(1).long())
    prefix = model.config.num_prefix_tokens
    numbers = list(range(2, 2 + prefix + 4))  # both families number from padding index 1 + 1
    assert seen[0].tolist() == [numbers, numbers[:-1] + [1]]


@pytest.mark.parametrize("family_name", ["distilbert", "mpnet"])
def test_families_without_token_types_ignore_them(family_name):
    family = FAMILIES[family_name]
    config = mux_config(family, num_instances=2)
    assert not config.has_token_types
    model = family.models["base"](config).eval()
    batch = padded_batch(config.pad_token_id)
    with torch.no_grad():
        plain = model(**batch).last_hidden_state
        typed = model(**batch, token_type_ids=torch.full_like(batch["input_ids"], 7)).last_hidden_state
    assert torch.equal(plain, typed)


def test_roberta_leaves_room_for_its_position_numbering():
    model = MuxRobertaModel(mux_config(FAMILIES["roberta"], num_instances=2, demux_type="prefix"))
    assert model.config.max_input_tokens == 40 - 2 - 2  # positions 0-1 below the first token's, 2 prefix
    with torch.no_grad():
        model(input_ids=torch.randint(5, 99, (2, 36)))
    with pytest.raises(ValueError, match="at most 36 tokens .*2 positions below the first token's and the 2-token"):
        model(input_ids=torch.randint(5, 99, (2, 37)))


def test_a_family_refuses_another_familys_checkpoint(plain_dirs, tmp_path):
    with pytest.raises(ValueError, match="needs a plain 'roberta', 'xlm-roberta' or 'camembert' checkpoint"):
        MuxRobertaModel.from_encoder(plain_dirs["bert"][0], num_instances=2)
    with pytest.raises(ValueError, match="plain roberta checkpoint: use MuxRobertaModel.from_encoder"):
        MuxRobertaModel.from_pretrained(plain_dirs["roberta"][0])
    with pytest.raises(ValueError, match="'mux_bert'"):
        MuxBertModel(mux_config(FAMILIES["bert"])).save_pretrained(tmp_path)
        MuxRobertaModel.from_pretrained(tmp_path)


def test_unsupported_and_mux_checkpoints_are_refused_with_the_supported_families():
    supported = r"bert, electra, roberta \(roberta / xlm-roberta / camembert\), distilbert, mpnet"
    with pytest.raises(ValueError, match=rf"'deberta-v2' model; muxplm multiplexes plain encoders of these families: "
                                         rf"{supported}"):
        family_of_plain_type(DebertaV2Config().model_type)
    with pytest.raises(ValueError, match="is a MUX checkpoint .*--init"):
        family_of_plain_type("mux_mpnet")


def test_the_training_recipe_reads_a_distilbert_size_under_berts_names(tmp_path):
    from types import SimpleNamespace

    from muxplm.training.models import read_model_config, size_of, with_bert_names

    DistilBertConfig(dim=256, n_layers=4, n_heads=4, hidden_dim=1024).save_pretrained(tmp_path)
    saved = read_model_config(tmp_path)
    assert "hidden_size" not in saved  # DistilBERT saves dim, n_layers, ...
    assert size_of(SimpleNamespace(**with_bert_names(saved))) == "tiny"  # the tiny preset's sizes
    DistilBertConfig().save_pretrained(tmp_path)  # distilbert-base: 768 wide, 6 layers
    assert size_of(SimpleNamespace(**with_bert_names(read_model_config(tmp_path)))) is None  # no preset, not "tiny"
