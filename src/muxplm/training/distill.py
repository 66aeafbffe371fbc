"""Distillation from a plain (N = 1) teacher: loss modules for the trainer (``--teacher``).

- Fine-tuning (:class:`TaskDistillation`): the MUX student learns from the teacher's soft
  labels and the hard labels, ``(1 - w) * task_loss + w * T^2 * KL(teacher_T || student_T)``
  over the labelled positions (sentence tasks: one per example; token tasks: every token with
  a label; regression: the squared difference of the two predictions).
- Retrieval priming of a converted encoder (:class:`StateDistillation`): every instance's
  demultiplexed last-layer states learn the plain encoder's states for that instance alone,
  ``(1 - w) * retrieval_loss + w * (1 - cosine)`` over real tokens, so the MUX model keeps the
  features the pretrained encoder computes while it learns to keep the instances apart. With
  ``pooling="mean"`` the target is each instance's mean over its real tokens instead (the sentence
  vector a mean-pooling head reads; one target per instance rather than one per token).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F
from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification

from ..modeling_mux import MuxRetrievalOutput, mean_over_tokens

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _frozen(model: torch.nn.Module, device) -> torch.nn.Module:
    model.requires_grad_(False)
    return model.eval().to(device)


def _single_instance(model, path) -> None:
    if getattr(model.config, "num_instances", 1) != 1:
        raise ValueError(f"the teacher {path} is a MUX model with N={model.config.num_instances}; "
                         f"distillation needs a plain (N = 1) teacher")


class TaskDistillation(torch.nn.Module):
    """Soft labels of a fine-tuned N = 1 classifier plus the hard labels."""

    def __init__(self, teacher_dir: str | Path, student, *, temperature: float, weight: float, device=None):
        super().__init__()
        if temperature <= 0 or not 0.0 <= weight <= 1.0:
            raise ValueError(f"distillation needs a temperature > 0 and a weight in [0, 1], "
                             f"got {temperature} and {weight}")
        token = type(student).__name__.endswith("ForTokenClassification")
        auto = AutoModelForTokenClassification if token else AutoModelForSequenceClassification
        try:
            teacher = auto.from_pretrained(teacher_dir)
        except (OSError, ValueError) as error:
            kind = "token" if token else "sequence"
            raise ValueError(f"--teacher {teacher_dir} is not a fine-tuned {kind} classifier: {error}") from error
        _single_instance(teacher, teacher_dir)
        ours, theirs = student.config, teacher.config
        if ours.num_labels != theirs.num_labels:
            raise ValueError(f"the teacher {teacher_dir} predicts {theirs.num_labels} labels, the task has "
                             f"{ours.num_labels}")
        if ours.num_labels > 1 and dict(ours.label2id) != dict(theirs.label2id):
            raise ValueError(f"the teacher {teacher_dir} orders its labels {dict(theirs.label2id)}, the task "
                             f"{dict(ours.label2id)}: fine-tune the teacher on the same task")
        self.teacher = _frozen(teacher, device or next(student.parameters()).device)
        self.temperature, self.weight = float(temperature), float(weight)

    def forward(self, model, batch: dict[str, torch.Tensor]):
        output = model(**batch)
        with torch.no_grad():
            target = self.teacher(**{key: batch[key] for key in _INPUTS if key in batch}).logits
        student, target = output.logits.float(), target.float()
        if student.shape[-1] == 1:  # regression
            soft = F.mse_loss(student, target)
        else:
            t = self.temperature
            per_row = F.kl_div(F.log_softmax(student / t, -1), F.log_softmax(target / t, -1), log_target=True,
                               reduction="none").sum(-1) * t * t
            if per_row.dim() == 2:  # token task: the mean over the labelled positions, weighted (no host sync)
                labelled = (batch["labels"] != -100).to(per_row.dtype)
                soft = (per_row * labelled).sum() / labelled.sum().clamp(min=1)
            else:
                soft = per_row.mean()
        output.loss = (1 - self.weight) * output.loss + self.weight * soft
        return output


class StateDistillation(torch.nn.Module):
    """A plain encoder's per-instance last-layer states as targets for the demultiplexed ones,
    mixed with the retrieval loss of the priming stage."""

    def __init__(self, teacher_dir: str | Path, student, *, weight: float, pooling: str = "tokens", device=None):
        super().__init__()
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"the distillation weight must lie in [0, 1], got {weight}")
        if pooling not in ("tokens", "mean"):
            raise ValueError(f"state distillation matches every token's states ('tokens') or each instance's "
                             f"mean over its tokens ('mean'), not {pooling!r}")
        try:
            teacher = AutoModel.from_pretrained(teacher_dir, add_pooling_layer=False)
        except TypeError:  # model classes without a pooler
            teacher = AutoModel.from_pretrained(teacher_dir)
        except (OSError, ValueError) as error:
            raise ValueError(f"--teacher {teacher_dir} is not an encoder checkpoint: {error}") from error
        _single_instance(teacher, teacher_dir)
        if teacher.config.hidden_size != student.config.hidden_size:
            raise ValueError(f"the teacher's states have width {teacher.config.hidden_size}, the student's "
                             f"{student.config.hidden_size}: state distillation needs the same width")
        self.teacher = _frozen(teacher, device or next(student.parameters()).device)
        self.weight, self.pooling = float(weight), pooling

    def forward(self, model, batch: dict[str, torch.Tensor]) -> MuxRetrievalOutput:
        inputs = {key: batch[key] for key in _INPUTS if key in batch}
        aux = model(**inputs, output_demuxed=True)  # the model's own forward (a DDP wrapper syncs it)
        real = inputs["attention_mask"].to(torch.float32)
        with torch.no_grad():
            target = self.teacher(**inputs).last_hidden_state
        # Means over real tokens as weighted sums: no data-dependent shape, so no host sync.
        if self.pooling == "mean":
            similarity = F.cosine_similarity(mean_over_tokens(aux.last_hidden_state.float(), real),
                                             mean_over_tokens(target.float(), real), dim=-1).mean()
        else:
            per_token = F.cosine_similarity(aux.last_hidden_state.float(), target.float(), dim=-1)
            similarity = (per_token * real).sum() / real.sum().clamp(min=1)
        aux.loss = (1 - self.weight) * aux.loss + self.weight * (1 - similarity)
        aux.similarity = similarity.detach()  # a declared output field: logged as a curve
        return aux
