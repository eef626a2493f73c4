"""An upstream (the JSON MCP test server) that answers 404 to ``tools/call`` on sessions it
chose to "forget", as an upstream that restarted or expired them does, for the tests of lost
sessions (a direct call that meets a 404 is made again on the supervisor's new session); one
with a tool of a test's own; and what those tests read of the gateway's view of it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import mcp_types as types
from starlette.types import Receive, Scope, Send

from conclave.platform.middleware import replay_body
from tests.gateway.upstreams.json_mcp_server import OBJECT, JsonServer, read_body


class ForgetfulServer(JsonServer):
    """``forget_all``: every session is answered 404 on ``tools/call`` (an upstream that loses
    each session at once); ``forgotten``: the sessions answered so (an upstream that restarted);
    ``slow_list_seconds``: ``tools/list`` takes that long (the supervisor is busy listing);
    ``refuse_initialize``: ``initialize`` is answered 503 (no new session opens);
    ``forget_listings``: a forgotten session's ``tools/list`` is answered 404 too (as any request
    on it is by an upstream that expired it), while calls it accepted before run on."""

    def __init__(self) -> None:
        super().__init__(json_response=True)
        self.forgotten: set[str] = set()
        self.forget_all = False
        self.answered_404 = 0
        self.slow_list_seconds = 0.0
        self.refuse_initialize = False
        self.forget_listings = False
        self.listing = asyncio.Event()
        """Set when a slow ``tools/list`` starts (the gateway's supervisor is busy listing)."""

    async def _list(self, ctx: Any, params: Any) -> Any:
        if self.slow_list_seconds:
            self.listing.set()
            await asyncio.sleep(self.slow_list_seconds)
        return await super()._list(ctx, params)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        body = await read_body(receive)
        headers = dict(scope["headers"])
        session = (headers.get(b"mcp-session-id") or b"").decode() or None
        message = json.loads(body)
        forgotten = self.forget_all or session in self.forgotten
        if message.get("method") == "initialize" and self.refuse_initialize:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if message.get("method") == "tools/list" and self.forget_listings and forgotten:
            self.answered_404 += 1
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if message.get("method") == "tools/call" and session is not None and forgotten:
            self.requests.append(("tools/call", message.get("id"), session, None))
            self.answered_404 += 1
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await super().__call__(scope, replay_body(body, receive), send)


class ToolServer(ForgetfulServer):
    """A forgetful upstream with one more tool, ``tool``, whose calls :meth:`on_call` answers."""

    tool = "custom"

    async def _list(self, ctx: Any, params: Any) -> Any:
        listed = await super()._list(ctx, params)
        listed.tools.append(types.Tool(name=self.tool, description=self.tool, input_schema=OBJECT))
        return listed

    async def on_call(self, message: dict[str, Any], send: Send) -> None:
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = await read_body(receive)
            message = json.loads(body)
            params = message.get("params") or {}
            if message.get("method") == "tools/call" and params.get("name") == self.tool:
                await self.on_call(message, send)
                return
            receive = replay_body(body, receive)
        await super().__call__(scope, receive, send)


async def send_rpc_error(
    send: Send, message: dict[str, Any], code: int, text: str, *, status: int = 200
) -> None:
    """Answer ``message`` with its own JSON-RPC error, at HTTP ``status``."""
    error = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": code, "message": text}}
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(error).encode()})


async def upstream_status(client: httpx.AsyncClient) -> dict[str, Any]:
    """What the gateway's ``GET /upstreams`` says of its one upstream."""
    return (await client.get("/upstreams")).json()["upstreams"][0]  # type: ignore[no-any-return]


async def upstream_ready(client: httpx.AsyncClient) -> bool:
    return bool((await upstream_status(client))["state"] == "ready")


async def gateway_mcp_session(client: httpx.AsyncClient) -> dict[str, str]:
    """An MCP session opened with the gateway's ``/mcp``: the headers its requests carry."""
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2025-06-18",
    }
    init = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    opened = await client.post(
        "/mcp",
        headers=headers,
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
    )
    if "mcp-session-id" in opened.headers:
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
    await client.post(
        "/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    return headers
