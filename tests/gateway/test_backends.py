"""HTTP backend tools against a real local HTTP server standing in for a deployment's backend."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.conftest import Backend, test_settings
from tests.gateway.conftest import audit_rows, run_gateway
from tests.httpserver import running_server


@dataclass
class FakeBackend:
    """What the backend will answer next, and what it received."""

    failures: int = 0  # answer 500 this many times first
    delay: float = 0.0
    received: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: Request) -> Response:
        body = json.loads(await request.body() or b"{}")
        self.received.append(
            {
                "path": request.url.path,
                "raw_path": request.scope["raw_path"].decode(),
                "query": dict(request.query_params),
                "conclave_id": request.headers.get("x-conclave-id"),
            }
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.failures > 0:
            self.failures -= 1
            return Response("boom", status_code=500)
        if request.url.path.endswith("/reject"):
            return Response("unknown entity", status_code=404)
        return JSONResponse({"results": [{"id": "e1", "score": 0.9}], "echo": body})


@pytest.fixture
async def backend_server() -> AsyncIterator[tuple[FakeBackend, str]]:
    fake = FakeBackend()
    app = Starlette(routes=[Route("/{path:path}", fake.handle, methods=["GET", "POST"])])
    async with running_server(app) as url:
        yield fake, url


CATALOGUE = """
tools:
  - name: lookup
    description: Look an entity up.
    url: {url}/v2
    method: GET
    path: /lookup
    parameters: {{type: object, properties: {{entity: {{type: string}}}}, required: [entity]}}
    arguments: {{id: entity}}
    result_field: results
    annotations: {{readOnlyHint: true, idempotentHint: true}}
    timeout_seconds: 0.5
    retries: 2
  - name: reject
    description: Always refused by the backend.
    url: {url}
    path: /reject
    parameters: {{type: object}}
  - name: fetch_item
    description: One item by id, the id filling a path segment.
    url: {url}
    method: GET
    path: /items/{{item_id}}
    parameters: {{type: object, properties: {{item_id: {{type: string}}}}, required: [item_id]}}
  - name: create_thing
    description: Not idempotent, so never retried.
    url: {url}
    path: /things
    parameters: {{type: object}}
"""


async def _gateway(backend: Backend, url: str, tmp_path, **overrides: Any):
    catalogue = tmp_path / "catalogue.yaml"
    catalogue.write_text(CATALOGUE.format(url=url))
    settings = test_settings(tool_catalogues=[catalogue], **overrides)
    return settings


async def test_backend_tool_success_with_mapping(backend: Backend, backend_server, tmp_path):
    fake, url = backend_server
    settings = await _gateway(backend, url, tmp_path, neural_engine_api=url + "/neural")
    async with run_gateway(backend, settings) as client:
        response = await client.post("/execute", json={"tool": "lookup", "args": {"entity": "e1"}})
        assert response.status_code == 200, response.text
        assert response.json()["result"] == [{"id": "e1", "score": 0.9}]
        assert fake.received[-1]["path"] == "/v2/lookup"
        assert fake.received[-1]["query"] == {"id": "e1"}
        assert fake.received[-1]["conclave_id"] == response.json()["conclave_id"]

        screen = await client.post(
            "/execute", json={"tool": "screen_entities", "args": {"criteria": {"risk": "low"}}}
        )
        assert screen.status_code == 200
        assert fake.received[-1]["path"] == "/neural/screen"
        assert screen.json()["result"]["echo"] == {"criteria": {"risk": "low"}}


async def test_retries_time_out_and_rejection(backend: Backend, backend_server, tmp_path):
    fake, url = backend_server
    settings = await _gateway(backend, url, tmp_path)
    async with run_gateway(backend, settings) as client:
        fake.failures = 2  # idempotent: two 500s, then success on the third attempt
        ok = await client.post("/execute", json={"tool": "lookup", "args": {"entity": "x"}})
        assert ok.status_code == 200 and len(fake.received) == 3

        fake.received.clear()
        fake.failures = 1  # not idempotent: one attempt only
        failed = await client.post("/execute", json={"tool": "create_thing", "args": {}})
        assert failed.status_code == 502 and failed.json()["code"] == "BACKEND_FAILED"
        assert len(fake.received) == 1

        fake.delay = 1.0
        slow = await client.post("/execute", json={"tool": "lookup", "args": {"entity": "x"}})
        assert slow.status_code == 504 and slow.json()["code"] == "BACKEND_TIMEOUT"
        fake.delay = 0

        refused = await client.post("/execute", json={"tool": "reject", "args": {}})
        assert refused.status_code == 422 and refused.json()["code"] == "BACKEND_REJECTED"
        assert "unknown entity" in refused.json()["detail"]
        statuses = [row.error_code for row in await audit_rows(backend)]
        assert statuses == [None, "BACKEND_FAILED", "BACKEND_TIMEOUT", "BACKEND_REJECTED"]


@pytest.mark.parametrize(
    ("item_id", "raw_path"),
    [
        ("..", "/items/%2E%2E"),
        (".", "/items/%2E"),
        ("%2e%2e", "/items/%252e%252e"),
        ("../admin", "/items/..%2Fadmin"),
        ("a/b", "/items/a%2Fb"),
        ("x?admin=1", "/items/x%3Fadmin%3D1"),
        ("x#admin", "/items/x%23admin"),
    ],
)
async def test_a_path_argument_stays_one_segment(
    backend: Backend, backend_server, tmp_path, item_id: str, raw_path: str
):
    fake, url = backend_server
    settings = await _gateway(backend, url, tmp_path)
    async with run_gateway(backend, settings) as client:
        response = await client.post(
            "/execute", json={"tool": "fetch_item", "args": {"item_id": item_id}}
        )
    assert response.status_code == 200, response.text
    assert [(r["raw_path"], r["query"]) for r in fake.received] == [(raw_path, {})]


async def test_an_empty_path_argument_is_refused_before_the_backend(
    backend: Backend, backend_server, tmp_path
):
    fake, url = backend_server
    settings = await _gateway(backend, url, tmp_path)
    async with run_gateway(backend, settings) as client:
        response = await client.post(
            "/execute", json={"tool": "fetch_item", "args": {"item_id": ""}}
        )
    assert response.status_code == 422
    assert response.json()["code"] == "INVALID_ARGUMENT"
    assert fake.received == []
    [row] = await audit_rows(backend)
    assert row.error_code == "INVALID_ARGUMENT"


async def test_breaker_opens_after_repeated_failures(backend: Backend, backend_server, tmp_path):
    fake, url = backend_server
    settings = await _gateway(backend, url, tmp_path)
    async with run_gateway(backend, settings) as client:
        fake.failures = 1000
        codes = []
        for _ in range(7):
            response = await client.post("/execute", json={"tool": "create_thing", "args": {}})
            codes.append(response.json()["code"])
        assert codes[:5] == ["BACKEND_FAILED"] * 5
        assert codes[5:] == ["BACKEND_UNAVAILABLE"] * 2  # open: the backend is left alone
        assert len(fake.received) == 5


async def test_unconfigured_backend_is_unlisted_and_503(backend: Backend, tmp_path):
    settings = test_settings()
    async with run_gateway(backend, settings) as client:
        listed = {t["function"]["name"] for t in (await client.get("/tools")).json()["tools"]}
        assert "screen_entities" not in listed and "query_signals" in listed
        everything = (await client.get("/tools", params={"include_unavailable": True})).json()
        assert "screen_entities" in {t["function"]["name"] for t in everything["tools"]}
        response = await client.post(
            "/execute", json={"tool": "screen_entities", "args": {"criteria": {}}}
        )
        assert response.status_code == 503
        assert response.json()["code"] == "BACKEND_UNAVAILABLE"
        assert "NEURAL_ENGINE_API" in response.json()["detail"]
        [row] = await audit_rows(backend)
        assert row.status == "rejected"


async def test_finance_aliases_reach_the_backend_rewritten(backend: Backend, backend_server):
    fake, url = backend_server
    settings = test_settings(mcp_domain="finance", neural_engine_api=url + "/neural")
    async with run_gateway(backend, settings) as client:
        args = {"tickers": ["aapl", "msft"], "profile": "conservative", "limit": 5}
        screen = await client.post("/execute", json={"tool": "screen_tickers", "args": args})
        assert screen.status_code == 200, screen.text
        assert screen.json()["tool"] == "screen_entities"
        assert fake.received[-1]["path"] == "/neural/screen"
        universe = ["ticker:AAPL", "ticker:MSFT"]
        expected = {"criteria": {"risk": "low"}, "universe": universe, "limit": 5}
        assert screen.json()["result"]["echo"] == expected

        compare = await client.post(
            "/execute",
            json={
                "tool": "compare_tickers",
                "args": {"tickers": ["AAPL", "GOOG"], "metrics": ["pe"]},
            },
        )
        assert compare.status_code == 200, compare.text
        assert fake.received[-1]["path"] == "/neural/compare"
        expected = {"entity_ids": ["ticker:AAPL", "ticker:GOOG"], "metrics": ["pe"]}
        assert compare.json()["result"]["echo"] == expected
        rows = await audit_rows(backend)
        names = [(r.requested_tool, r.tool_name) for r in rows]
        assert names == [
            ("screen_tickers", "screen_entities"),
            ("compare_tickers", "compare_entities"),
        ]
