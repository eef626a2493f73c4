"""``create_app``: the edge media intake service as an ASGI application (health, metrics)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from conclave import __version__
from conclave.platform.http import create_service_app, health_response, platform_lifespan
from conclave.platform.metrics import ServiceMetrics
from conclave.platform.runtime import Platform
from conclave.settings import EdgeSettings


def create_app(settings: EdgeSettings, *, platform: Platform | None = None) -> FastAPI:
    """The edge media intake service app. With ``platform`` given it is shared, not owned."""
    app = create_service_app(
        service="edge",
        title="Conclave edge media intake service",
        version=__version__,
        description="Accepts media uploads and stores immutable Evidence Packs.",
        settings=settings,
        metrics=ServiceMetrics("edge"),
        lifespan=platform_lifespan(settings, platform, lambda _app, _platform: None),
    )

    @app.get("/health", tags=["operations"])
    async def health(request: Request) -> JSONResponse:
        """Store and bus status; 503 when either is down."""
        return await health_response(request.app.state.platform, "edge")

    return app
