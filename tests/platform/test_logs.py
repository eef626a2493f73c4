"""Structured logs: one JSON object per line, carrying the request and correlation ids of the
request that logged it, so an operator can follow one call (or one whole flow) through the logs."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from conclave.platform.http import create_service_app
from conclave.platform.logs import JsonFormatter
from conclave.platform.metrics import ServiceMetrics
from tests.conftest import serve_app
from tests.conftest import test_settings as make_settings


@asynccontextmanager
async def no_resources(_app: FastAPI) -> AsyncIterator[None]:
    yield


def build_app() -> FastAPI:
    app = create_service_app(
        service="demo",
        title="Demo",
        version="0",
        description="A service built on the platform kit.",
        settings=make_settings(),
        metrics=ServiceMetrics("demo"),
        lifespan=no_resources,
    )

    @app.get("/work")
    async def work() -> dict[str, str]:
        """Log a line with an extra field."""
        logging.getLogger("demo.work").info("working", extra={"items": 3})
        return {"status": "done"}

    @app.get("/boom")
    async def boom() -> None:
        """Fail unexpectedly."""
        raise RuntimeError("secret detail")

    return app


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The JSON log lines written while the test runs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def lines_of(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(text) for text in stream.getvalue().splitlines()]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(build_app()) as client:
        yield client


async def test_a_request_logs_json_with_its_request_and_correlation_ids(
    client: httpx.AsyncClient, captured: io.StringIO
) -> None:
    await client.get("/work", headers={"X-Request-ID": "req-1", "X-Correlation-ID": "flow-9"})
    assigned = await client.get("/work")
    logging.getLogger("demo.work").info("outside any request")

    given_line, assigned_line, outside = [
        line for line in lines_of(captured) if line["logger"] == "demo.work"
    ]
    assert given_line["message"] == "working"
    assert given_line["level"] == "info"
    assert given_line["items"] == 3
    assert given_line["time"].endswith("Z")
    assert (given_line["request_id"], given_line["correlation_id"]) == ("req-1", "flow-9")
    # Without headers the service assigns a request id, and the flow starts with it.
    assert assigned_line["request_id"] == assigned.headers["x-request-id"]
    assert assigned_line["correlation_id"] == assigned.headers["x-request-id"]
    assert "request_id" not in outside and "correlation_id" not in outside


async def test_an_unexpected_error_is_logged_with_the_id_the_caller_sees(
    client: httpx.AsyncClient, captured: io.StringIO
) -> None:
    response = await client.get("/boom", headers={"X-Correlation-ID": "flow-10"})

    [error] = [line for line in lines_of(captured) if line["level"] == "error"]
    assert response.status_code == 500
    assert error["request_id"] == response.json()["request_id"]
    assert error["correlation_id"] == "flow-10"
    assert "RuntimeError: secret detail" in error["exception"]  # in the log, never the answer
    assert "secret detail" not in response.text
