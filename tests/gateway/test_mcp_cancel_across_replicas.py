"""A cancellation that reaches another replica than its call: two gateways on one store and one
bus, behind a load balancer that sends each request to the next replica (as a round-robin balancer
does with the MCP SDK's stateless requests). The MCP Python SDK's ``Client`` gives up on a call,
its ``notifications/cancelled`` lands on the other replica, and the call stops where it runs."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conclave.gateway.app import create_app
from conclave.gateway.mcp_cancel_relay import CHANNEL
from conclave.gateway.tools import Tool, ToolContext
from tests.conftest import Backend, eventually, open_platform, test_settings
from tests.gateway.conftest import audit_rows
from tests.httpserver import running_server

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}


class Waits:
    """A tool that waits a minute, and tells whether it started and how it ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    def tool(self) -> Tool:
        async def wait(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
            self.started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return {}

        parameters = {"type": "object", "additionalProperties": False}
        return Tool(
            name="wait", description="Waits.", executor=wait, parameters=parameters,
            timeout_seconds=120,
        )  # fmt: skip


@asynccontextmanager
async def two_replicas(backend: Backend, waits: Waits) -> AsyncIterator[list[str]]:
    """Two gateways (tokens ``tok-ada``, ``tok-bob``) sharing the backend's store and bus: the
    base URLs of both."""
    settings = test_settings(auth="enabled", api_tokens="tok-ada=ada,tok-bob=bob")
    async with AsyncExitStack() as stack:
        urls = []
        for _ in range(2):
            platform = await stack.enter_async_context(open_platform(backend, settings))
            app = create_app(settings, platform=platform, extra_tools=(waits.tool(),))
            urls.append(await stack.enter_async_context(running_server(app)))
        yield urls


class RoundRobin(httpx2.AsyncBaseTransport):
    """A load balancer in the client: each request goes to the next of ``ports``."""

    def __init__(self, ports: list[int]) -> None:
        self._ports = itertools.cycle(ports)
        self._inner = httpx2.AsyncHTTPTransport()
        self.sent: list[tuple[int, bytes]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self._ports)
        body = await request.aread()
        self.sent.append((port, body))
        moved = httpx2.Request(
            request.method, request.url.copy_with(port=port), headers=request.headers,
            content=body, extensions=request.extensions,
        )  # fmt: skip
        return await self._inner.handle_async_request(moved)

    async def aclose(self) -> None:
        await self._inner.aclose()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def rows_of(backend: Backend, tool: str) -> list[Any]:
    return [row for row in await audit_rows(backend) if row.tool_name == tool]


async def test_the_sdks_cancellation_stops_the_call_on_the_other_replica(backend: Backend):
    waits = Waits()
    async with two_replicas(backend, waits) as urls:
        balancer = RoundRobin([port_of(url) for url in urls])
        async with (
            httpx2.AsyncClient(
                transport=balancer, headers={"Authorization": "Bearer tok-ada"}, timeout=30
            ) as http,
            # At 2025-11-25 (the SDK's "legacy" mode) giving up is a request of its own; from
            # 2026-07-28 the SDK closes the call's request, which its own replica sees.
            Client(
                streamable_http_client(f"{urls[0]}/mcp", http_client=http), mode="legacy"
            ) as mcp,
        ):

            async def call() -> None:
                await mcp.call_tool("wait", {})

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                await asyncio.wait_for(waits.started.wait(), 60)
                group.cancel_scope.cancel()  # the SDK sends notifications/cancelled
            await asyncio.wait_for(waits.cancelled.wait(), 30)  # not the tool's 60 s
            after = await mcp.call_tool("echo", {"message": "still here"})

    calls = [(port, json.loads(body)) for port, body in balancer.sent if body]
    [(call_port, _)] = [(p, m) for p, m in calls if m.get("method") == "tools/call"][:1]
    [(cancel_port, cancel)] = [
        (p, m) for p, m in calls if m.get("method") == "notifications/cancelled"
    ]
    assert cancel_port != call_port  # the notification did reach the other replica
    assert after.is_error is False
    [row] = await rows_of(backend, "wait")
    assert (row.user_id, row.status, row.error_code) == ("ada", "failed", "CALL_CANCELLED")
    assert cancel["params"]["requestId"] is not None


async def test_another_users_cancellation_does_not_cross_replicas(backend: Backend):
    waits = Waits()
    async with two_replicas(backend, waits) as (first, second):
        ada = {**HEADERS, "Authorization": "Bearer tok-ada"}
        bob = {**HEADERS, "Authorization": "Bearer tok-bob"}
        cancel = json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
        )
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
        body["params"] = {"name": "wait", "arguments": {}}
        async with httpx.AsyncClient(timeout=60) as http:
            running = asyncio.create_task(
                http.post(f"{first}/mcp", content=json.dumps(body), headers=ada)
            )
            await asyncio.wait_for(waits.started.wait(), 60)
            by_bob = await http.post(f"{second}/mcp", content=cancel, headers=bob)
            await asyncio.sleep(1.0)  # a relayed cancellation arrives in milliseconds
            assert not waits.cancelled.is_set() and not running.done()
            by_ada = await http.post(f"{second}/mcp", content=cancel, headers=ada)
            answer = await asyncio.wait_for(running, 30)

    assert by_bob.status_code == by_ada.status_code == 202
    assert waits.cancelled.is_set()
    assert answer.json()["id"] == 7 and answer.json()["error"]["code"] == -32800
    relayed = [e.payload for e in await backend.bus.read(CHANNEL, count=100)]
    assert [(p["user_id"], p["request_id"]) for p in relayed] == [("bob", 7), ("ada", 7)]


async def test_a_malformed_relayed_cancellation_is_dead_lettered_and_the_relay_goes_on(
    backend: Backend,
):
    from conclave.platform.bus.base import Event

    waits = Waits()
    async with two_replicas(backend, waits) as (first, second):
        for payload in (
            {"user_id": "ada", "request_id": True, "origin": "elsewhere"},
            {"user_id": "", "request_id": 7, "origin": "elsewhere"},
            {"user_id": "ada", "request_id": "x" * 10_000, "origin": "elsewhere"},
            {"user_id": "ada", "request_id": 2**2000, "origin": "elsewhere"},
        ):
            await backend.bus.publish([Event(channel=CHANNEL, payload=payload, source="test")])
        ada = {**HEADERS, "Authorization": "Bearer tok-ada"}
        body = json.dumps(
            {"jsonrpc": "2.0", "id": "w", "method": "tools/call",
             "params": {"name": "wait", "arguments": {}}}
        )  # fmt: skip
        cancel = json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "w"}}
        )
        async with httpx.AsyncClient(timeout=60) as http:
            running = asyncio.create_task(http.post(f"{first}/mcp", content=body, headers=ada))
            await asyncio.wait_for(waits.started.wait(), 60)
            await http.post(f"{second}/mcp", content=cancel, headers=ada)
            answer = await asyncio.wait_for(running, 30)

    assert answer.json()["error"]["code"] == -32800

    async def dead() -> bool:
        return len(await backend.bus.dead_letters(CHANNEL)) >= 4

    await eventually(dead, timeout=30)
