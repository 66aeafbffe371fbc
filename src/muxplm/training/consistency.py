"""Composition consistency (``--consistency-weight``): a MUX model's prediction for an input
should not depend on which other inputs share its forward pass.

Every fine-tuning batch is encoded twice in one forward pass: as it comes, and shuffled (other
companions, other slots). The loss is the task loss over both copies plus ``w`` times the
symmetric KL divergence between the two predictions of every example (token tasks: of every
labelled token; regression: the squared difference). One forward pass over the doubled batch,
not two passes, so a DistributedDataParallel model syncs its gradients once.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.nn import functional as F


def symmetric_kl(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """``0.5 * (KL(p || q) + KL(q || p))`` over the last dimension, one value per position."""
    log_p, log_q = F.log_softmax(first.float(), -1), F.log_softmax(second.float(), -1)
    return 0.5 * ((log_p.exp() * (log_p - log_q)).sum(-1) + (log_q.exp() * (log_q - log_p)).sum(-1))


def second_composition(size: int, num_instances: int) -> torch.Tensor:
    """The order of the batch's second copy: a random permutation, drawn from the global
    generator (whose state the training loop saves and restores), in which no example shares
    a group with itself. The doubled batch is grouped N consecutive slots at a time, so when
    ``size`` is not a multiple of N one group holds the last ``size % N`` examples of the first
    copy and the first ``N - size % N`` of the second: those positions get other examples."""
    shuffle = torch.randperm(size)
    straddle = size % num_instances
    if straddle and size >= num_instances:
        shared = set(range(size - straddle, size))  # first-copy examples in the straddling group
        head = num_instances - straddle
        clashes = [i for i in range(head) if int(shuffle[i]) in shared]
        spare = [j for j in range(head, size) if int(shuffle[j]) not in shared]
        for i, j in zip(clashes, spare):
            shuffle[[i, j]] = shuffle[[j, i]]
    return shuffle


class CompositionConsistency(torch.nn.Module):
    """Task loss over two compositions of the batch plus ``weight`` x their disagreement: a
    loss module for :class:`~muxplm.training.trainer.MuxTrainer`.

    ``inner`` computes one forward pass's output and loss (task distillation, for example);
    by default the model's own loss.
    """

    def __init__(self, weight: float, inner: Callable[[torch.nn.Module, dict[str, torch.Tensor]], Any] | None = None):
        super().__init__()
        if weight < 0:
            raise ValueError(f"the consistency weight must be >= 0, got {weight}")
        self.weight = float(weight)
        self.inner = inner

    def forward(self, model, batch: dict[str, torch.Tensor]):
        size = batch["input_ids"].shape[0]
        num_instances = getattr(model, "module", model).config.num_instances  # a DDP wrapper holds the model
        shuffle = second_composition(size, num_instances).to(batch["input_ids"].device, non_blocking=True)
        doubled = {key: torch.cat([value, value[shuffle]]) for key, value in batch.items()}
        output = self.inner(model, doubled) if self.inner is not None else model(**doubled)
        first = output.logits[:size]
        second = torch.empty_like(first).index_copy_(0, shuffle, output.logits[size:])  # back in batch order
        if first.shape[-1] == 1:  # regression
            gap = (first.float() - second.float()).squeeze(-1) ** 2
        else:
            gap = symmetric_kl(first, second)
        if gap.dim() == 2:  # token task: the positions that carry a label (weights, not a boolean gather: no sync)
            labelled = (batch["labels"] != -100).float()
            gap = (gap * labelled).sum() / labelled.sum().clamp(min=1.0)
        else:
            gap = gap.mean()
        output.loss = output.loss + self.weight * gap
        output.disagreement = gap.detach()  # logged as a curve
        output.logits = first  # one prediction per example, as without consistency
        return output
