"""``echo``: returns its message, with control characters removed (a ``purified`` correction)."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from conclave.gateway.tools import RuleOutcome, Tool, ToolContext


async def _echo(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    return {"message": args["message"]}


def _strip_control_characters(_args: Mapping[str, Any], result: Any) -> RuleOutcome | None:
    message = result["message"]
    if message.isprintable():  # no control or format character at all (the usual case)
        return None
    cleaned = "".join(
        ch for ch in message if ch in "\t\n" or unicodedata.category(ch) not in ("Cc", "Cf")
    )
    if cleaned == message:
        return None
    removed = len(message) - len(cleaned)
    return RuleOutcome({"message": cleaned}, (f"removed {removed} control character(s)",))


ECHO = Tool(
    name="echo",
    title="Echo",
    description="Return the given message unchanged (control characters are removed).",
    executor=_echo,
    parameters={
        "type": "object",
        "properties": {"message": {"type": "string", "maxLength": 10_000}},
        "required": ["message"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
    },
    annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    tags=("builtin", "diagnostics"),
    rules=(_strip_control_characters,),
    timeout_seconds=5,
)
