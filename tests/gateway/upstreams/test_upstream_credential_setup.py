"""How upstream credentials are configured: catalogue rules, keys at start, another header."""

from __future__ import annotations

import functools
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from conclave.gateway.app import create_app
from conclave.gateway.upstreams.config import McpServerSpec
from conclave.gateway.upstreams.credentials import CredentialKeyError, parse_keys
from tests.conftest import Backend, eventually, open_platform, serve_app, test_settings
from tests.gateway.conftest import audit_rows
from tests.gateway.upstream_fixtures import catalogue
from tests.gateway.upstreams.credential_mcp_server import digest
from tests.gateway.upstreams.test_upstream_credentials import (
    ADA,
    BOB,
    SERVICE,
    bearer,
    credential_gateway,
    execute,
    register,
)

HTTP = {"name": "docs", "transport": "http", "url": "https://mcp.example.org/mcp"}


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        (
            {"name": "t", "transport": "stdio", "command": "x", "credential": {}},
            "'credential' is for http servers",
        ),
        ({**HTTP, "credential": {"header": "Host"}}, "not a header name one may set"),
        ({**HTTP, "credential": {"header": "X-Key\r\nA: b"}}, "not a header name one may set"),
        ({**HTTP, "credential": {"scheme": "Bearer x"}}, "scheme"),
        ({**HTTP, "credential": {"accept": "service"}}, "needs credential.service"),
        ({**HTTP, "credential": {"service": "the-token-itself"}}, "service"),
        (
            {**HTTP, "headers": {"authorization": "Bearer x"}, "credential": {}},
            "is set in 'headers' too",
        ),
    ],
)
def test_catalogue_rules_refused_when_loaded(entry: dict[str, Any], words: str):
    with pytest.raises(ValidationError, match=words):
        McpServerSpec.model_validate(entry)


def test_malformed_keys_are_named_by_position_not_text():
    with pytest.raises(CredentialKeyError, match="key 2 is not 32 bytes") as raised:
        parse_keys("A" * 43 + ", not-a-key-at-all")
    assert "not-a-key-at-all" not in str(raised.value)


async def test_keys_at_start(backend: Backend, tmp_path: Path):
    entry = {**HTTP, "credential": {"accept": "user_or_service"}}
    settings = test_settings(
        tool_catalogues=catalogue(tmp_path, entry),
        data_dir=tmp_path / "data",
        upstream_start_wait_seconds=0,
    )
    async with open_platform(backend, settings) as platform:
        if backend.name == "embedded":
            async with serve_app(create_app(settings, platform=platform)):
                pass
            key_file = settings.upstream_credential_key_file()
            assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
            assert len(parse_keys(key_file.read_text())) == 1
        else:
            with pytest.raises(ValueError, match="set GATEWAY_UPSTREAM_CREDENTIAL_KEYS"):
                async with serve_app(create_app(settings, platform=platform)):
                    pass
    # A service credential named in the catalogue must exist in the settings.
    entry = {**HTTP, "credential": {"accept": "service", "service": {"secret": "missing"}}}
    settings = test_settings(
        tool_catalogues=catalogue(tmp_path, entry), upstream_start_wait_seconds=0
    )
    async with open_platform(backend, settings) as platform:
        with pytest.raises(ValueError, match="'missing', which is not in GATEWAY_UPSTREAM_SECRETS"):
            async with serve_app(create_app(settings, platform=platform)):
                pass


async def test_an_api_key_header_without_a_scheme(backend: Backend, tmp_path: Path):
    rules = {"header": "X-Api-Key", "scheme": ""}
    async with credential_gateway(backend, tmp_path, accept="user", rules=rules) as (
        client,
        upstream,
        _,
    ):
        assert (await register(client, "tok-ada", ADA)).status_code == 204
        answer = await execute(client, "tok-ada", "whoami")
        listed = await client.get("/upstreams", headers={"Authorization": "Bearer tok-ada"})
    assert answer.json()["result"] == digest(ADA)
    assert upstream.calls() == [ADA]
    # accept: user — the service credential lists the tools, never calls.
    assert upstream.seen[0] == ("tools/list", "service-token-9999")
    assert listed.json()["upstreams"][0]["credential"]["header"] == "X-Api-Key"
    assert ADA not in json.dumps(listed.json())
    assert [row.upstream_credential for row in await audit_rows(backend)] == ["user"]


async def test_user_sessions_are_bounded_and_closed_when_idle(backend: Backend, tmp_path: Path):
    async with credential_gateway(
        backend, tmp_path, upstream_max_user_sessions=1, upstream_user_session_idle_seconds=1
    ) as (client, upstream, _):
        assert (await register(client, "tok-ada", ADA)).status_code == 204
        assert (await register(client, "tok-bob", BOB)).status_code == 204
        answers = [
            await execute(client, token, "whoami") for token in ("tok-ada", "tok-ada", "tok-bob")
        ]
        # One session per user at most here: Bob's pushed Ada's out (closed by the gateway).

        async def closed(header: str) -> bool:
            return header in upstream.closed

        await eventually(functools.partial(closed, f"Bearer {ADA}"))
        # Bob's is closed once idle, without any call.
        await eventually(functools.partial(closed, f"Bearer {BOB}"), timeout=60)
        again = await execute(client, "tok-bob", "whoami")
    assert [answer.status_code for answer in (*answers, again)] == [200] * 4
    user_sessions = [header for header in upstream.opened if header != f"Bearer {SERVICE}"]
    assert user_sessions == [f"Bearer {ADA}", f"Bearer {BOB}", f"Bearer {BOB}"]


async def test_a_session_that_cannot_open_fails_the_call_without_the_credential(
    backend: Backend, tmp_path: Path, json_logs: Any
):
    broken = "broken-ada-0001"
    async with credential_gateway(backend, tmp_path) as (client, upstream, _):
        assert (await register(client, "tok-ada", broken)).status_code == 204
        answer = await execute(client, "tok-ada", "whoami")
        (state,) = (await client.get("/upstreams", headers=bearer("tok-ada"))).json()["upstreams"]
    assert (answer.status_code, answer.json()["code"]) == (503, "UPSTREAM_UNAVAILABLE")
    assert broken not in answer.text and broken not in json_logs.getvalue()
    assert (state["state"], state["circuit"], state["last_error"]) == ("ready", "closed", None)
    assert upstream.calls() == []
    (row,) = await audit_rows(backend)
    assert (row.upstream_credential, row.error_code) == ("user", "UPSTREAM_UNAVAILABLE")
    assert broken not in (row.error_message or "")
