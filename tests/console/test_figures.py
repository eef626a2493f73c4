"""The overview's figures, read from a real service metrics registry's exposition."""

from __future__ import annotations

from conclave.console.figures import figures_from_metrics, health_of
from conclave.platform.listener import ConsumerMetrics
from conclave.platform.metrics import ServiceMetrics


def test_totals_latency_and_lag_come_from_the_exposition() -> None:
    metrics = ServiceMetrics("collector")
    for status, count in (("200", 95), ("404", 2), ("429", 1), ("503", 2)):
        metrics.child(metrics.http_requests, "GET", "/x", status).inc(count)
    for _ in range(99):
        metrics.child(metrics.http_duration, "GET", "/x").observe(0.004)
    metrics.child(metrics.http_duration, "GET", "/x").observe(2.0)
    metrics.event_loop_lateness_max.set(0.012)
    consumed = ConsumerMetrics(metrics)
    consumed.set_lag("things.created", "indexer", 40)
    consumed.set_lag("things.deleted", "indexer", 2)

    figures = figures_from_metrics(metrics.render().decode())
    assert (figures.requests, figures.server_errors) == (100, 2)
    assert (figures.client_errors, figures.rate_limited) == (3, 1)
    assert figures.latency_p99_ms == 5.0  # the bucket holding the 99th of 100: <= 5 ms
    assert round(figures.latency_mean_ms or 0, 2) == round(1000 * (99 * 0.004 + 2) / 100, 2)
    assert figures.loop_lateness_max_ms == 12.0
    assert figures.bus_lag == 42


def test_a_service_without_traffic_or_consumers_has_no_latency_or_lag() -> None:
    figures = figures_from_metrics(ServiceMetrics("graph").render().decode())
    assert figures.requests == 0 and figures.latency_p99_ms is None
    assert figures.latency_mean_ms is None and figures.bus_lag is None


def test_health_answers_of_every_shape() -> None:
    healthy = health_of(
        {"status": "healthy", "checks": {"outbox": {"status": "up", "pending": 3,
         "quarantined": 1}}, "warnings": ["one quarantined"]}, 200)  # fmt: skip
    assert (healthy.outbox_pending, healthy.outbox_quarantined) == (3, 1)
    assert healthy.warnings == ["one quarantined"]
    assert health_of({"status": "healthy", "heartbeat_count": 2}, 200).checks == {}
    assert health_of(None, 503).status == "unhealthy"
    assert health_of(["not", "a", "dict"], 200).status == "unknown"
    odd = health_of({"checks": {"outbox": {"pending": True}}, "warnings": [1, "w"]}, 503)
    assert odd.status == "unhealthy" and odd.outbox_pending is None and odd.warnings == ["w"]
