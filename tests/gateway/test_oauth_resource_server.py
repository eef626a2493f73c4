"""The gateway as an OAuth 2.1 resource server: protected resource metadata, the challenge of
every 401, JWTs checked against the issuer's JWKS (served by a local authorization server over a
real socket, fetched through the egress policy), key rotation, an issuer that is down, and the
MCP Python SDK's own OAuth client completing a flow against the gateway's ``/mcp``."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
from cryptography.hazmat.primitives import serialization
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from conclave.gateway.app import create_app
from conclave.gateway.tools import Tool
from tests.conftest import Backend, eventually, open_platform, test_settings
from tests.gateway.conftest import audit_rows
from tests.gateway.oauth_server import AuthorizationServer, SigningKey
from tests.httpserver import free_port, running_server

ECHO = {"tool": "echo", "args": {"message": "hi"}}
ACCEPT = "application/json, text/event-stream"
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
JSON_RPC = {"jsonrpc", "id", "error"}  # the members /mcp adds to its problems


@pytest.fixture
def embedded(sqlite_engine: Any, memory_bus: Any) -> Backend:
    """The embedded backend alone: what is judged here happens before any store is touched."""
    return Backend("embedded", sqlite_engine, memory_bus)


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    """The authorization server on a loopback socket, signing with an RSA key ``k1``."""
    server = AuthorizationServer(keys=[SigningKey.rsa("k1")])
    async with running_server(server.app()) as url:
        server.issuer = url
        yield server


@asynccontextmanager
async def oauth_gateway(
    backend: Backend,
    issuer: AuthorizationServer,
    tools: tuple[Tool, ...] = (),
    **overrides: Any,
) -> AsyncIterator[str]:
    """The gateway on a real socket trusting ``issuer``'s JWKS; yields its base URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    values: dict[str, Any] = {
        "auth": "enabled",
        "jwt_jwks_url": f"{issuer.issuer}/jwks",
        "jwt_issuer": issuer.issuer,
        "resource_url": f"{base}/mcp",
        # The issuer listens on loopback, which the egress policy refuses unless allowed.
        "egress_allow_hosts": "127.0.0.1",
        **overrides,
    }
    settings = test_settings(**values)
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=tools)
        async with running_server(app, port=port) as url:
            yield url


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def hand_signed(header: dict[str, Any], claims: dict[str, Any], signature: bytes) -> str:
    """A JWT assembled by hand, for the forgeries PyJWT refuses to produce."""

    def part(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    signing_input = f"{part(json.dumps(header).encode())}.{part(json.dumps(claims).encode())}"
    return f"{signing_input}.{part(signature)}"


async def test_the_metadata_document_names_the_resource_and_its_issuer(
    embedded: Backend, issuer: AuthorizationServer
):
    async with (
        oauth_gateway(embedded, issuer, oauth_scopes="tools") as url,
        httpx.AsyncClient() as client,
    ):
        suffixed = await client.get(f"{url}/.well-known/oauth-protected-resource/mcp")
        root = await client.get(f"{url}/.well-known/oauth-protected-resource")
    assert suffixed.status_code == root.status_code == 200
    assert (
        suffixed.json()
        == root.json()
        == {
            "resource": f"{url}/mcp",
            "authorization_servers": [issuer.issuer],
            "bearer_methods_supported": ["header"],
            "scopes_supported": ["tools"],
            "resource_name": "Conclave tool gateway",
        }
    )
    assert issuer.jwks_fetches == 0  # serving the metadata needs no key


async def test_every_401_names_the_metadata_and_says_when_a_token_was_refused(
    embedded: Backend, issuer: AuthorizationServer
):
    async with oauth_gateway(embedded, issuer) as url, httpx.AsyncClient() as client:
        answers = {
            "execute": await client.post(f"{url}/execute", json=ECHO),
            "tools": await client.get(f"{url}/tools"),
            "mcp": await client.post(f"{url}/mcp", json=LIST_TOOLS, headers={"Accept": ACCEPT}),
            "mcp refused": await client.post(
                f"{url}/mcp",
                json=LIST_TOOLS,
                headers={"Accept": ACCEPT, **bearer(issuer.token("https://elsewhere"))},
            ),
            "execute refused": await client.post(
                f"{url}/execute", json=ECHO, headers=bearer("not-a-token")
            ),
        }
    metadata = f'resource_metadata="{url}/.well-known/oauth-protected-resource/mcp"'
    for label, response in answers.items():
        assert response.status_code == 401, label
        # At /mcp, for a client accepting no problem+json, the problem is a JSON-RPC error too.
        media_type = "application/json" if label.startswith("mcp") else "application/problem+json"
        assert response.headers["content-type"] == media_type, label
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith(f'Bearer realm="conclave", {metadata}'), label
        assert ('error="invalid_token"' in challenge) == label.endswith("refused"), label
    assert answers["mcp refused"].json()["code"] == "INVALID_TOKEN"
    assert answers["mcp refused"].json()["error"]["data"]["code"] == "INVALID_TOKEN"


async def test_a_token_of_the_issuer_for_the_gateway_is_accepted(
    embedded: Backend, issuer: AuthorizationServer
):
    async with oauth_gateway(embedded, issuer) as url, httpx.AsyncClient() as client:
        token = issuer.token(f"{url}/mcp", sub="ada")
        executed = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
        identity = await client.get(f"{url}/whoami", headers=bearer(token))
        listed = await client.post(
            f"{url}/mcp", json=LIST_TOOLS, headers={"Accept": ACCEPT, **bearer(token)}
        )
    assert executed.status_code == 200, executed.text
    assert executed.json()["result"] == {"message": "hi"}
    assert identity.json() == {"user_id": "ada", "roles": [], "method": "jwt", "on_behalf_of": None}
    assert "echo" in {tool["name"] for tool in listed.json()["result"]["tools"]}
    assert [row.user_id for row in await audit_rows(embedded)] == ["ada"]
    assert issuer.jwks_fetches == 1  # fetched once, then served from the cache


async def test_tokens_that_are_not_for_the_gateway_or_forged_are_refused(
    embedded: Backend, issuer: AuthorizationServer
):
    stranger = SigningKey.rsa("k1")  # claims the issuer's key id, signs with another key
    public_pem = (
        issuer.keys[0]
        .private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    async with oauth_gateway(embedded, issuer) as url, httpx.AsyncClient() as client:
        resource = f"{url}/mcp"
        now = int(time.time())
        claims = {"iss": issuer.issuer, "sub": "ada", "aud": resource, "exp": now + 60}
        hs256_header = {"alg": "HS256", "typ": "JWT", "kid": "k1"}
        unsigned = hand_signed(hs256_header, claims, b"")
        hs256_input = unsigned.rsplit(".", 1)[0].encode()
        confused = hand_signed(
            hs256_header, claims, hmac.new(public_pem, hs256_input, hashlib.sha256).digest()
        )
        forged = {
            "another audience": (issuer.token("https://other.example/mcp"), "INVALID_TOKEN"),
            "no audience": (issuer.token(None), "INVALID_TOKEN"),
            "another issuer": (issuer.token(resource, iss="https://evil.example"), "INVALID_TOKEN"),
            "expired": (issuer.token(resource, exp=now - 120, iat=now - 400), "TOKEN_EXPIRED"),
            "unknown key": (issuer.token(resource, key=SigningKey.rsa("k9")), "INVALID_TOKEN"),
            "wrong key, known kid": (issuer.token(resource, key=stranger), "INVALID_TOKEN"),
            "HS256 with the public key": (confused, "INVALID_TOKEN"),
            "alg none": (
                hand_signed({"alg": "none", "typ": "JWT", "kid": "k1"}, claims, b""),
                "INVALID_TOKEN",
            ),
        }
        answers = {
            label: await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
            for label, (token, _code) in forged.items()
        }
    for label, (_token, code) in forged.items():
        assert answers[label].status_code == 401, label
        assert answers[label].json()["code"] == code, label
    assert await audit_rows(embedded) == []


async def test_a_rotated_key_is_accepted_after_a_refetch_and_a_retired_one_expires(
    embedded: Backend, issuer: AuthorizationServer
):
    settings = {"jwt_jwks_min_refresh_seconds": 0, "jwt_jwks_cache_seconds": 0.5}
    async with oauth_gateway(embedded, issuer, **settings) as url, httpx.AsyncClient() as client:
        resource, old = f"{url}/mcp", issuer.keys[0]

        async def status(key: SigningKey) -> int:
            token = issuer.token(resource, key=key)
            return (
                await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
            ).status_code

        assert await status(old) == 200
        # The issuer publishes new keys and signs with them at once: the unknown kid is fetched.
        ec_key, ed_key = SigningKey.ec("k2"), SigningKey.ed25519("k3")
        issuer.keys = [old, ec_key, ed_key]
        assert await status(ec_key) == 200
        assert await status(ed_key) == 200
        assert await status(old) == 200
        fetches = issuer.jwks_fetches
        # The old key is retired: once the cached set is older than its time to live, a request
        # refreshes it in the background, and the old key goes.
        issuer.keys = [ec_key, ed_key]
        await asyncio.sleep(0.6)

        async def old_key_refused() -> bool:
            return await status(old) == 401

        await eventually(old_key_refused)
        assert await status(ec_key) == 200
        assert issuer.jwks_fetches > fetches


async def test_an_issuer_that_is_down_leaves_the_last_good_keys_in_use(
    embedded: Backend, issuer: AuthorizationServer
):
    settings = {"jwt_jwks_min_refresh_seconds": 0, "jwt_jwks_cache_seconds": 0.2}
    async with oauth_gateway(embedded, issuer, **settings) as url, httpx.AsyncClient() as client:
        token = issuer.token(f"{url}/mcp")
        assert (await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))).is_success
        issuer.jwks_up = False
        await asyncio.sleep(0.3)  # the cached set is stale: the next request has it refetched
        fetches = issuer.jwks_fetches
        again = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
        assert again.status_code == 200

        async def tried() -> bool:
            return issuer.jwks_fetches > fetches

        await eventually(tried)
        later = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
        assert later.status_code == 200  # the failed fetch kept the keys it had


async def test_a_slow_issuer_delays_no_request_whose_key_is_cached(
    embedded: Backend, issuer: AuthorizationServer
):
    settings = {"jwt_jwks_min_refresh_seconds": 0, "jwt_jwks_cache_seconds": 0.2}
    async with oauth_gateway(embedded, issuer, **settings) as url, httpx.AsyncClient() as client:
        token = issuer.token(f"{url}/mcp")
        assert (await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))).is_success
        issuer.jwks_held = asyncio.Event()
        await asyncio.sleep(0.3)
        # The set is stale and the issuer does not answer: the request is served from the cache
        # while the refresh waits in the background.
        answered = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
        assert answered.status_code == 200

        async def fetch_pending() -> bool:
            return issuer.jwks_fetches == 2

        await eventually(fetch_pending)
        meanwhile = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
        assert meanwhile.status_code == 200
        assert issuer.jwks_fetches == 2  # one refresh in flight, not one per request
        issuer.jwks_held.set()


async def test_without_any_key_set_jwts_get_a_clear_503(
    embedded: Backend, issuer: AuthorizationServer
):
    issuer.jwks_up = False
    async with oauth_gateway(embedded, issuer) as url, httpx.AsyncClient() as client:
        token = issuer.token(f"{url}/mcp")
        execute = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
        mcp = await client.post(
            f"{url}/mcp", json=LIST_TOOLS, headers={"Accept": ACCEPT, **bearer(token)}
        )
        whoami = await client.get(f"{url}/whoami", headers=bearer(token))
    for response in (execute, mcp, whoami):
        assert response.status_code == 503
        assert response.json()["code"] == "AUTH_KEYS_UNAVAILABLE"
    assert execute.headers["content-type"] == whoami.headers["content-type"]
    assert execute.headers["content-type"] == "application/problem+json"
    assert mcp.headers["content-type"] == "application/json"  # an MCP client's Accept
    assert mcp.json()["error"] == {
        "code": -32603,
        "message": mcp.json()["detail"],
        "data": {key: value for key, value in mcp.json().items() if key not in JSON_RPC},
    }
    assert await audit_rows(embedded) == []


async def test_the_jwks_is_fetched_through_the_egress_policy(
    embedded: Backend, issuer: AuthorizationServer
):
    # Without the allow-list entry, a loopback issuer is what server-side request forgery looks
    # like: the gateway does not connect, and says it has no keys.
    async with (
        oauth_gateway(embedded, issuer, egress_allow_hosts="") as url,
        httpx.AsyncClient() as client,
    ):
        token = issuer.token(f"{url}/mcp")
        refused = await client.post(f"{url}/execute", json=ECHO, headers=bearer(token))
    assert refused.status_code == 503
    assert refused.json()["code"] == "AUTH_KEYS_UNAVAILABLE"
    assert issuer.jwks_fetches == 0


async def test_a_flood_of_unknown_key_ids_does_not_fetch_per_request(
    embedded: Backend, issuer: AuthorizationServer
):
    async with oauth_gateway(embedded, issuer) as url, httpx.AsyncClient() as client:
        resource = f"{url}/mcp"
        good = issuer.token(resource)
        # Concurrent first requests wait for one fetch.
        first = await asyncio.gather(
            *(client.post(f"{url}/execute", json=ECHO, headers=bearer(good)) for _ in range(10))
        )
        assert {response.status_code for response in first} == {200}
        assert issuer.jwks_fetches == 1
        flood = [
            issuer.token(resource, key=SigningKey(secrets.token_hex(8), "RS256", key.private))
            for key in issuer.keys * 30
        ]
        answers = [
            await client.post(f"{url}/execute", json=ECHO, headers=bearer(token)) for token in flood
        ]
    assert {response.status_code for response in answers} == {401}
    assert issuer.jwks_fetches == 1  # within the minimum interval: no fetch at all


@pytest.mark.parametrize(
    "settings",
    [
        {"resource_url": "ftp://gateway.example/mcp"},
        {"resource_url": "/mcp"},
        {"resource_url": 'https://gateway.example/mcp"'},
        {"resource_url": "https://gateway.example/mcp", "jwt_audience": "https://other.example"},
        {"authorization_servers": "https://as.example,as.example"},
        {"oauth_scopes": 'tools,read"write'},
        {"jwt_jwks_url": "file:///etc/keys.json"},
    ],
)
def test_settings_refuse_what_cannot_be_advertised_or_fetched(settings: dict[str, str]):
    with pytest.raises(ValueError):
        test_settings(**settings)


def test_the_resource_url_is_the_jwt_audience():
    settings = test_settings(resource_url="https://gateway.example/mcp")
    assert settings.jwt_audience == "https://gateway.example/mcp"


class MemoryTokens:
    """The SDK's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def test_the_mcp_sdk_oauth_client_discovers_authorizes_and_calls_a_tool(
    backend: Backend, issuer: AuthorizationServer
):
    redirect_uri = "http://127.0.0.1:9/callback"  # never opened: the "browser" reads the redirect
    redirects: list[str] = []

    async def open_browser(authorization_url: str) -> None:
        # What a user's browser does: the authorization server approves and redirects back.
        async with httpx.AsyncClient() as browser:
            answer = await browser.get(authorization_url)
        assert answer.status_code == 302, answer.text
        redirects.append(answer.headers["location"])

    async def receive_callback() -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(redirects[-1]).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query["state"][0])

    storage = MemoryTokens()
    async with oauth_gateway(backend, issuer) as url:
        provider = OAuthClientProvider(
            server_url=f"{url}/mcp",
            client_metadata=OAuthClientMetadata(
                client_name="conclave-test", redirect_uris=[redirect_uri]
            ),
            storage=storage,
            redirect_handler=open_browser,
            callback_handler=receive_callback,
        )
        async with (
            httpx2.AsyncClient(auth=provider) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = await session.list_tools()
            called = await session.call_tool("echo", {"message": "through OAuth"})
    assert "echo" in {tool.name for tool in tools.tools}
    assert not called.is_error
    assert called.structured_content == {"message": "through OAuth"}
    # The client asked the issuer for a token bound to the gateway's resource URL (RFC 8707),
    # which it learnt from the metadata the 401 pointed at.
    assert issuer.tokens_issued == [{"resource": f"{url}/mcp", "scope": None}]
    assert storage.tokens is not None and storage.client is not None
    rows = await audit_rows(backend)
    assert [(row.tool_name, row.user_id) for row in rows] == [("echo", "ada")]
