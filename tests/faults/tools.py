"""A gateway plug-in for the fault tests (loaded with ``GATEWAY_TOOL_MODULES``): a tool slow
enough that a burst of calls is still in flight when the gateway process is killed."""

from __future__ import annotations

import asyncio
from typing import Any

from conclave.gateway.tools import Tool, ToolContext


async def _slow_echo(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    await asyncio.sleep(args.get("delay_ms", 200) / 1000)
    return {"message": args["message"]}


# Not read-only: the gateway records the call as "running" before it runs (a side-effect tool).
SLOW_ECHO = Tool(
    name="slow_echo",
    description="Echo a message after a delay.",
    executor=_slow_echo,
    parameters={
        "type": "object",
        "properties": {
            "message": {"type": "string"},
            "delay_ms": {"type": "integer", "minimum": 0, "maximum": 5000},
        },
        "required": ["message"],
        "additionalProperties": False,
    },
)

TOOLS = [SLOW_ECHO]
