"""What /mcp puts on the wire for real clients, on both paths (fast path and the SDK's server):
error results every SDK accepts, structured content that matches its schema, answers shaped for
the negotiated protocol version, provider-safe names, parseable refusals and bearer challenges."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import jsonschema
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from conclave.gateway.formats import wire_name
from conclave.gateway.tools import RuleOutcome, Tool, ToolContext
from tests.conftest import Backend
from tests.gateway.conftest import audit_rows, live_mcp

TOKEN = {"Authorization": "Bearer tok-ada"}
ACCEPT = "application/json, text/event-stream"
LONG_NAME = "acme.warehouse.inventory.count_items_on_every_shelf_of_the_main_building_v2"
PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
# Tool and result fields each revision's schema.ts defines (of those the gateway sends).
TOOL_FIELDS = {
    "2024-11-05": {"name", "description", "inputSchema"},
    "2025-03-26": {"name", "description", "inputSchema", "annotations"},
    "2025-06-18": {"name", "title", "description", "inputSchema", "outputSchema", "annotations"},
    "2025-11-25": {"name", "title", "description", "inputSchema", "outputSchema", "annotations"},
}
RESULT_FIELDS = {
    "2024-11-05": {"content", "isError", "_meta"},
    "2025-03-26": {"content", "isError", "_meta"},
    "2025-06-18": {"content", "isError", "_meta", "structuredContent"},
    "2025-11-25": {"content", "isError", "_meta", "structuredContent"},
}
OBJECT = {"type": "object", "additionalProperties": False}


async def _listing(_args: dict[str, Any], _ctx: ToolContext) -> list[str]:
    return ["a", "b"]


async def _one(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    return {"count": 1}


def _spoil(_args: Mapping[str, Any], _result: Any) -> RuleOutcome:
    return RuleOutcome({"count": "one"}, ("spelled out",))


LONG_NAMED = Tool(
    name=LONG_NAME,
    description="A plug-in name no provider accepts.",
    executor=_one,
    parameters=OBJECT,
)
OUTPUT_TOOLS = (
    Tool(
        name="listing",
        description="Returns an array.",
        executor=_listing,
        parameters=OBJECT,
        output_schema={"type": "array", "items": {"type": "string"}},
    ),
    Tool(
        name="spoiled",
        description="A rule breaks the declared output.",
        executor=_one,
        parameters=OBJECT,
        rules=(_spoil,),
        output_schema={"type": "object", "properties": {"count": {"type": "integer"}}},
    ),
)
BUILTIN_CALLS = [
    ("echo", {"message": "hi"}),
    ("current_time", {"timezone": "Europe/Rome"}),
    ("evaluate_expression", {"expression": "6 * 7"}),
    ("evaluate_expression", {"expression": "2 ** 100"}),
    ("evaluate_expression", {"expression": "1e308 * 10"}),
    ("json_query", {"document": {"a": [1, 2]}, "query": "a[0]"}),
    ("json_query", {"document": {"a": 1}, "query": "missing"}),
]


@asynccontextmanager
async def rpc(url: str, version: str = "2025-11-25") -> AsyncIterator[Any]:
    """``await call(method, params)`` posts one JSON-RPC request; returns its ``result``."""
    headers = {**TOKEN, "Accept": ACCEPT, "MCP-Protocol-Version": version}
    async with httpx.AsyncClient(headers=headers) as client:

        async def call(method: str, params: dict[str, Any] | None = None) -> Any:
            message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
            response = await client.post(url, json=message)
            assert response.status_code == 200, response.text
            return response.json()["result"]

        yield call


@pytest.fixture(params=[True, False], ids=["fast-path", "sdk-path"])
def fast(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


async def test_error_results_carry_details_in_text_and_meta(
    backend: Backend, test_tools: tuple[Tool, ...], fast: bool
):
    async with live_mcp(backend, test_tools, fast) as url, rpc(url) as call:
        failures = {
            "INVALID_EXPRESSION": ("evaluate_expression", {"expression": "1/0"}),
            "VALIDATION_FAILED": ("echo", {"message": 5}),
            "OUTPUT_INVALID": ("bad_output", {}),
            "TOOL_TIMEOUT": ("slow", {}),
        }
        for code, (name, arguments) in failures.items():
            result = await call("tools/call", {"name": name, "arguments": arguments})
            assert result["isError"] is True
            # The TypeScript SDK checks structuredContent against the tool's outputSchema even on
            # errors: an error result must not carry any.
            assert "structuredContent" not in result, (code, result)
            assert result["content"][0]["text"].startswith(f"{code}: ")
            conclave = result["_meta"]["conclave"]
            assert conclave["code"] == code
            assert conclave["conclave_id"] and conclave["orthodoxy_status"]


async def test_success_structured_content_matches_the_declared_schema(
    backend: Backend, test_tools: tuple[Tool, ...], fast: bool
):
    async with live_mcp(backend, (*test_tools, *OUTPUT_TOOLS), fast) as url, rpc(url) as call:
        tools = {tool["name"]: tool for tool in (await call("tools/list"))["tools"]}
        for name, arguments in BUILTIN_CALLS:
            result = await call("tools/call", {"name": name, "arguments": arguments})
            assert result["isError"] is False, result
            jsonschema.validate(result["structuredContent"], tools[name]["outputSchema"])
        listing = await call("tools/call", {"name": "listing", "arguments": {}})
        spoiled = await call("tools/call", {"name": "spoiled", "arguments": {}})
    # MCP structured content is an object: an array schema is not declared, the array is text.
    assert "outputSchema" not in tools["listing"]
    assert listing["isError"] is False and "structuredContent" not in listing
    assert listing["content"][0]["text"] == '["a", "b"]'
    # A rule's correction that breaks the declared schema is the tool's fault, not a success.
    assert spoiled["isError"] is True and spoiled["_meta"]["conclave"]["code"] == "OUTPUT_INVALID"
    for tool in tools.values():
        if "outputSchema" in tool:
            assert tool["outputSchema"]["type"] == "object"


@pytest.mark.parametrize("version", HANDSHAKE_VERSIONS)
async def test_answers_hold_only_the_negotiated_versions_fields(
    backend: Backend, test_tools: tuple[Tool, ...], fast: bool, version: str
):
    async with live_mcp(backend, test_tools, fast) as url, rpc(url, version) as call:
        tools = (await call("tools/list"))["tools"]
        called = await call("tools/call", {"name": "echo", "arguments": {"message": "hi"}})
        failed = await call("tools/call", {"name": "echo", "arguments": {"message": 5}})
    echo = next(tool for tool in tools if tool["name"] == "echo")
    assert set(echo) == TOOL_FIELDS[version]
    assert all(set(tool) <= TOOL_FIELDS[version] for tool in tools)
    assert set(called) == RESULT_FIELDS[version]
    assert set(failed) == {"content", "isError", "_meta"}


@asynccontextmanager
async def pinned_session(url: str, version: str) -> AsyncIterator[ClientSession]:
    """The SDK's ``ClientSession`` after an ``initialize`` handshake offering ``version``."""
    async with (
        httpx2.AsyncClient(headers=TOKEN) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        offer = types.InitializeRequestParams(
            protocol_version=version,
            capabilities=types.ClientCapabilities(),
            client_info=types.Implementation(name="pinned", version="1"),
        )
        result = await session.send_request(
            types.InitializeRequest(params=offer), types.InitializeResult
        )
        assert result.protocol_version == version
        session.adopt(result)  # from here every request carries MCP-Protocol-Version: version
        await session.send_notification(types.InitializedNotification())
        yield session


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-11-25"])
async def test_sdk_client_pinned_to_a_version(
    backend: Backend, test_tools: tuple[Tool, ...], fast: bool, version: str
):
    async with live_mcp(backend, test_tools, fast) as url, pinned_session(url, version) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        result = await session.call_tool("evaluate_expression", {"expression": "6 * 7"})
    calc = tools["evaluate_expression"]
    modern = version >= "2025-06-18"
    assert (calc.title is not None, calc.output_schema is not None) == (modern, modern)
    assert (calc.annotations is not None) == (version >= "2025-03-26")
    assert result.is_error is False and "42" in result.content[0].text  # type: ignore[union-attr]
    assert result.structured_content == ({"expression": "6 * 7", "value": 42} if modern else None)


async def test_names_models_refuse_are_listed_and_called_by_their_alias(
    backend: Backend, test_tools: tuple[Tool, ...], fast: bool
):
    tools = (*test_tools, LONG_NAMED)
    async with live_mcp(backend, tools, fast) as url, pinned_session(url, "2025-11-25") as s:
        names = {tool.name for tool in (await s.list_tools()).tools}
        dotted = await s.call_tool(wire_name("billing.count"), {})
        long = await s.call_tool(wire_name(LONG_NAME), {})
    assert all(PROVIDER_NAME.match(name) for name in names), names
    assert {wire_name("billing.count"), wire_name(LONG_NAME)} <= names
    assert "billing.count" not in names and LONG_NAME not in names
    assert dotted.is_error is False and long.structured_content == {"count": 1}
    rows = await audit_rows(backend)
    assert {(row.requested_tool, row.tool_name, row.status) for row in rows} == {
        (wire_name("billing.count"), "billing.count", "succeeded"),
        (wire_name(LONG_NAME), LONG_NAME, "succeeded"),
    }


async def test_transport_refusals_are_parseable_json(
    backend: Backend, test_tools: tuple[Tool, ...], fast: bool
):
    call = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    json_body = {**TOKEN, "Accept": ACCEPT, "Content-Type": "application/json"}
    async with live_mcp(backend, test_tools, fast) as url, httpx.AsyncClient() as client:
        answers = {
            "text/plain body": await client.post(
                url, content=call, headers={**json_body, "Content-Type": "text/plain"}
            ),
            "foreign Host": await client.post(
                url, content=call, headers={**json_body, "Host": "evil.example"}
            ),
            "foreign Origin": await client.post(
                url, content=call, headers={**json_body, "Origin": "http://evil.example"}
            ),
            "2026 request refusing JSON": await client.post(
                url,
                content=call,
                headers={**json_body, "Accept": "text/html", "MCP-Protocol-Version": "2026-07-28"},
            ),
        }
        unknown = await client.post(
            url, content=call, headers={**json_body, "MCP-Protocol-Version": "2099-01-01"}
        )
        odd_types = {
            media_type: await client.post(
                url, content=call, headers={**json_body, "Content-Type": media_type}
            )
            for media_type in ("application/json-seq", "application/x+json", "text/json")
        }
        bad_ids = {
            case: await client.post(
                url,
                content=b'{"jsonrpc":"2.0","id":%s,"method":"tools/call",'
                b'"params":{"name":"echo","arguments":{"message":"m"}}}' % raw,
                headers=json_body,
            )
            for case, raw in {
                "fraction": b"1.5",
                "null": b"null",
                "list": b"[]",
                "true": b"true",
            }.items()
        }
    for case, response in answers.items():
        assert 400 <= response.status_code < 500, case
        # A JSON-RPC error from /mcp, or the platform's problem+json where a guard answers first.
        assert response.headers["content-type"].startswith(
            ("application/json", "application/problem+json")
        ), (case, response.headers)
        body = response.json()
        if "jsonrpc" in body:
            assert body["id"] is None and body["error"]["message"], case
        else:
            assert body["status"] == response.status_code and body["code"], case
    # Every body type but JSON is 415, as on every JSON route (the SDK said 400 for some, 415 for
    # others), and an id that is neither string nor integer is an error, not a 202 "notification".
    assert answers["text/plain body"].status_code == 415
    assert answers["text/plain body"].json()["error"]["code"] == -32600
    for media_type in ("application/json-seq", "application/x+json", "text/json"):
        assert odd_types[media_type].status_code == 415, media_type
    for case, response in bad_ids.items():
        assert response.status_code == 400, (case, response.text)
        assert response.json()["error"]["code"] == -32600, case
    assert unknown.status_code == 400
    assert unknown.headers["content-type"] == "application/json"
    error = unknown.json()["error"]
    assert error["code"] == -32022
    assert "2099-01-01" in error["message"] and "2025-11-25" in error["message"]
    assert error["data"] == {
        "supported": ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"],
        "requested": "2099-01-01",
    }
    assert await audit_rows(backend) == []


async def test_401_tells_clients_whether_the_token_was_refused(
    backend: Backend, test_tools: tuple[Tool, ...]
):
    list_tools = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with live_mcp(backend, test_tools, fast=True) as url, httpx.AsyncClient() as client:
        missing = await client.post(url, json=list_tools, headers={"Accept": ACCEPT})
        wrong = await client.post(
            url, json=list_tools, headers={"Accept": ACCEPT, "Authorization": "Bearer wrong"}
        )
        execute = await client.post(
            url.removesuffix("/mcp") + "/execute",
            json={"tool": "echo", "args": {"message": "hi"}},
            headers={"Authorization": "Bearer wrong"},
        )
    # RFC 6750 §3.1: no error code when no token came; invalid_token when one was refused, so
    # that a client asks for another token instead of starting an interactive OAuth flow.
    # Both name the OAuth protected resource metadata (RFC 9728 §5.1), derived from the URL the
    # request reached when GATEWAY_RESOURCE_URL is unset.
    metadata = url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp"
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == (
        f'Bearer realm="conclave", resource_metadata="{metadata}"'
    )
    for refused in (wrong, execute):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == (
            f'Bearer realm="conclave", resource_metadata="{metadata}", error="invalid_token", '
            'error_description="Invalid bearer token."'
        )
