"""An outside attack on the recording of the service that acted for a user (``on_behalf_of``,
``X-Conclave-Acting-User``): each test below failed on the version under attack (it says what was
observed and what was expected) and passes since its fix.

The promise under attack (docs/gateway.md, audit table): "ann called the tool" and "the service
called it for ann" are told apart in the audit row, GET /calls, the event and the call's leaf."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from conclave.gateway import store
from conclave.gateway.app import create_app
from conclave.gateway.tools import Tool, ToolContext
from tests.conftest import Backend, open_platform, test_settings
from tests.gateway.conftest import GatewayClient, audit_rows
from tests.httpserver import running_server

SETTINGS = {
    "auth": "enabled",
    "api_tokens": "tok-ann=ann,tok-svc=svc,tok-root=root",
    "service_users": "svc",
    "operators": "root",
}
ANN = {"Authorization": "Bearer tok-ann"}
FOR_ANN = {"Authorization": "Bearer tok-svc", "X-Conclave-Acting-User": "ann"}
CALL = {"tool": "evaluate_expression", "args": {"expression": "6 * 7"}}


async def test_an_idempotency_key_replay_answers_across_the_acting_service(
    backend: Backend, gateway: GatewayClient
) -> None:
    """Severity: low (accountability). A service acting for ann (``svc``) calls a tool with
    ``Idempotency-Key: k``; later ann herself sends the same request with the same key (or the
    other way round: ann first, then the service).

    Observed: the second request, made by another actor, is answered 200
    ``Idempotent-Replayed: true`` with the first actor's ``conclave_id``, and leaves no row, no
    event and no leaf. After ann's own request the only record is a row that says the service
    made the call; after the service's request the only record says ann made it herself. The
    key is looked up by ``user_id`` alone (gateway/idempotency.py ``replay``,
    ``store.find_by_idempotency_key``), and ``on_behalf_of`` is not part of the request hash.

    Expected: the change's promise that "ann called the tool" and "the service called it for
    ann" are told apart should hold for replays as well: a key recorded by one actor should not
    answer another's request as if it were theirs (409 ``IDEMPOTENCY_KEY_REUSED``, or keys
    scoped by ``(user_id, on_behalf_of)``)."""
    async with gateway(**SETTINGS) as client:
        first = await client.post(
            "/execute", json=CALL, headers={**FOR_ANN, "Idempotency-Key": "k"}
        )
        assert first.status_code == 200, first.text
        again = await client.post("/execute", json=CALL, headers={**ANN, "Idempotency-Key": "k"})
        row = await store.get_call(backend.engine, first.json()["conclave_id"])
        assert row is not None and row.on_behalf_of == "svc"
        # The reverse: ann's own call first, then the service replays her key.
        own = await client.post("/execute", json=CALL, headers={**ANN, "Idempotency-Key": "j"})
        assert own.status_code == 200, own.text
        by_svc = await client.post(
            "/execute", json=CALL, headers={**FOR_ANN, "Idempotency-Key": "j"}
        )
        rows = await audit_rows(backend)

    # Each is refused as the reuse of a key for another request, and neither runs the tool.
    for answer in (again, by_svc):
        assert answer.status_code == 409, answer.text
        assert answer.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
        assert "Idempotent-Replayed" not in answer.headers
    assert len(rows) == 2, "a crossed key ran the tool again or recorded something"


# --- cancellation: ann's own MCP client stops the call a service is making for her -------------

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}


class Nap:
    """A tool that sleeps, counting the calls that started and were cancelled."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0

    def tool(self) -> Tool:
        async def nap(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
            self.started += 1
            try:
                await asyncio.sleep(3)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            return {"slept": True}

        parameters = {"type": "object", "additionalProperties": False}
        return Tool(
            name="nap", description="Naps.", executor=nap, parameters=parameters,
            timeout_seconds=60,
        )  # fmt: skip


@asynccontextmanager
async def _served(backend: Backend, tool: Tool) -> AsyncIterator[str]:
    settings = test_settings(**SETTINGS)
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=(tool,))
        async with running_server(app) as url:
            yield url


async def test_the_users_own_client_cancels_the_call_a_service_makes_for_her(
    backend: Backend,
) -> None:
    """Severity: low (integrity of the audit trail / availability for the service). The
    service's MCP client, acting for ann, runs ``nap`` as JSON-RPC id 1; ann's own MCP client,
    in another session (SDK ids restart at 1 in every session), gives up on *its* request 1
    and sends ``notifications/cancelled`` ``{"requestId": 1}``.

    Observed: the service's call is stopped (-32800) and audited ``CALL_CANCELLED`` with
    ``on_behalf_of = svc``: the row now says the service's call was cancelled, though the
    service never asked for it. In-flight MCP calls are keyed by ``principal.user_id`` alone
    (gateway/mcp_relay.py ``_key``; gateway/mcp.py ``handlers.cancel(principal.user_id, …)``),
    so "ann" and "svc for ann" share one namespace of request ids. The reverse holds too: a
    service acting for ann stops ann's own calls by guessing small ids.

    Expected: as the change now tells the two actors apart, a cancellation should only reach
    calls of the same actor (key by ``(user_id, on_behalf_of)``)."""
    nap = Nap()
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "nap", "arguments": {}}}  # fmt: skip
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": 1}}  # fmt: skip
    async with _served(backend, nap.tool()) as url, httpx.AsyncClient(timeout=30) as http:
        running = asyncio.create_task(
            http.post(f"{url}/mcp", content=json.dumps(call), headers={**HEADERS, **FOR_ANN})
        )
        deadline = time.monotonic() + 20
        while nap.started == 0:
            assert time.monotonic() < deadline, "the call never started"
            await asyncio.sleep(0.02)
        sent = await http.post(f"{url}/mcp", content=json.dumps(cancel), headers={**HEADERS, **ANN})
        assert sent.status_code == 202
        answer = await asyncio.wait_for(running, 20)
        rows = [r for r in await audit_rows(backend) if r.tool_name == "nap"]

    assert len(rows) == 1 and rows[0].on_behalf_of == "svc"
    assert nap.cancelled == 0, (
        f"ann's own client cancelled the service's call: answer {answer.json().get('error')}, "
        f"row status={rows[0].status} error_code={rows[0].error_code} on_behalf_of=svc"
    )
