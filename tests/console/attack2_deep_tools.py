"""Forty plug-in tools whose input schemas are small (under 20,000 characters of JSON each) but
nested 60 deep (the gateway takes at most 64) in a keyword the form ignores (``examples``), for
the second attacker's tests."""

from __future__ import annotations

import json
from typing import Any

from conclave.gateway.tools import Tool, ToolContext

DEPTH, WIDTH = 60, 6400
# 60 nested lists around 6,400 zeros: under 20,000 characters as compact JSON.
DEEP = json.loads("[" * DEPTH + ",".join(["0"] * WIDTH) + "]" * DEPTH)


async def _received(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"received": args}


def _deep(index: int) -> Tool:
    return Tool(
        name=f"deep_{index}",
        description="A tool whose schema carries a deeply nested example.",
        executor=_received,
        parameters={
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "examples": [DEEP],
        },
        tags=("test",),
    )


TOOLS = [_deep(index) for index in range(40)]
