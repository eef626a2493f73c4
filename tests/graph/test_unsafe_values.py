"""A dispatch holding a value no store, bus or response can carry is refused before it runs: with
audit monitoring on, nothing is written to the outbox for it, and the audit stream keeps flowing."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI, Response
from sqlalchemy import select

from conclave.graph.events import AUDIT_CHANNEL
from conclave.platform.db.schema import outbox_events
from tests.conftest import eventually
from tests.graph.conftest import graph_app, graph_settings
from tests.httpserver import running_server

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


async def test_a_collector_answer_holding_a_lone_surrogate_is_answered_escaped(embedded) -> None:
    # The collector escapes what it sends, but the graph must not depend on it: a record holding
    # "\ud800" (as JSON text) used to fail the dispatch's answer with a 500.
    stub = FastAPI()

    @stub.get("/collections")
    async def collections() -> dict[str, Any]:
        return {"collections": [{"name": "assets"}]}

    @stub.get("/collections/{name}/records/{key}")
    async def record(name: str, key: str) -> Response:
        text = '{"collection": "%s", "record_key": "%s", "data": {"title": "x\\ud800y"}}'
        return Response((text % (name, key)).encode(), media_type="application/json")

    async with (
        running_server(stub) as url,
        graph_app(embedded, graph_settings(collector_url=url)) as (graph, _app),
    ):
        response = await graph.post(
            "/dispatch", json={"query": "", "validated_entities": ["pump-7"]}
        )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["entities"] == [{"id": "pump-7", "known": True}]
    assert [(item["kind"], item["data"]) for item in body["results"]] == [
        ("record", {"title": "x\\ud800y"})
    ]
