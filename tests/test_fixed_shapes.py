"""A training step on an accelerator must not wait for the host: no value read back, no shape
that depends on the data. The meta device stands for the accelerator (any host read of a meta
tensor raises), and on the CPU the fixed-shape losses must equal the compact ones."""

from __future__ import annotations

import pytest
import torch

from muxplm import (
    MuxBertConfig,
    MuxBertForMaskedLM,
    MuxBertForRetrieval,
    MuxBertForSequenceClassification,
    MuxBertForTokenClassification,
    MuxElectraConfig,
    MuxElectraForPreTraining,
)
from muxplm import modeling_mux
from muxplm.training.distill import TaskDistillation

from mux_testing import COMBOS, COMBO_IDS, micro_config, random_batch


def _labels(kind: str, batch: dict) -> torch.Tensor | None:
    gen = torch.Generator().manual_seed(1)
    ids = batch["input_ids"]
    if kind == "mlm":
        chosen = (torch.rand(ids.shape, generator=gen) < 0.3) & batch["attention_mask"].bool()
        return torch.where(chosen, ids, torch.full_like(ids, -100))
    if kind == "electra":
        return (torch.rand(ids.shape, generator=gen) < 0.2).long().masked_fill(batch["attention_mask"] == 0, -100)
    if kind == "token":
        return torch.randint(0, 3, ids.shape, generator=gen).masked_fill(batch["attention_mask"] == 0, -100)
    if kind == "sentence":
        return torch.randint(0, 3, (ids.shape[0],), generator=gen)
    return None


HEADS = {
    "retrieval": (MuxBertForRetrieval, MuxBertConfig, {}),
    "retrieval-in-batch": (MuxBertForRetrieval, MuxBertConfig, {"retrieval_softmax": "in_batch"}),
    "mlm": (MuxBertForMaskedLM, MuxBertConfig, {"retrieval_loss_weight": 0.2, "retrieval_softmax": "in_batch"}),
    "electra": (MuxElectraForPreTraining, MuxElectraConfig, {"retrieval_loss_weight": 0.2}),
    "token": (MuxBertForTokenClassification, MuxBertConfig, {"num_labels": 3}),
    "sentence": (MuxBertForSequenceClassification, MuxBertConfig, {"num_labels": 3}),
}


def _meta_step(model_class, config) -> None:
    model = model_class(config).train().to("meta")
    batch = random_batch(batch_size=9)
    kind = {MuxBertForMaskedLM: "mlm", MuxElectraForPreTraining: "electra", MuxBertForTokenClassification: "token",
            MuxBertForSequenceClassification: "sentence"}.get(model_class, "retrieval")
    labels = _labels(kind, batch)
    batch = {key: value.to("meta") for key, value in batch.items()}
    if labels is not None:
        batch["labels"] = labels.to("meta")
    model(**batch).loss.backward()


@pytest.mark.parametrize("head", sorted(HEADS))
def test_a_training_step_of_every_head_reads_nothing_back_from_the_device(head):
    model_class, config_class, overrides = HEADS[head]
    _meta_step(model_class, micro_config(config_class, num_instances=2, num_unmuxed_layers=1,
                                         num_hidden_layers=2, **overrides))


@pytest.mark.parametrize("combo", [c for c in COMBOS if c[0] > 1], ids=[i for c, i in zip(COMBOS, COMBO_IDS) if c[0] > 1])
def test_a_pretraining_step_of_every_variant_reads_nothing_back_from_the_device(combo):
    n, mux, demux = combo
    _meta_step(MuxBertForMaskedLM, micro_config(num_instances=n, mux_type=mux, demux_type=demux,
                                                retrieval_loss_weight=0.3, retrieval_softmax="in_batch"))


def test_an_evaluation_pass_may_read_back_and_keeps_its_compact_outputs():
    model = MuxBertForMaskedLM(micro_config(num_instances=2)).eval()
    batch = random_batch()
    labels = _labels("mlm", batch)
    output = model(**batch, labels=labels)
    assert output.logits.shape == ((labels != -100).sum().item(), model.config.vocab_size)


def _loss_and_grads(model, batch, labels, seed=3):
    model.zero_grad()
    torch.manual_seed(seed)  # the retrieval targets are sampled from the global RNG
    output = model(**batch, **({} if labels is None else {"labels": labels}))
    output.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return output, grads


@pytest.mark.parametrize("head", ["retrieval", "retrieval-in-batch", "mlm", "electra"])
def test_the_fixed_shape_losses_equal_the_compact_ones(head, monkeypatch):
    model_class, config_class, overrides = HEADS[head]
    torch.manual_seed(0)
    model = model_class(micro_config(config_class, num_instances=2, **overrides)).train()
    batch = random_batch(batch_size=9)
    kind = {"mlm": "mlm", "electra": "electra"}.get(head)
    labels = _labels(kind, batch) if kind else None
    compact, compact_grads = _loss_and_grads(model, batch, labels)
    # As in a training step on an accelerator:
    accelerator = lambda tensor, training: not training  # noqa: E731
    monkeypatch.setattr(modeling_mux, "host_checks_wanted", accelerator)  # the MLM loss of every family included
    fixed, fixed_grads = _loss_and_grads(model, batch, labels)
    torch.testing.assert_close(fixed.loss, compact.loss)
    for name in ("retrieval_accuracy", "accuracy", "retrieval_loss"):
        if getattr(compact, name, None) is not None:
            torch.testing.assert_close(getattr(fixed, name), getattr(compact, name))
    assert fixed_grads.keys() == compact_grads.keys()
    for name, grad in compact_grads.items():
        torch.testing.assert_close(fixed_grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)
    if head == "mlm":  # every position scored, the unmasked ones weighted out
        assert fixed.logits.shape == (*batch["input_ids"].shape, model.config.vocab_size)


def test_token_task_distillation_averages_over_the_labelled_positions_only(tmp_path):
    torch.manual_seed(0)
    config = micro_config(num_instances=1, num_labels=3)
    teacher = MuxBertForTokenClassification(config)
    teacher.save_pretrained(tmp_path)
    student = MuxBertForTokenClassification(micro_config(num_instances=2, num_labels=3))
    batch = random_batch(batch_size=6)
    batch["labels"] = _labels("token", batch)
    distill = TaskDistillation(tmp_path, student, temperature=2.0, weight=1.0)
    loss = distill(student, dict(batch)).loss
    # The same figure from the labelled positions picked out one by one.
    with torch.no_grad():
        keep = batch["labels"] != -100
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        s = torch.log_softmax(student(**inputs).logits[keep] / 2.0, -1)
        t = torch.log_softmax(teacher(**inputs).logits[keep] / 2.0, -1)
        expected = (t.exp() * (t - s)).sum(-1).mean() * 4.0
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("kind", ["sentence", "token"])
def test_a_composition_consistency_step_reads_nothing_back_from_the_device(kind):
    from muxplm.training.consistency import CompositionConsistency

    model_class = MuxBertForSequenceClassification if kind == "sentence" else MuxBertForTokenClassification
    model = model_class(micro_config(num_instances=2, num_labels=3)).train().to("meta")
    batch = random_batch(batch_size=6)
    batch["labels"] = _labels(kind, batch)
    CompositionConsistency(4.0)(model, {key: value.to("meta") for key, value in batch.items()}).loss.backward()


INFERENCE_HEADS = {"sentence": MuxBertForSequenceClassification, "token": MuxBertForTokenClassification}


@pytest.mark.parametrize("ensemble", [False, True], ids=["throughput", "ensemble"])
@pytest.mark.parametrize("combo", [c for c in COMBOS if c[0] == 2], ids=[i for c, i in zip(COMBOS, COMBO_IDS) if c[0] == 2])
def test_an_inference_pass_on_inputs_checked_on_the_host_reads_nothing_back(combo, ensemble):
    """What the Predictor and the throughput timer run: inputs validated on the host, then a
    pass that never waits for the device (meta tensors raise on any host read)."""
    from muxplm.devices import inputs_checked_on_host

    n, mux, demux = combo
    for head, model_class in INFERENCE_HEADS.items():
        model = model_class(micro_config(num_instances=n, mux_type=mux, demux_type=demux, num_labels=3,
                                         num_unmuxed_layers=1, num_hidden_layers=2)).eval().to("meta")
        batch = {key: value.to("meta") for key, value in random_batch(batch_size=9).items()}
        with torch.no_grad():
            with pytest.raises(Exception):  # the default: an evaluation pass checks the ids on the host
                model(**batch, ensemble=ensemble)
            with inputs_checked_on_host():
                logits = model(**batch, ensemble=ensemble).logits
        assert logits.shape[0] == 9, head


def test_a_checked_inference_pass_compiles_to_one_graph_with_the_same_outputs():
    """torch.compile captures the whole pass (fullgraph=True fails on any graph break: a host
    read, a data-dependent shape), fillers and an unmuxed layer included; outputs unchanged."""
    from muxplm.devices import host_checks_wanted, inputs_checked_on_host

    torch.manual_seed(0)
    model = MuxBertForSequenceClassification(micro_config(num_instances=2, num_labels=3, num_unmuxed_layers=1,
                                                          num_hidden_layers=2)).eval()
    batch = random_batch(batch_size=7)  # 7 = 3 groups of 2 and a filler
    compiled = torch.compile(model, fullgraph=True, backend="eager", dynamic=False)
    with torch.no_grad(), inputs_checked_on_host():
        assert not host_checks_wanted(batch["input_ids"], training=False)
        got = compiled(**batch).logits
    assert host_checks_wanted(batch["input_ids"], training=False)  # the context ends with its block
    with torch.no_grad():
        torch.testing.assert_close(got, model(**batch).logits)
