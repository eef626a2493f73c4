"""One correlation id follows an edge upload end to end, on PostgreSQL and Redis Streams:
upload → ``edge_intake.evidence.created`` event → the ``evidence_ingest`` expedition the
collector's bridge starts → the collected record → the expedition's completion event → logs.

The edge and collector services run in this process, each with its own platform (store pool,
bus connection, outbox relay), sharing one PostgreSQL schema and one Redis stream prefix the way
separate production processes share a database and a Redis server.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector.store.tables import records
from conclave.edge.app import create_app as create_edge_app
from conclave.platform.bus.redis_streams import RedisStreamsBus
from conclave.platform.runtime import Platform
from tests.collector.conftest import collector_app, collector_settings, wait_terminal
from tests.conftest import Backend, eventually, log_lines
from tests.edge import samples
from tests.edge.conftest import edge_settings
from tests.httpserver import running_server

EVIDENCE_CREATED = "edge_intake.evidence.created"
COMPLETED = "collector.expedition.run.completed"


@pytest.fixture
def production(postgres_engine: AsyncEngine, redis_bus: RedisStreamsBus) -> Backend:
    """PostgreSQL (a schema of this test's own) and Redis Streams (a prefix of its own)."""
    return Backend("production", postgres_engine, redis_bus)


def _upload_arguments(how: str, correlation_id: str) -> dict[str, Any]:
    files = {"file": ("harbour-survey.pdf", samples.pdf(text="Harbour crane survey"))}
    data = {"metadata": json.dumps({"site": "north quay"})}
    headers = {}
    if how == "header":
        headers["X-Correlation-ID"] = correlation_id
    elif how == "form field":
        data["correlation_id"] = correlation_id
    return {"files": files, "data": data, "headers": headers}


@pytest.mark.parametrize("how", ["header", "form field", "request id"])
async def test_an_upload_correlation_id_reaches_the_event_expedition_records_and_logs(
    production: Backend, tmp_path: Path, json_logs: io.StringIO, how: str
) -> None:
    edge = edge_settings(tmp_path / "edge")
    async with (
        Platform.open(edge, engine=production.engine, bus=production.bus) as edge_platform,
        running_server(create_edge_app(edge, platform=edge_platform)) as edge_url,
        collector_app(production, collector_settings(tmp_path / "collector")) as (collector, _),
    ):
        async with httpx.AsyncClient(base_url=edge_url) as uploader:
            response = await uploader.post(
                "/api/edge-intake/document", **_upload_arguments(how, f"flow-{how[0]}-7")
            )
        assert response.status_code == 200, response.text
        [evidence_id] = response.json()["evidence_ids"]
        # Without a correlation id, the upload's request id starts the flow.
        correlation_id = (
            f"flow-{how[0]}-7" if how != "request id" else response.headers["x-request-id"]
        )
        assert response.headers["x-correlation-id"] == (
            correlation_id if how != "form field" else response.headers["x-request-id"]
        )

        # 1. The event on Redis (published by the edge's outbox relay right after the commit).
        async def published() -> list[Any]:
            return await production.bus.read(EVIDENCE_CREATED)

        [event] = await eventually(published, timeout=60)
        assert event.payload["evidence_id"] == evidence_id
        assert event.correlation_id == correlation_id
        assert event.payload["correlation_id"] == correlation_id

        # 2. The expedition the bridge started from it.
        async def bridged() -> list[dict[str, Any]]:
            page = (await collector.get("/expedition/history")).json()
            return page["expeditions"]

        [expedition] = await eventually(bridged, timeout=60)
        assert expedition["expedition_type"] == "evidence_ingest"
        assert expedition["correlation_id"] == correlation_id
        finished = await wait_terminal(collector, expedition["expedition_id"])
        assert finished["status"] == "completed", finished["errors"]

        # 3. The record it produced, through the API and in the table itself.
        record = (await collector.get(f"/collections/evidence/records/{evidence_id}")).json()
        assert record["correlation_id"] == correlation_id
        assert record["expedition_id"] == expedition["expedition_id"]
        assert record["data"]["correlation_id"] == correlation_id
        async with production.engine.connect() as connection:
            stored = (
                await connection.execute(
                    select(records.c.correlation_id, records.c.expedition_id).where(
                        records.c.record_key == evidence_id
                    )
                )
            ).one()
        assert tuple(stored) == (correlation_id, expedition["expedition_id"])

        # 4. The expedition's completion event.
        async def completion() -> list[Any]:
            return [
                e
                for e in await production.bus.read(COMPLETED)
                if e.payload.get("expedition_id") == expedition["expedition_id"]
            ]

        [done] = await eventually(completion, timeout=60)
        assert done.correlation_id == correlation_id

    # 5. The logs: the upload's request and the collector's run both name the flow.
    lines = log_lines(json_logs)
    [finished_line] = [
        line
        for line in lines
        if line.get("expedition_id") == expedition["expedition_id"]
        and line["message"] == "expedition completed"
    ]
    assert finished_line["correlation_id"] == correlation_id
    assert finished_line["expedition_type"] == "evidence_ingest"
