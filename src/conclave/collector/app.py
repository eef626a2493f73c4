"""``create_app``: the expedition service as an ASGI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from conclave import __version__
from conclave.collector.api import router
from conclave.collector.metrics import CollectorMetrics
from conclave.collector.registry import ExpeditionRegistry
from conclave.collector.wiring import CollectorRuntime
from conclave.platform.dead_letter_routes import router as dead_letters_router
from conclave.platform.http import create_service_app, platform_lifespan
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings


def create_app(
    settings: CollectorSettings,
    *,
    platform: Platform | None = None,
    registry: ExpeditionRegistry | None = None,
) -> FastAPI:
    """The expedition service app. With ``platform`` given it is shared, not owned; ``registry``
    replaces the expedition types and sources loaded from settings."""
    metrics = CollectorMetrics()
    platform_span = platform_lifespan(settings, platform, lambda _app, _platform: None)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with (
            platform_span(app),
            CollectorRuntime.open(
                settings,
                app.state.platform,
                metrics,
                run_workers=settings.run_workers,
                registry=registry,
            ) as runtime,
        ):
            app.state.collector = runtime
            yield

    app = create_service_app(
        service="collector",
        title="Conclave expedition service",
        version=__version__,
        description="Background data-collection expeditions with dual write to a structured "
        "store and a semantic memory.",
        settings=settings,
        metrics=metrics,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.include_router(router)
    app.include_router(dead_letters_router)
    return app
