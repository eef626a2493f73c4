"""Every path parameter, query parameter and JSON body of every service, read from its OpenAPI
document, refuses values no store, bus or response can carry: 422 ``UNSAFE_INPUT`` naming the
field, never a 500 (a NUL reaching a PostgreSQL query failed it) and never a lookup of garbled
text. A header holding NUL is refused the same way. A stored row holding such a value (written
before the boundary refused it) is answered escaped."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from conclave.gateway.store import mcp_tool_calls
from tests.conftest import Backend
from tests.hostile.conftest import AUTH, SERVICES, USER, assert_problem, hostile_app

# A NUL, and the UTF-8-style encoding of a lone surrogate (which servers decode to U+FFFD).
HOSTILE = {"nul": "%00", "lone_surrogate": "%ED%A0%80"}
METHODS = ("get", "post", "put", "patch", "delete")


def _operations(openapi: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in openapi["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def _filled(path: str, replacing: str | None = None, with_text: str = "") -> str:
    """``path`` with every parameter given a plain value, and ``replacing`` given ``with_text``."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == replacing:
            return with_text
        return "image" if name == "media_type" else "default" if name == "name" else "x1"

    return re.sub(r"\{([^}]+)\}", value, path)


def _query_parameters(operation: dict[str, Any]) -> list[str]:
    return [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]


async def _call(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> httpx.Response:
    headers = {**AUTH, **kwargs.pop("headers", {})}
    return await client.request(method.upper(), url, headers=headers, **kwargs)


def _assert_unsafe(response: httpx.Response, field: str, kind: str) -> None:
    body = assert_problem(response, 422)
    assert body["code"] == "UNSAFE_INPUT", body
    assert body["errors"][0]["field"] == field, body
    assert body["errors"][0]["type"] == kind, body


@pytest.mark.parametrize("service", SERVICES)
async def test_every_path_and_query_parameter(
    service: str, embedded: Backend, tmp_path: Path
) -> None:
    checked = 0
    async with hostile_app(service, embedded, tmp_path) as (client, app):
        for method, path, operation in _operations(app.openapi()):
            for name in re.findall(r"\{([^}]+)\}", path):
                for kind, text in HOSTILE.items():
                    response = await _call(client, method, _filled(path, name, text))
                    _assert_unsafe(response, f"path.{name}", kind)
                    checked += 1
            for name in _query_parameters(operation):
                for kind, text in HOSTILE.items():
                    url = f"{_filled(path)}?{quote(name)}={text}"
                    _assert_unsafe(await _call(client, method, url), f"query.{name}", kind)
                    checked += 1
    if service != "graph":  # the graph's routes take a JSON body only
        assert checked >= 4, f"{service}: no parameters found in its OpenAPI document"


@pytest.mark.parametrize("service", SERVICES)
async def test_every_json_body(service: str, embedded: Backend, tmp_path: Path) -> None:
    bodies = {
        "lone_surrogate": b'{"\\udfff": 1}',
        "nul": b'{"a\\u0000": 1}',
    }
    fields = {"lone_surrogate": "body.\\udfff", "nul": "body.a\\u0000"}
    checked = 0
    async with hostile_app(service, embedded, tmp_path) as (client, app):
        for method, path, operation in _operations(app.openapi()):
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            for kind, body in bodies.items():
                headers = {"content-type": "application/json"}
                response = await _call(client, method, _filled(path), content=body, headers=headers)
                _assert_unsafe(response, fields[kind], kind)
                checked += 1
    if service != "edge":  # the edge takes multipart uploads only
        assert checked, f"{service}: no JSON body found in its OpenAPI document"


@pytest.mark.parametrize("service", SERVICES)
async def test_a_header_holding_nul(service: str, embedded: Backend, tmp_path: Path) -> None:
    # Servers refuse NUL in a header; an app served in-process gets what its client sends.
    probe = {
        "gateway": "/tools",
        "collector": "/expedition/history",
        "graph": "/health",
        "edge": "/api/edge-intake/events",
    }[service]
    async with hostile_app(service, embedded, tmp_path) as (client, _app):
        response = await _call(client, "get", probe, headers={"X-Probe": b"a\x00b"})
        _assert_unsafe(response, "header.x-probe", "nul")
        assert (await _call(client, "get", probe)).status_code == 200


async def test_a_stored_call_holding_a_lone_surrogate_is_answered_escaped(
    backend: Backend, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    row = {
        "conclave_id": "call-with-a-surrogate",
        "tool_name": "echo",
        "requested_tool": "echo",
        "args": {"message": "\ud800"},
        "canonical_args": {"message": "\ud800"},
        "result": {"echo": "\ud800"},
        "orthodoxy_status": "orthodox",
        "status": "succeeded",
        "warnings": [],
        "user_id": USER,
        "created_at": now,
        "completed_at": now,
    }
    async with backend.engine.begin() as connection:
        await connection.execute(mcp_tool_calls.insert().values(**row))
    async with hostile_app("gateway", backend, tmp_path) as (client, _app):
        response = await client.get("/calls/call-with-a-surrogate", headers=AUTH)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["args"] == {"message": "\\ud800"}
    assert body["result"] == {"echo": "\\ud800"}
