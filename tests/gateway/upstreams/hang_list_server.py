"""A stdio MCP server that answers its first ``tools/list`` and hangs on every later one; its tool
``pid`` answers its process id (``python -m tests.gateway.upstreams.hang_list_server``)."""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

OBJECT = {"type": "object", "properties": {}, "additionalProperties": True}
listed = 0


async def list_tools(_ctx: Any, _p: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    global listed
    listed += 1
    if listed > 1:
        await anyio.sleep_forever()
    return types.ListToolsResult(tools=[types.Tool(name="pid", input_schema=OBJECT)])


async def call_tool(_ctx: Any, _p: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=str(os.getpid()))])


async def main() -> None:
    server = Server("hang", version="0", on_list_tools=list_tools, on_call_tool=call_tool)
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
