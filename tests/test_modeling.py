"""Every model class, for every valid (N, mux, demux) combination: shapes, input order,
gradients, save/load and the Auto classes."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification

import muxplm  # noqa: F401  (registers the Auto classes)
from muxplm import (
    MuxBertConfig,
    MuxBertForMaskedLM,
    MuxBertForRetrieval,
    MuxBertForSequenceClassification,
    MuxBertForTokenClassification,
    MuxBertModel,
    MuxElectraConfig,
    MuxElectraForPreTraining,
    MuxElectraForTokenClassification,
    MuxElectraModel,
)

from mux_testing import COMBO_IDS, COMBOS, micro_config, random_batch

BATCH = 7  # deliberately not a multiple of 2, 5 or 10


def build(model_class, n, mux, demux, config_class=MuxBertConfig, **extra):
    torch.manual_seed(0)
    return model_class(micro_config(config_class, num_instances=n, mux_type=mux, demux_type=demux, **extra)).eval()


@pytest.mark.parametrize("n, mux, demux", COMBOS, ids=COMBO_IDS)
def test_output_shapes_for_a_batch_not_a_multiple_of_n(n, mux, demux):
    batch = random_batch(BATCH)
    length = batch["input_ids"].shape[1]
    base = build(MuxBertModel, n, mux, demux)
    out = base(**batch)
    assert out.last_hidden_state.shape == (BATCH, length, 32)
    groups = -(-BATCH // n)
    prefix = n if demux == "prefix" else 0
    assert out.muxed_hidden_state.shape == (groups, length + prefix, 32)
    seq = build(MuxBertForSequenceClassification, n, mux, demux, num_labels=3)
    assert seq(**batch).logits.shape == (BATCH, 3)
    assert seq(**batch, ensemble=True).logits.shape == (BATCH, 3)
    tok = build(MuxBertForTokenClassification, n, mux, demux, num_labels=4)
    assert tok(**batch).logits.shape == (BATCH, length, 4)
    electra = build(MuxElectraForPreTraining, n, mux, demux, config_class=MuxElectraConfig, embedding_size=16)
    assert electra(**batch).logits.shape == (BATCH, length)


@pytest.mark.parametrize("n, mux, demux", COMBOS, ids=COMBO_IDS)
def test_composition_seed_returns_outputs_in_input_order(n, mux, demux):
    """Running with a seed must equal running the seed's permutation of the batch without
    one and undoing the permutation by hand."""
    batch = random_batch(BATCH)
    model = build(MuxBertForTokenClassification, n, mux, demux, num_labels=4)
    seed = 11
    perm = torch.randperm(BATCH, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        seeded = model(**batch, composition_seed=seed).logits
        by_hand = model(**{k: v[perm] for k, v in batch.items()}).logits
    restored = torch.empty_like(by_hand)
    restored[perm] = by_hand
    assert torch.allclose(seeded, restored, atol=1e-5)


@pytest.mark.parametrize("n, mux, demux", COMBOS, ids=COMBO_IDS)
def test_gradients_reach_every_trainable_parameter(n, mux, demux):
    batch = random_batch(BATCH)
    model = build(MuxBertForTokenClassification, n, mux, demux, num_labels=4).train()
    with torch.no_grad():  # a trained adapter: its zero start would hold back the down-projection's first gradient
        for name, param in model.named_parameters():
            if name.endswith("adapters.up"):
                param.normal_(std=0.1)
    labels = torch.randint(0, 4, batch["input_ids"].shape)
    model(**batch, labels=labels).loss.backward()
    for name, param in model.named_parameters():
        if param.requires_grad:
            assert param.grad is not None, f"{name} got no gradient"
            assert torch.isfinite(param.grad).all(), name
            if name.startswith(("bert.mux", "bert.demux", "bert.encoder", "classifier")):
                assert param.grad.abs().sum() > 0, f"{name} got an all-zero gradient"
        else:
            assert "mux" in name  # only the frozen multiplexing keys may be frozen


@pytest.mark.parametrize("n, mux, demux", COMBOS, ids=COMBO_IDS)
def test_save_and_load_give_identical_outputs_and_auto_classes_work(n, mux, demux, tmp_path):
    batch = random_batch(BATCH)
    model = build(MuxBertForSequenceClassification, n, mux, demux, num_labels=2)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert type(loaded) is MuxBertForSequenceClassification
    trainable = {name: p.requires_grad for name, p in model.named_parameters()}
    assert {name: p.requires_grad for name, p in loaded.named_parameters()} == trainable  # keys stay frozen
    with torch.no_grad():
        assert torch.allclose(model(**batch).logits, loaded(**batch).logits, atol=1e-6)
    base = AutoModel.from_pretrained(tmp_path)
    assert type(base) is MuxBertModel


def test_electra_auto_classes_and_projection(tmp_path):
    model = build(MuxElectraForTokenClassification, 2, "gaussian_hadamard", "rsa", MuxElectraConfig, embedding_size=16)
    assert model.electra.embeddings_project.in_features == 16
    model.save_pretrained(tmp_path)
    assert type(AutoModelForTokenClassification.from_pretrained(tmp_path)) is MuxElectraForTokenClassification
    assert type(AutoModel.from_pretrained(tmp_path)) is MuxElectraModel


def test_prefix_demux_lengthens_the_encoder_input_and_rsa_does_not():
    batch = random_batch(4, length=9)
    rsa = build(MuxBertModel, 2, "gaussian_hadamard", "rsa")(**batch, output_hidden_states=True)
    prefix = build(MuxBertModel, 2, "gaussian_hadamard", "prefix")(**batch, output_hidden_states=True)
    assert all(h.shape[1] == 9 for h in rsa.hidden_states)
    assert all(h.shape[1] == 9 + 2 for h in prefix.hidden_states)


@pytest.mark.parametrize("mux", ["gaussian_hadamard", "binary_hadamard", "random_ortho", "contextual", "adapter"])
def test_masked_positions_do_not_leak_into_real_ones(mux):
    """A position no instance of the group uses is masked in the encoder: changing the
    token there changes nothing; nor does a companion's padding at a position the other
    instance uses (padding enters no mixture)."""
    model = build(MuxBertForTokenClassification, 2, mux, "rsa", num_labels=3)
    ids = torch.randint(5, 100, (2, 8))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    mask[1, 5:] = 0
    changed = ids.clone()
    changed[:, 7] = 3  # padding in both instances
    with torch.no_grad():
        a = model(ids, mask).logits
        b = model(changed, mask).logits
        assert torch.allclose(a[0, :6], b[0, :6], atol=1e-6) and torch.allclose(a[1, :5], b[1, :5], atol=1e-6)
        changed_used = ids.clone()
        changed_used[1, 5] = 4  # padding in instance 1, but instance 0 has a token at 5
        c = model(changed_used, mask).logits
    torch.testing.assert_close(a[0, :6], c[0, :6], atol=1e-6, rtol=1e-6)


def test_token_type_ids_are_used():
    model = build(MuxBertForSequenceClassification, 2, "gaussian_hadamard", "rsa", num_labels=2)
    batch = random_batch(4)
    with torch.no_grad():
        a = model(**batch).logits
        b = model(batch["input_ids"], batch["attention_mask"], torch.zeros_like(batch["token_type_ids"])).logits
    assert not torch.allclose(a, b)


def test_ensemble_with_one_instance_equals_a_plain_pass():
    model = build(MuxBertForSequenceClassification, 1, "identity", "identity", num_labels=3)
    batch = random_batch(5)
    with torch.no_grad():
        assert torch.allclose(model(**batch).logits, model(**batch, ensemble=True).logits)


def test_ensemble_averages_the_copies():
    """With N=2 the ensemble logits are the mean of the two copies' logits; recompute the
    copies by hand from the grouping plan."""
    from muxplm import plan_groups

    model = build(MuxBertForSequenceClassification, 2, "gaussian_hadamard", "rsa", num_labels=3)
    batch = random_batch(4)
    plan = plan_groups(4, 2, seed=5, ensemble=True)
    with torch.no_grad():
        ensembled = model(**batch, ensemble=True, composition_seed=5).logits
        slot_batch = {k: v[plan.order] * plan.is_real.view(-1, 1) for k, v in batch.items()}
        per_slot = model(**slot_batch).logits  # the same groups, in slot order, fillers as pad rows
    # Filler rows hold all-pad ids with an all-zero mask in the hand-built batch; this plan
    # (B=4, N=2) has none, so every slot is a real copy.
    assert bool(plan.is_real.all())
    manual = per_slot[plan.slot_of].view(2, 4, 3).mean(0)
    assert torch.allclose(ensembled, manual, atol=1e-5)
    assert not torch.allclose(ensembled, model(**batch).logits, atol=1e-4)


def test_regression_uses_mse():
    model = build(MuxBertForSequenceClassification, 2, "gaussian_hadamard", "rsa", num_labels=1)
    batch = random_batch(3)
    target = torch.tensor([0.5, -1.0, 2.0])
    out = model(**batch, labels=target)
    assert torch.allclose(out.loss, torch.nn.functional.mse_loss(out.logits.view(-1), target))


def test_masked_lm_scores_only_masked_positions_and_ties_the_decoder():
    model = build(MuxBertForMaskedLM, 2, "gaussian_hadamard", "rsa")
    assert model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
    batch = random_batch(5)
    labels = torch.full_like(batch["input_ids"], -100)
    labels[0, 1] = 7
    labels[3, 0] = 9
    out = model(**batch, labels=labels)
    assert out.logits.shape == (2, model.config.vocab_size)
    assert torch.allclose(out.loss, torch.nn.functional.cross_entropy(out.logits, torch.tensor([7, 9])))
    full = model(**batch).logits
    assert torch.allclose(full[0, 1], out.logits[0], atol=1e-5) and torch.allclose(full[3, 0], out.logits[1], atol=1e-5)


def test_retrieval_auxiliary_loss_mixes_with_the_weight():
    model = build(MuxBertForMaskedLM, 2, "gaussian_hadamard", "rsa", retrieval_loss_weight=0.2)
    batch = random_batch(4)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    torch.manual_seed(1)
    out = model(**batch, labels=labels)
    assert torch.allclose(out.loss, 0.8 * out.task_loss + 0.2 * out.retrieval_loss)
    assert "retrieval_head" not in dict(build(MuxBertForMaskedLM, 2, "gaussian_hadamard", "rsa").named_children())


def test_in_batch_retrieval_softmax_scores_the_batch_tokens_in_training_only():
    model = build(MuxBertForRetrieval, 2, "gaussian_hadamard", "rsa", retrieval_softmax="in_batch")
    batch = random_batch(6)
    candidates = torch.unique(batch["input_ids"][batch["attention_mask"].bool()])
    torch.manual_seed(3)
    out = model.train()(**batch)
    assert out.logits.shape == (out.labels.numel(), candidates.numel())
    # The restricted logits are exactly the full logits' columns of the batch's tokens.
    model.config.retrieval_softmax = "full"
    torch.manual_seed(3)
    full = model(**batch)
    assert torch.equal(full.labels, out.labels)
    assert torch.allclose(full.logits[:, candidates], out.logits, atol=1e-5)
    expected = torch.nn.functional.cross_entropy(full.logits[:, candidates], torch.searchsorted(candidates, out.labels))
    assert torch.allclose(out.loss, expected, atol=1e-5)
    # Evaluation always scores the whole vocabulary, so held-out accuracy stays comparable.
    model.config.retrieval_softmax = "in_batch"
    assert model.eval()(**batch).logits.shape[-1] == model.config.vocab_size
    with pytest.raises(ValueError, match="retrieval_softmax"):
        micro_config(retrieval_softmax="sampled")


def test_electra_loss_is_weighted_bce_over_real_tokens():
    model = build(MuxElectraForPreTraining, 2, "gaussian_hadamard", "rsa", MuxElectraConfig, embedding_size=16)
    batch = random_batch(4)
    labels = torch.randint(0, 2, batch["input_ids"].shape).masked_fill(batch["attention_mask"] == 0, -100)
    out = model(**batch, labels=labels)
    keep = labels != -100
    expected = 50 * torch.nn.functional.binary_cross_entropy_with_logits(out.logits[keep], labels[keep].float())
    assert torch.allclose(out.loss, expected, atol=1e-5)


def test_retrieval_targets_skip_padding_and_fillers():
    model = build(MuxBertForRetrieval, 5, "gaussian_hadamard", "rsa")
    batch = random_batch(7)
    out = model(**batch)
    assert (out.labels != 0).all()  # pad id 0 never appears as a target
    real_tokens_max = 2 * batch["input_ids"].shape[1]  # 2 groups, one target per position
    assert 0 < out.labels.numel() <= real_tokens_max
    assert model.reconstruct(**batch).shape == batch["input_ids"].shape


@pytest.mark.parametrize("mux", ["gaussian_hadamard", "binary_hadamard"])
def test_unbind_demux_starts_as_the_inverse_of_the_mux_keys(mux):
    model = build(MuxBertModel, 5, mux, "unbind", hidden_size=256)  # wide enough to superpose 5
    keys, unbind = model.mux.keys.detach(), model.demux.unbind_keys.detach()
    assert model.demux.unbind_keys.requires_grad  # learned, unlike the fixed mux keys
    assert torch.allclose((keys * unbind).mean(-1), torch.ones(5), atol=1e-5)
    # Unbinding a superposition with instance j's key recovers instance j best.
    x = torch.randn(5, keys.shape[1], generator=torch.Generator().manual_seed(0))
    mixed = model.mux(x[None, :, None, :], torch.ones(1, 5, 1, dtype=torch.bool))[0, 0]
    similarity = torch.nn.functional.cosine_similarity((mixed * unbind)[:, None], x[None], dim=-1)
    assert torch.equal(similarity.argmax(dim=1), torch.arange(5))


@pytest.mark.parametrize("n, mux, demux", [(1, "identity", "identity"), (2, "gaussian_hadamard", "unbind"),
                                           (3, "gaussian_hadamard", "rsa"), (2, "gaussian_hadamard", "prefix")])
def test_mean_pooling_sentence_head_demultiplexes_each_instances_token_mean(n, mux, demux):
    model = build(MuxBertForSequenceClassification, n, mux, demux, sentence_pooling="mean").eval()
    batch = random_batch(5)
    state = model.bert.multiplex(**batch)
    # Reference: pool the encoder output over each slot's own tokens, then demultiplex.
    groups, length = state.muxed.shape[0], batch["input_ids"].shape[1]
    mask = state.slot_mask.view(groups, n, length).float()
    tokens = state.muxed[:, model.config.num_prefix_tokens:]
    pooled = torch.stack([(mask[:, i, :, None] * tokens).sum(1) / mask[:, i].sum(-1, keepdim=True).clamp(min=1)
                          for i in range(n)], dim=1)
    expected = model.classifier(state.plan.ungroup(model.bert.demux.demux_states(state.muxed, pooled).flatten(0, 1)))
    assert torch.allclose(model(**batch).logits, expected, atol=1e-5)
    if n == 1:  # the plain model: mean pooling of BERT's last hidden states
        hidden = model.bert(**batch).last_hidden_state
        weights = batch["attention_mask"][..., None].float()
        manual = model.classifier((hidden * weights).sum(1) / weights.sum(1))
        assert torch.allclose(model(**batch).logits, manual, atol=1e-5)
