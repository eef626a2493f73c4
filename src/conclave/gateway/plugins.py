"""Load tool plug-ins from the ``conclave.tools`` entry point group and from module paths.

A plug-in target is a :class:`Tool`, an iterable of tools, or a callable returning either. A
module path is ``package.module:attribute`` or ``package.module`` (then the attribute ``TOOLS``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from importlib.metadata import entry_points
from typing import Any

from conclave.gateway.tools import Tool

ENTRY_POINT_GROUP = "conclave.tools"


def _expand(target: Any, origin: str) -> Iterator[Tool]:
    if callable(target) and not isinstance(target, Tool):
        target = target()
    if isinstance(target, Tool):
        yield target
        return
    if isinstance(target, Iterable):
        for item in target:
            if not isinstance(item, Tool):
                raise TypeError(f"{origin}: {item!r} is not a conclave Tool")
            yield item
        return
    raise TypeError(f"{origin}: expected a Tool, tools, or a callable returning them")


def load_module_tools(path: str) -> list[Tool]:
    """The tools of ``package.module[:attribute]``."""
    module_name, _, attribute = path.partition(":")
    module = importlib.import_module(module_name)
    target = getattr(module, attribute or "TOOLS")
    return list(_expand(target, path))


def load_entry_point_tools() -> list[Tool]:
    """The tools every installed distribution registers under ``conclave.tools``."""
    tools: list[Tool] = []
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        tools.extend(_expand(entry_point.load(), f"entry point {entry_point.name}"))
    return tools
