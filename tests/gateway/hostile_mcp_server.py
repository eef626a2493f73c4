"""A small, hostile MCP server over stdio, built with the MCP SDK's own low-level server.

Only for what the real servers of the suite (``mcp-server-time``, ``server-everything``) will not
do: break their output schema, list names that are not provider-safe or collide, answer 5 MB,
die in the middle of a call, storm ``list_changed``, list more tools than anyone should, flood
progress notifications, record that a call was cancelled. Run as
``python -m tests.gateway.hostile_mcp_server [--tools N] [--page N] [--abyss]``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

OBJECT = {"type": "object", "properties": {}, "additionalProperties": False}


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def hostile_tools() -> list[types.Tool]:
    """The tools with behaviour, then the ones with hostile names and schemas."""
    sized = {
        "type": "object",
        "properties": {"size": {"type": "integer", "minimum": 0}},
        "required": ["size"],
    }
    delay = {"type": "object", "properties": {"seconds": {"type": "number"}}}
    return [
        types.Tool(
            name="bad_output",
            description="Answers structured content that breaks its own output schema.",
            input_schema=OBJECT,
            output_schema={
                "type": "object",
                "properties": {"count": {"type": "integer"}},
                "required": ["count"],
            },
        ),
        types.Tool(name="huge", description="Answers `size` bytes of text.", input_schema=sized),
        types.Tool(name="crash", description="Exits after `seconds`.", input_schema=delay),
        types.Tool(name="storm", description="Sends 200 list_changed.", input_schema=OBJECT),
        types.Tool(name="big_number", description="Answers 2**70.", input_schema=OBJECT),
        types.Tool(name="fails", description="Answers isError.", input_schema=OBJECT),
        types.Tool(name="nul", description="Answers a NUL in its text.", input_schema=OBJECT),
        types.Tool(name="refuses", description="Answers -32602.", input_schema=OBJECT),
        types.Tool(name="pid", description="Answers its process id.", input_schema=OBJECT),
        types.Tool(
            name="slow",
            description="Sleeps `seconds`; writes `cancelled` to the file `marker` if cancelled.",
            input_schema={
                "type": "object",
                "properties": {"seconds": {"type": "number"}, "marker": {"type": "string"}},
                "required": ["seconds", "marker"],
            },
        ),
        types.Tool(
            name="progress_flood",
            description="Sends `count` progress notifications at once, hostile values first.",
            input_schema={"type": "object", "properties": {"count": {"type": "integer"}}},
        ),
        # Names: not provider-safe, long, colliding after sanitising, colliding with a plug-in.
        types.Tool(name="dotted.name", description="A dot.", input_schema=OBJECT),
        types.Tool(
            name="dotted_name", description="Sanitises like dotted.name.", input_schema=OBJECT
        ),
        types.Tool(name="a name with spaces", description="Spaces.", input_schema=OBJECT),
        types.Tool(name="n" * 120, description="120 characters.", input_schema=OBJECT),
        types.Tool(name="clash", description="hostile__clash is a plug-in.", input_schema=OBJECT),
        # Refused: a name longer than MCP's 128 characters (the policy's globs match it), and
        # schemas the registry must refuse. The others are served all the same.
        types.Tool(name="long_" + "n" * 124, description="129 characters.", input_schema=OBJECT),
        types.Tool(name="deep", description="Nests 80 levels.", input_schema=_deep(40)),
        types.Tool(
            name="huge_integer_schema",
            description="An integer beyond 64 bits in its schema.",
            input_schema={"type": "object", "properties": {"n": {"maximum": 2**70}}},
        ),
    ]


def make_server(count: int, page: int, abyss: bool = False) -> Server[Any]:
    """The server: ``count`` filler tools after the hostile ones, ``page`` per tools/list page
    (0: all in one page); with ``abyss``, a tool nested beyond any JSON parser's patience."""
    tools = hostile_tools() + [
        types.Tool(name=f"filler_{i}", description="Filler.", input_schema=OBJECT)
        for i in range(count)
    ]
    if abyss:
        tools.append(types.Tool(name="abyss", description="300 levels.", input_schema=_deep(100)))

    async def list_tools(
        _ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        start = int(params.cursor) if params and params.cursor else 0
        end = len(tools) if page == 0 else start + page
        cursor = str(end) if end < len(tools) else None
        return types.ListToolsResult(tools=tools[start:end], next_cursor=cursor)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        name = params.name
        if name == "bad_output":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text='{"count": "many"}')],
                structured_content={"count": "many"},
            )
        if name == "huge":
            text = "x" * int(args["size"])
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        if name == "crash":
            await anyio.sleep(float(args.get("seconds", 0)))
            os._exit(3)
        if name == "storm":
            for _ in range(200):
                await ctx.session.send_tool_list_changed()
        if name == "big_number":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(2**70))],
                structured_content={"n": 2**70},
            )
        if name == "nul":
            return types.CallToolResult(content=[types.TextContent(type="text", text="a\x00b")])
        if name == "fails":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="the upstream tool failed")],
                is_error=True,
            )
        if name == "refuses":
            from mcp.shared.exceptions import MCPError

            raise MCPError(types.INVALID_PARAMS, "no such thing")
        if name == "slow":
            try:
                await anyio.sleep(float(args["seconds"]))
            except anyio.get_cancelled_exc_class():
                # The SDK's dispatcher cancels the handler on the client's notifications/cancelled.
                with anyio.CancelScope(shield=True):
                    await anyio.Path(str(args["marker"])).write_text("cancelled")
                raise
            return types.CallToolResult(content=[types.TextContent(type="text", text="slept")])
        if name == "progress_flood":
            token = progress_token_from_params(ctx.params)
            count = int(args.get("count", 1000))
            if token is not None:
                # Unusable values first (the gateway drops them), then a flood.
                await ctx.session.send_notification(
                    types.ProgressNotification(
                        params=types.ProgressNotificationParams(
                            progress_token=token, progress=0.5, message="nul\x00" + "m" * 5000
                        )
                    ),
                    ctx.request_id,
                )
                for step in range(1, count + 1):
                    await ctx.session.send_progress_notification(
                        token, step, count, f"step {step}", related_request_id=ctx.request_id
                    )
            return types.CallToolResult(content=[types.TextContent(type="text", text="flooded")])
        if name == "pid":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(os.getpid()))]
            )
        return types.CallToolResult(content=[types.TextContent(type="text", text=name)])

    return Server("hostile", version="0", on_list_tools=list_tools, on_call_tool=call_tool)


async def _main(count: int, page: int, abyss: bool) -> None:
    server = make_server(count, page, abyss)
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--page", type=int, default=5)
    parser.add_argument("--abyss", action="store_true")
    arguments = parser.parse_args()
    anyio.run(_main, arguments.tools, arguments.page, arguments.abyss)
