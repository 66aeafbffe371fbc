"""Dynamic batching for the server: concurrent requests are collected in a bounded queue
and run together as multiplexed groups of N by one background worker thread.

The worker takes what is waiting, keeps collecting for at most ``max_wait_ms`` or until
``max_batch`` instances, and runs one forward pass over them (the model groups them by N).
When the instances do not fill the last group, the empty slots get companions: recently
served instances, whose outputs are discarded, so that a lone request is multiplexed with real
inputs as in training and in a full batch (with a filler or copies of itself, the demo's N = 2
sentiment model loses 7 points). Before any traffic has been served, copies of the waiting
instances fill the slots and each instance's output is the average over its copies.

Text requests (:meth:`DynamicBatcher.submit_texts`) are tokenized by the worker, all of a
batch in one tokenizer call, and decoded there too: the event loop only parses and answers.

Requests that ask for ``ensemble`` run in a separate pass with the model's ``ensemble=True``.
A failing forward pass fails only the requests of that pass; a text the tokenizer cannot
read, a failing decode and a failing ``on_batch`` callback fail nothing but their own request
(or nothing); no fault stops the worker.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .predictor import Encoded, InputTooLongError, InvalidTextError, Predictor

logger = logging.getLogger(__name__)


class QueueFullError(RuntimeError):
    """The queue holds ``max_queue`` instances; retry after ``retry_after`` seconds."""

    def __init__(self, depth: int, retry_after: int):
        self.depth, self.retry_after = depth, retry_after
        super().__init__(f"server busy: {depth} instances queued; retry in {retry_after} s")


class BatcherClosedError(RuntimeError):
    """The batcher is shutting down and takes no new requests."""


@dataclass
class _Request:
    instances: list[Encoded] | None  # None until the worker tokenizes ``texts``
    ensemble: bool
    size: int
    texts: list[str] | None = None
    pairs: list[str] | None = None
    truncate: bool = False
    future: Future = field(default_factory=Future)


@dataclass
class BatchStats:
    """What one forward pass did, for metrics."""

    requests: int
    instances: int  # distinct instances run
    slots: int  # multiplexed slots used (instances + copies; ensemble passes: N per instance)
    copies: int  # empty slots filled with copies or companions from recent traffic
    seconds: float
    failed: bool


def _renumbered(item, offset: int):
    """An error about input ``offset + i`` of a batch, as one about input ``i`` of its request."""
    return item.at(item.index - offset) if isinstance(item, (InputTooLongError, InvalidTextError)) else item


def fill_with_copies(num_instances: int, group_size: int) -> list[int]:
    """Row order for ``num_instances`` instances padded to a multiple of ``group_size`` with
    copies: ``[0..k-1]`` then the instances again, round robin, until the last group is full.

    >>> fill_with_copies(3, 5)
    [0, 1, 2, 0, 1]
    """
    rows = list(range(num_instances))
    empty = -num_instances % group_size
    rows += [i % num_instances for i in range(empty)]
    return rows


def average_copies(rows: Sequence[int], outputs: Sequence[torch.Tensor], num_instances: int) -> list[torch.Tensor]:
    """Average the outputs of rows that are copies of the same instance."""
    sums: list[torch.Tensor | None] = [None] * num_instances
    counts = [0] * num_instances
    for row, output in zip(rows, outputs):
        sums[row] = output.clone() if sums[row] is None else sums[row] + output
        counts[row] += 1
    return [total if count == 1 else total / count for total, count in zip(sums, counts)]


class DynamicBatcher:
    """Collects requests from many threads / event loops and runs them in multiplexed batches.

    Args:
        predictor: runs the model (:meth:`Predictor.run`).
        max_batch: most instances in one forward pass (and in one request).
        max_wait_ms: longest the worker waits for more requests once one is waiting.
        max_queue: most instances waiting; beyond it :meth:`submit` raises :class:`QueueFullError`.
        fill_slots: fill the last group's empty slots instead of leaving fillers in them: with
            companions from recent traffic when there has been any, else with copies of the
            waiting instances (averaged).
        companions: how many recently served instances are kept as companions for a part-filled
            group (their outputs are discarded); 0 fills with copies only.
        on_batch: called with a :class:`BatchStats` after every forward pass.
    """

    def __init__(
        self,
        predictor: Predictor,
        *,
        max_batch: int = 64,
        max_wait_ms: float = 5.0,
        max_queue: int = 1024,
        fill_slots: bool = True,
        companions: int = 64,
        on_batch: Callable[[BatchStats], None] | None = None,
    ):
        if max_batch < 1 or max_queue < 1 or max_wait_ms < 0:
            raise ValueError("max_batch and max_queue must be >= 1 and max_wait_ms >= 0")
        self.predictor = predictor
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.fill_slots = fill_slots
        self.on_batch = on_batch
        self._pending: deque[_Request] = deque()
        self._depth = 0  # instances waiting
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._rate = 0.0  # recent instances per second, for Retry-After
        # Recently served instances: a lone request shares its group with real inputs like the
        # ones the model was trained and measured with, not with copies of itself or fillers.
        self._recent: deque[Encoded] = deque(maxlen=max(companions, 0))

    # ------------------------------------------------------------------ public

    @property
    def queue_depth(self) -> int:
        return self._depth

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "DynamicBatcher":
        with self._cond:
            if self.running:
                return self
            self._closing = False
            self._thread = threading.Thread(target=self._work, name="muxplm-batcher", daemon=True)
            self._thread.start()
        return self

    def submit(self, instances: Sequence[Encoded], *, ensemble: bool = False) -> Future:
        """Queue one request's tokenized instances; the future resolves to one raw output
        (see :meth:`Predictor.run`) per instance."""
        return self._enqueue(_Request(list(instances), ensemble, len(instances)))

    def submit_texts(
        self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, truncate: bool = False,
        ensemble: bool = False,
    ) -> Future:
        """Queue one request's texts; the worker tokenizes the whole batch in one call and
        decodes, so the future resolves to one prediction dict per text, or fails with
        :class:`InputTooLongError` for this request alone."""
        pairs = list(pairs) if pairs is not None else None
        return self._enqueue(_Request(None, ensemble, len(texts), list(texts), pairs, truncate))

    def _enqueue(self, request: _Request) -> Future:
        if request.size < 1:
            raise ValueError("a request needs at least one instance")
        if request.size > self.max_batch:
            raise ValueError(f"a request may hold at most {self.max_batch} instances, got {request.size}")
        with self._cond:
            if self._closing or not self.running:
                raise BatcherClosedError("the server is shutting down")
            if self._depth + request.size > self.max_queue:
                raise QueueFullError(self._depth, self._retry_after())
            self._pending.append(request)
            self._depth += request.size
            self._cond.notify()
        return request.future

    def close(self, timeout: float | None = None) -> None:
        """Stop taking requests, finish every queued one, then stop the worker."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    # ------------------------------------------------------------------ worker

    def _retry_after(self) -> int:
        # Before the first batch has measured a rate, assume one full batch per second: a
        # multiplexed model drains max_batch instances in well under that on a CPU.
        rate = self._rate if self._rate > 0 else float(self.max_batch)
        return max(1, min(60, math.ceil(self._depth / rate)))

    def _take(self) -> list[_Request] | None:
        """Wait for work, then collect a batch; ``None`` once closed and drained."""
        with self._cond:
            while not self._pending:
                if self._closing:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self.max_wait
            batch, size = [], 0
            while True:
                while self._pending and size + self._pending[0].size <= self.max_batch:
                    request = self._pending.popleft()
                    self._depth -= request.size
                    if request.future.set_running_or_notify_cancel():  # False: the client gave up
                        batch.append(request)
                        size += request.size
                remaining = deadline - time.monotonic()
                full = size >= self.max_batch or (self._pending and size > 0)
                if full or remaining <= 0 or self._closing:
                    if batch or not self._pending:
                        return batch
                    continue  # everything taken was cancelled; take more
                self._cond.wait(remaining)

    def _work(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            if not batch:
                continue
            try:
                self._serve(batch)
            except Exception as error:  # the worker must outlive any fault: answer, then go on
                logger.exception("batch failed outside the model")
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(error)

    def _serve(self, batch: list[_Request]) -> None:
        started = time.perf_counter()
        batch = self._tokenize(batch)
        plain = [r for r in batch if not r.ensemble]
        ensembled = [r for r in batch if r.ensemble]
        if plain:
            self._run(plain, ensemble=False)
        if ensembled:
            self._run(ensembled, ensemble=True)
        elapsed = time.perf_counter() - started
        done = sum(r.size for r in batch)
        rate = done / max(elapsed, 1e-6)
        self._rate = rate if self._rate == 0 else 0.8 * self._rate + 0.2 * rate

    def _tokenize(self, batch: list[_Request]) -> list[_Request]:
        """Tokenize the text requests of a batch, one tokenizer call per (pairs?, truncate)
        kind; a request with an oversized input fails alone. Returns the requests to run."""
        kinds: dict[tuple[bool, bool], list[_Request]] = {}
        for request in batch:
            if request.instances is None:
                kinds.setdefault((request.pairs is not None, request.truncate), []).append(request)
        for (has_pairs, truncate), requests in kinds.items():
            texts = [t for r in requests for t in r.texts]
            pairs = [p for r in requests for p in r.pairs] if has_pairs else None
            try:
                encoded = self.predictor.encode(texts, pairs, truncate=truncate, raise_too_long=False)
            except Exception:
                # Something in one request upset the tokenizer: each request alone, so that
                # only the culprit fails.
                encoded = None
            for request, items in self._split(requests, encoded, truncate):
                bad = next((e for e in items if isinstance(e, Exception)), None)
                if bad is not None:
                    request.future.set_exception(bad)
                else:
                    request.instances = items
        return [r for r in batch if r.instances is not None]

    def _split(self, requests: list[_Request], encoded: list | None, truncate: bool):
        """Each request with its encoded inputs (indices in errors renumbered to the request)."""
        start = 0
        for request in requests:
            if encoded is None:
                try:
                    items = self.predictor.encode(request.texts, request.pairs, truncate=truncate,
                                                  raise_too_long=False)
                except Exception as error:
                    items = [error]
            else:
                items = encoded[start : start + request.size]
                start += request.size
                items = [_renumbered(item, start - request.size) for item in items]
            yield request, items

    def _run(self, requests: list[_Request], *, ensemble: bool) -> None:
        instances = [item for request in requests for item in request.instances]
        n = self.predictor.num_instances
        can_fill = self.fill_slots and not ensemble and self.predictor.task != "reconstruct"
        empty = -len(instances) % n if can_fill else 0
        companions = [self._recent[-1 - i % len(self._recent)] for i in range(empty)] if self._recent else []
        rows = list(range(len(instances)))
        if empty and not companions:
            rows = fill_with_copies(len(instances), n)
        started = time.perf_counter()
        failed = False
        try:
            outputs = self.predictor.run([instances[i] for i in rows] + companions, ensemble=ensemble)
            outputs = outputs[: len(rows)]  # the companions' outputs are not anybody's answer
            if len(rows) > len(instances):
                outputs = average_copies(rows, outputs, len(instances))
            if not ensemble:
                self._recent.extend(instances)
        except Exception as error:  # fail this pass's requests, keep serving
            failed = True
            for request in requests:
                request.future.set_exception(error)
        else:
            start = 0
            for request in requests:
                mine = outputs[start : start + request.size]
                start += request.size
                try:
                    if request.texts is not None:  # text requests get decoded predictions
                        mine = [self.predictor.decode(item, out) for item, out in zip(request.instances, mine)]
                except Exception as error:  # a decoding fault fails its own request only
                    request.future.set_exception(error)
                else:
                    request.future.set_result(mine)
        if self.on_batch is not None:
            slots = len(instances) * n if ensemble else len(rows)
            stats = BatchStats(requests=len(requests), instances=len(instances), slots=-(-slots // n) * n,
                               copies=len(rows) - len(instances) + len(companions),
                               seconds=time.perf_counter() - started, failed=failed)
            try:
                self.on_batch(stats)
            except Exception:  # metrics are not worth a request
                logger.exception("the on_batch callback failed")
