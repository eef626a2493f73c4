"""``create_app``: the tool gateway as an ASGI application."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI
from starlette.routing import Route

from conclave import __version__
from conclave.gateway.api import router
from conclave.gateway.builtin import BUILTIN_TOOLS
from conclave.gateway.mcp import MCP_PATH, McpEndpoint, create_mcp_server, create_session_manager
from conclave.gateway.metrics import GatewayMetrics
from conclave.gateway.plugins import load_entry_point_tools, load_module_tools
from conclave.gateway.registry import ToolRegistry
from conclave.gateway.service import GatewayService
from conclave.gateway.tools import Tool
from conclave.platform.http import create_service_app, platform_lifespan
from conclave.platform.runtime import Platform
from conclave.settings import GatewaySettings


def build_registry(settings: GatewaySettings, extra: tuple[Tool, ...] = ()) -> ToolRegistry:
    """Built-ins, then entry-point plug-ins, then module plug-ins from settings, then ``extra``."""
    registry = ToolRegistry()
    tools = list(BUILTIN_TOOLS)
    if settings.load_entry_points:
        tools.extend(load_entry_point_tools())
    for path in settings.tool_modules:
        tools.extend(load_module_tools(path))
    tools.extend(extra)
    for tool in tools:
        registry.register(tool)
    return registry


def create_app(
    settings: GatewaySettings,
    *,
    platform: Platform | None = None,
    extra_tools: tuple[Tool, ...] = (),
) -> FastAPI:
    """The gateway app. With ``platform`` given (``conclave up``, tests) it is shared, not owned."""
    metrics = GatewayMetrics()
    registry = build_registry(settings, extra_tools)

    mcp_server = create_mcp_server(lambda: app.state.gateway)
    allowed_hosts = [] if "*" in settings.mcp_allowed_hosts else settings.mcp_allowed_hosts

    def setup(app: FastAPI, runtime: Platform) -> AbstractAsyncContextManager[None]:
        app.state.gateway = GatewayService(
            registry,
            runtime,
            metrics,
            default_timeout=settings.tool_timeout_seconds,
            max_depth=settings.max_json_depth,
        )
        # A session manager runs once: every start of the app gets a new one.
        manager = create_session_manager(mcp_server, allowed_hosts)
        mcp_endpoint.manager = manager
        return manager.run()

    app = create_service_app(
        service="gateway",
        title="Conclave tool gateway",
        version=__version__,
        description="Discover tools; execute them through validation, audit, events and metrics.",
        settings=settings,
        metrics=metrics,
        lifespan=platform_lifespan(settings, platform, setup, max_batch=settings.max_batch),
    )
    app.state.settings = settings
    app.include_router(router)
    mcp_endpoint = McpEndpoint(app.state.authenticator)
    app.router.routes.append(Route(MCP_PATH, mcp_endpoint, methods=["GET", "POST", "DELETE"]))
    return app
