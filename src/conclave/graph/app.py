"""``create_app``: the graph dispatch service as an ASGI application."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx
from fastapi import FastAPI

from conclave import __version__
from conclave.graph.api import DISPATCH_ROUTE, router
from conclave.graph.collector_client import CollectorClient, CollectorLookup
from conclave.graph.graph import GraphContext, GraphExtension, define_graph, load_extension
from conclave.graph.heartbeat import Heartbeat
from conclave.graph.intents import IntentClassifier, load_intents
from conclave.graph.metrics import GraphMetrics
from conclave.graph.runner import dispatch_runner
from conclave.graph.service import DispatchService
from conclave.platform.dead_letter_routes import router as dead_letters_router
from conclave.platform.embedding import load_embedder
from conclave.platform.http import create_service_app, platform_lifespan
from conclave.platform.runtime import Platform
from conclave.settings import GraphSettings


def build_classifier(settings: GraphSettings) -> IntentClassifier:
    """The intent classifier the settings describe (embeds every example once)."""
    embedder = load_embedder(settings.embedder, settings.embedding_dimensions)
    return IntentClassifier(load_intents(settings.intents_file), embedder)


def create_app(
    settings: GraphSettings,
    *,
    platform: Platform | None = None,
    extensions: Sequence[GraphExtension] = (),
) -> FastAPI:
    """The graph dispatch service app. With ``platform`` given it is shared, not owned.

    ``extensions`` run after those named in ``GRAPH_EXTENSIONS`` and may add nodes and edges.
    """
    metrics = GraphMetrics()
    all_extensions = [*(load_extension(spec) for spec in settings.extensions), *extensions]

    @asynccontextmanager
    async def resources(app: FastAPI, runtime: Platform) -> AsyncIterator[None]:
        # A neural embedder may take seconds to embed the examples: keep the loop free meanwhile.
        classifier = await asyncio.to_thread(build_classifier, settings)
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        timeout = httpx.Timeout(settings.collector_timeout_seconds)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
            client = CollectorClient(
                http, settings.collector_url, settings.collector_token.get_secret_value()
            )
            context = GraphContext(settings, classifier, CollectorLookup(client, settings))
            graph = define_graph(context, all_extensions)
            runner = dispatch_runner(
                graph, settings.coalesce, settings.coalesce_runs, metrics.run_dispatches.observe
            )
            # The first run of a compiled graph pays LangGraph's lazy set-up (tens of ms); pay it
            # here rather than in the first caller's request. Empty input does no I/O.
            await runner.run({"query": "", "entities": []})
            heartbeat = Heartbeat(settings.heartbeat_seconds, settings.heartbeat_grace_seconds)
            metrics.watch_heartbeat(lambda: heartbeat.count, heartbeat.age)
            try:
                async with heartbeat.running():
                    app.state.graph = DispatchService(settings, runner, runtime, heartbeat, metrics)
                    yield
            finally:
                await runner.close()

    def setup(app: FastAPI, runtime: Platform) -> AbstractAsyncContextManager[None]:
        return resources(app, runtime)

    app = create_service_app(
        service="graph",
        title="Conclave graph dispatch service",
        version=__version__,
        description="Routes a query and its entities through a LangGraph orchestration.",
        settings=settings,
        metrics=metrics,
        lifespan=platform_lifespan(settings, platform, setup),
    )
    app.state.settings = settings
    app.include_router(router)
    app.include_router(dead_letters_router)
    # Ids, metrics and the body cap still apply to it (see platform/fast_lane.py).
    app.add_fast_lane(DISPATCH_ROUTE, "POST")
    return app
