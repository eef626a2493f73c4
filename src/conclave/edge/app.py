"""``create_app``: the edge media intake service as an ASGI application."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from conclave import __version__
from conclave.edge.api import UPLOAD_ROUTE, router, upload_lanes
from conclave.edge.blobs import BlobStore
from conclave.edge.metrics import EdgeMetrics
from conclave.edge.pack_log import PACKS_LOG, may_read_pack
from conclave.edge.parsing import ParserPool
from conclave.edge.search_api import router as search_router
from conclave.edge.service import IntakeService
from conclave.platform.dead_letter_routes import router as dead_letters_router
from conclave.platform.http import create_service_app, platform_lifespan
from conclave.platform.media_types import registered_media_types
from conclave.platform.runtime import Platform
from conclave.platform.tlog.api import tlog_router
from conclave.platform.tlog.published import PublishedLogs
from conclave.platform.tlog.serving import serve_log
from conclave.settings import EdgeSettings


def create_app(settings: EdgeSettings, *, platform: Platform | None = None) -> FastAPI:
    """The edge media intake service app. With ``platform`` given it is shared, not owned."""
    metrics = EdgeMetrics()
    blobs = BlobStore(settings.resolved_blob_dir(), fsync=settings.fsync_blobs)

    @asynccontextmanager
    async def setup(app: FastAPI, runtime: Platform) -> AsyncIterator[None]:
        await asyncio.to_thread(blobs.open)  # reads every blob folder
        async with AsyncExitStack() as stack:
            app.state.tlogs = PublishedLogs()
            pack_log = None
            if settings.pack_log:
                engine = runtime.engine
                pack_log = await serve_log(app, stack, engine, settings, PACKS_LOG, may_read_pack)
            app.state.edge = IntakeService(
                settings,
                runtime,
                blobs,
                app.state.parsers,
                metrics,
                pack_log=pack_log,
            )
            yield

    platform_span = platform_lifespan(settings, platform, setup)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.parsers = ParserPool(
            settings.parser_workers,
            timeout=settings.parse_timeout_seconds,
            memory_bytes=settings.parse_memory_bytes,
            queue_seconds=settings.parser_queue_seconds,
        )
        warm_up = None
        if settings.parser_prestart:
            warm_up = asyncio.create_task(app.state.parsers.prestart(), name="edge-parser-warm-up")
        try:
            async with platform_span(app):
                yield
        finally:
            if warm_up is not None:
                warm_up.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await warm_up
            await app.state.parsers.close()

    app = create_service_app(
        service="edge",
        title="Conclave edge media intake service",
        version=__version__,
        description="Accepts media uploads from devices and stores immutable Evidence Packs.",
        settings=settings,
        metrics=metrics,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.include_router(router)
    app.include_router(search_router)
    app.include_router(dead_letters_router)
    app.include_router(tlog_router)
    # Ids, metrics and the body cap still apply to it (see platform/fast_lane.py).
    app.add_fast_lane(UPLOAD_ROUTE, "POST", upload_lanes(registered_media_types()))
    return app
