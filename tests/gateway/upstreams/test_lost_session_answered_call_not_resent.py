"""A call on the SDK's path that the upstream answered is not made again when its session is lost.

Attack (outside review of f5727ba): an SDK-path call (one carrying a progress token) is made
again whenever it fails with -32600 on a session that some *other* request found gone.

``Upstream._sdk_call`` turns any ``MCPError`` with code -32600 into ``SessionGone`` ("the upstream
ran nothing: make it again") as soon as ``opened.lost`` is set, i.e. as soon as any request on
the session was answered 404. But a call already accepted on that session runs on (the
rework's own premise: "the upstream answers those it accepted"), and its answer may well be a
JSON-RPC error -32600 the upstream itself sent after doing the work. The gateway then sends the
same ``tools/call`` again on the new session: a non-idempotent tool runs twice, for a call the
caller made once. Only a call whose *own* request was answered 404 ran nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
from starlette.types import Receive, Scope, Send

from conclave.platform.middleware import replay_body
from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.json_mcp_server import OBJECT, read_body
from tests.gateway.upstreams.session_404_server import ForgetfulServer
from tests.httpserver import running_server

MCP_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-06-18",
}


class ChargingServer(ForgetfulServer):
    """``charge``: a non-idempotent tool (it books a payment) that, having booked it, answers a
    JSON-RPC error -32600 of its own ("invalid request: the receipt could not be produced")."""

    def __init__(self) -> None:
        super().__init__()
        self.charged = 0
        self.release = asyncio.Event()

    async def _list(self, ctx: Any, params: Any) -> Any:
        listed = await super()._list(ctx, params)
        listed.tools.append(types.Tool(name="charge", description="charge", input_schema=OBJECT))
        return listed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = await read_body(receive)
            message = json.loads(body)
            params = message.get("params") or {}
            if message.get("method") == "tools/call" and params.get("name") == "charge":
                self.charged += 1  # the payment is booked
                await self.release.wait()
                error = {"code": -32600, "message": "invalid request: no receipt"}
                answer = {"jsonrpc": "2.0", "id": message["id"], "error": error}
                headers = [(b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": json.dumps(answer).encode()})
                return
            receive = replay_body(body, receive)
        await super().__call__(scope, receive, send)


async def _upstream(client: httpx.AsyncClient) -> dict:
    return (await client.get("/upstreams")).json()["upstreams"][0]


async def _ready(client: httpx.AsyncClient) -> bool:
    return (await _upstream(client))["state"] == "ready"


async def test_a_call_the_upstream_answered_is_not_made_again(backend: Backend, tmp_path: Path):
    server = ChargingServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: _ready(client))
            first = await client.post(
                "/execute", json={"tool": "json__echo", "args": {"message": "zero"}}
            )
            assert first.status_code == 200, first.text
            session = server.calls()[0][2]
            init = {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            }
            opened = await client.post(
                "/mcp",
                headers=MCP_HEADERS,
                json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
            )
            headers = {**MCP_HEADERS}
            if "mcp-session-id" in opened.headers:
                headers["mcp-session-id"] = opened.headers["mcp-session-id"]
            await client.post(
                "/mcp",
                headers=headers,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            )
            # The caller charges once, asking progress (the SDK path).
            charge = asyncio.create_task(
                client.post(
                    "/mcp",
                    headers=headers,
                    json={
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "tools/call",
                        "params": {
                            "name": "json__charge",
                            "arguments": {},
                            "_meta": {"progressToken": "p"},
                        },
                    },
                    timeout=60,
                )
            )
            await eventually(lambda: _charged(server, 1))
            # Meanwhile the upstream expires the session: another call meets its 404 and is
            # made again on the new one (as it should).
            server.forgotten.add(session)
            other = await client.post(
                "/execute", json={"tool": "json__echo", "args": {"message": "one"}}
            )
            assert other.status_code == 200, other.text
            # The upstream answers the charge it accepted (and booked): its own -32600.
            server.release.set()
            answered = await charge
            status = await _upstream(client)
    # Observed: 2 — the gateway took the upstream's own -32600 for the 404's and charged again.
    assert server.charged == 1, (server.charged, answered.text[:500])
    assert answered.status_code == 200, answered.text
    # The caller gets the upstream's own error (an SSE answer: progress was asked).
    event = next(line for line in answered.text.splitlines() if line.startswith("data: "))
    error = json.loads(event.removeprefix("data: "))["result"]
    assert error["isError"] is True, error
    assert error["content"][0]["text"].endswith("-32600: invalid request: no receipt"), error
    assert status["circuit"] == "closed", status


async def _charged(server: ChargingServer, count: int) -> bool:
    return server.charged >= count
