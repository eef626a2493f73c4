"""``create_app``: the graph dispatch service as an ASGI application (health, metrics)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from conclave import __version__
from conclave.platform.http import create_service_app, health_response, platform_lifespan
from conclave.platform.metrics import ServiceMetrics
from conclave.platform.runtime import Platform
from conclave.settings import GraphSettings


def create_app(settings: GraphSettings, *, platform: Platform | None = None) -> FastAPI:
    """The graph dispatch service app. With ``platform`` given it is shared, not owned."""
    app = create_service_app(
        service="graph",
        title="Conclave graph dispatch service",
        version=__version__,
        description="Routes a query and its entities through a LangGraph orchestration.",
        settings=settings,
        metrics=ServiceMetrics("graph"),
        lifespan=platform_lifespan(settings, platform, lambda _app, _platform: None),
    )

    @app.get("/health", tags=["operations"])
    async def health(request: Request) -> JSONResponse:
        """Store and bus status; 503 when either is down."""
        return await health_response(request.app.state.platform, "graph")

    return app
