"""Fast lanes: a hot route skips the framework's machinery, never the platform's own behaviour."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conclave.platform.bodies import read_model
from conclave.platform.errors import Conflict
from conclave.platform.fast_lane import ServiceApp
from conclave.platform.problems import PROBLEM_MEDIA_TYPE
from tests.conftest import serve_app
from tests.platform.conftest import demo_app

MAX_BODY = 2048


class Echo(BaseModel):
    text: str


def hot_app() -> ServiceApp:
    app = demo_app(max_body_bytes=MAX_BODY)
    assert isinstance(app, ServiceApp)

    @app.post("/hot")
    async def hot(request: Request) -> Response:
        body = await read_model(request, Echo)
        if body.text == "conflict":
            raise Conflict("Taken.", code="TAKEN")
        if body.text == "crash":
            raise RuntimeError("secret detail")
        return Response(json.dumps({"echo": body.text}), media_type="application/json")

    route = next(r for r in app.routes if isinstance(r, APIRoute) and r.path == "/hot")
    app.add_fast_lane(route, "POST")
    return app


class StampMiddleware:
    """A middleware a deployment adds: the hot route must pass through it too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message["headers"], (b"x-stamp", b"1")]}
            await send(message)

        await self.app(scope, receive, stamped)


@pytest.mark.parametrize("stamped", [False, True], ids=["from the entry", "through the stack"])
async def test_a_hot_route_keeps_ids_metrics_body_cap_and_problems(stamped: bool) -> None:
    app = hot_app()
    if stamped:
        app.add_middleware(StampMiddleware)
    async with serve_app(app) as client:
        ok = await client.post("/hot", json={"text": "hi"}, headers={"X-Correlation-ID": "corr-1"})
        conflict = await client.post("/hot", json={"text": "conflict"})
        invalid = await client.post("/hot", json={"text": 5})
        broken = await client.post(
            "/hot", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        too_big = await client.post("/hot", json={"text": "x" * (MAX_BODY + 1)})
        crash = await client.post("/hot", json={"text": "crash"})
        metrics = (await client.get("/metrics")).text

    assert app.lanes_skip_the_stack is not stamped
    assert (ok.status_code, ok.json()) == (200, {"echo": "hi"})
    assert ok.headers["x-correlation-id"] == "corr-1"
    assert ok.headers["x-request-id"]
    assert ("x-stamp" in ok.headers) is stamped
    assert (conflict.status_code, conflict.json()["code"]) == (409, "TAKEN")
    assert (invalid.status_code, invalid.json()["code"]) == (422, "VALIDATION_FAILED")
    assert (broken.status_code, broken.json()["code"]) == (400, "MALFORMED_JSON")
    assert (too_big.status_code, too_big.json()["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert crash.status_code == 500
    assert crash.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    assert "secret detail" not in crash.text
    assert crash.json()["request_id"] == crash.headers["x-request-id"]
    counted = 'conclave_demo_http_requests_total{method="POST",route="/hot",status="%d"} 1.0'
    for status in (200, 409, 422, 400, 500):
        assert counted % status in metrics, status
    # Refused while reading, before any route was chosen: the same label either way.
    assert 'http_requests_total{method="POST",route="unmatched",status="413"} 1.0' in metrics


async def test_other_routes_and_methods_take_the_usual_way() -> None:
    app = hot_app()

    @app.get("/hot")
    async def read_hot() -> dict[str, Any]:
        return {"method": "GET"}

    async with serve_app(app) as client:
        got = await client.get("/hot")
        missing = await client.post("/nowhere", json={})
    assert got.json() == {"method": "GET"}
    assert (missing.status_code, missing.json()["code"]) == (404, "NOT_FOUND")


def test_a_plain_fastapi_app_is_not_a_service_app() -> None:
    # What `create_service_app` returns is what carries the lanes; the framework's own app does
    # not pretend to.
    assert not isinstance(FastAPI(), ServiceApp)
