"""The catalogue in the three function-calling formats, with stable wire names.

OpenAI and Anthropic accept names matching ``^[a-zA-Z0-9_-]{1,64}$``; MCP accepts dots and up to 128
characters, but MCP clients forward tool names to model providers, so MCP gets the same alias. A
tool whose name breaks the rule gets a stable alias (derived from the name, so every replica
computes the same one), and ``/execute`` and MCP ``tools/call`` accept the alias.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from conclave.gateway.tools import Tool

Format = Literal["openai", "anthropic", "mcp"]
FORMATS: tuple[Format, ...] = ("openai", "anthropic", "mcp")
_STRICT_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}\Z")


def wire_name(name: str) -> str:
    """The name of ``name`` for OpenAI/Anthropic: itself when valid, else a stable alias."""
    if _STRICT_NAME.match(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    stem = re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:55] or "tool"
    return f"{stem}_{digest}"


def render(tool: Tool, fmt: Format) -> dict[str, Any]:
    """One catalogue entry of ``tool`` in ``fmt``."""
    if fmt == "openai":
        return {
            "type": "function",
            "function": {
                "name": wire_name(tool.name),
                "description": tool.description,
                "parameters": dict(tool.parameters),
            },
        }
    if fmt == "anthropic":
        return {
            "name": wire_name(tool.name),
            "description": tool.description,
            "input_schema": dict(tool.parameters),
        }
    entry: dict[str, Any] = {
        "name": wire_name(tool.name),
        "description": tool.description,
        "inputSchema": dict(tool.parameters),
    }
    if tool.title:
        entry["title"] = tool.title
    if tool.output_schema and tool.output_schema.get("type") == "object":
        # MCP structured content is an object: a schema for anything else cannot be declared.
        entry["outputSchema"] = dict(tool.output_schema)
    if tool.annotations:
        entry["annotations"] = dict(tool.annotations)
    return entry
