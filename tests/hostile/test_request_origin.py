"""What a web page can make a browser send to a service with authentication off (``conclave up``)
is refused before anything runs: a non-JSON body on a JSON route (415), a foreign ``Host`` (421,
DNS rebinding) and a foreign ``Origin`` (403). Each refusal is problem+json, and the store, the
bus and the tools show that nothing happened.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from conclave.collector.store.tables import expeditions, schedules
from conclave.edge.store import evidence_packs
from conclave.gateway.store import mcp_tool_calls
from conclave.graph.events import AUDIT_CHANNEL
from conclave.platform.runtime import Platform
from tests.conftest import Backend, eventually
from tests.hostile.conftest import (
    CONFIGURATIONS,
    SERVICES,
    assert_problem,
    build_app,
    hostile_app,
    service_settings,
)
from tests.httpserver import running_server

# A valid request of every JSON route (the finance routes with the gateway in finance mode).
JSON_ROUTES: dict[str, dict[str, Any]] = {
    "/execute": {"tool": "evaluate_expression", "args": {"expression": "6*7"}},
    "/v1/finance/normalize": {"tool": "evaluate_expression", "args": {"expression": "1"}},
    "/dispatch": {"query": "hello"},
    "/expedition/run": {"expedition_type": "audit"},
    "/expedition/trigger/orchestrator": {"expedition_type": "audit"},
    "/schedules": {"expedition_type": "audit", "name": "nightly", "cron": "0 3 * * *"},
}
# What a browser sends cross-site without a preflight: its three "simple" content types, and a
# body with none at all (fetch with a Blob body of no type).
NOT_JSON = {
    "text/plain": "text/plain;charset=UTF-8",
    "urlencoded": "application/x-www-form-urlencoded",
    "multipart": "multipart/form-data; boundary=x",
    "no content type": None,
}
EVIL = "http://evil.example"
BOUNDARY = "origin-test"
UPLOAD = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="note.txt"\r\n'
    "Content-Type: text/plain\r\n\r\nField note.\r\n"
    f"--{BOUNDARY}--\r\n"
).encode()
UPLOAD_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


def _settings_for(service: str) -> dict[str, Any]:
    # Auth off, as under `conclave up`; the graph audits each dispatch so that one shows.
    overrides: dict[str, Any] = {"auth": "disabled"}
    if service == "graph":
        overrides["audit_monitoring"] = True
    return overrides


async def _count(backend: Backend, table: Any) -> int:
    async with backend.engine.connect() as connection:
        return int((await connection.execute(select(func.count()).select_from(table))).scalar())


async def _effects(service: str, backend: Backend) -> int:
    """How many things the requests so far made happen: audit rows, expeditions, schedules,
    dispatch audit events, Evidence Packs."""
    if service == "gateway":
        return await _count(backend, mcp_tool_calls)
    if service == "collector":
        return await _count(backend, expeditions) + await _count(backend, schedules)
    if service == "graph":
        return len(await backend.bus.read(AUDIT_CHANNEL))
    return await _count(backend, evidence_packs)


def _json_routes(app: FastAPI) -> list[str]:
    """Every path whose POST takes a JSON body, from the app's own OpenAPI document."""
    found = []
    for path, operations in app.openapi()["paths"].items():
        body = operations.get("post", {}).get("requestBody", {})
        if "application/json" in body.get("content", {}):
            found.append(path)
    return found


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
async def test_json_routes_refuse_what_browsers_send_without_asking(
    configuration: str, embedded: Backend, tmp_path: Path
) -> None:
    service, overrides = CONFIGURATIONS[configuration]
    settings = {**_settings_for(service), **overrides}
    async with hostile_app(service, embedded, tmp_path, **settings) as (client, app):
        routes = _json_routes(app)
        assert set(routes) <= set(JSON_ROUTES), f"a JSON route this test does not know: {routes}"
        if service != "edge":
            assert routes, "the service has JSON routes"
        for path in routes:
            body = httpx.Request("POST", "/", json=JSON_ROUTES[path]).content
            for label, content_type in NOT_JSON.items():
                headers = {"Content-Type": content_type} if content_type else {}
                response = await client.post(path, content=body, headers=headers)
                problem = assert_problem(response, 415)
                assert problem["code"] == "UNSUPPORTED_MEDIA_TYPE", (path, label)
                assert "application/json" in problem["detail"], problem
                assert problem["accepted"] == ["application/json", "application/*+json"]
        await asyncio.sleep(0.2)  # time for a wrongly accepted call to leave a trace
        assert await _effects(service, embedded) == 0, "a refused body ran"
        # Declared as JSON (or a +json type), the same bodies are taken.
        for path in routes:
            for content_type in ("application/json", "application/vnd.api+json; charset=utf-8"):
                response = await client.post(
                    path,
                    content=httpx.Request("POST", "/", json=JSON_ROUTES[path]).content,
                    headers={"Content-Type": content_type},
                )
                assert response.status_code not in (415, 422), (path, response.text)
                if path == "/schedules":  # the second one would be a name conflict
                    break


async def test_edge_uploads_refuse_text_and_forms(embedded: Backend, tmp_path: Path) -> None:
    async with hostile_app("edge", embedded, tmp_path, auth="disabled") as (client, _app):
        for label, content_type in NOT_JSON.items():
            if label == "multipart":
                continue
            headers = {"Content-Type": content_type} if content_type else {}
            response = await client.post(
                "/api/edge-intake/document", content=UPLOAD, headers=headers
            )
            assert assert_problem(response, 415)["code"] == "UNSUPPORTED_MEDIA_TYPE", label
    assert await _effects("edge", embedded) == 0


def _every_route(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every documented route, the docs themselves and /mcp."""
    routes = [("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/metrics")]
    for path, operations in app.openapi()["paths"].items():
        concrete = path.replace("{", "").replace("}", "")  # any value: the guard answers first
        routes += [(method.upper(), concrete) for method in operations]
    if any(getattr(route, "path", None) == "/mcp" for route in app.routes):
        routes += [("POST", "/mcp"), ("GET", "/mcp")]
    return routes


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
async def test_every_route_refuses_a_foreign_host_and_a_foreign_origin(
    configuration: str, embedded: Backend, tmp_path: Path
) -> None:
    service, overrides = CONFIGURATIONS[configuration]
    settings = {**_settings_for(service), **overrides}
    async with hostile_app(service, embedded, tmp_path, **settings) as (client, app):
        for method, path in _every_route(app):
            body = JSON_ROUTES.get(path)
            rebound = await client.request(
                method, path, json=body, headers={"Host": "evil.example:8020"}
            )
            problem = assert_problem(rebound, 421)
            assert problem["code"] == "HOST_NOT_ALLOWED", (method, path)
            assert "evil.example:8020" in problem["detail"]
            cross_site = await client.request(method, path, json=body, headers={"Origin": EVIL})
            problem = assert_problem(cross_site, 403)
            assert problem["code"] == "ORIGIN_NOT_ALLOWED", (method, path)
            assert not any(h.startswith("access-control-") for h in cross_site.headers)
        if service == "edge":
            upload = await client.post(
                "/api/edge-intake/document",
                content=UPLOAD,
                headers={"Content-Type": UPLOAD_TYPE, "Origin": EVIL},
            )
            assert assert_problem(upload, 403)["code"] == "ORIGIN_NOT_ALLOWED"
        await asyncio.sleep(0.2)
        assert await _effects(service, embedded) == 0, "a refused request ran"


# Host values an attacker (or a confused client) may send, and whether each is this machine's
# loopback: names have no case; an IPv6 address has several spellings; a trailing dot makes
# another name (resolved through DNS, so a rebinding name could end in one).
HOSTS = [
    ("127.0.0.1:8020", True),
    ("127.0.0.1", True),
    ("LOCALHOST:8020", True),
    ("[::1]:8020", True),
    ("[0:0:0:0:0:0:0:1]:8020", True),
    ("localhost.:8020", False),
    ("localhost.", False),
    ("127.0.0.1.evil.example", False),
    ("[::ffff:127.0.0.1]:8020", False),
    ("0.0.0.0:8020", False),
    ("127.1:8020", False),
    ("evil.example", False),
    ("127.0.0.1:8020\x00.evil.example", False),
    ("localhost\u00e9:8020", False),
    ("xn--localhost:8020", False),
    ("user@127.0.0.1:8020", False),
    ("127.0.0.1:8020/path", False),
    ("127.0.0.1:99999999", False),
    ("localhost:" + "8" * 10_000, False),
    ("a" * 70_000, False),
    ("", False),
]


async def test_host_values(embedded: Backend, tmp_path: Path) -> None:
    async with hostile_app("gateway", embedded, tmp_path, auth="disabled") as (client, _app):
        for host, allowed in HOSTS:
            raw = [(b"host", host.encode("utf-8"))]
            response = await client.get("/tools", headers=raw)
            if allowed:
                assert response.status_code == 200, (host, response.text)
            else:
                problem = assert_problem(response, 421)
                assert problem["code"] == "HOST_NOT_ALLOWED", host
                assert len(problem["detail"]) < 400, "a huge Host is not echoed back whole"
        # Two Host headers (request smuggling's favourite): refused even when both are loopback.
        twice = [(b"host", b"127.0.0.1:8020"), (b"host", b"evil.example")]
        assert assert_problem(await client.get("/tools", headers=twice), 421)
        same_twice = [(b"host", b"127.0.0.1:8020"), (b"host", b"127.0.0.1:8020")]
        assert assert_problem(await client.get("/tools", headers=same_twice), 421)


ORIGINS = [
    ("http://127.0.0.1", True),  # the service's own origin: /docs' "try it out"
    ("HTTP://127.0.0.1", True),
    ("http://127.0.0.1:80", True),
    ("https://127.0.0.1", True),  # a Host without port: either scheme's default port
    ("http://127.0.0.1:8020", False),
    ("http://localhost", False),
    ("null", False),  # sandboxed frames, file:// pages, redirects
    (EVIL, False),
    ("http://127.0.0.1.evil.example", False),
    ("http://127.0.0.1@evil.example", False),
    ("http://127.0.0.1\x00", False),
    ("chrome-extension://abcdef", False),
    ("http://" + "a" * 10_000, False),
    ("", False),
]


async def test_origin_values(embedded: Backend, tmp_path: Path) -> None:
    # The in-process client's Host is 127.0.0.1 (port 80): the service's own origin is
    # http://127.0.0.1.
    async with hostile_app("gateway", embedded, tmp_path, auth="disabled") as (client, _app):
        for origin, allowed in ORIGINS:
            raw = [(b"origin", origin.encode("utf-8"))]
            response = await client.get("/tools", headers=raw)
            if allowed:
                assert response.status_code == 200, (origin, response.text)
            else:
                assert assert_problem(response, 403)["code"] == "ORIGIN_NOT_ALLOWED", origin
        two = [(b"origin", b"http://127.0.0.1"), (b"origin", EVIL.encode())]
        assert assert_problem(await client.get("/tools", headers=two), 403)


async def test_configured_hosts_and_origins(embedded: Backend, tmp_path: Path) -> None:
    settings = {
        "auth": "disabled",
        "allowed_hosts": "gateway.internal:8020,conclave.example.com",
        "allowed_origins": "https://app.example.com,http://localhost:*",
    }
    async with hostile_app("gateway", embedded, tmp_path, **settings) as (client, _app):

        async def status(**headers: str) -> int:
            return (await client.get("/tools", headers=headers)).status_code

        assert await status(host="gateway.internal:8020") == 200
        assert await status(host="gateway.internal:9000") == 421
        assert await status(host="conclave.example.com") == 200
        assert await status(host="conclave.example.com:8443") == 421
        # The setting replaces the loopback default.
        assert await status(host="127.0.0.1:8020") == 421
        assert await status(host="conclave.example.com", origin="https://app.example.com") == 200
        assert await status(host="conclave.example.com", origin="http://app.example.com") == 403
        assert await status(host="conclave.example.com", origin="http://localhost:5173") == 200
        assert await status(host="conclave.example.com", origin="https://localhost:5173") == 403
        assert await status(host="conclave.example.com", origin=EVIL) == 403
    anything = {"auth": "disabled", "allowed_hosts": "*", "allowed_origins": "*"}
    async with hostile_app("gateway", embedded, tmp_path, **anything) as (client, _app):
        headers = {"host": "behind.a.proxy.example", "origin": EVIL}
        assert (await client.get("/tools", headers=headers)).status_code == 200


async def test_the_mcp_host_setting_is_still_honoured(embedded: Backend, tmp_path: Path) -> None:
    # GATEWAY_MCP_ALLOWED_HOSTS predates the guard of every route: its hosts are allowed hosts.
    settings = {"auth": "disabled", "mcp_allowed_hosts": "mcp.example.com:*"}
    async with hostile_app("gateway", embedded, tmp_path, **settings) as (client, _app):
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        headers = {
            "host": "mcp.example.com:8020",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-06-18",
        }
        listed = await client.post("/mcp", json=request, headers=headers)
        assert listed.status_code == 200, listed.text
        assert listed.json()["result"]["tools"]
        assert (await client.get("/tools", headers={"host": "127.0.0.1:8020"})).status_code == 200
        rebound = await client.post("/mcp", json=request, headers={**headers, "host": "evil.x"})
        # An MCP client accepts no problem+json: the problem comes as a JSON-RPC error too.
        assert rebound.status_code == 421
        assert rebound.headers["content-type"] == "application/json"
        assert rebound.json()["code"] == "HOST_NOT_ALLOWED"
        assert rebound.json()["error"]["data"]["code"] == "HOST_NOT_ALLOWED"


async def test_cors_is_off_unless_configured(embedded: Backend, tmp_path: Path) -> None:
    preflight = {
        "Origin": "https://app.example.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization",
    }
    allowed_only = {"auth": "disabled", "allowed_origins": "https://app.example.com"}
    async with hostile_app("gateway", embedded, tmp_path, **allowed_only) as (client, _app):
        answer = await client.options("/execute", headers=preflight)
        assert not any(h.startswith("access-control-") for h in answer.headers), answer.headers
        simple = await client.get("/tools", headers={"Origin": "https://app.example.com"})
        assert simple.status_code == 200
        assert "access-control-allow-origin" not in simple.headers
    cors = {"auth": "disabled", "cors_origins": "https://app.example.com"}
    async with hostile_app("gateway", embedded, tmp_path, **cors) as (client, _app):
        answer = await client.options("/execute", headers=preflight)
        assert answer.status_code == 200, answer.text
        assert answer.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "POST" in answer.headers["access-control-allow-methods"]
        assert "authorization" in answer.headers["access-control-allow-headers"].lower()
        assert "access-control-allow-credentials" not in answer.headers
        call = await client.post(
            "/execute",
            json=JSON_ROUTES["/execute"],
            headers={"Origin": "https://app.example.com"},
        )
        assert call.status_code == 200, call.text
        assert call.json()["status"] == "succeeded"
        assert call.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "x-request-id" in call.headers["access-control-expose-headers"].lower()
        # Other pages are still refused outright, preflight or not.
        foreign = await client.options("/execute", headers={**preflight, "Origin": EVIL})
        assert assert_problem(foreign, 403)["code"] == "ORIGIN_NOT_ALLOWED"
        assert "access-control-allow-origin" not in foreign.headers


@pytest.mark.parametrize("service", SERVICES)
async def test_a_real_server_refuses_them(service: str, embedded: Backend, tmp_path: Path) -> None:
    """Through uvicorn and a socket, as a browser's requests arrive (raw HTTP/1.1, so that the
    request line and headers are exactly what is written here)."""
    settings = service_settings(service, tmp_path, auto_migrate=False, **_settings_for(service))
    async with (
        Platform.open(settings, engine=embedded.engine, bus=embedded.bus) as platform,
        running_server(build_app(service, settings, platform)) as url,
    ):
        port = int(url.rsplit(":", 1)[1])
        path = "/api/edge-intake/pipeline" if service == "edge" else "/health"

        async def exchange(request: bytes) -> tuple[int, bytes]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            answer = await reader.read()
            writer.close()
            status = int(answer.split(b" ", 2)[1])
            return status, answer

        own = f"127.0.0.1:{port}"
        ok, _ = await exchange(
            f"GET {path} HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n".encode()
        )
        assert ok == 200
        # Whitespace around a field value is not part of it (RFC 9110 §5.5).
        padded, _ = await exchange(
            f"GET {path} HTTP/1.1\r\nHost:\t{own}\t\r\nConnection: close\r\n\r\n".encode()
        )
        assert padded == 200
        rebound, answer = await exchange(
            f"GET {path} HTTP/1.1\r\nHost: evil.example:{port}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert rebound == 421 and b"application/problem+json" in answer
        assert b"HOST_NOT_ALLOWED" in answer
        # An absolute-form target: uvicorn serves its path and keeps the Host header, which is
        # what is checked (a browser never sends this form to a server, only to a proxy).
        absolute, _ = await exchange(
            f"GET http://evil.example{path} HTTP/1.1\r\nHost: evil.example\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert absolute == 421
        cross_site, answer = await exchange(
            f"GET {path} HTTP/1.1\r\nHost: {own}\r\nOrigin: {EVIL}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert cross_site == 403 and b"ORIGIN_NOT_ALLOWED" in answer
        two_hosts, _ = await exchange(
            f"GET {path} HTTP/1.1\r\nHost: {own}\r\nHost: evil.example\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert two_hosts in (400, 421)
        if service in ("gateway", "graph", "collector"):
            json_path = {"gateway": "/execute", "graph": "/dispatch"}.get(
                service, "/expedition/run"
            )
            body = httpx.Request("POST", "/", json=JSON_ROUTES[json_path]).content
            plain, answer = await exchange(
                f"POST {json_path} HTTP/1.1\r\nHost: {own}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            assert plain == 415 and b"UNSUPPORTED_MEDIA_TYPE" in answer
            await asyncio.sleep(0.2)
            assert await _effects(service, embedded) == 0

            async def ran() -> bool:
                return await _effects(service, embedded) == 1

            async with httpx.AsyncClient(base_url=url) as http:
                taken = await http.post(json_path, json=JSON_ROUTES[json_path])
            assert taken.status_code < 300, taken.text
            await eventually(ran)
