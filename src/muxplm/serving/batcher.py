"""Dynamic batching for the server: concurrent requests are collected in a bounded queue
and run together as multiplexed groups of N by one background worker thread.

The worker takes what is waiting, keeps collecting for at most ``max_wait_ms`` or until
``max_batch`` instances, and runs one forward pass over them, N instances to a group. Which
inputs share a group decides the answers (a multiplexed model reads its N inputs together), so
the composition is a policy:

* **Default**: the waiting instances fill groups in arrival order; concurrent requests may share
  a group. The empty slots of a part-filled group get copies of that group's own instances (each
  instance's output is the average over its copies), or the operator's fixed companion texts
  (``companion_texts``): never another client's earlier traffic, so a lone request's answer
  depends on its own texts only. ``companions=K`` (opt-in) fills them with the K most recently
  served instances instead, as the model saw real inputs in training (outputs discarded).
* **Tenants** (``isolate_tenants``): requests are grouped only with requests of the same tenant
  key (a request without one is a tenant of its own), in the same forward pass.
* **Deterministic**: every instance is run in a group of its own with fixed companions (copies of
  itself, or the companion texts), in a pass of fixed shape (``DETERMINISTIC_GROUPS`` groups,
  padded to a length bucket of the group's own inputs): a text gets the same answer, to the bit,
  whatever else is served.

**Fairness**: requests queue per tenant (the ``tenant`` of a request, the server's
``X-Muxplm-Tenant`` header; requests without one share a queue), whether or not tenants are
isolated. Batches take one request of each tenant in turn, and when the queue is full a request
of a tenant holding less of it than the heaviest tenant takes the place of that tenant's newest
request (which is refused): a tenant that floods the server gets the refusals and the waits, the
others keep their share.

Text requests (:meth:`DynamicBatcher.submit_texts`) are tokenized by the worker, all of a
batch in one tokenizer call, and decoded there too: the event loop only parses and answers.

Requests that ask for ``ensemble`` run in a separate pass with the model's ``ensemble=True``
(one per tenant when tenants are isolated; copies laid out by the batcher when deterministic).
A failing forward pass fails only the requests of that pass; a text the tokenizer cannot
read, a failing decode and a failing ``on_batch`` callback fail nothing but their own request
(or nothing); no fault stops the worker.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .limits import check_wait_ms
from .predictor import Encoded, InputTooLongError, InvalidTextError, Predictor, length_bucket

logger = logging.getLogger(__name__)


class QueueFullError(RuntimeError):
    """The queue holds ``max_queue`` instances; retry after ``retry_after`` seconds."""

    def __init__(self, depth: int, retry_after: int):
        self.depth, self.retry_after = depth, retry_after
        super().__init__(f"server busy: {depth} instances queued; retry in {retry_after} s")


class BatcherClosedError(RuntimeError):
    """The batcher is shutting down and takes no new requests."""


class NonFiniteOutputError(RuntimeError):
    """The model's output for an input holds NaN or infinity: no answer rather than a NaN one."""


@dataclass
class _Request:
    instances: list[Encoded] | None  # None until the worker tokenizes ``texts``
    ensemble: bool
    size: int
    texts: list[str] | None = None
    pairs: list[str] | None = None
    truncate: bool = False
    future: Future = field(default_factory=Future)
    tenant: str | None = None


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


# Deterministic mode: passes of this many groups (plus one that fixes the padded length), whatever
# the load, so that every pass has the same shape and a group's outputs do not depend on the others.
DETERMINISTIC_GROUPS = 8
_RECENT_TENANTS = 1024  # tenants whose recent traffic is kept (companions=K with isolate_tenants)


class DynamicBatcher:
    """Collects requests from many threads / event loops and runs them in multiplexed batches.

    Args:
        predictor: runs the model (:meth:`Predictor.run`).
        max_batch: most instances in one forward pass (and in one request).
        max_wait_ms: longest the worker waits for more requests once one is waiting.
        max_queue: most instances waiting; beyond it :meth:`submit` raises :class:`QueueFullError`,
            or makes room by refusing the newest requests of the tenant holding the most (see the
            module's fairness).
        fill_slots: fill the last group's empty slots instead of leaving fillers in them: with
            companions from recent traffic when there has been any, else with copies of the
            waiting instances (averaged).
        companions: opt-in: how many recently served instances are kept as companions for a
            part-filled group (their outputs are discarded; with ``isolate_tenants``, the tenant's
            own). A request's answer then depends on earlier requests, other clients' included.
            0 (the default): copies, or ``companion_texts``.
        companion_texts: fixed texts (the operator's calibration set) that fill the empty slots of
            part-filled groups, in this order (outputs discarded), instead of copies.
        isolate_tenants: group requests only with requests of the same ``tenant`` (a request
            without a tenant is grouped with nothing but itself).
        deterministic: run each instance in a group of its own with fixed companions, in passes
            of fixed shape: an input's output does not depend on anything else served.
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
        companions: int = 0,
        companion_texts: Sequence[str] | None = None,
        isolate_tenants: bool = False,
        deterministic: bool = False,
        on_batch: Callable[[BatchStats], None] | None = None,
    ):
        if companions < 0:
            raise ValueError(f"companions must be >= 0, got {companions}")
        if companions and companion_texts:
            raise ValueError("companions (recent traffic) and companion_texts are exclusive: choose one")
        if companions and deterministic:
            raise ValueError("deterministic mode cannot use recent traffic as companions (companions=0)")
        if max_batch < 1 or max_queue < 1:
            raise ValueError("max_batch and max_queue must be >= 1")
        if max_queue < max_batch:
            raise ValueError(f"max_queue ({max_queue}) must be at least max_batch ({max_batch}): a request of "
                             f"max_batch instances could never be queued")
        max_wait_ms = check_wait_ms(max_wait_ms)  # nan would spin the worker, inf kill it
        self.predictor = predictor
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.fill_slots = fill_slots
        self.on_batch = on_batch
        # Waiting requests, a queue per tenant (requests without one share a queue), in the order
        # the tenants are served: the front one was served longest ago.
        self._queues: OrderedDict[str | None, deque[_Request]] = OrderedDict()
        self._queued: dict[str | None, int] = {}  # instances waiting, per tenant
        self._depth = 0  # instances waiting, all tenants
        self._light_turn = True  # may the next pass be one of light tenants only (see _pass_tenants)
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._rate = 0.0  # recent instances per second, for Retry-After
        self.isolate_tenants, self.deterministic = isolate_tenants, deterministic
        # Opt-in: recently served instances (per tenant when isolated), so that a lone request
        # shares its group with real inputs like the ones the model was trained with.
        self.companions = companions
        self._recent: OrderedDict[object, deque[Encoded]] = OrderedDict()
        # The operator's fixed companions, tokenized once (cut to the longest input served).
        self.companion_texts = list(companion_texts or [])
        self._fixed: list[Encoded] = []
        if self.companion_texts:
            if any(not text.strip() for text in self.companion_texts):
                raise ValueError("companion_texts holds an empty text")
            self._fixed = predictor.encode(self.companion_texts, truncate=True)
        self._filler = Encoded([], [])  # an all-masked row: enters no mixture
        self._pads: dict[int, Encoded] = {}  # deterministic mode: a row of each padded length

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

    def submit(self, instances: Sequence[Encoded], *, ensemble: bool = False, tenant: str | None = None) -> Future:
        """Queue one request's tokenized instances; the future resolves to one raw output
        (see :meth:`Predictor.run`) per instance. ``tenant``: see ``isolate_tenants``."""
        return self._enqueue(_Request(list(instances), ensemble, len(instances), tenant=tenant))

    def submit_texts(
        self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, truncate: bool = False,
        ensemble: bool = False, tenant: str | None = None,
    ) -> Future:
        """Queue one request's texts; the worker tokenizes the whole batch in one call and
        decodes, so the future resolves to one prediction dict per text, or fails with
        :class:`InputTooLongError` for this request alone."""
        pairs = list(pairs) if pairs is not None else None
        return self._enqueue(_Request(None, ensemble, len(texts), list(texts), pairs, truncate, tenant=tenant))

    def _enqueue(self, request: _Request) -> Future:
        if request.size < 1:
            raise ValueError("a request needs at least one instance")
        if request.size > self.max_batch:
            raise ValueError(f"a request may hold at most {self.max_batch} instances, got {request.size}")
        key = request.tenant
        with self._cond:
            if self._closing or not self.running:
                raise BatcherClosedError("the server is shutting down")
            pushed_out = []
            if self._depth + request.size > self.max_queue:
                pushed_out = self._push_out(key, request.size)
                if pushed_out is None:
                    raise QueueFullError(self._depth, self._retry_after())
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = deque()
            queue.append(request)
            self._queued[key] = self._queued.get(key, 0) + request.size
            self._depth += request.size
            self._cond.notify()
            retry_after = self._retry_after() if pushed_out else 0
        for refused in pushed_out:
            if refused.future.set_running_or_notify_cancel():  # False: its client left already
                refused.future.set_exception(QueueFullError(self._depth, retry_after))
        return request.future

    def _push_out(self, key, size: int) -> list[_Request] | None:
        """Room in the full queue for ``size`` instances of tenant ``key``, made by taking out the
        newest requests of the tenant that holds the most, as long as that tenant holds more than
        ``key`` would: a flooding tenant gets the 429s, and every other keeps its share of the
        queue (max-min fair). Returns the requests taken out (to be refused), or ``None`` when
        ``key`` itself holds the most (the newcomer is refused)."""
        mine = self._queued.get(key, 0) + size
        need = self._depth + size - self.max_queue
        taken: dict[object, int] = {}  # requests to take from the back of each tenant's queue
        left = dict(self._queued)
        while need > 0:
            heaviest = max((k for k in left if k != key), key=left.__getitem__, default=None)
            if heaviest is None or left[heaviest] <= mine:
                return None
            queue = self._queues[heaviest]
            request = queue[-1 - taken.get(heaviest, 0)]
            taken[heaviest] = taken.get(heaviest, 0) + 1
            left[heaviest] -= request.size
            need -= request.size
        pushed = []
        for heaviest, count in taken.items():
            queue = self._queues[heaviest]
            for _ in range(count):
                request = queue.pop()
                pushed.append(request)
                self._queued[heaviest] -= request.size
                self._depth -= request.size
            if not queue:
                del self._queues[heaviest], self._queued[heaviest]
        return pushed

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
            while not self._depth:
                if self._closing:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self.max_wait
            batch, size = [], 0
            tenants = self._pass_tenants()
            while True:
                size = self._collect(batch, size, tenants)
                remaining = deadline - time.monotonic()
                full = size >= self.max_batch or (self._depth and size > 0)  # what waits does not fit
                if full or remaining <= 0 or self._closing:
                    if batch or not self._depth:
                        return batch
                    continue  # everything taken was cancelled; take more
                self._cond.wait(remaining)

    def _pass_tenants(self) -> set | None:
        """The tenants whose requests the next pass may take (``None``: every tenant). When some
        tenants have queued at least their share of a pass (``max_batch`` over the tenants
        waiting) and others less, every other pass takes only the others: a light tenant's
        request waits for the pass under way and runs in a short one of its own, not in a pass
        filled by a flood, and the flooding tenants still get at least every other pass."""
        tenants = None
        if self._light_turn and len(self._queues) > 1:
            share = self.max_batch / len(self._queues)
            light = {key for key, queued in self._queued.items() if queued < share}
            if light and len(light) < len(self._queues):
                tenants = light
        self._light_turn = tenants is None
        return tenants

    def _collect(self, batch: list[_Request], size: int, tenants: set | None = None) -> int:
        """Add waiting requests (of ``tenants``, or any) to ``batch`` (holding ``size`` instances)
        up to ``max_batch``: one request of each tenant in turn, from the tenant served longest
        ago, so that a tenant's request waits for at most one request of each other tenant,
        however many they queued. Returns the batch's new size."""
        queues = self._queues
        progress = True
        while progress and queues and size < self.max_batch:
            progress = False
            for key in list(queues):
                if tenants is not None and key not in tenants:
                    continue
                queue = queues[key]
                request = queue[0]
                if size + request.size > self.max_batch:
                    continue  # first in this tenant's line for the next batch
                queue.popleft()
                self._depth -= request.size
                if queue:
                    self._queued[key] -= request.size
                    queues.move_to_end(key)
                else:
                    del queues[key], self._queued[key]
                progress = True
                if request.future.set_running_or_notify_cancel():  # False: the client gave up
                    batch.append(request)
                    size += request.size
                    if size >= self.max_batch:
                        break
        return size

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
        owner_request = [index for index, request in enumerate(requests) for _ in request.instances]
        started = time.perf_counter()
        sums: list[torch.Tensor | None] = [None] * len(instances)
        counts = [0] * len(instances)
        failures: dict[int, Exception] = {}  # request index -> the error of a pass it was in
        slots = copies = 0
        for rows, owners, as_ensemble in self._plan(requests, instances, ensemble):
            try:
                outputs = self.predictor.run(rows, ensemble=as_ensemble)
            except Exception as error:  # fail this pass's requests, keep serving
                for owner in owners:
                    if owner is not None:
                        failures.setdefault(owner_request[owner], error)
                continue
            n = self.predictor.num_instances
            slots += -(-(len(rows) * (n if as_ensemble else 1)) // n) * n
            if not as_ensemble:
                copies += self._count_copies(rows, owners)
            for owner, output in zip(owners, outputs):
                if owner is None:  # a companion, filler or padding row: nobody's answer
                    continue
                sums[owner] = output if sums[owner] is None else sums[owner] + output
                counts[owner] += 1
        if not ensemble and self.companions:
            self._remember([r for index, r in enumerate(requests) if index not in failures])
        start = 0
        for index, request in enumerate(requests):
            mine = range(start, start + request.size)
            start += request.size
            if index in failures:
                request.future.set_exception(failures[index])
                continue
            outputs = [sums[i] if counts[i] == 1 else sums[i] / counts[i] for i in mine]
            bad = next((k for k, out in enumerate(outputs)
                        if out.is_floating_point() and not bool(torch.isfinite(out).all())), None)
            if bad is not None:
                request.future.set_exception(NonFiniteOutputError(f"the model's output for input {bad} is not finite"))
                continue
            try:
                if request.texts is not None:  # text requests get decoded predictions
                    outputs = [self.predictor.decode(item, out) for item, out in zip(request.instances, outputs)]
            except Exception as error:  # a decoding fault fails its own request only
                request.future.set_exception(error)
            else:
                request.future.set_result(outputs)
        if self.on_batch is not None:
            stats = BatchStats(requests=len(requests), instances=len(instances), slots=slots, copies=copies,
                               seconds=time.perf_counter() - started, failed=bool(failures))
            try:
                self.on_batch(stats)
            except Exception:  # metrics are not worth a request
                logger.exception("the on_batch callback failed")

    def _count_copies(self, rows, owners) -> int:
        """Slots holding a copy of an instance or a companion (not fillers, not padding rows)."""
        seen, count = set(), 0
        pads = {id(row) for row in self._pads.values()}
        for row, owner in zip(rows, owners):
            if owner is None:
                count += row is not self._filler and id(row) not in pads
            elif owner in seen:
                count += 1
            else:
                seen.add(owner)
        return count

    # ------------------------------------------------------------------ composition

    def _can_fill(self) -> bool:
        return self.fill_slots and self.predictor.task != "reconstruct"

    def _scopes(self, requests: list[_Request]) -> list[tuple[object, list[int]]]:
        """The instances (indices into the batch) that may share groups, with the key of their
        scope: one scope for all, or one per tenant (a request without a tenant alone)."""
        if not self.isolate_tenants:
            return [(None, list(range(sum(r.size for r in requests))))]
        scopes: dict[object, list[int]] = {}
        start = 0
        for request in requests:
            key = ("tenant", request.tenant) if request.tenant is not None else ("request", id(request))
            scopes.setdefault(key, []).extend(range(start, start + request.size))
            start += request.size
        return list(scopes.items())

    def _plan(self, requests, instances, ensemble: bool):
        """The forward passes of a batch: ``(rows, owners, ensemble)`` each, ``owners[r]`` the
        batch instance whose output row ``r`` is (averaged over its rows), or ``None``."""
        n = self.predictor.num_instances
        if self.deterministic:
            return self._deterministic_passes(instances, ensemble)
        scopes = self._scopes(requests)
        if ensemble:  # the model lays out the copies; a pass per scope keeps scopes apart
            return [([instances[i] for i in members], members, True) for _, members in scopes]
        rows, owners = [], []
        for key, members in scopes:
            for start in range(0, len(members), n):
                group = members[start : start + n]
                rows += [instances[i] for i in group]
                owners += group
                empty = n - len(group)
                if empty and (len(scopes) > 1 or start + n < len(members) or self._can_fill()):
                    fill_rows, fill_owners = self._fill(group, instances, key, empty)
                    rows += fill_rows
                    owners += fill_owners
        return [(rows, owners, False)]

    def _fill(self, group: list[int], instances, key, empty: int):
        """Rows for the ``empty`` slots of a part-filled group (and whose outputs they are)."""
        if not self._can_fill():
            return [self._filler] * empty, [None] * empty
        if self._fixed:
            return [self._fixed[j % len(self._fixed)] for j in range(empty)], [None] * empty
        recent = self._recent.get(key) if self.companions else None
        if recent:
            return [recent[-1 - j % len(recent)] for j in range(empty)], [None] * empty
        owners = [group[j % len(group)] for j in range(empty)]
        return [instances[i] for i in owners], owners

    def _remember(self, requests: list[_Request]) -> None:
        for request in requests:
            if self.isolate_tenants and request.tenant is None:
                continue  # a request of its own: no later request may share its texts
            key = ("tenant", request.tenant) if self.isolate_tenants else None
            pool = self._recent.get(key)
            if pool is None:
                pool = self._recent[key] = deque(maxlen=self.companions)
                while len(self._recent) > _RECENT_TENANTS:
                    self._recent.popitem(last=False)
            self._recent.move_to_end(key)
            pool.extend(request.instances)

    def _deterministic_passes(self, instances, ensemble: bool):
        """Each instance alone in a group with fixed companions (copies of itself when there
        are no companion texts, or when it asked for an ensemble; fillers when slots are not
        filled), in passes of fixed shape (:func:`deterministic_passes`)."""
        n = self.predictor.num_instances
        groups = []
        for index, item in enumerate(instances):
            if ensemble or (self._can_fill() and not self._fixed):
                groups.append(([item] * n, [index] * n))
            elif self._can_fill():
                groups.append(([item] + [self._fixed[j % len(self._fixed)] for j in range(n - 1)],
                               [index] + [None] * (n - 1)))
            else:
                groups.append(([item] + [self._filler] * (n - 1), [index] + [None] * (n - 1)))
        return [(rows, owners, False) for rows, owners in
                deterministic_passes(groups, num_instances=n, max_length=self.predictor.max_length,
                                     pad_row=self._pad_row)]

    def _pad_row(self, length: int) -> Encoded:
        """A row of ``length`` padding tokens: fixes a deterministic pass's padded length."""
        if length not in self._pads:
            self._pads[length] = padding_row(self.predictor.pad_token_id, length)
        return self._pads[length]


def padding_row(pad_token_id: int, length: int) -> Encoded:
    """A row of ``length`` padding tokens: fixes a deterministic pass's padded length."""
    return Encoded([pad_token_id] * length, [0] * length)


def deterministic_passes(groups: Sequence[tuple[list[Encoded], list]], *, num_instances: int, max_length: int,
                         pad_row: Callable[[int], Encoded]) -> list[tuple[list[Encoded], list]]:
    """Forward passes of fixed shape over ``groups``, each ``(rows, owners)``: one instance and its
    fixed companions, ``num_instances`` rows. Groups of one length bucket go together,
    ``DETERMINISTIC_GROUPS`` to a pass, then unused groups and one more group made of
    ``pad_row(bucket)`` rows, so that a group's outputs depend on its own rows only. Returns
    ``(rows, owners)`` per pass, ``None`` owning the padding rows."""
    by_bucket: dict[int, list[tuple[list[Encoded], list]]] = {}
    for rows, owners in groups:
        bucket = length_bucket(max(len(row) for row in rows), max_length)
        by_bucket.setdefault(bucket, []).append((rows, owners))
    passes = []
    for bucket, chunked in by_bucket.items():
        pad = pad_row(bucket)
        for start in range(0, len(chunked), DETERMINISTIC_GROUPS):
            chunk = chunked[start : start + DETERMINISTIC_GROUPS]
            rows = [row for group_rows, _ in chunk for row in group_rows]
            owners = [owner for _, group_owners in chunk for owner in group_owners]
            padding = (DETERMINISTIC_GROUPS - len(chunk) + 1) * num_instances
            passes.append((rows + [pad] * padding, owners + [None] * padding))
    return passes
