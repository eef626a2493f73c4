"""A local MCP server that echoes, over streamable HTTP (the MCP SDK's own server, stateless,
JSON answers): the upstream of the gateway's federated benchmark (``bench/gateway.py``).

Run: ``python -m uvicorn bench.mcp_echo:app --port 8931``; its endpoint is ``/mcp``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Mount

ECHO = types.Tool(
    name="echo",
    description="Echo a message.",
    input_schema={
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
        "additionalProperties": False,
    },
    annotations=types.ToolAnnotations(read_only_hint=True),
)


async def _list(_ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[ECHO])


async def _call(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    message = str((params.arguments or {}).get("message", ""))
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)])


manager = StreamableHTTPSessionManager(
    app=Server("bench-echo", version="1", on_list_tools=_list, on_call_tool=_call),
    json_response=True,
    stateless=True,
)


@asynccontextmanager
async def _lifespan(_app: Starlette) -> AsyncIterator[None]:
    async with manager.run():
        yield


app = Starlette(routes=[Mount("/mcp", app=manager.handle_request)], lifespan=_lifespan)
