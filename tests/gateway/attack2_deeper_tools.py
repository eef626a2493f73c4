"""A plug-in tool whose input schema nests 400 deep in a keyword nothing reads (``examples``),
beside a plain one, for the second attacker's tests."""

from __future__ import annotations

import json
from typing import Any

from conclave.gateway.tools import Tool, ToolContext

DEEP = json.loads("[" * 400 + "0" + "]" * 400)


async def _received(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"received": args}


DEEPER = Tool(
    name="deeper",
    description="A schema with an example nested 400 deep.",
    executor=_received,
    parameters={"type": "object", "properties": {}, "examples": [DEEP]},
    tags=("test",),
)
PLAIN = Tool(
    name="plain",
    description="An ordinary tool.",
    executor=_received,
    parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
    tags=("test",),
)
TOOLS = [DEEPER, PLAIN]
