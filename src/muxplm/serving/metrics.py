"""Prometheus metrics of one server (its own registry, so several apps can live in one process)."""

from __future__ import annotations

from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .batcher import BatchStats

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_RATIO_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class ServingMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, max_batch: int, queue_depth: Callable[[], int]):
        self.max_batch = max_batch
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "muxplm_requests", "Prediction requests by HTTP status", ["status"], registry=registry
        )
        self.instances = Counter("muxplm_instances", "Instances (texts) predicted", registry=registry)
        self.latency = Histogram(
            "muxplm_request_latency_seconds", "Time from request arrival to response",
            buckets=_LATENCY_BUCKETS, registry=registry,
        )
        self.batch_seconds = Histogram(
            "muxplm_batch_seconds", "Duration of one multiplexed forward pass",
            buckets=_LATENCY_BUCKETS, registry=registry,
        )
        self.batch_fill = Histogram(
            "muxplm_batch_fill_ratio", "Instances per forward pass / --max-batch",
            buckets=_RATIO_BUCKETS, registry=registry,
        )
        self.slot_fill = Histogram(
            "muxplm_slot_fill_ratio", "Distinct instances / multiplexed slots of a forward pass",
            buckets=_RATIO_BUCKETS, registry=registry,
        )
        self.copies = Counter(
            "muxplm_ensemble_copies", "Empty mux slots filled with copies (load-adaptive ensembling)",
            registry=registry,
        )
        self.failed_batches = Counter("muxplm_failed_batches", "Forward passes that raised", registry=registry)
        depth = Gauge("muxplm_queue_depth", "Instances waiting for the batcher", registry=registry)
        depth.set_function(queue_depth)

    def observe_batch(self, stats: BatchStats) -> None:
        self.batch_seconds.observe(stats.seconds)
        self.batch_fill.observe(min(1.0, stats.instances / self.max_batch))
        self.slot_fill.observe(stats.instances / max(stats.slots, 1))
        self.copies.inc(stats.copies)
        if stats.failed:
            self.failed_batches.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
