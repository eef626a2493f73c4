"""A service acting for a user (``X-Conclave-Acting-User``) is named in the call's audit row, in
``GET /calls``, in the call's event and in its leaf of the calls log: "ann called the tool" and
"the service called it for ann" are told apart, and removing the service from the row afterwards
is caught by ``GET /calls/{id}/verify``."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from conclave.gateway import store
from conclave.platform.db.schema import outbox_events
from conclave.platform.tlog.entries import text_sha256
from tests.conftest import Backend
from tests.gateway.conftest import GatewayClient
from tests.gateway.test_call_log import index_in, receipt_of
from tests.gateway.test_call_verify import _edit_row, _verify

SETTINGS = {
    "auth": "enabled",
    "api_tokens": "tok-ann=ann,tok-svc=svc,tok-root=root",
    "service_users": "svc",
    "operators": "root",
    "call_log": True,
}
ANN = {"Authorization": "Bearer tok-ann"}
FOR_ANN = {"Authorization": "Bearer tok-svc", "X-Conclave-Acting-User": "ann"}
ROOT = {"Authorization": "Bearer tok-root"}
CALL = {"tool": "evaluate_expression", "args": {"expression": "6 * 7"}}
MCP_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "evaluate_expression", "arguments": {"expression": "1 + 1"}},
}
MCP_ACCEPT = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


async def _leaf_entry(client: httpx.AsyncClient, receipt: str) -> dict[str, Any]:
    index = index_in(await receipt_of(client, receipt))
    leaf = (await client.get(f"/logs/calls/leaves/{index}", headers=ROOT)).json()
    entry: dict[str, Any] = json.loads(base64.b64decode(leaf["data"]))
    return entry


async def _event_payload(backend: Backend, conclave_id: str) -> dict[str, Any]:
    async with backend.engine.connect() as connection:
        payloads = (await connection.execute(select(outbox_events.c.payload))).scalars()
    found = [p for p in payloads if p["conclave_id"] == conclave_id]
    assert len(found) == 1
    return dict(found[0])


async def test_a_call_a_service_made_for_a_user_names_the_service(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(data_dir=tmp_path, **SETTINGS) as client:
        theirs = (await client.post("/execute", json=CALL, headers=FOR_ANN)).json()
        own = (await client.post("/execute", json=CALL, headers=ANN)).json()
        mcp = await client.post("/mcp", json=MCP_CALL, headers={**FOR_ANN, **MCP_ACCEPT})
        assert mcp.status_code == 200, mcp.text
        by_mcp = mcp.json()["result"]["_meta"]["conclave"]["conclave_id"]

        for conclave_id, acting in [
            (theirs["conclave_id"], "svc"),
            (own["conclave_id"], None),
            (by_mcp, "svc"),
        ]:
            row = await store.get_call(backend.engine, conclave_id)
            assert row is not None and (row.user_id, row.on_behalf_of) == ("ann", acting)
            shown = (await client.get(f"/calls/{conclave_id}", headers=ANN)).json()
            assert (shown["user_id"], shown["on_behalf_of"]) == ("ann", acting)
            payload = await _event_payload(backend, conclave_id)
            assert payload["user_id"] == "ann"
            assert payload.get("on_behalf_of") == acting
        listed = (await client.get("/calls", headers=ANN)).json()["calls"]
        assert {call["conclave_id"]: call["on_behalf_of"] for call in listed} == {
            theirs["conclave_id"]: "svc",
            own["conclave_id"]: None,
            by_mcp: "svc",
        }

        # The leaf names the service by its hash; a user's own call has no such key at all,
        # so its entry is byte for byte what it was before the key existed.
        entry = await _leaf_entry(client, theirs["receipt"])
        assert entry["on_behalf_of_sha256"] == text_sha256("svc")
        assert entry["user_sha256"] == text_sha256("ann")
        assert "on_behalf_of_sha256" not in await _leaf_entry(client, own["receipt"])
        for conclave_id in (theirs["conclave_id"], own["conclave_id"], by_mcp):
            assert (await _verify(client, conclave_id, ROOT))["ok"] is True


async def test_hiding_the_service_in_the_store_is_caught(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(data_dir=tmp_path, **SETTINGS) as client:
        theirs = (await client.post("/execute", json=CALL, headers=FOR_ANN)).json()
        own = (await client.post("/execute", json=CALL, headers=ANN)).json()
        await receipt_of(client, theirs["receipt"])
        await receipt_of(client, own["receipt"])
        # A DBA makes the service's call look like ann's own, and ann's like the service's.
        await _edit_row(backend, theirs["conclave_id"], on_behalf_of=None)
        await _edit_row(backend, own["conclave_id"], on_behalf_of="svc")
        for conclave_id in (theirs["conclave_id"], own["conclave_id"]):
            found = await _verify(client, conclave_id, ROOT)
            assert found["ok"] is False and found["problem"], found
