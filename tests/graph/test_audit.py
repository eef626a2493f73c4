"""Audit monitoring: every dispatch publishes `graph.dispatch.completed` through the outbox."""

from __future__ import annotations

import json

from conclave.graph.events import AUDIT_CHANNEL
from tests.conftest import eventually
from tests.graph.conftest import graph_app, graph_settings


async def test_every_dispatch_publishes_an_audit_event(backend, request) -> None:
    settings = graph_settings(audit_monitoring=True, auth="enabled", api_tokens="tok=alice")
    headers = {"Authorization": "Bearer tok", "X-Correlation-ID": "corr-7"}
    async with graph_app(backend, settings) as (client, _app):
        first = (
            await client.post(
                "/dispatch",
                json={"query": "hello", "validated_entities": ["e1"]},
                headers=headers,
            )
        ).json()
        second = (
            await client.post(
                "/dispatch", json={"query": "", "correlation_id": "own-id"}, headers=headers
            )
        ).json()

        async def published() -> list:
            events = await backend.bus.read(AUDIT_CHANNEL)
            return events if len(events) == 2 else []

        events = await eventually(published)
    payloads = {event.payload["trace_id"]: event for event in events}
    event = payloads[first["trace_id"]]
    assert event.source == "graph"
    assert event.correlation_id == "corr-7"
    assert event.payload["route"] == "collector_complete"
    assert event.payload["intent"] == "greeting"
    assert event.payload["intent_confidence"] == first["intent_confidence"]
    assert event.payload["duration_ms"] == first["duration_ms"]
    assert event.payload["user_id"] == "alice"
    assert event.payload["entity_ids"] == ["e1"]
    assert event.payload["degraded"] == ["collector"]
    assert "query" not in event.payload
    assert payloads[second["trace_id"]].correlation_id == "own-id"
    assert payloads[second["trace_id"]].payload["intent"] == "unknown"
    if backend.name == "production":
        redis = request.getfixturevalue("redis_client")
        prefix = request.getfixturevalue("redis_prefix")
        entries = await redis.xrange(f"{prefix}{AUDIT_CHANNEL}")
        assert len(entries) == 2
        assert json.loads(entries[0][1]["payload"])["route"] == "collector_complete"


async def test_no_audit_event_when_monitoring_is_disabled(embedded) -> None:
    async with graph_app(embedded, graph_settings()) as (client, _app):
        assert (await client.post("/dispatch", json={"query": "hello"})).status_code == 200
        assert (await client.get("/health")).json()["audit_monitoring"] == "disabled"
    assert await embedded.bus.read(AUDIT_CHANNEL) == []
