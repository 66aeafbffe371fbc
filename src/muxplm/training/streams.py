"""Training on a stream (``datasets.IterableDataset``): each process reads its own share, in a
shuffled order that a checkpoint resumes exactly."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import torch


class ShuffledStream(torch.utils.data.IterableDataset):
    """A stream's rows (this rank's share of a ``datasets.IterableDataset``) in a shuffled order
    that a checkpoint can resume exactly: read ``window`` rows at a time, each window permuted by
    (seed, epoch, window index). Its state is the source's state where the window began and the
    position in it; a resume reads that window again and goes on from the position. (A shuffle
    buffer would lose its contents on resume.)"""

    def __init__(self, source, seed: int, window: int = 10_000):
        self.source, self.seed, self.window, self.epoch = source, seed, window, 0
        self.position: dict[str, Any] = {"epoch": 0, "source": None, "window": 0, "taken": 0}
        self._resume: dict[str, Any] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.source.set_epoch(epoch)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._resume = dict(state)
        self.set_epoch(state["epoch"])

    def state_dict(self) -> dict[str, Any]:
        return dict(self.position)

    def __iter__(self):
        start = self._resume or {"source": None, "window": 0, "taken": 0}
        self._resume = None
        if start["source"] is not None:
            self.source.load_state_dict(start["source"])
        rows, index, taken, at = iter(self.source), start["window"], start["taken"], start["source"]
        while True:
            window = list(itertools.islice(rows, self.window))
            if not window:
                return
            order = torch.randperm(len(window), generator=torch.Generator().manual_seed(
                (self.seed * 1_000_003 + self.epoch) * 1_000_003 + index)).tolist()
            for k in range(taken, len(window)):
                self.position = {"epoch": self.epoch, "source": at, "window": index, "taken": k + 1}
                yield window[order[k]]
            at, index, taken = copy.deepcopy(self.source.state_dict()), index + 1, 0


class StreamLoader(torch.utils.data.DataLoader):
    """This rank's micro-batches of a stream: ``batch_size`` rows of a :class:`ShuffledStream`,
    collated with random draws seeded by the micro-batch's index (as :class:`MicroBatches`)."""

    def __init__(self, stream: ShuffledStream, collate, batch_size: int, seed: int, rank: int, first: int = 0):
        self.stream, self.collate_rows, self.seed, self.rank, self.micro_step = stream, collate, seed, rank, first
        self.epoch_offset = 0
        super().__init__(stream, batch_size=batch_size, collate_fn=self._collate, num_workers=0)

    def _collate(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        generator = getattr(self.collate_rows, "generator", None)
        if isinstance(generator, torch.Generator):
            generator.manual_seed((self.seed * 1_000_003 + self.micro_step) * 1009 + self.rank)
        self.micro_step += 1
        return self.collate_rows(rows)

    def set_epoch(self, epoch: int) -> None:
        self.stream.set_epoch(epoch + self.epoch_offset)


def is_stream(rows) -> bool:
    try:
        from datasets import IterableDataset
    except ImportError:
        return False
    return isinstance(rows, IterableDataset)
