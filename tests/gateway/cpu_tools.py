"""CPU-bound plug-in tools for the tests: module-level functions, run in the gateway's workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from conclave.gateway.tools import Tool, ToolContext


def spin(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    """Write this process's id to ``pid_file``, then compute for ever."""
    Path(args["pid_file"]).write_text(str(os.getpid()))
    while True:
        pass


def die(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    """End the worker process abruptly, as the kernel's out-of-memory killer would."""
    os._exit(9)


def oversized(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    """A result of ``size`` characters."""
    return {"text": "x" * args["size"]}


SPIN = Tool(
    name="spin",
    description="Computes until its time-out stops it.",
    cpu_executor=spin,
    parameters={"type": "object", "properties": {"pid_file": {"type": "string"}}},
    annotations={"readOnlyHint": True},
    timeout_seconds=0.5,
)
OVERSIZED = Tool(
    name="oversized",
    description="Returns as much text as asked.",
    cpu_executor=oversized,
    parameters={"type": "object", "properties": {"size": {"type": "integer"}}},
    annotations={"readOnlyHint": True},
)
DIE = Tool(
    name="die",
    description="Kills its worker process.",
    cpu_executor=die,
    annotations={"readOnlyHint": True},
)
CPU_TOOLS = (SPIN, OVERSIZED, DIE)
