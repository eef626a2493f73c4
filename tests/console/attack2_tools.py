"""Plug-in tools with hostile input schemas, for the second attacker's tests (loaded by the gateway
through ``tool_modules``). A tool catalogue is filled by plug-ins and by HTTP tool catalogues: its
schemas are input like any other."""

from __future__ import annotations

from typing import Any

from conclave.gateway.tools import Tool, ToolContext


async def _received(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"received": args}


# A bound of 401 digits: valid JSON (Python reads up to 4,300 digits), valid JSON Schema.
HUGE = 10**400

HUGE_BOUND = Tool(
    name="huge_bound",
    description="An integer parameter whose minimum is a 401-digit integer.",
    executor=_received,
    parameters={
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": HUGE}},
        "additionalProperties": False,
    },
    tags=("test",),
)


TOOLS = [HUGE_BOUND]
