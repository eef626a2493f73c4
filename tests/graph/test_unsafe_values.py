"""A dispatch holding a value no store, bus or response can carry is refused before it runs: with
audit monitoring on, nothing is written to the outbox for it, and the audit stream keeps flowing."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from conclave.graph.service import AUDIT_CHANNEL
from conclave.platform.db.schema import outbox_events
from tests.conftest import eventually
from tests.graph.conftest import graph_app, graph_settings

HEADERS = {"Authorization": "Bearer tok", "content-type": "application/json"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"query": "hello", "validated_entities": ["\\ud800"]}', "body.validated_entities.0"),
        (b'{"query": "hello\\udfff"}', "body.query"),
        (b'{"query": "a\\u0000b"}', "body.query"),
        (b'{"query": "hello", "correlation_id": "\\ud800"}', "body.correlation_id"),
    ],
)
async def test_an_unsafe_dispatch_is_refused_and_audits_nothing(backend, body, field) -> None:
    settings = graph_settings(audit_monitoring=True, auth="enabled", api_tokens="tok=alice")
    async with graph_app(backend, settings) as (client, _app):
        refused = await client.post("/dispatch", content=body, headers=HEADERS)
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert problem["code"] == "UNSAFE_INPUT"
        assert problem["errors"][0]["field"] == field

        answered = await client.post("/dispatch", json={"query": "hello"}, headers=HEADERS)
        assert answered.status_code == 200
        trace_id = answered.json()["trace_id"]

        async def published() -> list:
            return await backend.bus.read(AUDIT_CHANNEL)

        events = await eventually(published)
    assert [event.payload["trace_id"] for event in events] == [trace_id]
    async with backend.engine.connect() as connection:
        rows = (await connection.execute(select(outbox_events.c.channel))).all()
    assert [row.channel for row in rows] == [AUDIT_CHANNEL]
