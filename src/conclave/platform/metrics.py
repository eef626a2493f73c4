"""Prometheus helpers: one registry per service app, names ``conclave_<service>_<name>_<unit>``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from conclave.platform.event_loop_probe import PROBE_INTERVAL_SECONDS

# Latency buckets from sub-millisecond (in-process tools) up to the longest time-outs.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

# Event-loop lateness (platform/event_loop_probe.py): fine-grained around the 20 ms a service's
# loop may be held at most, up to the second beyond which a stall is simply "too long".
LATENESS_BUCKETS = (
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
)


class ServiceMetrics:
    """A service's metric registry. Separate registries let four services share one process."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.http_requests = self.counter(
            "http_requests_total",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
        )
        self.http_duration = self.histogram(
            "http_request_duration_seconds",
            "HTTP request duration by route template.",
            ["method", "route"],
        )
        self.event_loop_lateness = self.histogram(
            "event_loop_lateness_seconds",
            "How much later than due the event loop woke the lateness probe, which sleeps "
            f"{PROBE_INTERVAL_SECONDS * 1000:g} ms at a time while the service serves.",
            buckets=LATENESS_BUCKETS,
        )
        self.event_loop_lateness_max = self.gauge(
            "event_loop_lateness_max_seconds",
            "The largest event-loop lateness since the service began serving.",
        )

    def child(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(*labels)``, remembered. prometheus_client validates the values and
        takes a lock on every ``labels`` call (a few microseconds, several times per request);
        label values here are bounded sets, so the cache is too."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def name(self, suffix: str) -> str:
        """The full metric name for ``suffix``."""
        return f"conclave_{self.service}_{suffix}"

    def counter(self, suffix: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        """A counter registered on this service's registry (``suffix`` ends in ``_total``)."""
        name = self.name(suffix.removesuffix("_total"))
        return Counter(name, documentation, labels, registry=self.registry)

    def histogram(
        self,
        suffix: str,
        documentation: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> Histogram:
        """A histogram registered on this service's registry."""
        return Histogram(
            self.name(suffix), documentation, labels, registry=self.registry, buckets=buckets
        )

    def gauge(self, suffix: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        """A gauge registered on this service's registry."""
        return Gauge(self.name(suffix), documentation, labels, registry=self.registry)

    def read_at_scrape(self, readings: Sequence[Reading]) -> Callable[[], None]:
        """Register metrics whose values are read from live objects when scraped (nothing to do
        where the values change); returns the function that unregisters them."""
        named = [(self.name(r.suffix.removesuffix("_total")), r) for r in readings]
        collector = _ReadAtScrape(named)
        self.registry.register(collector)
        return lambda: self.registry.unregister(collector)

    def render(self) -> bytes:
        """The text exposition of every metric of this service."""
        return generate_latest(self.registry)


@dataclass(frozen=True)
class Reading:
    """A counter or gauge whose value ``read`` returns at scrape time (``suffix`` as for
    :meth:`ServiceMetrics.counter` / :meth:`ServiceMetrics.gauge`)."""

    kind: Literal["counter", "gauge"]
    suffix: str
    documentation: str
    read: Callable[[], float]


class _ReadAtScrape(Collector):
    def __init__(self, readings: Sequence[tuple[str, Reading]]) -> None:
        self._readings = readings

    def collect(self) -> Iterator[Metric]:
        for name, reading in self._readings:
            if reading.kind == "counter":
                yield CounterMetricFamily(name, reading.documentation, value=reading.read())
            else:
                yield GaugeMetricFamily(name, reading.documentation, value=reading.read())
