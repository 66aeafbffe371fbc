"""Which examples each process trains on, in which order, and their collation: a pure
function of (seed, micro-batch index), so that a resumed run sees exactly the batches an
uninterrupted run would have seen, with or without DataLoader workers."""

from __future__ import annotations

import torch

from .config import TrainConfig


class ShardedBatches:
    """Deterministic per-rank batches: micro-batch ``m`` is slice ``rank`` of global batch
    ``m`` of a permutation drawn per epoch from ``seed`` (a batch is never split unevenly;
    the tail of an epoch that does not fill a global batch is skipped).

    With ``lengths`` (``--group-by-length``), each run of ``LENGTH_POOL`` global batches of the
    permutation is sorted by length before it is cut into batches, and the batches are then
    shuffled: batches of similar lengths, so less padding, in random order."""

    LENGTH_POOL = 50

    def __init__(self, num_examples: int, batch_size: int, world_size: int, rank: int, seed: int,
                 lengths: list[int] | None = None):
        if num_examples < 1:
            raise ValueError("the training set is empty")
        self.num_examples = num_examples
        self.batch_size = batch_size
        self.world_size = world_size
        self.rank = rank
        self.seed = seed
        self.global_batch = batch_size * world_size
        self.batches_per_epoch = max(1, num_examples // self.global_batch)
        self.lengths = torch.as_tensor(lengths) if lengths is not None and num_examples >= self.global_batch else None
        self._epoch, self._perm = -1, None

    def _order(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        perm = torch.randperm(self.num_examples, generator=generator)
        if self.lengths is None:
            return perm
        used = perm[: self.batches_per_epoch * self.global_batch]
        pool = self.LENGTH_POOL * self.global_batch
        chunks = [chunk[torch.argsort(self.lengths[chunk], descending=True, stable=True)] for chunk in used.split(pool)]
        batches = torch.cat(chunks).view(self.batches_per_epoch, self.global_batch)
        return batches[torch.randperm(self.batches_per_epoch, generator=generator)].flatten()

    def indices(self, micro_step: int) -> list[int]:
        epoch, position = divmod(micro_step, self.batches_per_epoch)
        if epoch != self._epoch:
            self._epoch, self._perm = epoch, self._order(epoch)
        start = position * self.global_batch + self.rank * self.batch_size
        # Modulo: a training set smaller than one global batch is cycled through.
        return self._perm[(start + torch.arange(self.batch_size)) % self.num_examples].tolist()


class MicroBatches(torch.utils.data.Dataset):
    """Item ``m`` is this rank's collated micro-batch ``m`` (with its example ids): the examples
    and the collator's random draws depend on ``m`` only, so a ``DataLoader`` over it gives the
    same batches with or without worker processes, and resuming means starting at ``m``."""

    def __init__(self, rows, sampler: ShardedBatches, collate, seed: int):
        self.rows, self.sampler, self.collate, self.seed = rows, sampler, collate, seed

    def __len__(self) -> int:  # only a DataLoader formality: the sampler names the items
        return 2**62

    def __getitem__(self, micro_step: int) -> tuple[list[int], dict[str, torch.Tensor]]:
        ids = self.sampler.indices(micro_step)
        seed_collator(self.collate, (self.seed * 1_000_003 + micro_step) * 1009 + self.sampler.rank)
        return ids, self.collate([self.rows[i] for i in ids])


def micro_batch_loader(rows, collate, sampler: ShardedBatches, config: TrainConfig, first: int, count: int,
                       device: torch.device) -> torch.utils.data.DataLoader:
    """Micro-batches ``first .. first + count - 1`` in order; workers collate ahead of the step
    (``--dataloader-workers``: by default 2 on a GPU, none on a CPU, whose cores train), and
    batches bound for a GPU come in pinned memory."""
    workers = config.dataloader_workers
    if workers is None:
        workers = 2 if device.type == "cuda" else 0
    return torch.utils.data.DataLoader(
        MicroBatches(rows, sampler, collate, config.seed), batch_size=None,
        sampler=range(first, first + count), num_workers=workers, pin_memory=device.type == "cuda",
        # Its own generator: drawing the workers' base seed from the global one would shift the
        # dropout stream of a resumed run against an uninterrupted one.
        generator=torch.Generator().manual_seed(config.seed),
    )


def seed_collator(collate, seed: int) -> None:
    generator = getattr(collate, "generator", None)
    if isinstance(generator, torch.Generator):
        generator.manual_seed(seed)
