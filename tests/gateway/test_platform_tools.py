"""Platform tools: the gateway calling Conclave's own services over HTTP."""

from __future__ import annotations

import httpx
import pytest

from conclave.collector.app import create_app as create_collector_app
from conclave.edge.app import create_app as create_edge_app
from conclave.platform.runtime import Platform
from tests.collector.conftest import collector_settings, inbox
from tests.conftest import Backend, eventually, test_settings
from tests.edge.conftest import edge_settings
from tests.edge.samples import png
from tests.gateway.conftest import audit_rows, run_gateway
from tests.httpserver import free_port, running_server


async def test_evidence_tools_read_the_edge_service(backend: Backend, tmp_path):
    settings = edge_settings(tmp_path)
    async with (
        Platform.open(settings, engine=backend.engine, bus=backend.bus) as platform,
        running_server(create_edge_app(settings, platform=platform)) as edge_url,
    ):
        async with httpx.AsyncClient(base_url=edge_url) as edge:
            upload = await edge.post(
                "/api/edge-intake/image",
                files={"file": ("map.png", png(), "image/png")},
                headers={"Idempotency-Key": "gw-1"},
            )
            assert upload.status_code == 200, upload.text
            [evidence_id] = upload.json()["evidence_ids"]

        async with run_gateway(backend, test_settings(edge_url=edge_url)) as client:
            found = await client.post(
                "/execute", json={"tool": "get_evidence", "args": {"evidence_id": evidence_id}}
            )
            assert found.status_code == 200, found.text
            assert found.json()["result"]["evidence_id"] == evidence_id
            assert found.json()["result"]["media_type"] == "image"
            recent = await client.post(
                "/execute", json={"tool": "search_evidence", "args": {"type": "image"}}
            )
            assert recent.status_code == 200, recent.text
            assert evidence_id in recent.text
            missing = await client.post(
                "/execute", json={"tool": "get_evidence", "args": {"evidence_id": "nope"}}
            )
            assert missing.status_code == 422
            assert missing.json()["code"] == "BACKEND_REJECTED"


async def test_unreachable_service_is_503(backend: Backend):
    settings = test_settings(collector_url=f"http://127.0.0.1:{free_port()}")
    async with run_gateway(backend, settings) as client:
        response = await client.post(
            "/execute", json={"tool": "expedition_status", "args": {"expedition_id": "x"}}
        )
        assert response.status_code == 503
        assert response.json()["code"] == "BACKEND_UNAVAILABLE"
        [row] = await audit_rows(backend)
        assert (row.tool_name, row.status) == ("expedition_status", "failed")


async def test_expedition_tools_drive_the_collector(backend: Backend, tmp_path):
    items = inbox(tmp_path) / "items.jsonl"
    items.write_text('{"id": "b1", "name": "Old stone bridge"}\n{"id": "b2", "name": "Steel"}\n')
    settings = collector_settings(tmp_path)
    async with (
        Platform.open(settings, engine=backend.engine, bus=backend.bus) as platform,
        running_server(create_collector_app(settings, platform=platform)) as collector_url,
        run_gateway(backend, test_settings(collector_url=collector_url)) as client,
    ):
        parameters = {"sources": [{"type": "file", "path": str(items), "key": "id"}]}
        args = {
            "expedition_type": "discovery",
            "target_collections": ["bridges"],
            "parameters": parameters,
        }
        started = await client.post("/execute", json={"tool": "run_expedition", "args": args})
        assert started.status_code == 200, started.text
        expedition_id = started.json()["result"]["expedition_id"]

        async def finished():
            status = await client.post(
                "/execute",
                json={"tool": "expedition_status", "args": {"expedition_id": expedition_id}},
            )
            result = status.json()["result"]
            return result if result["status"] in ("completed", "failed") else None

        record = await eventually(finished, timeout=60)
        assert record["status"] == "completed", record
        search = await client.post(
            "/execute",
            json={
                "tool": "semantic_search",
                "args": {"collection": "bridges", "q": "stone bridge"},
            },
        )
        assert search.status_code == 200, search.text
        hits = search.json()["result"]["hits"]
        assert hits and hits[0]["record"]["record_key"] == "b1"
        rows = await audit_rows(backend)
        assert rows[0].tool_name == "run_expedition" and rows[0].status == "succeeded"


async def test_expeditions_run_through_the_gateway_are_the_calling_users(backend, tmp_path):
    # Both services require credentials; the gateway calls the collector with its own service
    # token, on behalf of whoever called the gateway.
    collector = collector_settings(
        tmp_path,
        run_workers=False,
        auth="enabled",
        api_tokens="tok-gw=gateway-svc,tok-ann=ann,tok-bob=bob",
        service_users="gateway-svc",
    )
    gateway = test_settings(
        collector_url="",
        auth="enabled",
        api_tokens="tok-ann=ann,tok-bob=bob",
        service_token="tok-gw",
    )
    run = {"expedition_type": "audit", "target_collections": ["ann-notes"]}
    async with (
        Platform.open(collector, engine=backend.engine, bus=backend.bus) as platform,
        running_server(create_collector_app(collector, platform=platform)) as collector_url,
        run_gateway(backend, gateway.model_copy(update={"collector_url": collector_url})) as gw,
        httpx.AsyncClient(base_url=collector_url) as direct,
    ):
        ann, bob = {"Authorization": "Bearer tok-ann"}, {"Authorization": "Bearer tok-bob"}
        started = await gw.post(
            "/execute", json={"tool": "run_expedition", "args": run}, headers=ann
        )
        assert started.status_code == 200, started.text
        expedition_id = started.json()["result"]["expedition_id"]

        own = await direct.get(f"/expedition/status/{expedition_id}", headers=ann)
        assert own.status_code == 200 and own.json()["requested_by"] == "ann"
        # Through the gateway too, Bob cannot read Ann's expedition.
        status = {"tool": "expedition_status", "args": {"expedition_id": expedition_id}}
        mine = await gw.post("/execute", json=status, headers=ann)
        assert mine.status_code == 200 and mine.json()["result"]["requested_by"] == "ann"
        theirs = await gw.post("/execute", json=status, headers=bob)
        assert (theirs.status_code, theirs.json()["code"]) == (422, "BACKEND_REJECTED")
        assert "EXPEDITION_NOT_FOUND" in theirs.json()["detail"]


async def test_collector_refuses_a_gateway_that_is_no_service(backend, tmp_path):
    # Without the service role the gateway's identity may not act for anyone: nothing runs
    # under the gateway's own name instead.
    collector = collector_settings(
        tmp_path, run_workers=False, auth="enabled", api_tokens="tok-gw=gateway-svc,tok-ann=ann"
    )
    gateway = test_settings(auth="enabled", api_tokens="tok-ann=ann", service_token="tok-gw")
    async with (
        Platform.open(collector, engine=backend.engine, bus=backend.bus) as platform,
        running_server(create_collector_app(collector, platform=platform)) as collector_url,
        run_gateway(backend, gateway.model_copy(update={"collector_url": collector_url})) as gw,
        httpx.AsyncClient(base_url=collector_url) as direct,
    ):
        run = {"expedition_type": "audit", "target_collections": ["notes"]}
        refused = await gw.post(
            "/execute",
            json={"tool": "run_expedition", "args": run},
            headers={"Authorization": "Bearer tok-ann"},
        )
        assert refused.status_code == 422
        assert "ACTING_USER_FORBIDDEN" in refused.json()["detail"]
        history = await direct.get(
            "/expedition/history", headers={"Authorization": "Bearer tok-gw"}
        )
        assert history.json()["expeditions"] == []


def test_a_gateway_without_authentication_refuses_to_hold_a_service_token():
    """With auth off a caller names their own user; a service token would let anyone reaching
    the gateway act as any user at the services that trust it. The settings are refused, so the
    gateway does not start."""
    with pytest.raises(ValueError, match="GATEWAY_SERVICE_TOKEN is set while CONCLAVE_AUTH"):
        test_settings(auth="disabled", service_token="tok-gw")
