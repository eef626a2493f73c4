"""The `evidence` source reads Evidence Packs from the real edge service over HTTP."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from conclave.edge.app import create_app as create_edge_app
from conclave.platform.runtime import Platform
from tests.collector.conftest import collector_app, collector_settings, wait_terminal
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_settings, form
from tests.httpserver import running_server


async def test_uploaded_pack_becomes_a_record_through_the_edge_api(
    backend: Backend, tmp_path
) -> None:
    edge = edge_settings(tmp_path / "edge")
    async with (
        Platform.open(edge, engine=backend.engine, bus=backend.bus) as platform,
        running_server(create_edge_app(edge, platform=platform)) as edge_url,
    ):
        async with httpx.AsyncClient(base_url=edge_url) as uploader:
            response = await uploader.post(
                "/api/edge-intake/document",
                **form(("survey.pdf", samples.pdf(text="Dam survey")), {"site": "upper dam"}),
            )
        assert response.status_code == 200, response.text
        [evidence_id] = response.json()["evidence_ids"]

        # The bridge is off: only the expeditions below read the edge service.
        settings = collector_settings(
            tmp_path / "collector", edge_api_base=edge_url, bridge_channels={}
        )
        async with collector_app(backend, settings) as (client, _app):
            ingest = await client.post(
                "/expedition/run",
                json={
                    "expedition_type": "evidence_ingest",
                    "parameters": {"evidence_ids": [evidence_id]},
                },
            )
            discovery = await client.post(
                "/expedition/run",
                json={
                    "expedition_type": "discovery",
                    "target_collections": ["packs"],
                    "parameters": {
                        "sources": [{"type": "evidence", "limit": 10, "key": "evidence_id"}]
                    },
                },
            )
            for accepted in (ingest, discovery):
                record = await wait_terminal(client, accepted.json()["expedition_id"])
                assert record["status"] == "completed", record["errors"]
                assert record["results"]["records"]["inserted"] == 1
            for collection in ("evidence", "packs"):
                stored = await client.get(f"/collections/{collection}/records/{evidence_id}")
                assert stored.status_code == 200
                data = stored.json()["data"]
                assert data["filename"] == "survey.pdf"
                assert data["metadata"]["site"] == "upper dam"


PACK_ID = "0b9e2c1a-5f3d-4c8e-9a7b-1d2e3f405162"
HOSTILE_IDS: list[Any] = [
    "../pipeline",
    "..%2Fpipeline",
    "%2e%2e/pipeline",
    f"{PACK_ID}/../../pipeline",
    f"{PACK_ID}?limit=500",
    f"{PACK_ID}#x",
    PACK_ID.upper(),
    "{" + PACK_ID + "}",
    f"urn:uuid:{PACK_ID}",
    PACK_ID.replace("-", ""),
    "",
    7,
]


def recording_edge(listed: list[Any], seen: list[str]) -> Starlette:
    """A stand-in edge that answers every path and records the raw path of each request."""

    async def anything(request: Request) -> JSONResponse:
        seen.append(request.scope["raw_path"].decode())
        if request.url.path == "/api/edge-intake/events":
            return JSONResponse({"events": [{"evidence_id": i} for i in listed]})
        return JSONResponse({"evidence_id": request.url.path.rsplit("/", 1)[-1], "leak": True})

    return Starlette(routes=[Route("/{rest:path}", anything)])


def _ingest(ids: Any) -> dict[str, Any]:
    return {"expedition_type": "evidence_ingest", "parameters": {"evidence_ids": ids}}


def _discovery(**spec: Any) -> dict[str, Any]:
    source = {"type": "evidence", "key": "evidence_id", **spec}
    return {"expedition_type": "discovery", "parameters": {"sources": [source]}}


async def test_evidence_ids_are_pack_ids_and_reach_no_other_edge_path(
    backend: Backend, tmp_path
) -> None:
    seen: list[str] = []
    listed: list[Any] = []
    async with running_server(recording_edge(listed, seen)) as edge_url:
        settings = collector_settings(tmp_path, edge_api_base=edge_url, bridge_channels={})
        async with collector_app(backend, settings) as (client, _app):
            for ids in [*([hostile] for hostile in HOSTILE_IDS), [], [PACK_ID] * 501, PACK_ID]:
                for body in (_ingest(ids), _discovery(evidence_ids=ids)):
                    refused = await client.post("/expedition/run", json=body)
                    assert refused.status_code == 422, (ids, refused.text)
                    assert refused.json()["code"] == "INVALID_PARAMETERS"
                    assert "Evidence Pack ids" in refused.json()["detail"]
            assert (await client.get("/expedition/history")).json()["count"] == 0
            assert seen == []

            # The edge's own listing does not steer the collector either.
            listed += [PACK_ID, "../pipeline"]
            accepted = await client.post("/expedition/run", json=_discovery(limit=5))
            record = await wait_terminal(client, accepted.json()["expedition_id"])
            assert record["status"] == "failed"
            assert "without a valid evidence_id" in record["errors"][0]["message"]
            assert seen == ["/api/edge-intake/events"]

            seen.clear()
            accepted = await client.post("/expedition/run", json=_ingest([PACK_ID]))
            record = await wait_terminal(client, accepted.json()["expedition_id"])
            assert record["status"] == "completed", record["errors"]
            assert seen == [f"/api/edge-intake/evidence/{PACK_ID}"]
