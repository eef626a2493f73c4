"""Structured logs: one JSON object per line, carrying the request and correlation ids of the
request that logged it, so an operator can follow one call (or one whole flow) through the logs."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from tests.conftest import log_lines, serve_app
from tests.platform.conftest import demo_app


def build_app() -> FastAPI:
    app = demo_app()

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
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(build_app()) as client:
        yield client


async def test_a_request_logs_json_with_its_request_and_correlation_ids(
    client: httpx.AsyncClient, json_logs: io.StringIO
) -> None:
    await client.get("/work", headers={"X-Request-ID": "req-1", "X-Correlation-ID": "flow-9"})
    assigned = await client.get("/work")
    logging.getLogger("demo.work").info("outside any request")

    given_line, assigned_line, outside = [
        line for line in log_lines(json_logs) if line["logger"] == "demo.work"
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
    client: httpx.AsyncClient, json_logs: io.StringIO
) -> None:
    response = await client.get("/boom", headers={"X-Correlation-ID": "flow-10"})

    [error] = [line for line in log_lines(json_logs) if line["level"] == "error"]
    assert response.status_code == 500
    assert error["request_id"] == response.json()["request_id"]
    assert error["correlation_id"] == "flow-10"
    assert "RuntimeError: secret detail" in error["exception"]  # in the log, never the answer
    assert "secret detail" not in response.text
