"""`GET /tools` in OpenAI and Anthropic format, checked by the providers' own SDKs.

Every entry must validate as the SDKs' tool parameter types (the shapes their clients send), carry
a name the providers accept (``^[a-zA-Z0-9_-]{1,64}$``, unique in the list) and a JSON Schema with
an object root; and a tool call a model makes under that name (a response parsed by the SDK's own
models) runs on ``/execute``. No request goes to a provider.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
from anthropic.types import Message, ToolParam
from jsonschema import Draft202012Validator
from openai.types.chat import ChatCompletion, ChatCompletionToolParam
from openai.types.responses import FunctionToolParam
from openai.types.shared_params import FunctionDefinition
from pydantic import TypeAdapter

from conclave.gateway.app import create_app
from tests.conftest import Backend, open_platform, serve_app, test_settings
from tests.interop.provider_named_tools import DOTTED, LONG

PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
PLUGINS = "tests.interop.provider_named_tools"
OPENAI_CHAT_TOOL = TypeAdapter(ChatCompletionToolParam)
OPENAI_RESPONSES_TOOL = TypeAdapter(FunctionToolParam)
ANTHROPIC_TOOL = TypeAdapter(ToolParam)
Catalogue = Callable[[], AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture(params=["generic", "finance"])
def catalogue(request, sqlite_engine, memory_bus) -> Catalogue:
    """``async with catalogue() as client``: the gateway (both domain modes) with plug-in tools
    whose names need aliases. (Its MCP transport's task group must be entered and left in the
    test's own task, so this is no yield fixture.)"""

    @asynccontextmanager
    async def start() -> AsyncIterator[httpx.AsyncClient]:
        settings = test_settings(mcp_domain=request.param, tool_modules=[PLUGINS])
        backend = Backend("embedded", sqlite_engine, memory_bus)
        async with (
            open_platform(backend, settings) as platform,
            serve_app(create_app(settings, platform=platform)) as client,
        ):
            yield client

    return start


async def listed(client: httpx.AsyncClient, fmt: str) -> list[dict[str, Any]]:
    response = await client.get("/tools", params={"format": fmt})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["count"] == len(body["tools"])
    return list(body["tools"])


def keys_of(typed_dict: Any) -> set[str]:
    return set(typing.get_type_hints(typed_dict))


def check_names_and_schema(names: list[str], schemas: list[dict[str, Any]]) -> None:
    assert all(PROVIDER_NAME.fullmatch(name) for name in names), names
    assert len(set(names)) == len(names), "the providers refuse a list with a name twice"
    for schema in schemas:
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"


async def test_openai_entries_are_tools_of_the_openai_sdk(catalogue: Catalogue) -> None:
    async with catalogue() as client:
        tools = await listed(client, "openai")
    for entry in tools:
        OPENAI_CHAT_TOOL.validate_python(entry, strict=True)
        assert set(entry) <= keys_of(ChatCompletionToolParam)
        assert set(entry["function"]) <= keys_of(FunctionDefinition)
        # The same function, flat, is a tool of the Responses API.
        OPENAI_RESPONSES_TOOL.validate_python(
            {"type": "function", **entry["function"], "strict": False}, strict=True
        )
    check_names_and_schema(
        [e["function"]["name"] for e in tools], [e["function"]["parameters"] for e in tools]
    )
    assert {DOTTED, LONG}.isdisjoint(e["function"]["name"] for e in tools)


async def test_anthropic_entries_are_tools_of_the_anthropic_sdk(catalogue: Catalogue) -> None:
    async with catalogue() as client:
        tools = await listed(client, "anthropic")
    for entry in tools:
        ANTHROPIC_TOOL.validate_python(entry, strict=True)
        assert set(entry) <= keys_of(ToolParam)
    check_names_and_schema([e["name"] for e in tools], [e["input_schema"] for e in tools])
    assert {DOTTED, LONG}.isdisjoint(e["name"] for e in tools)


async def test_every_format_lists_the_same_tools_under_the_same_names(catalogue: Catalogue) -> None:
    # A deployment serving OpenAI and Anthropic models maps one name back to one tool.
    async with catalogue() as client:
        openai_names = [e["function"]["name"] for e in await listed(client, "openai")]
        anthropic_names = [e["name"] for e in await listed(client, "anthropic")]
        mcp_names = [e["name"] for e in await listed(client, "mcp")]
    # MCP clients hand the names they list to model providers: the same aliases there too.
    assert openai_names == anthropic_names == mcp_names
    assert {DOTTED, LONG}.isdisjoint(mcp_names)


def openai_tool_call(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A Chat Completions answer calling ``name``, parsed by the OpenAI SDK's own model."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    completion = ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
        }
    )
    [parsed] = completion.choices[0].message.tool_calls or []
    assert parsed.type == "function"
    return parsed.function.name, json.loads(parsed.function.arguments)


def anthropic_tool_use(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A Messages answer with a ``tool_use`` block, parsed by the Anthropic SDK's own model."""
    message = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "content": [{"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments}],
        }
    )
    [block] = message.content
    assert block.type == "tool_use"
    return block.name, dict(block.input)  # type: ignore[arg-type]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_model_call_under_the_listed_name_runs_the_plug_in(
    catalogue: Catalogue, provider: str
) -> None:
    async with catalogue() as client:
        if provider == "openai":
            names = [e["function"]["name"] for e in await listed(client, "openai")]
        else:
            names = [e["name"] for e in await listed(client, "anthropic")]
        aliases = [name for name in names if name.startswith(("billing_invoices", "warehouse_"))]
        assert len(aliases) == 2
        parse = openai_tool_call if provider == "openai" else anthropic_tool_use
        for alias in aliases:
            tool, args = parse(alias, {"text": "ünïcode"})
            response = await client.post("/execute", json={"tool": tool, "args": args})
            assert response.status_code == 200, response.text
            assert response.json()["tool"] in (DOTTED, LONG)
            assert response.json()["result"] == {"text": "ünïcode"}
