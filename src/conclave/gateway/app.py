"""``create_app``: the tool gateway as an ASGI application."""

from __future__ import annotations

from fastapi import FastAPI

from conclave import __version__
from conclave.gateway.api import router
from conclave.gateway.builtin import BUILTIN_TOOLS
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

    def setup(app: FastAPI, runtime: Platform) -> None:
        app.state.gateway = GatewayService(
            registry,
            runtime,
            metrics,
            default_timeout=settings.tool_timeout_seconds,
            max_depth=settings.max_json_depth,
        )

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
    return app
