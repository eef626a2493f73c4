"""An MCP server over streamable HTTP that answers JSON (the MCP SDK's own server with
``json_response=True``, sessions on; event streams when asked), for the tests of the gateway's
direct calls, and a few answers no well-behaved server gives, made on purpose.

It records every POST (``(JSON-RPC method, id, mcp-session-id, mcp-protocol-version)``) and the
``notifications/cancelled`` it receives. Tools:

- ``echo`` answers its ``message``; ``slow`` sleeps ``seconds`` and records whether it was
  cancelled; ``fail`` answers ``isError``;
- ``rpc_error_500``: HTTP 500 with a JSON-RPC error body; ``plain_500``: HTTP 500, text body;
  ``stream``: the answer as an event stream after a notification; ``redirect``: a 307 to
  another address; ``other_id``: a JSON answer for another request id.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from starlette.types import ASGIApp, Receive, Scope, Send

from conclave.platform.middleware import replay_body

OBJECT: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}
CRAFTED = ("rpc_error_500", "plain_500", "stream", "redirect", "other_id")


class JsonServer:
    """The server, its ASGI app and what it saw."""

    def __init__(self, *, json_response: bool = True) -> None:
        self.requests: list[tuple[str, Any, str | None, str | None]] = []
        self.cancelled: list[Any] = []
        """The ``requestId`` of every ``notifications/cancelled``."""
        self.slow_cancelled = asyncio.Event()
        self.list_delays: list[float] = []
        """Seconds the next ``tools/list`` requests take, one each (listings that time out)."""
        server = Server("json", version="0", on_list_tools=self._list, on_call_tool=self._call)
        self._mcp: ASGIApp = server.streamable_http_app(json_response=json_response)

    def calls(self) -> list[tuple[str, Any, str | None, str | None]]:
        """What every ``tools/call`` carried: (method, id, session id, protocol version)."""
        return [request for request in self.requests if request[0] == "tools/call"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._mcp(scope, receive, send)
            return
        body = await read_body(receive)
        headers = dict(scope["headers"])
        message = json.loads(body)
        session = headers.get(b"mcp-session-id")
        version = headers.get(b"mcp-protocol-version")
        self.requests.append(
            (
                message.get("method"),
                message.get("id"),
                session.decode() if session else None,
                version.decode() if version else None,
            )
        )
        if message.get("method") == "notifications/cancelled":
            self.cancelled.append(message["params"]["requestId"])
        name = (message.get("params") or {}).get("name")
        if message.get("method") == "tools/call" and name in CRAFTED:
            await _crafted(name, message["id"], send)
            return
        await self._mcp(scope, replay_body(body, receive), send)

    async def _list(
        self, _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if self.list_delays:
            await asyncio.sleep(self.list_delays.pop(0))
        names = ("echo", "slow", "fail", *CRAFTED)
        tools = [types.Tool(name=name, description=name, input_schema=OBJECT) for name in names]
        return types.ListToolsResult(tools=tools)

    async def _call(self, _ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "slow":
            try:
                await asyncio.sleep(float(arguments.get("seconds", 5)))
            except asyncio.CancelledError:
                self.slow_cancelled.set()
                raise
            return _text("slept")
        if params.name == "fail":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="no")], is_error=True
            )
        return _text(str(arguments.get("message", "")))


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def read_body(receive: Receive) -> bytes:
    """The whole body of an ASGI request."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _crafted(name: str, request_id: Any, send: Send) -> None:
    status, headers, body = 200, [(b"content-type", b"application/json")], b""
    if name == "rpc_error_500":
        status = 500
        error = {"code": -32603, "message": "the database is on fire"}
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
    elif name == "plain_500":
        status, headers, body = 500, [(b"content-type", b"text/plain")], b"oops"
    elif name == "stream":
        headers = [(b"content-type", b"text/event-stream")]
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": "x"},
        }
        result = {"content": [{"type": "text", "text": "streamed"}]}
        answer = {"jsonrpc": "2.0", "id": request_id, "result": result}
        events = [f"event: message\ndata: {json.dumps(item)}\n\n" for item in (note, answer)]
        body = "".join(events).encode()
    elif name == "redirect":
        status, headers = 307, [(b"location", b"http://169.254.169.254/latest/meta-data")]
    elif name == "other_id":
        result = {"content": [{"type": "text", "text": "not yours"}]}
        body = json.dumps({"jsonrpc": "2.0", "id": "someone-else", "result": result}).encode()
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
