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

import json
from pathlib import Path
from typing import Any

import pytest
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


async def _six_calls(client: Any, *, progress: bool) -> tuple[list[Any], dict[str, Any]]:
    await eventually(lambda: upstream_ready(client))
    headers = await gateway_mcp_session(client)
    answers = []
    for n in range(6):
        params: dict[str, Any] = {"name": "json__check", "arguments": {"id": n}}
        if progress:
            params["_meta"] = {"progressToken": f"p{n}"}  # the SDK's path
        call = {"jsonrpc": "2.0", "id": n + 2, "method": "tools/call", "params": params}
        answers.append(await client.post("/mcp", headers=headers, json=call))
    return answers, await upstream_status(client)


async def test_a_tools_own_server_error_on_the_sdk_path_does_not_open_the_circuit(
    backend: Backend, tmp_path: Path
) -> None:
    server = FailingServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec) as client:
            # One user, past the breaker's threshold (5), on the SDK's path.
            answers, status = await _six_calls(client, progress=True)
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


# -- From an outside attack on the first version (which knew only two of the SDK's wordings): a
# -- dead stream must still open the circuit, on both paths, and a too-large answer must not. --


class CutStreamServer(ToolServer):
    """``check``: answers 200 ``text/event-stream`` and ends the stream with no event (an
    upstream whose worker died after the headers: the call can never be answered)."""

    tool = "check"

    async def on_call(self, message: dict[str, Any], send: Send) -> None:
        self.requests.append(("tools/call", message.get("id"), None, None))
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class HugeEventServer(ToolServer):
    """``check``: the tool's answer is one SSE event over the gateway's per-event cap (what a
    user's arguments make e.g. a file reader or generator answer)."""

    tool = "check"

    def __init__(self, media_type: bytes) -> None:
        super().__init__()
        self.media_type = media_type

    async def on_call(self, message: dict[str, Any], send: Send) -> None:
        self.requests.append(("tools/call", message.get("id"), None, None))
        result = {"content": [{"type": "text", "text": "x" * 100_000}], "isError": False}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
        headers = [(b"content-type", self.media_type)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        event = f"event: message\ndata: {body}\n\n".encode()
        await send({"type": "http.response.body", "body": event, "more_body": False})


@pytest.mark.parametrize("progress", [True, False], ids=["sdk path", "direct path"])
async def test_a_stream_that_ends_without_the_answer_opens_the_circuit(
    backend: Backend, tmp_path: Path, progress: bool
) -> None:
    """A call whose event stream ends with no answer is a dead stream, a breaker failure, on
    both paths: the SDK's -32000 "SSE stream ended without a response", the direct path's own
    TransportEnded (the first version took both for the upstream's answer: the circuit of an
    upstream whose calls all died never opened)."""
    server = CutStreamServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec) as client:
            answers, status = await _six_calls(client, progress=progress)
    texts = [a.text for a in answers]
    assert status["circuit"] == "open", (status, texts)


async def test_direct_path_stream_ended_answers_connection_lost(
    backend: Backend, tmp_path: Path
) -> None:
    """And its caller is told so: 502 UPSTREAM_CONNECTION_LOST, not an upstream's answer."""
    server = CutStreamServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: upstream_ready(client))
            answer = await client.post(
                "/execute",
                json={"tool": "json__check", "args": {"id": 1}},
            )
    assert answer.status_code == 502, answer.text
    assert answer.json()["type"].endswith("upstream-connection-lost"), answer.text


# Media types are case-insensitive: the gateway's cap on whole bodies once cut a
# `Text/Event-Stream` answer short, which the SDK reported as a stream that ended (second attack).
@pytest.mark.parametrize("media_type", [b"text/event-stream", b"Text/Event-Stream"])
async def test_one_users_oversized_answer_on_sdk_path_does_not_open_the_circuit(
    backend: Backend, tmp_path: Path, media_type: bytes
) -> None:
    """An event over the cap is "SSE stream failed: Server-sent event exceeded the N byte
    limit." (-32000, no data) from the SDK: the answer's size, which one user's arguments can
    make, not the connection (it was counted as a breaker failure, older than this change: five
    such calls paused the upstream for everyone; the direct path counted it as an answer)."""
    server = HugeEventServer(media_type)
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec, upstream_max_message_bytes=65536) as client:
            answers, status = await _six_calls(client, progress=True)
            other = await client.post(
                "/execute", json={"tool": "json__echo", "args": {"message": "hi"}}
            )
    texts = [a.text for a in answers]
    assert any("more than the gateway accepts" in t for t in texts), texts
    assert status["circuit"] == "closed", (status, texts)
    assert other.status_code == 200, other.text


class AbortedStreamServer(ToolServer):
    """``check``: starts an event stream, sends half an event, and the worker dies (uvicorn
    drops the socket with no terminating chunk): the SDK path's "real crash mid-event"."""

    tool = "check"

    async def on_call(self, message: dict[str, Any], send: Send) -> None:
        self.requests.append(("tools/call", message.get("id"), None, None))
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(
            {
                "type": "http.response.body",
                "body": b'event: message\ndata: {"jso',
                "more_body": True,
            }
        )
        raise RuntimeError("worker died mid-event")


async def test_sdk_path_socket_dropped_mid_event_counts_as_lost_connection(
    backend: Backend, tmp_path: Path
) -> None:
    """A socket cut mid-event: httpx raises inside the SDK's event loop, which it swallows
    (`except Exception: "SSE stream ended"`) and resolves as -32000 "SSE stream ended without a
    response": a crashing upstream opens the circuit on the SDK's path."""
    server = AbortedStreamServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp"}
        async with gateway(backend, tmp_path, spec) as client:
            answers, status = await _six_calls(client, progress=True)
    assert status["circuit"] == "open", (status, [a.text[-300:] for a in answers])
