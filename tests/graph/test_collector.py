"""The collector step against the real expedition service, served on a real port."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from conclave.collector.app import create_app as create_collector_app
from conclave.graph.app import create_app as create_graph_app
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings
from tests.conftest import Backend, eventually, serve_app
from tests.graph.conftest import graph_app, graph_settings
from tests.httpserver import running_server

BRIDGES = [
    {"id": "bridge-1", "title": "Stone bridge over the river, flood damage in spring"},
    {"id": "bridge-2", "title": "Steel railway bridge, repainted last year"},
    {"id": "pump-7", "title": "Water pump station near the harbour"},
]


def _collector_settings(data_dir: Path) -> CollectorSettings:
    return CollectorSettings(
        auto_migrate=False,
        auth="disabled",
        outbox_poll_seconds=0.05,
        outbox_max_backoff_seconds=0.2,
        data_dir=data_dir,
        file_roots=[data_dir],
        poll_seconds=0.05,
        scheduler_poll_seconds=0.1,
        load_entry_points=False,
    )


async def _wait_done(client: httpx.AsyncClient, expedition_id: str) -> dict[str, Any]:
    async def finished() -> dict[str, Any] | None:
        body = (await client.get(f"/expedition/status/{expedition_id}")).json()
        return body if body["status"] in ("completed", "failed", "cancelled") else None

    return await eventually(finished, timeout=60)


@asynccontextmanager
async def services(
    backend: Backend, data_dir: Path, **graph_overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """The real collector on a port, seeded with BRIDGES in collection `assets`, and the graph
    app pointing at it; yields (graph client, collector client)."""
    source = data_dir / "assets.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in BRIDGES))
    settings = _collector_settings(data_dir)
    async with Platform.open(settings, engine=backend.engine, bus=backend.bus) as platform:
        collector = create_collector_app(settings, platform=platform)
        async with running_server(collector) as url, httpx.AsyncClient(base_url=url) as api:
            run = {
                "expedition_type": "discovery",
                "target_collections": ["assets"],
                "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
            }
            accepted = (await api.post("/expedition/run", json=run)).json()
            assert (await _wait_done(api, accepted["expedition_id"]))["status"] == "completed"

            async def indexed() -> bool:
                listing = (await api.get("/collections")).json()["collections"]
                return any(c["name"] == "assets" and c["vectors"] == 3 for c in listing)

            await eventually(indexed, timeout=60)
            graph = create_graph_app(
                graph_settings(collector_url=url, **graph_overrides), platform=platform
            )
            async with serve_app(graph) as client:
                yield client, api


async def test_collector_step_returns_records_of_entities_and_matches_of_the_query(
    backend, tmp_path
) -> None:
    async with services(backend, tmp_path) as (graph, _api):
        body = (
            await graph.post(
                "/dispatch",
                json={
                    "query": "find reports about flood damage on the stone bridge",
                    "validated_entities": ["pump-7", {"id": "nowhere-1", "type": "asset"}],
                },
            )
        ).json()
    assert body["degraded"] == []
    assert body["entities"] == [
        {"id": "pump-7", "known": True},
        {"id": "nowhere-1", "type": "asset", "known": False},
    ]
    records = [item for item in body["results"] if item["kind"] == "record"]
    assert [(r["entity"], r["collection"], r["record_key"]) for r in records] == [
        ("pump-7", "assets", "pump-7")
    ]
    assert records[0]["data"]["title"] == BRIDGES[2]["title"]
    matches = [item for item in body["results"] if item["kind"] == "match"]
    assert matches[0]["record_key"] == "bridge-1"
    assert all(m["score"] >= 0.1 for m in matches)
    assert "pump-7" not in [m["record_key"] for m in matches]  # already a record result
    assert not any(item["kind"] == "expedition" for item in body["results"])  # discovery off


async def test_small_talk_looks_up_entities_but_does_not_search(backend, tmp_path) -> None:
    async with services(backend, tmp_path) as (graph, _api):
        body = (
            await graph.post(
                "/dispatch", json={"query": "hello", "validated_entities": ["bridge-2"]}
            )
        ).json()
    assert body["intent"] == "greeting"
    assert [item["kind"] for item in body["results"]] == ["record"]


async def test_unknown_entity_requests_a_discovery_expedition_when_enabled(
    embedded, tmp_path
) -> None:
    (tmp_path / "crane-3.jsonl").write_text(json.dumps({"id": "crane-3", "title": "Crane"}) + "\n")
    sources = [{"type": "file", "path": str(tmp_path / "{entity}.jsonl"), "key": "id"}]
    async with services(
        embedded, tmp_path, discovery_sources=sources, discovery_collection="found"
    ) as (graph, api):
        first = (
            await graph.post(
                "/dispatch", json={"query": "", "validated_entities": ["crane-3", "pump-7"]}
            )
        ).json()
        [expedition] = [item for item in first["results"] if item["kind"] == "expedition"]
        assert expedition["entity"] == "crane-3"
        assert expedition["collection"] == "found"
        assert (await _wait_done(api, expedition["expedition_id"]))["status"] == "completed"
        again = (
            await graph.post("/dispatch", json={"query": "", "validated_entities": ["crane-3"]})
        ).json()
    assert first["entities"][0]["known"] is False
    assert again["entities"] == [{"id": "crane-3", "known": True}]
    [record] = again["results"]
    assert (record["collection"], record["record_key"]) == ("found", "crane-3")


async def test_concurrent_dispatches_keep_their_own_state(embedded, tmp_path) -> None:
    keys = [item["id"] for item in BRIDGES]
    # What is checked is each dispatch's own state, not speed: a budget no loaded machine runs out
    # of (40 dispatches at once on two slow cores passed the default 3 s, and the step degraded).
    overrides = {"collector_search_limit": 0, "collector_timeout_seconds": 60.0}
    async with services(embedded, tmp_path, **overrides) as (graph, _api):

        async def one(index: int) -> tuple[int, dict[str, Any]]:
            entity = keys[index % 3] if index % 2 else f"missing-{index}"
            query = "hello" if index % 3 == 0 else f"what is asset {index}?"
            body = {"query": query, "validated_entities": [entity], "correlation_id": f"c-{index}"}
            return index, (await graph.post("/dispatch", json=body)).json()

        answers = await asyncio.gather(*(one(index) for index in range(40)))
    assert len({body["trace_id"] for _, body in answers}) == 40
    for index, body in answers:
        entity = keys[index % 3] if index % 2 else f"missing-{index}"
        assert body["entities"] == [{"id": entity, "known": bool(index % 2)}]
        assert body["intent"] == ("greeting" if index % 3 == 0 else "question")
        assert [item.get("entity") for item in body["results"]] == ([entity] if index % 2 else [])
        assert body["route"] == "collector_complete"


async def test_lookups_carry_the_dispatch_correlation_id(embedded) -> None:
    seen: list[str | None] = []
    stub = FastAPI()

    @stub.get("/collections")
    async def collections(request: Request) -> dict[str, Any]:
        seen.append(request.headers.get("x-correlation-id"))
        return {"collections": [{"name": "assets"}]}

    @stub.get("/collections/{name}/records/{key}")
    async def record(request: Request, name: str, key: str) -> JSONResponse:
        seen.append(request.headers.get("x-correlation-id"))
        return JSONResponse({"code": "RECORD_NOT_FOUND"}, status_code=404)

    async with (
        running_server(stub) as url,
        graph_app(embedded, graph_settings(collector_url=url)) as (graph, _app),
    ):
        response = await graph.post(
            "/dispatch",
            json={"query": "", "validated_entities": ["pump-7"]},
            headers={"X-Correlation-ID": "corr-lookup-1"},
        )
    assert response.status_code == 200
    assert seen and set(seen) == {"corr-lookup-1"}


async def test_an_entity_id_stays_one_path_segment_of_the_record_lookup(embedded) -> None:
    # ".." used to make the graph ask GET /collections/assets (the collection, not a record),
    # with its service token, and take the answer for a record.
    paths: list[str] = []
    stub = FastAPI()

    @stub.get("/{path:path}")
    async def anything(request: Request, path: str) -> JSONResponse:
        paths.append(request.scope["raw_path"].decode())
        if path == "collections":
            return JSONResponse({"collections": [{"name": "assets"}]})
        if path == "collections/assets":
            return JSONResponse({"collection": "assets", "record_key": "not-a-record"})
        return JSONResponse({"code": "RECORD_NOT_FOUND"}, status_code=404)

    async with (
        running_server(stub) as url,
        graph_app(embedded, graph_settings(collector_url=url)) as (graph, _app),
    ):
        response = await graph.post(
            "/dispatch", json={"query": "", "validated_entities": ["..", "a/b?c#d"]}
        )
    assert response.status_code == 200, response.text
    assert sorted(paths) == [
        "/collections",
        "/collections/assets/records/%2E%2E",
        "/collections/assets/records/a%2Fb%3Fc%23d",
    ]
    assert "not-a-record" not in response.text


async def test_dispatches_sharing_a_graph_run_keep_their_own_correlation_ids(embedded) -> None:
    seen: dict[str, str | None] = {}
    stub = FastAPI()

    @stub.get("/collections")
    async def collections() -> dict[str, Any]:
        return {"collections": [{"name": "assets"}]}

    @stub.get("/collections/{name}/records/{key}")
    async def record(request: Request, name: str, key: str) -> JSONResponse:
        seen[key] = request.headers.get("x-correlation-id")
        return JSONResponse({"code": "RECORD_NOT_FOUND"}, status_code=404)

    async with (
        running_server(stub) as url,
        graph_app(embedded, graph_settings(collector_url=url)) as (graph, app),
    ):
        answers = await asyncio.gather(
            *(
                graph.post(
                    "/dispatch",
                    json={"query": "", "validated_entities": [f"pump-{index}"]},
                    headers={"X-Correlation-ID": f"corr-{index}"},
                )
                for index in range(8)
            )
        )
        metrics = (await graph.get("/metrics")).text
    assert [answer.status_code for answer in answers] == [200] * 8
    assert seen == {f"pump-{index}": f"corr-{index}" for index in range(8)}
    assert app.state.graph.runner.mode == "coalesced"
    runs = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("conclave_graph_run_dispatches_count")
    )
    assert runs < 1 + 8  # the start-up run, then the dispatches shared runs
