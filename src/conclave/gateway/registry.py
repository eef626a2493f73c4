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
        self._sources: dict[str, set[str]] = {}

    def register(self, tool: Tool) -> None:
        """Add ``tool``; raises ``ValueError`` for a bad name, a duplicate or an invalid schema."""
        self._add(self.prepare(tool))

    @staticmethod
    def prepare(tool: Tool) -> RegisteredTool:
        """``tool`` checked and its schemas compiled, not yet registered: no state of the
        registry is read, so this may run off the event loop (upstream tools are many, and what
        their schemas cost to compile is the upstream's choice). ``ValueError`` says what is
        wrong."""
        if not _MCP_NAME.match(tool.name):
            raise ValueError(f"tool name {tool.name!r} must match {_MCP_NAME.pattern}")
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
        return RegisteredTool(tool, arguments, output)

    def answers_to(self, name: str) -> bool:
        """Whether some tool or alias tool is called ``name`` or has it as wire alias."""
        return name in self._tools or name in self._aliases or name in self._alias_tools

    def _add(self, entry: RegisteredTool) -> None:
        tool = entry.tool
        if self.answers_to(tool.name):
            raise ValueError(f"tool {tool.name!r} is registered twice")
        alias = wire_name(tool.name)
        if alias != tool.name:
            if self.answers_to(alias):
                raise ValueError(f"tool {tool.name!r}: wire alias {alias!r} is already taken")
            self._aliases[alias] = tool.name
        self._tools[tool.name] = entry

    def _remove(self, name: str) -> None:
        self._tools.pop(name, None)
        alias = wire_name(name)
        if self._aliases.get(alias) == name:
            del self._aliases[alias]

    def names_in_use(self, *, besides: str) -> frozenset[str]:
        """Every name a tool answers to, but those of the tools of source ``besides``."""
        own = self._sources.get(besides, set())
        every = (*self._tools, *self._aliases, *self._alias_tools)
        return frozenset(name for name in every if name not in own)

    def replace_source(self, source: str, entries: list[RegisteredTool]) -> list[str]:
        """Make ``entries`` the tools of ``source`` (an upstream MCP server), in place of the ones
        it registered before; one that cannot be registered (its name taken meanwhile) is left
        out and described in the list returned. Synchronous, so no request sees a half-updated
        catalogue."""
        for name in self._sources.pop(source, set()):
            self._remove(name)
        refused: list[str] = []
        names: set[str] = set()
        for entry in entries:
            try:
                self._add(entry)
            except ValueError as exc:
                refused.append(str(exc))
            else:
                names.add(entry.tool.name)
        self._sources[source] = names
        return refused

    def add_alias(self, alias: Alias) -> None:
        """Add an alias tool for a registered canonical tool."""
        canonical = self._tools.get(alias.canonical)
        if canonical is None:
            raise ValueError(f"alias {alias.name!r}: canonical tool {alias.canonical!r} is missing")
        # A name any tool answers to (its own or its wire alias) cannot be taken twice.
        if self.answers_to(alias.name):
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
