"""Helpers for the platform tests: a demo service built on the platform kit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from conclave.platform.http import create_service_app
from conclave.platform.metrics import ServiceMetrics
from conclave.platform.tracing import Tracing
from tests.conftest import test_settings


@asynccontextmanager
async def no_resources(_app: FastAPI) -> AsyncIterator[None]:
    yield


def demo_app(tracing: Tracing | None = None, **settings: Any) -> FastAPI:
    """A service app named ``demo`` with no resources of its own; tests add their routes."""
    return create_service_app(
        service="demo",
        title="Demo",
        version="0",
        description="A service built on the platform kit.",
        settings=test_settings(**settings),
        metrics=ServiceMetrics("demo"),
        lifespan=no_resources,
        tracing=tracing,
    )
