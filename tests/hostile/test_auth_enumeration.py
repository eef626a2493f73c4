"""Every route that is not explicitly public refuses missing, expired and forged credentials.

The routes come from the apps themselves (``app.routes``, mounted sub-apps included), never from a
list in this file: a route added tomorrow without ``CurrentPrincipal`` makes this test fail.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.routing import BaseRoute, Mount, Route

from tests.conftest import Backend
from tests.hostile.conftest import (
    SERVICES,
    assert_problem,
    expired_jwt,
    forged_jwt,
    hostile_app,
)

# Routes anyone may call, and why. Keep this short: each entry is a deliberate decision.
PUBLIC = {
    "/": "service description and links, no data",
    "/health": "load balancers and orchestrators probe it without credentials",
    "/metrics": "Prometheus scrapes it; it carries counters, no records",
    "/openapi.json": "the API description",
    "/docs": "the API description, rendered",
    "/docs/oauth2-redirect": "part of the Swagger UI page",
    "/redoc": "the API description, rendered",
    # A transparency log exists so that outsiders can check it: hashes, sizes, signatures and
    # keys only (docs/transparency.md, "Endpoints"); a leaf's data stays authenticated.
    "/logs": "the names of the transparency logs published",
    "/logs/{name}/checkpoint": "a log's latest signed checkpoint",
    "/logs/{name}/checkpoint/{size}": "a log's signed checkpoint of a size",
    "/logs/{name}/keys": "a log's public verifier keys",
    "/logs/{name}/proof/inclusion": "an inclusion proof: hashes",
    "/logs/{name}/proof/consistency": "a consistency proof: hashes and signed checkpoints",
    "/logs/{name}/receipt/{index}": "a receipt: a leaf hash, a signed checkpoint, a proof",
    "/logs/{name}/receipt/by-hash/{leaf_hash}": "the same receipt, found by its leaf hash",
    # RFC 9728: a client without a token reads it to learn where to get one (the gateway).
    "/.well-known/oauth-protected-resource": "OAuth protected resource metadata, no data",
    "/.well-known/oauth-protected-resource/mcp": "the same, at the path MCP clients try first",
}

# Public routes with parameters, as a reader calls them: the path (``{log}`` the service's log)
# and the status an empty log answers without credentials (404 BEYOND_LOG or LEAF_NOT_FOUND: no
# leaf yet).
PUBLIC_EXAMPLES = {
    "/logs/{name}/checkpoint": ("/logs/{log}/checkpoint", 200),
    "/logs/{name}/checkpoint/{size}": ("/logs/{log}/checkpoint/0", 200),
    "/logs/{name}/keys": ("/logs/{log}/keys", 200),
    "/logs/{name}/proof/inclusion": ("/logs/{log}/proof/inclusion?index=0&size=1", 404),
    "/logs/{name}/proof/consistency": ("/logs/{log}/proof/consistency?from=0&to=0", 200),
    "/logs/{name}/receipt/{index}": ("/logs/{log}/receipt/0", 404),
    "/logs/{name}/receipt/by-hash/{leaf_hash}": ("/logs/{log}/receipt/by-hash/" + "0" * 64, 404),
}
# The log each service publishes.
SERVICE_LOGS = {"gateway": "calls", "edge": "packs"}

# The gateway grows finance routes in finance mode: enumerate that configuration too.
CONFIGURATIONS = [(service, {}) for service in SERVICES] + [("gateway", {"mcp_domain": "finance"})]


def _leaves(routes: list[BaseRoute], prefix: str = "") -> list[tuple[str, set[str]]]:
    """(path, methods) of every endpoint, descending into mounts; a mounted app whose routes
    cannot be listed counts as one endpoint answering every method."""
    found: list[tuple[str, set[str]]] = []
    for route in routes:
        if isinstance(route, Mount):
            inner = getattr(route.app, "routes", None)
            if inner is None:
                found.append((prefix + route.path, {"GET", "POST", "PUT", "PATCH", "DELETE"}))
            else:
                found.extend(_leaves(list(inner), prefix + route.path))
        elif isinstance(route, Route):
            found.append((prefix + route.path, set(route.methods or {"GET"})))
        elif hasattr(route, "effective_route_contexts"):
            # Recent FastAPI keeps an included router as one entry of ``app.routes``; expand it to
            # the routes it serves, with their full paths.
            for context in route.effective_route_contexts():
                found.append((prefix + context.path, set(context.methods or {"GET"})))
        else:
            raise AssertionError(f"a route of a kind this test cannot check: {route!r}")
    return found


def _concrete(path: str) -> str:
    # Any value does: credentials are checked before path parameters are.
    return re.sub(r"\{[^}]+\}", "x", path)


def _protected(app: FastAPI) -> list[tuple[str, str]]:
    pairs = []
    for path, methods in _leaves(list(app.routes)):
        if path in PUBLIC:
            continue
        pairs.extend((method, path) for method in sorted(methods) if method != "HEAD")
    return pairs


CREDENTIALS: list[tuple[str, dict[str, str], str]] = [
    ("missing", {}, "UNAUTHORIZED"),
    ("not bearer", {"Authorization": "Basic Zm9vOmJhcg=="}, "UNAUTHORIZED"),
    ("expired", {"Authorization": f"Bearer {expired_jwt()}"}, "TOKEN_EXPIRED"),
    ("wrong signature", {"Authorization": f"Bearer {forged_jwt()}"}, "INVALID_TOKEN"),
]


@pytest.mark.parametrize(("service", "overrides"), CONFIGURATIONS, ids=lambda v: str(v or ""))
async def test_every_non_public_route_refuses_bad_credentials(
    service: str, overrides: dict[str, Any], embedded: Backend, tmp_path: Path
) -> None:
    async with hostile_app(service, embedded, tmp_path, **overrides) as (client, app):
        protected = _protected(app)
        assert protected, f"{service} lists no protected route: the enumeration is broken"
        failures = []
        for method, path in protected:
            url = _concrete(path)
            for label, headers, code in CREDENTIALS:
                response = await client.request(method, url, headers=headers)
                kind = response.headers.get("content-type", "")
                body = response.json() if kind.startswith("application/problem+json") else {}
                if response.status_code != 401 or body.get("code") != code:
                    failures.append(f"{method} {path} ({label}): {response.status_code} {body}")
                elif not response.headers.get("www-authenticate", "").startswith("Bearer"):
                    failures.append(f"{method} {path} ({label}): no WWW-Authenticate challenge")
        assert not failures, "routes that do not refuse bad credentials:\n" + "\n".join(failures)


async def test_the_public_routes_are_real_and_answer_without_credentials(
    embedded: Backend, tmp_path: Path
) -> None:
    """A stale allow-list entry would quietly widen what is public if a route took its path."""
    seen: set[str] = set()
    for service in SERVICES:
        # The gateway publishes its calls log only with GATEWAY_CALL_LOG on (off by default).
        extra = {"call_log": True} if service == "gateway" else {}
        async with hostile_app(service, embedded, tmp_path / service, **extra) as (client, app):
            paths = {path for path, _methods in _leaves(list(app.routes))}
            for path in PUBLIC.keys() & paths:
                seen.add(path)
                target, expected = PUBLIC_EXAMPLES.get(path, (path, None))
                target = target.replace("{log}", SERVICE_LOGS.get(service, "none"))
                response = await client.get(target)
                answered = (
                    response.status_code == expected
                    if expected is not None
                    else response.status_code in (200, 503)
                )
                assert answered, (service, path, response.status_code)
    assert seen == set(PUBLIC), f"allow-list entries no app serves: {set(PUBLIC) - seen}"


async def test_a_valid_token_gets_past_authentication(embedded: Backend, tmp_path: Path) -> None:
    """The refusals above come from the credentials, not from a route that refuses everyone."""
    async with hostile_app("collector", embedded, tmp_path) as (client, _app):
        ok = await client.get("/stats", headers={"Authorization": "Bearer hostile-test-token"})
        assert ok.status_code == 200, ok.text
        refused = await client.get("/stats")
        assert_problem(refused, 401)
