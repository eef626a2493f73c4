"""``create_app``: the expedition service as an ASGI application (health, metrics)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from conclave import __version__
from conclave.platform.http import create_service_app, health_response, platform_lifespan
from conclave.platform.metrics import ServiceMetrics
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings


def create_app(settings: CollectorSettings, *, platform: Platform | None = None) -> FastAPI:
    """The expedition service app. With ``platform`` given it is shared, not owned."""
    app = create_service_app(
        service="collector",
        title="Conclave expedition service",
        version=__version__,
        description="Background data-collection expeditions.",
        settings=settings,
        metrics=ServiceMetrics("collector"),
        lifespan=platform_lifespan(settings, platform, lambda _app, _platform: None),
    )

    @app.get("/health", tags=["operations"])
    async def health(request: Request) -> JSONResponse:
        """Store and bus status; 503 when either is down."""
        return await health_response(request.app.state.platform, "collector")

    return app
