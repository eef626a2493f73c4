"""Property-based fuzzing of every operation of the four services, from their own OpenAPI documents.

Schemathesis generates valid and invalid requests for each operation; each one is sent in-process,
authenticated with the static token, to the app with its lifespan running (SQLite, in-process bus).
For every request: no 5xx; the status is one the operation documents (every problem it can
answer is declared, see ``conclave.platform.openapi``); the content type and the body match what
the document says for that status (problems: ``application/problem+json`` and the ``Problem``
schema); the headers it declares required are there (``X-Request-ID`` and ``X-Correlation-ID``
on every answer, ``WWW-Authenticate`` on 401, ``Retry-After`` on 429, ``Location`` on 202); and
every problem's ``type`` and ``title`` are the registered ones for its ``code`` (RFC 9457: one
title per type), across every request of every service.

Budget: ``MAX_EXAMPLES`` per operation and a per-example deadline keep the folder within a few
minutes on a 2-core machine. Generation is derandomized and Hypothesis' example database is off:
every run sends the same requests. ``CONCLAVE_FUZZ_EXAMPLES=500`` explores further on demand.

Not fuzzed here, with the reason:

- ``/mcp`` (gateway): a plain Starlette route outside the OpenAPI document (the MCP SDK speaks
  JSON-RPC and SSE). Its authentication is covered by ``test_auth_enumeration`` and its hostile
  bodies by ``test_bodies``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from conclave.platform.media_types import media_type_names
from conclave.platform.problem_types import title_of, type_uri
from tests.hostile.conftest import AUTH, CONFIGURATIONS, build_app, service_settings

# ``CONCLAVE_FUZZ_EXAMPLES`` raises the budget for a deeper run on demand.
MAX_EXAMPLES = int(os.environ.get("CONCLAVE_FUZZ_EXAMPLES", "25"))
# ``type`` -> ``title`` of every problem any fuzzed request was answered with, every service.
TITLES_SEEN: dict[str, set[str]] = {}


def one_title_per_type(ctx: Any, response: Any, case: Any) -> bool | None:
    """A problem's ``type`` and ``title`` are the registered ones for its ``code``."""
    if not response.headers.get("content-type", [""])[0].startswith("application/problem+json"):
        return None
    body = response.json()
    code = body["code"]
    TITLES_SEEN.setdefault(body["type"], set()).add(body["title"])
    assert body["type"] == type_uri(code), body
    assert body["title"] == title_of(code), body
    assert body["status"] == response.status_code, body
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    one_title_per_type,
]
GATEWAY_TOOLS = ("echo", "evaluate_expression", "json_query", "current_time")
# Waiting for an expedition is behaviour, not input handling, and the fuzzing collector runs no
# workers: a generated ``wait_seconds`` of minutes would only burn the budget.
MAX_WAIT_SECONDS = 0.2


def _app(name: str, data_dir: Path) -> FastAPI:
    service, overrides = CONFIGURATIONS[name]
    return build_app(service, service_settings(service, data_dir, **overrides))


def _schema(name: str) -> Any:
    # The documents come from apps built only to describe themselves: building an app opens
    # nothing (no lifespan), so collection stays free of side effects.
    return schemathesis.openapi.from_dict(_app(name, Path("unused")).openapi())


SCHEMAS = {name: _schema(name) for name in CONFIGURATIONS}


@pytest.fixture(scope="module")
def live_apps() -> Iterator[dict[str, FastAPI]]:
    """One running app per service, each with its own temporary embedded store."""
    root = Path(tempfile.mkdtemp(prefix="conclave-fuzz-"))
    apps = {name: _app(name, root / name) for name in CONFIGURATIONS}
    try:
        yield apps
    finally:
        # Schemathesis starts an app's lifespan on its first request and keeps it for the process;
        # stop them here so stores, relays and parser workers close before the next module.
        asgi.shutdown_lifespans()
        shutil.rmtree(root, ignore_errors=True)


_BUDGET = settings(
    max_examples=MAX_EXAMPLES,
    deadline=timedelta(seconds=10),
    database=None,
    # The same examples on every run: CI is reproducible, and a failure reproduces locally.
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _aim(case: Any) -> None:
    """Point generated requests at code that does something with them.

    A random media type or tool name is a 404 before any parsing or validation runs, and those
    404s are tested elsewhere; mapping most of them onto real names (chosen from the generated
    value, so shrinking still works) sends the generated bodies through the upload and tool chains.
    """
    body = case.body if isinstance(case.body, dict) else None
    if body is not None and isinstance(body.get("wait_seconds"), int | float):
        body["wait_seconds"] = min(body["wait_seconds"], MAX_WAIT_SECONDS)
    params = case.path_parameters or {}
    media_type = params.get("media_type")
    names = media_type_names()
    if isinstance(media_type, str) and media_type not in names and len(media_type) % 4:
        params["media_type"] = names[len(media_type) % len(names)]
    if case.path == "/execute" and body is not None and isinstance(body.get("tool"), str):
        tool = body["tool"]
        if len(tool) % 4:
            body["tool"] = GATEWAY_TOOLS[len(tool) % len(GATEWAY_TOOLS)]


def _fuzz(service: str, case: Any, apps: dict[str, FastAPI]) -> None:
    _aim(case)
    case.call_and_validate(app=apps[service], headers=AUTH, checks=CHECKS)


@SCHEMAS["gateway"].parametrize()
@_BUDGET
def test_gateway(case: Any, live_apps: dict[str, FastAPI]) -> None:
    _fuzz("gateway", case, live_apps)


@SCHEMAS["collector"].parametrize()
@_BUDGET
def test_collector(case: Any, live_apps: dict[str, FastAPI]) -> None:
    _fuzz("collector", case, live_apps)


@SCHEMAS["graph"].parametrize()
@_BUDGET
def test_graph(case: Any, live_apps: dict[str, FastAPI]) -> None:
    _fuzz("graph", case, live_apps)


@SCHEMAS["edge"].parametrize()
@_BUDGET
def test_edge(case: Any, live_apps: dict[str, FastAPI]) -> None:
    _fuzz("edge", case, live_apps)


@SCHEMAS["finance"].parametrize()
@_BUDGET
def test_gateway_finance_mode(case: Any, live_apps: dict[str, FastAPI]) -> None:
    _fuzz("finance", case, live_apps)


def test_one_title_per_problem_type_across_services() -> None:
    """Runs after the fuzzing above (pytest keeps file order): no type had two titles."""
    if not TITLES_SEEN:
        pytest.skip("no fuzzing test ran in this session (selected alone)")
    assert {kind: titles for kind, titles in TITLES_SEEN.items() if len(titles) > 1} == {}
