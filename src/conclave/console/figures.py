"""A service's vital signs, read from its own ``/health`` and ``/metrics``.

The counters are totals since the service started; the overview page keeps the samples it polled
in the browser and draws rates from their differences, so the console itself stores nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

MAX_METRICS_CHARS = 4 * 1024 * 1024
"""Longest exposition parsed (the parser is pure Python): a service's is tens of kilobytes."""


@dataclass
class Figures:
    """Totals of one service since it started, as its metrics report them."""

    requests: float = 0.0
    server_errors: float = 0.0
    client_errors: float = 0.0
    rate_limited: float = 0.0
    latency_sum_seconds: float = 0.0
    latency_count: float = 0.0
    latency_p99_ms: float | None = None
    loop_lateness_max_ms: float | None = None
    outbox_quarantined: float = 0.0
    bus_lag: float | None = None
    """Entries the service's consumer groups have not acknowledged yet (``None``: it consumes
    nothing, or has not measured yet)."""

    @property
    def latency_mean_ms(self) -> float | None:
        """Mean request duration since start."""
        if not self.latency_count:
            return None
        return 1000 * self.latency_sum_seconds / self.latency_count


def figures_from_metrics(text: str) -> Figures:
    """Read the HTTP, event-loop and outbox figures out of a Prometheus text exposition (any
    service's: names are matched by their suffix, after the ``conclave_<service>_`` prefix)."""
    figures = Figures()
    buckets: dict[float, float] = defaultdict(float)
    if len(text) > MAX_METRICS_CHARS:
        return figures
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if not math.isfinite(value):
                continue
            if name.endswith("_http_requests_total"):
                _count_request(figures, labels.get("status", ""), value)
            elif name.endswith("_http_request_duration_seconds_bucket"):
                buckets[float(labels.get("le", "inf"))] += value
            elif name.endswith("_http_request_duration_seconds_sum"):
                figures.latency_sum_seconds += value
            elif name.endswith("_http_request_duration_seconds_count"):
                figures.latency_count += value
            elif name.endswith("_event_loop_lateness_max_seconds"):
                figures.loop_lateness_max_ms = 1000 * value
            elif name.endswith("_outbox_quarantined_events"):
                figures.outbox_quarantined = value
            elif name.endswith("_bus_consumer_lag_entries"):
                figures.bus_lag = (figures.bus_lag or 0.0) + value
    figures.latency_p99_ms = _quantile_ms(buckets, 0.99)
    return figures


def _count_request(figures: Figures, status: str, value: float) -> None:
    figures.requests += value
    if status.startswith("5"):
        figures.server_errors += value
    elif status == "429":
        figures.rate_limited += value
        figures.client_errors += value
    elif status.startswith("4"):
        figures.client_errors += value


def _quantile_ms(buckets: dict[float, float], quantile: float) -> float | None:
    """The upper bound of the histogram bucket holding ``quantile`` (summed over routes), in
    milliseconds: an upper estimate, as Prometheus' own ``histogram_quantile`` would bracket it."""
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return None
    for bound in sorted(buckets):
        if buckets[bound] >= quantile * total:
            return None if math.isinf(bound) else 1000 * bound
    return None


@dataclass
class Health:
    """A service's ``/health`` answer as the overview shows it."""

    status: str
    checks: dict[str, dict[str, Any]]
    warnings: list[str]
    outbox_pending: float | None = None
    outbox_quarantined: float | None = None


def health_of(body: Any, status_code: int) -> Health:
    """Read a health answer (200 healthy, 503 unhealthy; the graph's carries no checks)."""
    if not isinstance(body, dict):
        return Health("unhealthy" if status_code >= 500 else "unknown", {}, [])
    raw_checks = body.get("checks")
    checks = {
        str(name): check
        for name, check in (raw_checks.items() if isinstance(raw_checks, dict) else [])
        if isinstance(check, dict)
    }
    warnings = [str(item) for item in body.get("warnings", []) if isinstance(item, str)]
    status = str(body.get("status") or ("unhealthy" if status_code >= 500 else "healthy"))
    outbox = checks.get("outbox", {})
    return Health(
        status=status,
        checks=checks,
        warnings=warnings,
        outbox_pending=_number(outbox.get("pending")),
        outbox_quarantined=_number(outbox.get("quarantined")),
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
