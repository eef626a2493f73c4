"""A catalogue of large tool schemas, for the second attacker's tests (loaded by the gateway through
``tool_modules``): 50 tools of 500 parameters and 500 result fields each, about 2.4 MB of
catalogue, as a tool catalogue read over HTTP (an OpenAPI conversion, say) can be."""

from __future__ import annotations

from typing import Any

from conclave.gateway.tools import Tool, ToolContext


async def _received(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"received": args}


def _wide(index: int) -> Tool:
    properties = {f"field_{n}": {"type": "string", "description": "d"} for n in range(500)}
    schema = {"type": "object", "properties": properties}
    return Tool(
        name=f"wide_{index}",
        description="A tool with 500 string parameters and as many result fields.",
        executor=_received,
        parameters=schema,
        output_schema=schema,
        tags=("test",),
    )


WIDE_TOOLS = [_wide(index) for index in range(50)]

TOOLS = WIDE_TOOLS
