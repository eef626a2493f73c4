"""A 404 that names the request's id but says the session is gone (the TypeScript SDK's code
-32001, or words about a session) is the session's loss: the session is replaced.

The MCP spec: once a server ends a session it "MUST respond to requests containing that session
ID with HTTP 404 Not Found"; it says nothing of the body. A server that parses the request before
looking up the session (JSON-RPC says an error SHOULD carry the request's id when known) answers
``{"id": <the request's id>, "error": {"code": -32001, "message": "Session not found"}}``. An
outside attack found that such a 404 was read as the tool's own answer (the rule that keeps a
tool's "no such item" at 404 from costing a session): the session was never marked lost, and
every call failed until a periodic listing (300 s by default, never with 0) reconnected.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from starlette.types import Receive, Scope, Send

from conclave.platform.middleware import replay_body
from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.json_mcp_server import read_body
from tests.gateway.upstreams.session_404_server import (
    ForgetfulServer,
    send_rpc_error,
    upstream_ready,
    upstream_status,
)
from tests.httpserver import running_server


class EchoingIdServer(ForgetfulServer):
    """A forgotten session's every request is answered 404 "Session not found" with its id."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = await read_body(receive)
            session = (dict(scope["headers"]).get(b"mcp-session-id") or b"").decode()
            message: dict[str, Any] = json.loads(body)
            if session in self.forgotten and "id" in message:
                self.answered_404 += 1
                await send_rpc_error(send, message, -32001, "Session not found", status=404)
                return
            receive = replay_body(body, receive)
        await super().__call__(scope, receive, send)


async def _echo(client: Any, text: str) -> Any:
    return await client.post("/execute", json={"tool": "json__echo", "args": {"message": text}})


async def test_a_session_not_found_naming_the_requests_id_is_replaced(
    backend: Backend, tmp_path: Path
):
    server = EchoingIdServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}  # defaults
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: upstream_ready(client))
            first = await _echo(client, "zero")
            assert first.status_code == 200, first.text
            server.forgotten.add(server.calls()[0][2])  # the upstream restarted
            answers = []
            for n in range(4):  # well past a backoff and a handshake
                answers.append(await _echo(client, f"call {n}"))
                await asyncio.sleep(1.5)
            status = await upstream_status(client)
    initializes = sum(1 for request in server.requests if request[0] == "initialize")
    seen = ([(a.status_code, a.json().get("detail")) for a in answers], status, initializes)
    # Before the fix: every call 504 TOOL_TIMEOUT (-32001 is also the Python SDK's
    # REQUEST_TIMEOUT), restarts 0, one initialize, state "ready".
    assert initializes >= 2, seen
    assert answers[-1].status_code == 200, seen
