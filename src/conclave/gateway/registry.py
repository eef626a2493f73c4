"""The tool catalogue: registered tools, their compiled schemas and their wire aliases."""

from __future__ import annotations

import re
from dataclasses import dataclass

from jsonschema import Draft202012Validator

from conclave.gateway.formats import wire_name
from conclave.gateway.tools import Tool
from conclave.gateway.validation import compile_schema

_MCP_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


@dataclass(frozen=True)
class RegisteredTool:
    """A tool with its validators compiled once at registration."""

    tool: Tool
    arguments: Draft202012Validator
    output: Draft202012Validator | None


class ToolRegistry:
    """Tools by name. Registration checks names and schemas, so a broken plug-in fails at start."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        self._aliases: dict[str, str] = {}

    def register(self, tool: Tool) -> None:
        """Add ``tool``; raises ``ValueError`` for a bad name, a duplicate or an invalid schema."""
        if not _MCP_NAME.match(tool.name):
            raise ValueError(f"tool name {tool.name!r} must match {_MCP_NAME.pattern}")
        if tool.name in self._tools or tool.name in self._aliases:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        if tool.parameters.get("type") != "object":
            raise ValueError(f"tool {tool.name!r}: parameters must be a JSON Schema of type object")
        arguments = compile_schema(tool.parameters, where=f"tool {tool.name!r} parameters")
        output = (
            compile_schema(tool.output_schema, where=f"tool {tool.name!r} output schema")
            if tool.output_schema
            else None
        )
        alias = wire_name(tool.name)
        if alias != tool.name:
            if alias in self._tools or alias in self._aliases:
                raise ValueError(f"tool {tool.name!r}: wire alias {alias!r} is already taken")
            self._aliases[alias] = tool.name
        self._tools[tool.name] = RegisteredTool(tool, arguments, output)

    def resolve(self, name: str) -> RegisteredTool | None:
        """The tool called ``name`` or whose wire alias is ``name``."""
        found = self._tools.get(name)
        if found is None and name in self._aliases:
            found = self._tools[self._aliases[name]]
        return found

    def tools(self) -> list[Tool]:
        """Every tool, sorted by name."""
        return [self._tools[name].tool for name in sorted(self._tools)]

    def __len__(self) -> int:
        return len(self._tools)
