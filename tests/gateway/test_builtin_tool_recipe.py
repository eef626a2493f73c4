"""The recipe "Add a built-in tool" of CONTRIBUTING.md, followed once.

``WORD_COUNT`` is written the way the recipe says a built-in is (a module-level ``Tool`` with its
own module, output schema, annotations, ``builtin`` tag and time-out) and registered the way
``BUILTIN_TOOLS`` is (before the app starts, here through ``extra_tools`` so that the catalogue of
the other tests stays as it is). It is listed in every format, runs through ``POST /execute`` and
leaves its audit row and event. The last test holds the built-ins that ship to the same recipe.
"""

from __future__ import annotations

from typing import Any

import pytest

from conclave.gateway.builtin import BUILTIN_TOOLS
from conclave.gateway.tools import Tool, ToolContext
from tests.conftest import Backend, test_settings
from tests.gateway.conftest import audit_rows, published, run_gateway


async def _count_words(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    return {"words": len(args["text"].split())}


WORD_COUNT = Tool(
    name="word_count",
    title="Word count",
    description="Count the words of a text.",
    executor=_count_words,
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": 10_000}},
        "required": ["text"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"words": {"type": "integer"}},
        "required": ["words"],
    },
    annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    tags=("builtin", "text"),
    timeout_seconds=5,
)


async def test_a_new_builtin_is_listed_in_every_format_and_runs_governed(backend: Backend):
    async with run_gateway(backend, test_settings(), extra_tools=(WORD_COUNT,)) as client:
        openai = (await client.get("/tools", params={"format": "openai"})).json()["tools"]
        [listed] = [t["function"] for t in openai if t["function"]["name"] == "word_count"]
        assert listed["parameters"]["required"] == ["text"]
        anthropic = (await client.get("/tools", params={"format": "anthropic"})).json()["tools"]
        [listed] = [t for t in anthropic if t["name"] == "word_count"]
        assert listed["input_schema"]["required"] == ["text"]
        mcp = (await client.get("/tools", params={"format": "mcp"})).json()["tools"]
        [listed] = [t for t in mcp if t["name"] == "word_count"]
        assert listed["outputSchema"]["required"] == ["words"]
        assert listed["annotations"]["readOnlyHint"] is True
        builtin = (await client.get("/tools", params={"tags": "builtin"})).json()["tools"]
        assert "word_count" in {t["function"]["name"] for t in builtin}

        response = await client.post(
            "/execute", json={"tool": "word_count", "args": {"text": "one two three"}}
        )
        assert response.status_code == 200
        body = response.json()
        assert (body["result"], body["status"]) == ({"words": 3}, "succeeded")
        refused = await client.post("/execute", json={"tool": "word_count", "args": {}})
        assert refused.status_code == 422

    [ran, rejected] = await audit_rows(backend)
    assert (ran.conclave_id, ran.tool_name, ran.status) == (
        body["conclave_id"],
        "word_count",
        "succeeded",
    )
    assert ran.result == {"words": 3} and ran.args == {"text": "one two three"}
    assert (rejected.status, rejected.error_code) == ("rejected", "VALIDATION_FAILED")
    events = [e for e in await published(backend) if e.payload["tool"] == "word_count"]
    assert [e.payload["status"] for e in events] == ["succeeded", "rejected"]


@pytest.mark.parametrize("tool", BUILTIN_TOOLS, ids=lambda tool: tool.name)
def test_the_shipped_builtins_follow_the_recipe(tool: Tool):
    executor = tool.executor or tool.cpu_executor
    assert executor is not None
    assert executor.__module__.startswith("conclave.gateway.builtin.")  # a module of its own
    assert tool.tags[0] == "builtin"
    assert tool.output_schema is not None and tool.title
    assert tool.annotations is not None and "readOnlyHint" in tool.annotations
    assert tool.timeout_seconds is not None
