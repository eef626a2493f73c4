"""Helpers for the graph service tests: settings, a served app, embedders and extensions."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import httpx
import pytest
from fastapi import FastAPI

from conclave.graph.app import create_app
from conclave.graph.graph import GraphExtension
from conclave.platform.embedding import HashingEmbedder
from conclave.platform.runtime import Platform
from conclave.settings import GraphSettings
from tests.conftest import Backend, serve_app

# A port nothing listens on: connections are refused at once.
CLOSED_URL = "http://127.0.0.1:9"


@pytest.fixture
def embedded(sqlite_engine: Any, memory_bus: Any) -> Backend:
    """SQLite + in-process bus only, for behaviour that does not depend on the backend."""
    return Backend("embedded", sqlite_engine, memory_bus)


def graph_settings(**overrides: Any) -> GraphSettings:
    """Graph settings for tests: fixtures migrate, auth off, fast relay, no collector."""
    values: dict[str, Any] = {
        "auto_migrate": False,
        "auth": "disabled",
        "outbox_poll_seconds": 0.05,
        "outbox_max_backoff_seconds": 0.2,
        "collector_url": CLOSED_URL,
        "collector_timeout_seconds": 2.0,
    }
    values.update(overrides)
    return GraphSettings(**values)


@asynccontextmanager
async def graph_app(
    backend: Backend, settings: GraphSettings, extensions: Sequence[GraphExtension] = ()
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """The graph app on the backend's store and bus, with an in-process client."""
    async with Platform.open(settings, engine=backend.engine, bus=backend.bus) as platform:
        app = create_app(settings, platform=platform, extensions=extensions)
        async with serve_app(app) as client:
            yield client, app


class ThreadRecordingEmbedder(HashingEmbedder):
    """The hashing embedder, remembering which threads embedded a query."""

    threads: ClassVar[set[int]] = set()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed and record the calling thread."""
        ThreadRecordingEmbedder.threads.add(threading.get_ident())
        return super().embed(texts)


def recording_embedder(dimensions: int) -> ThreadRecordingEmbedder:
    """Factory for ``GRAPH_EMBEDDER=tests.graph.conftest:recording_embedder``."""
    return ThreadRecordingEmbedder(dimensions)
