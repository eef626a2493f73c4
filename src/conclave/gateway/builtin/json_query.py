"""``json_query``: a JMESPath query over a JSON document given in the arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from conclave.gateway.tools import RuleOutcome, Tool, ToolContext, ToolExecutionError


async def _json_query(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    try:
        expression = jmespath.compile(args["query"])
        return {"query": args["query"], "result": expression.search(args["document"])}
    except JMESPathError as exc:
        raise ToolExecutionError(f"invalid JMESPath query: {exc}", code="INVALID_QUERY") from exc


def _warn_when_nothing_matched(_args: Mapping[str, Any], result: Any) -> RuleOutcome | None:
    if result["result"] is None:
        return RuleOutcome(result, ("the query matched nothing in the document",))
    return None


JSON_QUERY = Tool(
    name="json_query",
    title="Query JSON",
    description="Run a JMESPath query (jmespath.org) over a JSON document; return the match.",
    executor=_json_query,
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
