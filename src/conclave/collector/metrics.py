"""Prometheus metrics of the expedition service (``conclave_collector_*``).

Label values are bounded: expedition types come from the registry, statuses and outcomes are
fixed sets; collection names (user data) are never labels.
"""

from __future__ import annotations

from conclave.platform.listener import ConsumerMetrics
from conclave.platform.metrics import ServiceMetrics

_DURATION_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class CollectorMetrics(ServiceMetrics):
    """HTTP metrics plus expeditions, durations, queue depth, records, vectors and bus events."""

    def __init__(self) -> None:
        super().__init__("collector")
        self.expeditions = self.counter(
            "expeditions_total",
            "Expeditions that reached a state in this process, by type and status.",
            ["type", "status"],
        )
        self.active = self.gauge("expeditions_active", "Expeditions running in this process.")
        self.duration = self.histogram(
            "expedition_duration_seconds",
            "Run time of finished expeditions by type.",
            ["type"],
            buckets=_DURATION_BUCKETS,
        )
        self.queue_depth = self.gauge("queue_depth", "Queued expeditions (all processes).")
        self.records = self.counter(
            "records_collected_total",
            "Records bound by outcome (inserted, updated, unchanged, rejected).",
            ["outcome"],
        )
        self.vectors = self.counter("vectors_written_total", "Points written to semantic memory.")
        self.vector_errors = self.counter(
            "vector_write_errors_total", "Failed attempts to write to semantic memory."
        )
        self.consumed = ConsumerMetrics(self)
