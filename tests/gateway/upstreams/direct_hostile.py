"""A streamable-HTTP MCP server (the SDK's own, answering JSON) whose ``tools/call`` a test
answers itself: the hostile upstream of :mod:`.test_attack_direct_calls`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server

from conclave.platform.middleware import replay_body
from tests.gateway.upstreams.json_mcp_server import read_body
from tests.httpserver import running_server

Send = Callable[[dict[str, Any]], Awaitable[None]]
OnCall = Callable[[dict[str, Any], dict[str, Any], Send], Awaitable[bool]]
"""(the JSON-RPC request, the ASGI scope, send): True when it answered, False to let the SDK."""

TOOLS = [
    types.Tool(name="ping", description="Answers pong.", input_schema={"type": "object"}),
    types.Tool(
        name="sleep",
        description="Sleeps.",
        input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    ),
]


async def answer(
    send: Send,
    status: int,
    body: bytes | list[bytes],
    content_type: str = "application/json",
    headers: list[tuple[bytes, bytes]] = (),  # type: ignore[assignment]
) -> None:
    chunks = [body] if isinstance(body, bytes) else body
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type.encode()), *headers],
        }
    )
    for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def rpc(request_id: Any, **fields: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, **fields}).encode()


def sdk_server(
    calls: Callable[[dict[str, Any]], Awaitable[types.CallToolResult]] | None = None,
) -> Server:
    """The SDK's low-level server with :data:`TOOLS`; ``calls`` answers their calls (``pong``)."""

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if calls is not None:
            return await calls(params.arguments or {})
        return types.CallToolResult(content=[types.TextContent(type="text", text="pong")])

    return Server("hostile", version="0", on_list_tools=list_tools, on_call_tool=call_tool)


def replayed(message: dict[str, Any]) -> Any:
    """An ASGI ``receive`` giving ``message`` as the request's body."""
    body = json.dumps(message).encode()
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:  # then no disconnect until the response is done
            await asyncio.Event().wait()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def hostile_app(
    on_call: OnCall,
    *,
    stateless: bool = True,
    seen: list[dict[str, Any]] | None = None,
    calls: Callable[[dict[str, Any]], Awaitable[types.CallToolResult]] | None = None,
    gate: OnCall | None = None,
) -> Any:
    """The SDK's server (JSON answers) for everything but the ``tools/call`` ``on_call``
    answers; ``seen`` collects every JSON-RPC message posted (with its headers); ``gate`` sees
    every message posted first and may answer it itself (True)."""

    inner = sdk_server(calls).streamable_http_app(json_response=True, stateless_http=stateless)

    async def app(scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        body = await read_body(receive)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if seen is not None and isinstance(parsed, dict):
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            seen.append({**parsed, "_headers": headers})
        if gate is not None and isinstance(parsed, dict) and await gate(parsed, scope, send):
            return
        is_call = isinstance(parsed, dict) and parsed.get("method") == "tools/call"
        if is_call and await on_call(parsed, scope, send):  # type: ignore[arg-type]
            return
        await inner(scope, replay_body(body, receive), send)

    return app


@asynccontextmanager
async def hostile_upstream(on_call: OnCall, **options: Any) -> AsyncIterator[str]:
    """The server on a loopback port; its ``/mcp`` URL."""
    async with running_server(hostile_app(on_call, **options), timeout_graceful_shutdown=1) as base:
        yield f"{base}/mcp"
