"""The `evidence` source reads Evidence Packs from the real edge service over HTTP."""

from __future__ import annotations

import httpx

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
