"""MCP at /mcp with the official SDK client: same catalogue, same governance chain."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import pytest
import uvicorn
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conclave.gateway.app import create_app
from conclave.gateway.formats import wire_name
from conclave.gateway.tools import Tool
from tests.conftest import Backend, eventually, open_platform, test_settings
from tests.gateway.conftest import audit_rows, published

AUTH = {"auth": "enabled", "api_tokens": "tok-ada=ada"}
HEADERS = {"Authorization": "Bearer tok-ada"}


@pytest.fixture
async def live_gateway(backend: Backend, test_tools: tuple[Tool, ...]) -> AsyncIterator[str]:
    """The gateway on a real socket (uvicorn in this event loop); yields its /mcp URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = test_settings(**AUTH)
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=test_tools)
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        await eventually(lambda: _started(server))
        yield f"http://127.0.0.1:{port}/mcp"
        server.should_exit = True
        await task


async def _started(server: uvicorn.Server) -> bool:
    return server.started


@asynccontextmanager
async def mcp_client(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """The SDK's high-level ``Client`` over streamable HTTP with our bearer token."""
    async with (
        httpx2.AsyncClient(headers=headers or HEADERS) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def test_session_handshake_lists_the_same_catalogue(live_gateway: str):
    async with (
        httpx2.AsyncClient(headers=HEADERS) as http,
        streamable_http_client(live_gateway, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    builtins = {"echo", "current_time", "evaluate_expression", "json_query"}
    assert builtins | {wire_name("billing.count")} <= set(tools)
    echo = tools["echo"]
    assert echo.input_schema["required"] == ["message"]
    assert echo.output_schema is not None and echo.output_schema["required"] == ["message"]
    assert echo.annotations is not None and echo.annotations.read_only_hint is True


async def test_call_is_governed_audited_and_published(backend: Backend, live_gateway: str):
    async with mcp_client(live_gateway) as client:
        result = await client.call_tool("evaluate_expression", {"expression": "6 * 7"})
    assert result.is_error is False
    assert result.structured_content == {"expression": "6 * 7", "value": 42}
    [row] = await audit_rows(backend)
    assert (row.tool_name, row.user_id, row.status) == ("evaluate_expression", "ada", "succeeded")

    async def event():
        return [e for e in await published(backend) if e.payload["conclave_id"] == row.conclave_id]

    [found] = await eventually(event)
    assert found.payload["user_id"] == "ada"


async def test_invalid_arguments_and_failures_are_error_results(
    backend: Backend, live_gateway: str
):
    async with mcp_client(live_gateway) as client:
        invalid = await client.call_tool("echo", {"message": 5})
        failed = await client.call_tool("evaluate_expression", {"expression": "1/0"})
        timed_out = await client.call_tool("slow", {})
    assert invalid.is_error is True
    assert "VALIDATION_FAILED" in invalid.content[0].text
    assert "/message" in invalid.content[0].text
    assert failed.is_error is True and "division by zero" in failed.content[0].text
    assert timed_out.is_error is True and "TOOL_TIMEOUT" in timed_out.content[0].text
    statuses = sorted(row.status for row in await audit_rows(backend))
    assert statuses == ["failed", "rejected", "timeout"]


async def test_unknown_tool_is_a_json_rpc_error_and_audited(backend: Backend, live_gateway: str):
    async with mcp_client(live_gateway) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("no_such_tool", {})
    assert raised.value.code == -32602
    [row] = await audit_rows(backend)
    assert (row.requested_tool, row.orthodoxy_status) == ("no_such_tool", "heretical")


async def test_mcp_requires_credentials(backend: Backend, live_gateway: str):
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            live_gateway,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={"Accept": "application/json, text/event-stream"},
        )
    assert response.status_code == 401
    assert response.json()["code"] == "UNAUTHORIZED"
    with pytest.raises(Exception):  # noqa: B017 - the SDK raises its own transport error type
        async with mcp_client(live_gateway, {"Authorization": "Bearer wrong"}) as client:
            await client.list_tools()
    assert await audit_rows(backend) == []
