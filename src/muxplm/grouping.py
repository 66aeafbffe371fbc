"""The one place that groups a batch into multiplexed groups and ungroups the results.

A batch of B instances becomes G = ceil(B / N) groups of N *slots*; slot ``g * N + i`` is
instance ``i`` of group ``g``. When B is not a multiple of N, the last slots hold fillers
whose outputs are dropped. An optional seeded permutation decides which instances share a
group (the paper evaluates over several such compositions); outputs always come back in
input order.

Ensembling repeats every instance N times ("copies"): copy ``c`` puts the instance that sits
in slot ``i`` of group ``g`` of copy 0 into slot ``(i + c) % N`` of group ``(g + c * i) % G``,
a Latin-square layout that gives every copy a different slot and, mostly, different
companions. The N outputs of an instance are then averaged.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


@dataclass
class GroupPlan:
    """Where each instance of a batch sits among the multiplexed slots.

    Attributes:
        order: ``[num_slots]`` batch index held by each slot (fillers point at row 0).
        is_real: ``[num_slots]`` False for filler slots.
        slot_of: ``[num_copies * B]`` slot of each (copy, instance) output row, copy-major.
    """

    order: torch.Tensor
    is_real: torch.Tensor
    slot_of: torch.Tensor
    batch_size: int
    num_instances: int
    num_copies: int
    has_fillers: bool

    @property
    def num_slots(self) -> int:
        return self.order.numel()

    @property
    def num_groups(self) -> int:
        return self.num_slots // self.num_instances

    def group(self, batch_tensor: torch.Tensor, fill_value=0) -> torch.Tensor:
        """``[B, ...] -> [num_slots, ...]``; filler slots get ``fill_value``."""
        slots = batch_tensor[self.order]
        if self.has_fillers:
            keep = self.is_real.view(-1, *([1] * (slots.dim() - 1)))
            slots = torch.where(keep, slots, torch.full_like(slots, fill_value))
        return slots

    def ungroup(self, slot_tensor: torch.Tensor) -> torch.Tensor:
        """``[num_slots, ...] -> [num_copies * B, ...]`` in input order, fillers dropped."""
        return slot_tensor[self.slot_of]

    def reduce_copies(self, rows: torch.Tensor) -> torch.Tensor:
        """Average the copies of each instance: ``[num_copies * B, ...] -> [B, ...]``."""
        if self.num_copies == 1:
            return rows
        return rows.view(self.num_copies, self.batch_size, *rows.shape[1:]).mean(dim=0)


def plan_groups(
    batch_size: int,
    num_instances: int,
    *,
    seed: int | None = None,
    ensemble: bool = False,
    device: torch.device | str | None = None,
) -> GroupPlan:
    """Plan the grouping of ``batch_size`` instances into groups of ``num_instances``.

    Args:
        seed: if given, instances are shuffled with a generator seeded by it before grouping,
            so the same seed always gives the same composition.
        ensemble: repeat each instance ``num_instances`` times (see the module docstring).

    Plans are cached (they are small and never modified), so a serving or benchmark loop
    with recurring batch shapes builds each one once, not on every forward pass.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    batch_size, num_instances = int(batch_size), int(num_instances)
    if batch_size < 1:
        raise ValueError(f"cannot group an empty batch (batch_size={batch_size})")
    padded = -(-batch_size // num_instances) * num_instances
    order, is_real, slot_of = _plan_tensors(batch_size, num_instances, None if seed is None else int(seed),
                                            bool(ensemble), device)
    return GroupPlan(order=order, is_real=is_real, slot_of=slot_of, batch_size=batch_size,
                     num_instances=num_instances, num_copies=order.numel() // padded,
                     has_fillers=padded > batch_size)


# Under torch.compile a plan is data, not computation (it depends on Python values only): the
# compiler calls this eagerly and bakes its tensors into the graph, which then reads nothing
# back from the device.
@torch.compiler.assume_constant_result
def _plan_tensors(batch_size: int, num_instances: int, seed: int | None, ensemble: bool, device):
    # A plan first built under inference_mode must still serve later autograd passes, so its
    # tensors are always created as normal tensors.
    with torch.inference_mode(False):
        return _cached_plan(batch_size, num_instances, seed, ensemble, device)


@functools.lru_cache(maxsize=256)
def _cached_plan(batch_size: int, num_instances: int, seed: int | None, ensemble: bool,
                 device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = num_instances
    num_groups = -(-batch_size // n)
    padded = num_groups * n

    if seed is None:
        base = torch.arange(batch_size)
    else:
        base = torch.randperm(batch_size, generator=torch.Generator().manual_seed(int(seed)))
    # Position p in the padded sequence -> instance index (or -1 for a filler).
    instance_at = torch.full((padded,), -1, dtype=torch.long)
    instance_at[:batch_size] = base

    num_copies = n if ensemble and n > 1 else 1
    positions = torch.arange(padded)
    group, slot = positions // n, positions % n
    order = torch.empty(num_copies * padded, dtype=torch.long)
    slot_of = torch.empty(num_copies * batch_size, dtype=torch.long)
    for copy in range(num_copies):
        target = copy * padded + ((group + copy * slot) % num_groups) * n + (slot + copy) % n
        order[target] = instance_at
        real = instance_at >= 0
        slot_of[copy * batch_size + instance_at[real]] = target[real]

    is_real = order >= 0
    return order.clamp(min=0).to(device), is_real.to(device), slot_of.to(device)
