"""Distillation from a plain teacher (``--teacher``): the loss arithmetic, refusals, and a few
steps of each stage through ``run_stage``."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from training_utils import MICRO, read_log
from transformers import BertConfig, BertModel

from muxplm import MuxBertConfig, MuxBertForRetrieval, MuxBertForSequenceClassification, MuxBertForTokenClassification
from muxplm.training import TrainConfig, run_stage
from muxplm.training.distill import StateDistillation, TaskDistillation

from mux_testing import MICRO as MICRO_CONFIG
from mux_testing import random_batch

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data

LABELS = dict(id2label={0: "a", 1: "b", 2: "c"}, label2id={"a": 0, "b": 1, "c": 2})


def classifier(model_class, n, seed, **extra):
    torch.manual_seed(seed)
    mux = dict(mux_type="identity", demux_type="identity") if n == 1 else dict(demux_type="unbind")
    return model_class(MuxBertConfig(**MICRO_CONFIG, num_instances=n, num_labels=3, **LABELS, **mux, **extra))


@pytest.fixture
def teacher_dir(tmp_path):
    classifier(MuxBertForSequenceClassification, 1, seed=1).save_pretrained(tmp_path / "teacher")
    return tmp_path / "teacher"


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_task_distillation_mixes_hard_and_soft_labels(teacher_dir, weight):
    student = classifier(MuxBertForSequenceClassification, 2, seed=0).eval()
    distill = TaskDistillation(teacher_dir, student, temperature=2.0, weight=weight)
    batch = dict(random_batch(6), labels=torch.tensor([0, 1, 2, 0, 1, 2]))
    output = distill(student, batch)
    with torch.no_grad():
        logits = student(**batch).logits
        teacher = distill.teacher(**{k: v for k, v in batch.items() if k != "labels"}).logits
    hard = F.cross_entropy(logits, batch["labels"])
    soft = F.kl_div(F.log_softmax(logits / 2, -1), F.softmax(teacher / 2, -1), reduction="batchmean") * 4
    assert torch.allclose(output.loss, (1 - weight) * hard + weight * soft, atol=1e-5)
    assert not any(p.requires_grad for p in distill.teacher.parameters())


def test_token_distillation_reads_only_labelled_positions(tmp_path):
    classifier(MuxBertForTokenClassification, 1, seed=1).save_pretrained(tmp_path / "teacher")
    student = classifier(MuxBertForTokenClassification, 2, seed=0).eval()
    distill = TaskDistillation(tmp_path / "teacher", student, temperature=1.0, weight=1.0)
    batch = random_batch(4, length=6)
    labels = torch.randint(0, 3, (4, 6))
    labels[:, 3:] = -100
    output = distill(student, dict(batch, labels=labels))
    with torch.no_grad():
        logits = student(**batch).logits[:, :3].flatten(0, 1)
        teacher = distill.teacher(**batch).logits[:, :3].flatten(0, 1)
    soft = F.kl_div(F.log_softmax(logits, -1), F.softmax(teacher, -1), reduction="batchmean")
    assert torch.allclose(output.loss, soft, atol=1e-5)


def test_a_teacher_must_be_plain_and_share_the_labels(tmp_path):
    classifier(MuxBertForSequenceClassification, 2, seed=1).save_pretrained(tmp_path / "mux")
    student = classifier(MuxBertForSequenceClassification, 2, seed=0)
    with pytest.raises(ValueError, match="N = 1"):
        TaskDistillation(tmp_path / "mux", student, temperature=2.0, weight=0.5)
    torch.manual_seed(0)
    two = MuxBertConfig(**MICRO_CONFIG, num_instances=1, mux_type="identity", demux_type="identity", num_labels=2)
    MuxBertForSequenceClassification(two).save_pretrained(tmp_path / "two")
    with pytest.raises(ValueError, match="predicts 2 labels"):
        TaskDistillation(tmp_path / "two", student, temperature=2.0, weight=0.5)
    with pytest.raises(ValueError, match="temperature"):
        TaskDistillation(tmp_path / "two", student, temperature=0.0, weight=0.5)


def plain_encoder(path, vocab_size=MICRO_CONFIG["vocab_size"], **sizes):
    torch.manual_seed(3)
    config = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=40, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    BertModel(BertConfig(**{**config, **sizes}), add_pooling_layer=False).save_pretrained(path)
    return path


def test_state_distillation_of_an_identical_single_instance_student_is_exact(tmp_path):
    path = plain_encoder(tmp_path / "plain")
    student = MuxBertForRetrieval.from_encoder(path, num_instances=1, mux_type="identity", demux_type="identity")
    distill = StateDistillation(path, student, weight=1.0)
    output = distill(student.eval(), random_batch(5))
    assert torch.allclose(output.similarity, torch.tensor(1.0), atol=1e-5)
    assert output.loss.abs() < 1e-5


def test_state_distillation_mixes_with_retrieval_and_trains_the_student(tmp_path):
    path = plain_encoder(tmp_path / "plain")
    student = MuxBertForRetrieval.from_encoder(path, num_instances=2, demux_type="unbind").train()
    distill = StateDistillation(path, student, weight=0.5)
    output = distill(student, random_batch(6))
    assert -1 <= float(output.similarity) <= 1 and torch.isfinite(output.loss)
    output.loss.backward()
    assert all(p.grad is not None for p in student.bert.encoder.parameters())
    with pytest.raises(ValueError, match="same width"):
        StateDistillation(plain_encoder(tmp_path / "wide", hidden_size=64), student, weight=0.5)


def test_pooled_state_distillation_matches_each_instance_sentence_vector(tmp_path):
    """``pooling="mean"``: one target per instance, its mean over real tokens, so a student whose
    states differ from the teacher's token by token but not on average is already exact."""
    path = plain_encoder(tmp_path / "plain")
    student = MuxBertForRetrieval.from_encoder(path, num_instances=1, mux_type="identity", demux_type="identity")
    pooled, tokens = (StateDistillation(path, student, weight=1.0, pooling=pooling) for pooling in ("mean", "tokens"))
    batch = random_batch(4)
    batch["attention_mask"][:, -3:] = 0  # padding takes no part in the means
    assert torch.allclose(pooled(student.eval(), batch).similarity, torch.tensor(1.0), atol=1e-5)
    teacher_forward = pooled.teacher.forward

    def shuffled_tokens(**inputs):  # the same states in another order over the real tokens: equal means
        output = teacher_forward(**inputs)
        real = int(inputs["attention_mask"][0].sum())
        order = torch.cat([torch.arange(real).flip(0), torch.arange(real, inputs["input_ids"].shape[1])])
        output.last_hidden_state = output.last_hidden_state[:, order]
        return output

    for distill in (pooled, tokens):
        distill.teacher.forward = shuffled_tokens
    batch["attention_mask"][:] = 1
    batch["attention_mask"][:, -3:] = 0
    assert torch.allclose(pooled(student, batch).similarity, torch.tensor(1.0), atol=1e-5)
    assert tokens(student, batch).similarity < 0.99
    with pytest.raises(ValueError, match="'tokens'"):
        StateDistillation(path, student, weight=0.5, pooling="max")


def test_finetune_with_a_teacher_runs_through_the_stage(tmp_path):
    settings = dict(MICRO, task="sentiment", max_train_examples=48, max_eval_examples=20, max_steps=3)
    run_stage(TrainConfig(stage="finetune", output_dir=str(tmp_path / "teacher"), num_instances=1, **settings))
    run_stage(TrainConfig(stage="finetune", output_dir=str(tmp_path / "student"), num_instances=2,
                          teacher=str(tmp_path / "teacher"), distill_weight=0.7, **settings))
    losses = [record["loss"] for record in read_log(tmp_path / "student")]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert (tmp_path / "student" / "model.safetensors").is_file()
