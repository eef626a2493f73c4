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

MAX_METRICS_BYTES = 512 * 1024
"""Largest exposition read (the parser is pure Python): a service's is tens of kilobytes."""
MAX_HEALTH_BYTES = 256 * 1024
"""Largest ``/health`` answer read: a service's is a few hundred bytes."""
SHOWN_WARNINGS = 10
SHOWN_CHECKS = 12
SHOWN_TEXT = 300
_WANTED = (
    "_http_requests_total",
    "_http_request_duration_seconds_bucket",
    "_http_request_duration_seconds_sum",
    "_http_request_duration_seconds_count",
    "_event_loop_lateness_max_seconds",
    "_outbox_quarantined_events",
    "_bus_consumer_lag_entries",
)


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


def figures_from_metrics(text: str) -> Figures | None:
    """Read the HTTP, event-loop, outbox and bus figures out of a Prometheus text exposition
    (any service's: names are matched by their suffix, after the ``conclave_<service>_``
    prefix); ``None`` when it is not an exposition. Only the samples read here are parsed: the
    lines of every other metric are dropped first."""
    figures = Figures()
    buckets: dict[float, float] = defaultdict(float)
    kept = "\n".join(line for line in text.splitlines() if _wanted(line))
    if not kept:
        return None  # every service exposes at least its event-loop gauge: this is none
    try:
        for family in text_string_to_metric_families(kept):
            for sample in family.samples:
                _read(figures, buckets, sample.name, sample.labels, sample.value)
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    figures.latency_p99_ms = _quantile_ms(buckets, 0.99)
    return figures


def _wanted(line: str) -> bool:
    name = line.split("{", 1)[0].split(" ", 1)[0]
    return name.endswith(_WANTED)


def _read(
    figures: Figures, buckets: dict[float, float], name: str, labels: dict[str, str], value: float
) -> None:
    if not math.isfinite(value):
        return
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
    """Read a health answer (200 healthy, 503 unhealthy; the graph's carries no checks). Any
    shape is read without failing: what is not as expected is left out, and what is shown is
    bounded (a few checks and warnings, each cut short)."""
    if not isinstance(body, dict):
        return Health("unhealthy" if status_code >= 500 else "unknown", {}, [])
    raw_checks = body.get("checks")
    checks = {
        _short(name): {_short(key): _short(value) for key, value in list(check.items())[:8]}
        for name, check in (list(raw_checks.items()) if isinstance(raw_checks, dict) else [])[
            :SHOWN_CHECKS
        ]
        if isinstance(check, dict)
    }
    raw_warnings = body.get("warnings")
    warnings = [
        _short(item)
        for item in (raw_warnings if isinstance(raw_warnings, list) else [])[:SHOWN_WARNINGS]
        if isinstance(item, str)
    ]
    status = _short(body.get("status") or ("unhealthy" if status_code >= 500 else "healthy"))
    outbox = raw_checks.get("outbox") if isinstance(raw_checks, dict) else None
    outbox = outbox if isinstance(outbox, dict) else {}
    return Health(
        status=status,
        checks=checks,
        warnings=warnings,
        outbox_pending=_number(outbox.get("pending")),
        outbox_quarantined=_number(outbox.get("quarantined")),
    )


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)[:SHOWN_TEXT]
    return text[:SHOWN_TEXT]


def _number(value: Any) -> float | None:
    """A finite count, or ``None`` (not a number, non-finite, too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
