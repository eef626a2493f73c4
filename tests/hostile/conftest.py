"""The four service apps with authentication on, for hostile-input tests.

Every app accepts the static token ``TOKEN`` and HS256 JWTs signed with ``JWT_SECRET``, so the
tests can send a valid credential, an expired JWT and a JWT signed with another key. Outgoing
traffic cannot leave the machine: the gateway's backends and the graph's collector point at a
closed local port, and the collector queues expeditions without running them (a fuzzed
``http_json`` source must never be fetched).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI

from conclave.collector.app import create_app as create_collector
from conclave.edge.app import create_app as create_edge
from conclave.gateway.app import create_app as create_gateway
from conclave.graph.app import create_app as create_graph
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings, EdgeSettings, GatewaySettings, GraphSettings
from tests.conftest import Backend, serve_app

TOKEN = "hostile-test-token"
USER = "fuzzer"
JWT_SECRET = "hostile-tests-secret-that-is-at-least-32-bytes"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Nothing listens on the discard port: calls to "backends" are refused at once, locally.
CLOSED_URL = "http://127.0.0.1:9"
SERVICES = ("gateway", "collector", "graph", "edge")
# Each app configuration the generated suites cover: the four services, plus the gateway in
# finance mode, which serves the ``/v1/finance`` routes.
CONFIGURATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    **{service: (service, {}) for service in SERVICES},
    "finance": ("gateway", {"mcp_domain": "finance"}),
}


def _common(data_dir: Path, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "auth": "enabled",
        "api_tokens": f"{TOKEN}={USER}",
        "jwt_secret": JWT_SECRET,
        "outbox_poll_seconds": 0.05,
        "outbox_max_backoff_seconds": 0.2,
        "data_dir": data_dir,
        "load_entry_points": False,
    }
    values.update(overrides)
    return values


def service_settings(service: str, data_dir: Path, **overrides: Any) -> Any:
    """Settings of ``service`` with auth on and no way to reach anything off this machine."""
    if service == "gateway":
        values = _common(data_dir, edge_url=CLOSED_URL, collector_url=CLOSED_URL,
                         graph_url=CLOSED_URL, **overrides)  # fmt: skip
        return GatewaySettings(**values)
    if service == "collector":
        # Queued, never run, unless a test asks for workers (``run_workers=True``).
        values = _common(data_dir, **{"run_workers": False, "file_roots": [data_dir], **overrides})
        return CollectorSettings(**values)
    if service == "graph":
        values = _common(data_dir, collector_url=CLOSED_URL, collector_timeout_seconds=1.0,
                         **overrides)  # fmt: skip
        return GraphSettings(**values)
    values = _common(data_dir, parser_workers=1, fsync_blobs=False, **overrides)
    return EdgeSettings(**values)


def build_app(service: str, settings: Any, platform: Platform | None = None) -> FastAPI:
    """The service's app; with ``platform`` None it opens (and owns) its own store and bus."""
    factory: dict[str, Callable[..., FastAPI]] = {
        "gateway": create_gateway,
        "collector": create_collector,
        "graph": create_graph,
        "edge": create_edge,
    }
    return factory[service](settings, platform=platform)


@asynccontextmanager
async def hostile_app(
    service: str, backend: Backend, data_dir: Path, **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """``service`` over the backend's store and bus, auth on, with an in-process client."""
    settings = service_settings(service, data_dir, auto_migrate=False, **overrides)
    async with Platform.open(settings, engine=backend.engine, bus=backend.bus) as platform:
        app = build_app(service, settings, platform)
        async with serve_app(app) as client:
            yield client, app


@pytest.fixture
def embedded(sqlite_engine: Any, memory_bus: Any) -> Backend:
    """Hostile input is refused before the store matters: SQLite and the in-process bus."""
    return Backend("embedded", sqlite_engine, memory_bus)


@pytest.fixture
def production(postgres_engine: Any, redis_bus: Any) -> Backend:
    """PostgreSQL and Redis, as deployed: NUL and un-encodable text fail there, not in SQLite."""
    return Backend("production", postgres_engine, redis_bus)


def expired_jwt() -> str:
    """A JWT correctly signed for these apps whose ``exp`` has passed."""
    now = int(time.time())
    return jwt.encode({"sub": USER, "iat": now - 7200, "exp": now - 3600}, JWT_SECRET, "HS256")


def forged_jwt() -> str:
    """A JWT valid in every way except that another key signed it."""
    claims = {"sub": USER, "exp": int(time.time()) + 3600}
    return jwt.encode(claims, "another-secret-that-is-also-32-bytes-long!", "HS256")


def assert_problem(response: httpx.Response, status: int | tuple[int, ...]) -> dict[str, Any]:
    """The response is a problem+json with the expected status and a stable ``code``."""
    expected = (status,) if isinstance(status, int) else status
    assert response.status_code in expected, (response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith("application/problem+json"), response.text
    body: dict[str, Any] = response.json()
    assert isinstance(body.get("code"), str) and body["code"].isupper(), body
    assert body["status"] == response.status_code, body
    return body
