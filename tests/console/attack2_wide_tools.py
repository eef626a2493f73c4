"""A catalogue of large tool schemas, for the second attacker's tests (loaded by the gateway through
``tool_modules``): 15 tools of 500 parameters and 500 result fields each, about 0.7 MB of
catalogue, as a tool catalogue read over HTTP (an OpenAPI conversion, say) can be.

The attacker used 50 such tools (2.4 MB); the gateway checks every schema against the JSON Schema
meta-schema when it loads them, about 0.14 s per schema, so 50 tools cost 14 s to start. 15 is the
fewest that still fails without the Tools page's row budget on any machine: a 3.4 MB page, past
the test's 2.5 MB bound whatever the stall measured (12 tools made 2.7 MB)."""

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


WIDE_TOOLS = [_wide(index) for index in range(15)]

TOOLS = WIDE_TOOLS
