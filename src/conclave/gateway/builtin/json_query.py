"""``json_query``: a JMESPath query over a JSON document given in the arguments.

A query can build values far larger than its input: ``@ | {a: @, b: @}`` doubles its input, and
twenty of those turn the one-character document ``"x"`` into a 29 MB answer. JMESPath builds such
values by sharing (the dict holds the same object twice), so they cost nothing until something
writes them out: the size has to be counted, not observed. Every value the interpreter produces
is therefore measured as it is produced (its JSON size as if written out, shared parts counted
each time they appear, each object measured once) and the query is refused with 422
``RESULT_TOO_LARGE`` as soon as one exceeds :data:`MAX_VALUE_CHARS`. The tool runs in a worker
process (``cpu_executor``), so its time-out stops a query that is slow within that budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jmespath.exceptions import JMESPathError
from jmespath.parser import Parser
from jmespath.visitor import TreeInterpreter

from conclave.gateway.tools import RuleOutcome, Tool, ToolContext, ToolExecutionError
from conclave.platform.problem_types import ProblemCode

MAX_VALUE_CHARS = 1_048_576
"""Largest value (in characters of JSON) a query may build, its result included."""


class _QueryTooLarge(Exception):
    pass


class _BudgetedInterpreter(TreeInterpreter):  # type: ignore[misc]  # jmespath has no types
    """JMESPath's own interpreter, measuring every value a node of the query produces."""

    def __init__(self, budget: int) -> None:
        super().__init__()
        self._budget = budget
        # id -> (the object, kept alive so its id is not reused; its size)
        self._sizes: dict[int, tuple[Any, int]] = {}

    def visit(self, node: Any, *args: Any, **kwargs: Any) -> Any:
        value = super().visit(node, *args, **kwargs)
        if isinstance(value, dict | list):
            self._measure(value)
        elif isinstance(value, str) and len(value) > self._budget:
            raise _QueryTooLarge
        return value

    def _measure(self, root: dict[str, Any] | list[Any]) -> int:
        # Iterative post-order walk: children before parents, each container once.
        stack: list[Any] = [root]
        while stack:
            container = stack[-1]
            if id(container) in self._sizes:
                stack.pop()
                continue
            children = container.values() if isinstance(container, dict) else container
            pending = [
                child
                for child in children
                if isinstance(child, dict | list) and id(child) not in self._sizes
            ]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            size = 2 + sum(self._size(child) + 1 for child in children)
            if isinstance(container, dict):
                size += sum(len(key) + 3 for key in container)
            if size > self._budget:
                raise _QueryTooLarge
            self._sizes[id(container)] = (container, size)
        return self._sizes[id(root)][1]

    def _size(self, value: Any) -> int:
        if isinstance(value, dict | list):
            return self._sizes[id(value)][1]
        if isinstance(value, str):
            return len(value) + 2
        if value is None or isinstance(value, bool):
            return 5
        if isinstance(value, int | float):
            return len(repr(value))
        return 0  # an expression reference (&field), never part of a result


def query(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    """The tool's function (run in a worker process)."""
    try:
        parsed = Parser().parse(args["query"])
        result = _BudgetedInterpreter(MAX_VALUE_CHARS).visit(parsed.parsed, args["document"])
    except JMESPathError as exc:
        raise ToolExecutionError(
            f"invalid JMESPath query: {exc}", code=ProblemCode.INVALID_QUERY
        ) from exc
    except RecursionError as exc:
        raise ToolExecutionError(
            "the query nests too deeply", code=ProblemCode.INVALID_QUERY
        ) from exc
    except _QueryTooLarge as exc:
        raise ToolExecutionError(
            f"the query builds a value larger than {MAX_VALUE_CHARS:,} characters of JSON",
            code=ProblemCode.RESULT_TOO_LARGE,
        ) from exc
    return {"query": args["query"], "result": result}


def _warn_when_nothing_matched(_args: Mapping[str, Any], result: Any) -> RuleOutcome | None:
    if result["result"] is None:
        return RuleOutcome(result, ("the query matched nothing in the document",))
    return None


JSON_QUERY = Tool(
    name="json_query",
    title="Query JSON",
    description="Run a JMESPath query (jmespath.org) over a JSON document; return the match.",
    cpu_executor=query,
    parameters={
        "type": "object",
        "properties": {
            "document": {"description": "Any JSON value to query."},
            "query": {"type": "string", "minLength": 1, "maxLength": 2000},
        },
        "required": ["document", "query"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"query": {"type": "string"}, "result": {}},
        "required": ["query", "result"],
    },
    annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    tags=("builtin", "data"),
    rules=(_warn_when_nothing_matched,),
    timeout_seconds=5,
)
