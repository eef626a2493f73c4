"""The tool catalogue: registered tools, their compiled schemas and their wire aliases."""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass, replace

from conclave.gateway.finance import Alias
from conclave.gateway.formats import wire_name
from conclave.gateway.tools import Tool
from conclave.gateway.validation import SchemaCheck, compile_schema, depth_exceeds

_MCP_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}\Z")
MAX_SCHEMA_DEPTH = 64
"""Deepest nesting a tool's schemas may have (real ones stay under ten)."""


@dataclass(frozen=True)
class RegisteredAlias:
    """An alias tool with its argument validator; it runs its canonical tool."""

    alias: Alias
    arguments: SchemaCheck
    view: Tool
    """How the alias appears in catalogues (the canonical tool's annotations, its own schema)."""


@dataclass(frozen=True)
class RegisteredTool:
    """A tool with its validators compiled once at registration."""

    tool: Tool
    arguments: SchemaCheck
    output: SchemaCheck | None


def _check_executor(tool: Tool) -> None:
    if (tool.executor is None) == (tool.cpu_executor is None):
        raise ValueError(f"tool {tool.name!r}: give exactly one of executor and cpu_executor")
    if tool.cpu_executor is not None:
        try:  # it crosses to a worker process by reference: a closure or lambda cannot
            pickle.dumps(tool.cpu_executor)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise ValueError(
                f"tool {tool.name!r}: cpu_executor must be a function defined at module level"
            ) from exc


class ToolRegistry:
    """Tools by name. Registration checks names and schemas, so a broken plug-in fails at start."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        self._aliases: dict[str, str] = {}
        self._alias_tools: dict[str, RegisteredAlias] = {}

    def register(self, tool: Tool) -> None:
        """Add ``tool``; raises ``ValueError`` for a bad name, a duplicate or an invalid schema."""
        if not _MCP_NAME.match(tool.name):
            raise ValueError(f"tool name {tool.name!r} must match {_MCP_NAME.pattern}")
        if tool.name in self._tools or tool.name in self._aliases or tool.name in self._alias_tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        _check_executor(tool)
        if tool.parameters.get("type") != "object":
            raise ValueError(f"tool {tool.name!r}: parameters must be a JSON Schema of type object")
        for part, schema in (
            ("parameters", tool.parameters),
            ("output schema", tool.output_schema),
        ):
            if schema and depth_exceeds(schema, MAX_SCHEMA_DEPTH):
                # Served as it is, such a schema makes the whole catalogue unserialisable
                # (GET /tools and MCP tools/list a 500 for every tool), and no client reads it.
                raise ValueError(
                    f"tool {tool.name!r}: {part} nest deeper than {MAX_SCHEMA_DEPTH} levels"
                )
        arguments = compile_schema(tool.parameters, where=f"tool {tool.name!r} parameters")
        output = (
            compile_schema(tool.output_schema, where=f"tool {tool.name!r} output schema")
            if tool.output_schema
            else None
        )
        alias = wire_name(tool.name)
        if alias != tool.name:
            if alias in self._tools or alias in self._aliases or alias in self._alias_tools:
                raise ValueError(f"tool {tool.name!r}: wire alias {alias!r} is already taken")
            self._aliases[alias] = tool.name
        self._tools[tool.name] = RegisteredTool(tool, arguments, output)

    def add_alias(self, alias: Alias) -> None:
        """Add an alias tool for a registered canonical tool."""
        canonical = self._tools.get(alias.canonical)
        if canonical is None:
            raise ValueError(f"alias {alias.name!r}: canonical tool {alias.canonical!r} is missing")
        # A name any tool answers to (its own or its wire alias) cannot be taken twice.
        if (
            alias.name in self._tools
            or alias.name in self._alias_tools
            or alias.name in self._aliases
        ):
            raise ValueError(f"alias {alias.name!r} is registered twice")
        view = replace(
            canonical.tool,
            name=alias.name,
            title=None,
            description=alias.description,
            parameters=alias.parameters,
            tags=("finance", *canonical.tool.tags),
        )
        validator = compile_schema(alias.parameters, where=f"alias {alias.name!r} parameters")
        self._alias_tools[alias.name] = RegisteredAlias(alias, validator, view)

    def alias(self, name: str) -> RegisteredAlias | None:
        """The alias tool called ``name``."""
        return self._alias_tools.get(name)

    def aliases(self) -> list[RegisteredAlias]:
        """Every alias tool, sorted by name."""
        return [self._alias_tools[name] for name in sorted(self._alias_tools)]

    def resolve(self, name: str) -> RegisteredTool | None:
        """The tool called ``name`` or whose wire alias is ``name``."""
        found = self._tools.get(name)
        if found is None and name in self._aliases:
            found = self._tools[self._aliases[name]]
        return found

    def tools(self, *, include_unavailable: bool = False) -> list[Tool]:
        """The catalogue sorted by name: tools and alias tools, without unavailable ones unless
        asked for."""
        tools = [entry.tool for entry in self._tools.values()]
        tools += [entry.view for entry in self._alias_tools.values()]
        if not include_unavailable:
            tools = [tool for tool in tools if tool.unavailable_reason is None]
        return sorted(tools, key=lambda tool: tool.name)

    def __len__(self) -> int:
        return len(self._tools)
