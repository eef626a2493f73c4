"""GET /health: the spec's fields and formats, heartbeat counting, 503 when the heartbeat stalls."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta

from conclave import __version__
from tests.conftest import eventually
from tests.graph.conftest import graph_app, graph_settings

SPEC_FIELDS = {
    "status": str,
    "service": str,
    "timestamp": str,
    "version": str,
    "audit_monitoring": str,
    "heartbeat_count": int,
    "last_heartbeat": str,
    "supervisor_anti_restart": str,
}
NO_OFFSET = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?$")


def _naive_utc(text: str) -> datetime:
    assert NO_OFFSET.match(text), text
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


async def test_health_has_exactly_the_spec_fields_and_formats(embedded) -> None:
    async with graph_app(embedded, graph_settings(heartbeat_seconds=30)) as (client, _app):
        response = await client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == set(SPEC_FIELDS)
    for field, kind in SPEC_FIELDS.items():
        assert type(body[field]) is kind, field
    assert body["status"] == "healthy"
    assert body["service"] == "api_graph"
    assert body["version"] == __version__
    assert body["audit_monitoring"] == "disabled"
    assert body["heartbeat_count"] == 0
    assert body["last_heartbeat"] == "never"
    assert body["supervisor_anti_restart"] == "active"
    now = datetime.now(UTC)
    assert abs(_naive_utc(body["timestamp"]) - now) < timedelta(seconds=5)


async def test_heartbeat_counts_and_reports_its_last_beat(backend) -> None:
    settings = graph_settings(heartbeat_seconds=0.05, audit_monitoring=True)
    async with graph_app(backend, settings) as (client, _app):

        async def beaten() -> dict | None:
            body = (await client.get("/health")).json()
            return body if body["heartbeat_count"] >= 3 else None

        body = await eventually(beaten)
        assert body["status"] == "healthy"
        assert body["audit_monitoring"] == "enabled"
        last = _naive_utc(body["last_heartbeat"])
        assert abs(last - datetime.now(UTC)) < timedelta(seconds=5)
        later = await eventually(
            lambda: _more_beats(client, body["heartbeat_count"])  # keeps counting
        )
        assert _naive_utc(later["last_heartbeat"]) > last
        metrics = (await client.get("/metrics")).text
        assert "conclave_graph_heartbeats " in metrics
        assert "conclave_graph_heartbeat_age_seconds " in metrics


async def _more_beats(client, count: int) -> dict | None:
    body = (await client.get("/health")).json()
    return body if body["heartbeat_count"] > count else None


async def test_a_blocked_event_loop_turns_health_503_until_beats_are_on_time(embedded) -> None:
    settings = graph_settings(heartbeat_seconds=0.05, heartbeat_grace_seconds=0.2)
    async with graph_app(embedded, settings) as (client, _app):
        await eventually(lambda: _more_beats(client, 0))
        time.sleep(0.6)  # noqa: ASYNC251 - blocking the loop is the point of this test
        response = await client.get("/health")
        assert response.status_code == 503
        body = response.json()
        assert body["status"] != "healthy"
        assert body["supervisor_anti_restart"] == "stalled"
        assert set(body) == set(SPEC_FIELDS)

        async def recovered() -> bool:
            return (await client.get("/health")).status_code == 200

        await eventually(recovered)


async def test_a_dead_heartbeat_task_turns_health_503(embedded) -> None:
    async with graph_app(embedded, graph_settings(heartbeat_seconds=0.05)) as (client, app):
        assert (await client.get("/health")).status_code == 200
        app.state.graph.heartbeat.stop()
        await asyncio.sleep(0.01)
        response = await client.get("/health")
        assert response.status_code == 503
        assert response.json()["status"] == "unhealthy"
        assert response.json()["supervisor_anti_restart"] == "stopped"
