"""Gateway fixtures: the app over a test backend, plus tools that misbehave on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from conclave.gateway.app import create_app
from conclave.gateway.events import CHANNEL
from conclave.gateway.store import mcp_tool_calls
from conclave.gateway.tools import Tool, ToolContext
from conclave.platform.bus.base import Event
from tests.conftest import Backend, open_platform, serve_app, test_settings
from tests.gateway.upstream_fixtures import everything_http  # noqa: F401 (a fixture)
from tests.httpserver import running_server


class Calls:
    """Counts executions of the test tools, to prove whether a tool ran."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def test_tools(calls: Calls) -> tuple[Tool, ...]:
    """Tools exercising time-outs, crashes, secrets and names outside the OpenAI rules."""

    async def slow(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
        calls.count += 1
        await asyncio.sleep(5)
        return {}

    async def crash(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
        calls.count += 1
        raise RuntimeError("database password is hunter2")

    async def login(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        calls.count += 1
        return {"user": args["username"], "caller": ctx.user_id}

    async def bad_output(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
        calls.count += 1
        return {"count": "not a number"}

    async def count(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
        calls.count += 1
        return {"count": calls.count}

    obj = {"type": "object", "additionalProperties": False}
    return (
        Tool(
            name="slow", description="Sleeps.", executor=slow, parameters=obj, timeout_seconds=0.1
        ),
        Tool(name="crash", description="Raises.", executor=crash, parameters=obj),
        Tool(
            name="login",
            description="Takes a secret.",
            executor=login,
            tags=("auth",),
            parameters={
                "type": "object",
                "properties": {
                    "username": {"type": "string"},
                    "password": {"type": "string", "writeOnly": True},
                    "pin": {"type": "string", "x-sensitive": True},
                },
                "required": ["username", "password"],
            },
        ),
        Tool(
            name="bad_output",
            description="Breaks its output schema.",
            executor=bad_output,
            parameters=obj,
            output_schema={"type": "object", "properties": {"count": {"type": "integer"}}},
        ),
        Tool(name="billing.count", description="Counts calls.", executor=count, parameters=obj),
    )


GatewayClient = Callable[..., Any]


@pytest.fixture
def gateway(backend: Backend, test_tools: tuple[Tool, ...]) -> GatewayClient:
    """``async with gateway(**settings) as client`` runs the gateway app over the backend."""

    @asynccontextmanager
    async def start(**overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
        settings = test_settings(**overrides)
        async with open_platform(backend, settings) as platform:
            app = create_app(settings, platform=platform, extra_tools=test_tools)
            async with serve_app(app) as client:
                client.platform = platform  # type: ignore[attr-defined]
                yield client

    return start


@asynccontextmanager
async def run_gateway(
    backend: Backend, settings: Any, extra_tools: tuple[Tool, ...] = ()
) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway app with ``settings`` over the backend, as an in-process HTTP client."""
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=extra_tools)
        async with serve_app(app) as client:
            yield client


async def audit_rows(backend: Backend) -> list[Any]:
    """Every row of ``mcp_tool_calls``, oldest first."""
    async with backend.engine.connect() as connection:
        result = await connection.execute(
            select(mcp_tool_calls).order_by(mcp_tool_calls.c.created_at)
        )
        return list(result.all())


async def published(backend: Backend) -> list[Event]:
    """Events on ``conclave.mcp.actions`` as the bus holds them (the Redis stream in production)."""
    return await backend.bus.read(CHANNEL, count=1000)


@asynccontextmanager
async def live_mcp(backend: Backend, tools: tuple[Tool, ...], fast: bool) -> AsyncIterator[str]:
    """The gateway on a real socket (bearer ``tok-ada``), its MCP fast path on or off: the URL of
    ``/mcp``."""
    settings = test_settings(auth="enabled", api_tokens="tok-ada=ada", mcp_fast_path=fast)
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=tools)
        async with running_server(app) as url:
            yield f"{url}/mcp"
