"""A plug-in module loaded by the tests through GATEWAY_TOOL_MODULES and an entry point."""

from __future__ import annotations

from typing import Any

from conclave.gateway.tools import Tool, ToolContext


async def _shout(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    return {"text": args["text"].upper()}


SHOUT = Tool(
    name="shout",
    description="Upper-case a text.",
    executor=_shout,
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
)


def make_tools() -> list[Tool]:
    """A factory, the form entry points usually take."""
    return [
        Tool(
            name="whisper",
            description="Lower-case a text.",
            executor=lambda args, _ctx: _lower(args),
            parameters=SHOUT.parameters,
        )
    ]


async def _lower(args: dict[str, Any]) -> dict[str, Any]:
    return {"text": args["text"].lower()}


TOOLS = [SHOUT]
