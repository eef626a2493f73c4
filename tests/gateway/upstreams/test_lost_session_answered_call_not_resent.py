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

from starlette.types import Send

from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.session_404_server import (
    ToolServer,
    gateway_mcp_session,
    send_rpc_error,
    upstream_ready,
    upstream_status,
)
from tests.httpserver import running_server


class ChargingServer(ToolServer):
    """``charge``: a non-idempotent tool (it books a payment) that, having booked it, answers a
    JSON-RPC error -32600 of its own ("invalid request: the receipt could not be produced")."""

    tool = "charge"

    def __init__(self) -> None:
        super().__init__()
        self.charged = 0
        self.release = asyncio.Event()

    async def on_call(self, message: dict[str, Any], send: Send) -> None:
        self.charged += 1  # the payment is booked
        await self.release.wait()
        await send_rpc_error(send, message, -32600, "invalid request: no receipt")


async def test_a_call_the_upstream_answered_is_not_made_again(backend: Backend, tmp_path: Path):
    server = ChargingServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: upstream_ready(client))
            first = await client.post(
                "/execute", json={"tool": "json__echo", "args": {"message": "zero"}}
            )
            assert first.status_code == 200, first.text
            session = server.calls()[0][2]
            headers = await gateway_mcp_session(client)
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
            status = await upstream_status(client)
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
