"""Regression tests from an attack on the gateway's JWKS handling: an issuer's key document that
is not what the fetcher expects, and an issuer that answers slowly. Each docstring says what is
guarded now, then what the attack found before."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.conftest import Backend
from tests.gateway.oauth_server import AuthorizationServer, SigningKey
from tests.gateway.test_oauth_resource_server import ECHO, bearer, oauth_gateway
from tests.httpserver import running_server


@pytest.fixture
def embedded(sqlite_engine: Any, memory_bus: Any) -> Backend:
    return Backend("embedded", sqlite_engine, memory_bus)


class OddIssuer(AuthorizationServer):
    """The test authorization server, whose /jwks answers what a test sets."""

    jwks_body: bytes = b""
    trickle_seconds: float = 0.0

    async def _jwks(self, _request: Request) -> Response:  # type: ignore[override]
        self.jwks_fetches += 1
        if not self.trickle_seconds:
            return Response(self.jwks_body, media_type="application/json")

        async def slowly() -> AsyncIterator[bytes]:
            for byte in self.jwks_body:
                await asyncio.sleep(self.trickle_seconds)
                yield bytes([byte])

        return StreamingResponse(slowly(), media_type="application/json")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/jwks", self._jwks)])


@pytest.fixture
async def odd_issuer() -> AsyncIterator[OddIssuer]:
    server = OddIssuer(keys=[SigningKey.rsa("k1")])
    async with running_server(server.app()) as url:
        server.issuer = url
        yield server


async def test_a_deeply_nested_jwks_is_a_failed_fetch_not_a_500(
    embedded: Backend, odd_issuer: OddIssuer
):
    """Guarded: the parse error is a failed fetch, so 503 AUTH_KEYS_UNAVAILABLE.

    Before: An issuer's JWKS (or anything at that URL: a captive portal, a compromised CDN)
    holding a deeply nested JSON document within the 256 KiB cap makes ``json.loads`` raise
    RecursionError, which ``JwksKeys._fetch`` does not catch (only httpx.HTTPError and
    ValueError): every request carrying a JWT is answered 500 instead of 503
    AUTH_KEYS_UNAVAILABLE."""
    odd_issuer.jwks_body = b"[" * 200_000
    async with oauth_gateway(embedded, odd_issuer) as url, httpx.AsyncClient() as client:
        token = odd_issuer.token(f"{url}/mcp")
        answer = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "AUTH_KEYS_UNAVAILABLE"


async def test_a_trickling_jwks_is_cut_at_the_fetch_deadline(
    embedded: Backend, odd_issuer: OddIssuer
):
    """Guarded: one deadline covers the whole fetch.

    Before: The JWKS fetch's 5 s timeout is httpx's per-read timeout, not a deadline: an issuer
    (or a path to it) sending one byte every second keeps the fetch, and every request waiting
    on it, going for as many seconds as the document has bytes (up to 262,144 s for the size
    cap). Here a 40-byte document at one byte per 0.5 s holds the first JWT request ~20 s."""
    odd_issuer.jwks_body = b'{"keys": []}' + b" " * 28
    odd_issuer.trickle_seconds = 0.5
    async with oauth_gateway(embedded, odd_issuer) as url, httpx.AsyncClient(timeout=60) as client:
        token = odd_issuer.token(f"{url}/mcp")
        started = time.monotonic()
        answer = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
        took = time.monotonic() - started
    assert answer.status_code in (401, 503)
    # The trickle lasts 20 s; the 5 s deadline, on a loaded machine, a few seconds more.
    assert took < 15.0, f"a request waited {took:.1f} s on a trickling JWKS (fetch timeout 5 s)"


class BombIssuer(OddIssuer):
    async def _jwks(self, _request: Request) -> Response:  # type: ignore[override]
        self.jwks_fetches += 1
        return Response(
            self.jwks_body,
            media_type="application/json",
            headers={"Content-Encoding": "zstd"},
        )


@pytest.fixture
async def bomb_issuer() -> AsyncIterator[BombIssuer]:
    import zstandard

    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    parts = [compressor.compress(b'{"keys": [')]
    for _ in range(400):
        parts.append(compressor.compress(b" " * 1_000_000))
    parts.append(compressor.flush())
    server = BombIssuer(keys=[SigningKey.rsa("k1")])
    server.jwks_body = b"".join(parts)  # ~12 KB on the wire, 400 MB decoded
    async with running_server(server.app()) as url:
        server.issuer = url
        yield server


async def test_a_compressed_jwks_is_refused_undecoded(embedded: Backend, bomb_issuer: BombIssuer):
    """Guarded: identity encoding is asked for and a compressed answer refused.

    Before: MAX_DOCUMENT_BYTES (256 KiB) is checked on the *decoded* chunks ``aiter_bytes``
    yields, but httpx decodes each network chunk whole: a 12 KB zstd (or gzip/deflate) body from
    the JWKS URL becomes one 400 MB bytes object in the gateway before the cap is looked at. The
    fetcher advertises ``Accept-Encoding: gzip, deflate, zstd`` (httpx's default) and sets no
    limit."""
    import resource

    assert len(bomb_issuer.jwks_body) < 100_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    async with oauth_gateway(embedded, bomb_issuer) as url, httpx.AsyncClient(timeout=60) as client:
        token = bomb_issuer.token(f"{url}/mcp")
        answer = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert answer.status_code in (401, 503)
    assert grown_mb < 100, f"peak memory grew {grown_mb:.0f} MB fetching a 12 KB JWKS"


async def test_jwks_entries_with_private_parts_are_skipped(
    embedded: Backend, odd_issuer: OddIssuer
):
    """Guarded: entries with private members are skipped (no usable key: 503).

    Before: An issuer (misconfigured: it serves its key file as the JWKS) publishes its keys
    *with* their private parts. ``_usable_keys`` keeps them as they are: the EC key's private
    half is now public, and the gateway accepts tokens anyone signs with it; the RSA one is kept
    as an RSAPrivateKey, and every token naming it is answered 500 (PyJWT calls ``.verify`` on
    it)."""
    import json

    from jwt.algorithms import ECAlgorithm, RSAAlgorithm

    rsa_key = SigningKey.rsa("r1")
    ec_key = SigningKey.ec("e1")
    published = [
        {**RSAAlgorithm.to_jwk(rsa_key.private, as_dict=True), "kid": "r1", "use": "sig"},
        {**ECAlgorithm.to_jwk(ec_key.private, as_dict=True), "kid": "e1", "use": "sig"},
    ]
    odd_issuer.jwks_body = json.dumps({"keys": published}).encode()
    async with oauth_gateway(embedded, odd_issuer) as url, httpx.AsyncClient() as client:
        answers = {}
        for key in (rsa_key, ec_key):
            token = odd_issuer.token(f"{url}/mcp", key=key, roles=["operator"])
            answer = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
            answers[key.kid] = (answer.status_code, answer.text[:120])
    assert answers["r1"][0] != 500, answers
    assert answers["e1"][0] in (401, 503), f"a token signed with a published private key: {answers}"
