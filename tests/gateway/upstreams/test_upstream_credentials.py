"""Users' own credentials for an HTTP upstream: each call carries its user's, the service's
stands in, nothing is refused clearly; stored encrypted, never shown, logged or audited.

The upstream is :mod:`.credential_mcp_server` (the MCP SDK's server over streamable HTTP, on a
real port); the gateway runs on both backends, with two users' bearer tokens.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import select, update

from conclave.gateway.app import create_app
from conclave.gateway.store import upstream_credentials
from conclave.gateway.upstreams.credentials import (
    CredentialCipher,
    CredentialKeyError,
    CredentialUnreadable,
    new_key_text,
    parse_keys,
)
from tests.conftest import Backend, open_platform, serve_app, test_settings
from tests.gateway.conftest import audit_rows, published
from tests.gateway.upstream_fixtures import ALLOW_LOOPBACK, catalogue
from tests.gateway.upstreams.credential_mcp_server import CredentialServer, digest
from tests.httpserver import running_server

ADA, BOB, CAROL = "ada-token-0001", "bob-token-0002", "carol-token-3"
TOKENS = "tok-ada=ada,tok-bob=bob,tok-carol=carol,tok-root=root"
SERVICE = "service-token-9999"
KEY = new_key_text()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def credential_gateway(
    backend: Backend,
    tmp_path: Path,
    accept: str = "user_or_service",
    service: bool = True,
    keys: str = KEY,
    rules: dict[str, Any] | None = None,
    **overrides: Any,
) -> AsyncIterator[tuple[httpx.AsyncClient, CredentialServer, str]]:
    """The upstream, a gateway naming it with the credential rules given, a client (no
    Authorization of its own: each request names its user) and the gateway's URL."""
    upstream = CredentialServer((rules or {}).get("header", "authorization").lower())
    async with running_server(upstream) as upstream_url:
        entry: dict[str, Any] = {
            "name": "creds",
            "transport": "http",
            "url": f"{upstream_url}/mcp",
            "timeout_seconds": 10,
            "credential": {"accept": accept, **(rules or {})},
        }
        if service:
            entry["credential"]["service"] = {"secret": "creds-service"}
        settings = test_settings(
            tool_catalogues=catalogue(tmp_path, entry),
            auth="enabled",
            api_tokens=TOKENS,
            operators="root",
            upstream_credential_keys=keys,
            upstream_secrets={"creds-service": SERVICE},
            data_dir=tmp_path / "data",
            **{**ALLOW_LOOPBACK, **overrides},
        )
        async with open_platform(backend, settings) as platform:
            app = create_app(settings, platform=platform)
            async with running_server(app) as url, httpx.AsyncClient(base_url=url) as client:
                yield client, upstream, url


async def execute(client: httpx.AsyncClient, token: str, tool: str) -> httpx.Response:
    return await client.post(
        "/execute", json={"tool": f"creds__{tool}", "args": {}}, headers=bearer(token)
    )


async def register(client: httpx.AsyncClient, token: str, credential: str) -> httpx.Response:
    return await client.put(
        "/upstreams/creds/credential", json={"credential": credential}, headers=bearer(token)
    )


async def test_each_user_calls_with_their_own_credential(backend: Backend, tmp_path: Path):
    async with credential_gateway(backend, tmp_path) as (client, upstream, url):
        assert (await register(client, "tok-ada", ADA)).status_code == 204
        assert (await register(client, "tok-bob", BOB)).status_code == 204
        answers = {
            token: await execute(client, token, "whoami")
            for token in ("tok-ada", "tok-bob", "tok-carol", "tok-ada")
        }
        listed = (await client.get("/upstreams", headers=bearer("tok-ada"))).json()
        listed_bob = (await client.get("/upstreams", headers=bearer("tok-carol"))).json()
        # The same through /mcp, driven by the MCP SDK's own client, one session per user.
        mcp_results = {}
        for token in ("tok-bob", "tok-ada"):
            async with (
                httpx2.AsyncClient(headers=bearer(token)) as http,
                Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp,
            ):
                result = await mcp.call_tool("creds__whoami", {})
                mcp_results[token] = json.loads(result.content[0].text)  # type: ignore[union-attr]
        # Discovery used the service credential.
        assert ("tools/list", f"Bearer {SERVICE}") in upstream.seen
        call = await _call_row(client, answers["tok-ada"].json()["conclave_id"])
    assert {token: answer.json()["result"] for token, answer in answers.items()} == {
        "tok-ada": digest(f"Bearer {ADA}"),
        "tok-bob": digest(f"Bearer {BOB}"),
        "tok-carol": digest(f"Bearer {SERVICE}"),
    }
    assert mcp_results == {
        "tok-bob": digest(f"Bearer {BOB}"),
        "tok-ada": digest(f"Bearer {ADA}"),
    }
    assert upstream.calls() == [
        f"Bearer {ADA}",
        f"Bearer {BOB}",
        f"Bearer {SERVICE}",
        f"Bearer {ADA}",
        f"Bearer {BOB}",
        f"Bearer {ADA}",
    ]
    rows = await audit_rows(backend)
    assert [(row.user_id, row.upstream_credential, row.status) for row in rows] == [
        ("ada", "user", "succeeded"),
        ("bob", "user", "succeeded"),
        ("carol", "service", "succeeded"),
        ("ada", "user", "succeeded"),
        ("bob", "user", "succeeded"),
        ("ada", "user", "succeeded"),
    ]
    events = await published(backend)
    assert [event.payload["upstream_credential"] for event in events][:3] == [
        "user",
        "user",
        "service",
    ]
    (shown,) = listed["upstreams"]
    assert shown["credential"] == {
        "header": "Authorization",
        "accepts": "user_or_service",
        "service": True,
        "yours": True,
    }
    assert listed_bob["upstreams"][0]["credential"]["yours"] is False
    assert ADA not in json.dumps(listed) and SERVICE not in json.dumps(listed)
    assert call["upstream_credential"] == "user"


async def _call_row(client: httpx.AsyncClient, conclave_id: str) -> dict[str, Any]:
    answer = await client.get(f"/calls/{conclave_id}", headers=bearer("tok-root"))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def test_without_a_credential_the_call_is_refused_and_audited(
    backend: Backend, tmp_path: Path
):
    async with credential_gateway(backend, tmp_path, accept="user", service=False) as (
        client,
        upstream,
        _,
    ):
        refused = await execute(client, "tok-carol", "whoami")
        assert (await register(client, "tok-ada", ADA)).status_code == 204
        allowed = await execute(client, "tok-ada", "whoami")
        # Deleted: refused again, and the session opened with it is gone.
        deleted = await client.delete("/upstreams/creds/credential", headers=bearer("tok-ada"))
        again = await execute(client, "tok-ada", "whoami")
    assert refused.status_code == 403
    assert refused.json()["code"] == "UPSTREAM_CREDENTIAL_REQUIRED"
    assert "PUT /upstreams/creds/credential" in refused.json()["detail"]
    assert allowed.status_code == 200
    assert deleted.status_code == 204
    assert again.json()["code"] == "UPSTREAM_CREDENTIAL_REQUIRED"
    assert upstream.calls() == [f"Bearer {ADA}"]  # nothing was sent without a credential
    # No service credential: the tools were listed without one.
    assert ("tools/list", None) in upstream.seen
    rows = await audit_rows(backend)
    assert [(row.user_id, row.upstream_credential, row.error_code) for row in rows] == [
        ("carol", "none", "UPSTREAM_CREDENTIAL_REQUIRED"),
        ("ada", "user", None),
        ("ada", "none", "UPSTREAM_CREDENTIAL_REQUIRED"),
    ]


async def test_the_credential_never_leaks(backend: Backend, tmp_path: Path, json_logs: Any):
    async with credential_gateway(backend, tmp_path) as (client, _upstream, _):
        assert (await register(client, "tok-ada", ADA)).status_code == 204
        error = await execute(client, "tok-ada", "leak_error")
        result = await execute(client, "tok-ada", "leak_result")
        service_error = await execute(client, "tok-carol", "leak_error")
        listed = await client.get("/upstreams", headers=bearer("tok-ada"))
        calls = [
            await _call_row(client, body.json()["conclave_id"])
            for body in (error, result, service_error)
        ]
    assert error.status_code == 422 and error.json()["code"] == "UPSTREAM_TOOL_ERROR"
    assert "Authorization: Bearer [redacted]" in error.json()["detail"]
    assert result.json()["result"] == {
        "authorization": "Bearer [redacted]",
        "echo": [{"h": "Bearer [redacted]"}],
    }
    assert "Bearer [redacted]" in service_error.json()["detail"]
    rows = await audit_rows(backend)
    events = await published(backend)
    everything = json.dumps(
        [
            error.json(),
            result.json(),
            service_error.json(),
            listed.json(),
            calls,
            [dict(row._mapping) for row in rows],
            [event.payload for event in events],
        ],
        default=str,
    )
    everything += json_logs.getvalue()
    for secret in (ADA, SERVICE):
        assert secret not in everything


async def test_a_refused_credential_fails_its_user_only(backend: Backend, tmp_path: Path):
    async with credential_gateway(backend, tmp_path) as (client, upstream, _):
        assert (await register(client, "tok-ada", "revoked-ada-0001")).status_code == 204
        assert (await register(client, "tok-bob", BOB)).status_code == 204
        refusals = [await execute(client, "tok-ada", "whoami") for _ in range(7)]
        bob = await execute(client, "tok-bob", "whoami")
        carol = await execute(client, "tok-carol", "whoami")
        (state,) = (await client.get("/upstreams", headers=bearer("tok-bob"))).json()["upstreams"]
        # Ada replaces it: her next call works.
        assert (await register(client, "tok-ada", ADA)).status_code == 204
        fixed = await execute(client, "tok-ada", "whoami")
    assert {(r.status_code, r.json()["code"]) for r in refusals} == {
        (403, "UPSTREAM_CREDENTIAL_REJECTED")
    }
    assert "revoked-ada" not in json.dumps([r.json() for r in refusals])
    assert bob.status_code == 200 and carol.status_code == 200
    assert (state["state"], state["circuit"], state["last_error"]) == ("ready", "closed", None)
    assert fixed.json()["result"] == digest(f"Bearer {ADA}")
    assert f"Bearer {BOB}" in upstream.calls()


async def test_credentials_at_rest_are_bound_to_their_user(backend: Backend, tmp_path: Path):
    async with credential_gateway(backend, tmp_path) as (client, upstream, _):
        assert (await register(client, "tok-ada", ADA)).status_code == 204
        assert (await register(client, "tok-bob", BOB)).status_code == 204
        async with backend.engine.begin() as connection:
            stored = {
                row.user_id: row for row in await connection.execute(select(upstream_credentials))
            }
            # Bob's row given Ada's ciphertext: it must not decrypt as Bob's.
            await connection.execute(
                update(upstream_credentials)
                .where(upstream_credentials.c.user_id == "bob")
                .values(ciphertext=stored["ada"].ciphertext, key_id=stored["ada"].key_id)
            )
        copied = await execute(client, "tok-bob", "whoami")
    assert set(stored) == {"ada", "bob"}
    for user, plain in (("ada", ADA), ("bob", BOB)):
        blob = bytes(stored[user].ciphertext)
        assert plain.encode() not in blob
        assert stored[user].server == "creds"
    cipher = CredentialCipher(parse_keys(KEY))
    assert cipher.decrypt("creds", "ada", stored["ada"].key_id, stored["ada"].ciphertext) == ADA
    with pytest.raises(CredentialUnreadable):
        cipher.decrypt("creds", "bob", stored["ada"].key_id, stored["ada"].ciphertext)
    assert copied.status_code == 403
    assert copied.json()["code"] == "UPSTREAM_CREDENTIAL_REQUIRED"
    assert "cannot be read" in copied.json()["detail"]
    assert f"Bearer {ADA}" not in upstream.calls()


async def test_a_wrong_key_at_start_is_a_clear_error(backend: Backend, tmp_path: Path):
    async with credential_gateway(backend, tmp_path) as (client, _upstream, _):
        assert (await register(client, "tok-ada", ADA)).status_code == 204
    entry = {"name": "creds", "transport": "http", "url": "http://127.0.0.1:9/mcp"}
    entry["credential"] = {"accept": "user"}  # type: ignore[assignment]
    settings = test_settings(
        tool_catalogues=catalogue(tmp_path, entry),
        upstream_credential_keys=new_key_text(),
        upstream_start_wait_seconds=0,
        **ALLOW_LOOPBACK,
    )
    async with open_platform(backend, settings) as platform:
        with pytest.raises(CredentialKeyError, match="GATEWAY_UPSTREAM_CREDENTIAL_KEYS") as raised:
            async with serve_app(create_app(settings, platform=platform)):
                pass
    assert KEY not in str(raised.value)
    # Rotation: the new key first, the old one still listed: the gateway starts and decrypts.
    rotated = f"{new_key_text()},{KEY}"
    async with credential_gateway(backend, tmp_path, keys=rotated) as (client, _upstream, _):
        answer = await execute(client, "tok-ada", "whoami")
    assert answer.json()["result"] == digest(f"Bearer {ADA}")


@pytest.mark.parametrize(
    ("credential", "code"),
    [
        ("token\r\nX-Injected: yes", "UPSTREAM_CREDENTIAL_INVALID"),
        ("token-with\nnewline", "UPSTREAM_CREDENTIAL_INVALID"),
        ("token\x00nul-inside", "UNSAFE_INPUT"),
        ("tok\ud800surrogate", "UNSAFE_INPUT"),
        ("short", "UPSTREAM_CREDENTIAL_INVALID"),
        ("x" * 4097, "UPSTREAM_CREDENTIAL_INVALID"),
        (" leading-space", "UPSTREAM_CREDENTIAL_INVALID"),
        ("tökén-non-ascii", "UPSTREAM_CREDENTIAL_INVALID"),
    ],
)
async def test_a_credential_a_header_cannot_carry_is_refused(
    backend: Backend, tmp_path: Path, credential: str, code: str
):
    async with credential_gateway(backend, tmp_path) as (client, _upstream, _):
        body = json.dumps({"credential": credential}).encode()
        answer = await client.put(
            "/upstreams/creds/credential",
            content=body,
            headers={**bearer("tok-ada"), "Content-Type": "application/json"},
        )
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["code"] == code
    assert credential not in answer.text
    async with backend.engine.connect() as connection:
        assert (await connection.execute(select(upstream_credentials))).all() == []


async def test_who_may_touch_which_credential(backend: Backend, tmp_path: Path):
    async with credential_gateway(backend, tmp_path) as (client, _upstream, _):
        assert (await register(client, "tok-ada", ADA)).status_code == 204
        unknown = await client.put(
            "/upstreams/nope/credential", json={"credential": ADA}, headers=bearer("tok-ada")
        )
        # Bob cannot delete Ada's; the route for another user's is for operators.
        by_bob = await client.delete("/upstreams/creds/credentials/ada", headers=bearer("tok-bob"))
        stray = await client.put(
            "/upstreams/creds/credential",
            json={"credential": BOB, "user_id": "ada"},
            headers=bearer("tok-bob"),
        )
        still = await execute(client, "tok-ada", "whoami")
        by_root = await client.delete(
            "/upstreams/creds/credentials/ada", headers=bearer("tok-root")
        )
        gone = await execute(client, "tok-ada", "whoami")
        anonymous = await client.put("/upstreams/creds/credential", json={"credential": ADA})
    assert (unknown.status_code, unknown.json()["code"]) == (404, "UPSTREAM_NOT_FOUND")
    assert (by_bob.status_code, by_bob.json()["code"]) == (403, "FORBIDDEN")
    assert stray.status_code == 422  # no user id in a body
    assert still.json()["result"] == digest(f"Bearer {ADA}")
    assert by_root.status_code == 204
    assert gone.status_code == 200  # the service credential stands in
    assert gone.json()["result"] == digest(f"Bearer {SERVICE}")
    assert anonymous.status_code == 401


async def test_an_upstream_without_user_credentials_takes_none(backend: Backend, tmp_path: Path):
    async with credential_gateway(backend, tmp_path, accept="service") as (client, upstream, _):
        refused = await register(client, "tok-ada", ADA)
        answer = await execute(client, "tok-ada", "whoami")
    assert (refused.status_code, refused.json()["code"]) == (
        409,
        "UPSTREAM_CREDENTIALS_NOT_ACCEPTED",
    )
    assert answer.json()["result"] == digest(f"Bearer {SERVICE}")
    assert upstream.calls() == [f"Bearer {SERVICE}"]
    rows = await audit_rows(backend)
    assert [row.upstream_credential for row in rows] == ["service"]
