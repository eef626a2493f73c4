"""An upstream's own JSON-RPC error -32000 on the SDK's path is its answer, not a broken connection.

JSON-RPC leaves -32000…-32099 to servers, and -32000 is the usual generic one. The MCP SDK uses the
same code for the error it makes when a call's connection ends ("Connection closed"), so the
gateway took every -32000 a tool answered on the SDK's path (calls with a progress token, users'
own sessions) for a lost connection: each one a breaker failure, and five calls of one user whose
arguments make the tool fail so paused the upstream for everyone (a known gap until now; the
direct path told the two apart already). Only the SDK's own wording is a broken connection now;
`tests/gateway/test_upstreams.py` (a stdio upstream that exits mid-call, 502
`UPSTREAM_CONNECTION_LOST`) holds the other side with the real SDK."""

from __future__ import annotations

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


class FailingServer(ToolServer):
    """``check``: every call is answered with the upstream's own -32000 (HTTP 200, its id)."""

    tool = "check"

    async def on_call(self, message: dict[str, Any], send: Send) -> None:
        self.requests.append(("tools/call", message.get("id"), None, None))
        await send_rpc_error(send, message, -32000, "Server error: bad argument", status=200)


async def test_a_tools_own_server_error_on_the_sdk_path_does_not_open_the_circuit(
    backend: Backend, tmp_path: Path
) -> None:
    server = FailingServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: upstream_ready(client))
            headers = await gateway_mcp_session(client)
            answers = []
            for n in range(6):  # one user, past the breaker's threshold (5)
                call = {
                    "jsonrpc": "2.0",
                    "id": n + 2,
                    "method": "tools/call",
                    "params": {
                        "name": "json__check",
                        "arguments": {"id": n},
                        "_meta": {"progressToken": f"p{n}"},  # the SDK's path
                    },
                }
                answers.append(await client.post("/mcp", headers=headers, json=call))
            status = await upstream_status(client)
            other = await client.post(
                "/execute", json={"tool": "json__echo", "args": {"message": "hi"}}
            )
    for answer in answers:  # the upstream's error, as it answered it
        assert answer.status_code == 200, answer.text
        assert "bad argument" in answer.text, answer.text
        assert "connection" not in answer.text.lower(), answer.text
    assert (status["circuit"], status["restarts"]) == ("closed", 0), status
    assert (other.status_code, other.json().get("result")) == (200, "hi"), other.text
    initializes = sum(1 for request in server.requests if request[0] == "initialize")
    assert initializes == 1, initializes
