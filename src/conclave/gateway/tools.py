"""What a tool is: a schema, an executor and optional rules.

This is the plug-in contract. A plug-in module or entry point provides :class:`Tool` objects::

    from conclave.gateway.tools import Tool

    async def add(args, ctx):
        return {"sum": args["a"] + args["b"]}

    TOOLS = [Tool(name="add", description="Add two numbers.", executor=add, parameters={
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"], "additionalProperties": False})]

An executor that computes rather than waits (parsing, big numbers, searching a document) is given
as ``cpu_executor`` instead: a synchronous function defined at module level, which the gateway runs
in a worker process so that its time-out stops it (see :mod:`conclave.gateway.workers`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conclave.platform.problem_types import ProblemCode

if TYPE_CHECKING:  # worker processes import this module: they need no Redis client
    from conclave.gateway.progress import ProgressReporter
    from conclave.platform.ratelimit import Rate


@dataclass(slots=True)
class ToolContext:
    """What an executor knows about the call it serves."""

    conclave_id: str
    user_id: str
    correlation_id: str | None
    upstream_credential: str | None = None
    """Set by an upstream tool's executor: the kind of credential it presented (``user``,
    ``service``, ``none``); the chain writes it into the audit row."""
    progress: ProgressReporter | None = None
    """Where the tool may report its progress (``progress, total, message``): set when the
    caller can receive it (:mod:`conclave.gateway.progress`), ``None`` otherwise. A
    ``cpu_executor`` never gets it (it runs in another process)."""


Executor = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
CpuExecutor = Callable[[dict[str, Any], ToolContext], Any]
"""A synchronous executor run in a worker process: module-level (it is pickled by reference),
arguments and result plain JSON values."""


@dataclass(frozen=True)
class RuleOutcome:
    """A rule's verdict on a result: possibly corrected, with warnings (``purified``)."""

    result: Any
    warnings: tuple[str, ...] = ()


Rule = Callable[[Mapping[str, Any], Any], RuleOutcome | None]
"""A tool-specific check run on (arguments, result). Return ``None`` when the result passes as is,
a :class:`RuleOutcome` to correct it or attach warnings, or raise :class:`RuleViolation`."""


class RuleViolation(Exception):
    """A rule rejects the call: it is recorded ``heretical`` and answered with 422."""


class ToolExecutionError(Exception):
    """An expected failure of an executor (bad input it could only detect while running, a
    backend refusing). ``status`` is the HTTP status the caller receives."""

    def __init__(
        self, message: str, *, code: str = ProblemCode.TOOL_ERROR, status: int = 422
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


@dataclass(frozen=True)
class Tool:
    """A callable tool. ``parameters`` is a JSON Schema whose root is ``type: object``. Exactly one
    of ``executor`` (async, on the event loop: waiting on I/O) and ``cpu_executor`` (synchronous,
    in a worker process: computing) is given."""

    name: str
    description: str
    executor: Executor | None = None
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    title: str | None = None
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] | None = None
    tags: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = ()
    timeout_seconds: float | None = None
    rate_limit: Rate | None = None
    """Calls per second for this tool across all users (and replicas, on Redis)."""
    max_concurrency: int | None = None
    """Executions of this tool running at once in one process; more get 429 ``TOOL_BUSY``."""
    cpu_executor: CpuExecutor | None = None
    audit_read_only: bool | None = None
    """Whether a call is recorded once, when it finishes (``True``), or first as ``running``
    (``False``). ``None``: the ``readOnlyHint`` annotation decides. Set for tools whose
    annotations come from a server the gateway does not control (upstream MCP servers)."""
    unavailable_reason: str | None = None
    """Set when the tool cannot work in this deployment (e.g. its backend is not configured):
    it is left out of the catalogue and its executor answers 503."""
    upstream_origin: tuple[str, str] | None = None
    """For a tool of an upstream MCP server: (the server's name, the tool's own name there), which
    the tool policy's ``upstream:<server>/<tool>`` selectors match."""
