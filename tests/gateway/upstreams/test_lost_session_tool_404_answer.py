"""A tool's own JSON-RPC error at HTTP 404 is its answer to the call, not a lost session.

Attack (outside review of 6b65019): one user's calls open an upstream's circuit for everyone
when a tool of that upstream answers HTTP 404 with its own JSON-RPC error.

A server may answer a JSON-RPC error at a non-2xx status (the MCP SDK's client reads it so, its
own comment: "404 for METHOD_NOT_FOUND"; a REST bridge answers "no such item" so). The gateway
takes *any* 404 to a POST carrying the session id for "the upstream ended the session"
(``DirectCalls._answer`` before it reads the body; ``session_gone`` in the SDK path's response
hook): it drops the shared session, opens a new one, sends the call again, meets the 404 again and
charges a breaker failure (``_charge``). Five such calls of one user, with arguments of their
choosing, cost the upstream ten new sessions and open the circuit: every tool of the upstream
answers 503 to every user for 30 s, again and again. (Slow calls were made breaker-neutral for
this very reason.) The upstream's own error, carrying the request's id, is an answer, not a lost
session: a 404 for an unknown session carries no such id (the SDK's server: ``id: null``,
"Session not found")."""

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


class LookupServer(ToolServer):
    """``lookup``: an item that does not exist is answered HTTP 404 with the JSON-RPC error of
    the request (its id, -32602 "no such item")."""

    tool = "lookup"

    async def on_call(self, message: dict[str, Any], send: Send) -> None:
        self.requests.append(("tools/call", message.get("id"), None, None))
        await send_rpc_error(send, message, -32602, "no such item", status=404)


async def test_a_tools_own_404_error_does_not_open_the_circuit(backend: Backend, tmp_path: Path):
    server = LookupServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: upstream_ready(client))
            # One user looks up five items that do not exist.
            lookups = []
            for n in range(5):
                await eventually(lambda: upstream_ready(client), timeout=20)
                lookups.append(
                    await client.post("/execute", json={"tool": "json__lookup", "args": {"id": n}})
                )
            await eventually(lambda: upstream_ready(client), timeout=20)
            status = await upstream_status(client)
            # Any other user, any other tool of that upstream.
            other = await client.post(
                "/execute", json={"tool": "json__echo", "args": {"message": "hi"}}
            )
    initializes = sum(1 for request in server.requests if request[0] == "initialize")
    seen = (
        [(a.status_code, a.json().get("code")) for a in lookups],
        status,
        initializes,
        other.status_code,
        other.text[:200],
    )
    # Observed: circuit "open", ~11 initialize handshakes, the echo 503 "calls are paused".
    assert status["circuit"] == "closed", seen
    assert (other.status_code, other.json().get("result")) == (200, "hi"), seen
    assert initializes == 1, seen
    for answer in lookups:  # the upstream's own error, as it answered it
        assert (answer.status_code, answer.json()["code"]) == (422, "UPSTREAM_REJECTED"), seen
        assert "no such item" in answer.json()["detail"], answer.text


async def test_a_tools_own_404_error_on_the_sdk_path_keeps_the_session(
    backend: Backend, tmp_path: Path
):
    # A call with a progress token goes through the SDK's session: the same 404 is its answer.
    server = LookupServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: upstream_ready(client))
            headers = await gateway_mcp_session(client)
            answers = []
            for n in range(5):
                call = {
                    "jsonrpc": "2.0",
                    "id": n + 2,
                    "method": "tools/call",
                    "params": {
                        "name": "json__lookup",
                        "arguments": {"id": n},
                        "_meta": {"progressToken": f"p{n}"},
                    },
                }
                answers.append(await client.post("/mcp", headers=headers, json=call))
            status = await upstream_status(client)
            other = await client.post(
                "/execute", json={"tool": "json__echo", "args": {"message": "hi"}}
            )
    initializes = sum(1 for request in server.requests if request[0] == "initialize")
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert "no such item" in answer.text, answer.text
    assert (status["circuit"], status["restarts"]) == ("closed", 0), status
    assert (other.status_code, other.json().get("result")) == (200, "hi"), other.text
    assert initializes == 1, initializes
