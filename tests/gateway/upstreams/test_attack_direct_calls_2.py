"""The outside attack on the direct ``tools/call`` (``gateway/upstreams/direct_calls.py``),
continued from :mod:`.test_attack_direct_calls`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import aiohttp

from conclave.platform.egress import EgressPolicy
from conclave.platform.egress_aiohttp import guarded_aiohttp_session
from tests.conftest import Backend
from tests.gateway.conftest import audit_rows, published
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.direct_hostile import Send, answer, hostile_app, hostile_upstream, rpc
from tests.gateway.upstreams.test_attack_direct_calls import entry, ping
from tests.httpserver import running_server

# -- Finding 11: the answer to `initialize` is taken from a redirect the SDK followed ------------


async def test_an_endpoint_behind_a_trailing_slash_redirect_keeps_answering(
    backend: Backend, tmp_path: Path
):
    """The SDK follows a same-origin 307/308 (``stream_within_origin``: "a trailing-slash
    normalisation"), so ``/mcp`` → ``/mcp/`` is a working upstream URL. ``keep_first`` keeps the
    *first* HTTP answer the client sees — the redirect, not the answer to ``initialize`` — and
    ``_direct_calls`` decides on its content type and takes its (absent) ``Mcp-Session-Id``.
    A server whose redirects carry a JSON body (``{"moved": ...}``, as API gateways word them)
    gets direct calls to the configured URL, without the session id: each answers the 307,
    "redirect (307) not followed", 502 ``UPSTREAM_FAILED`` — every call of a server the SDK
    path served. (When the redirect has no content type, as Starlette's, the direct path is
    silently never used.)"""

    async def on_call(_message: dict[str, Any], _scope: Any, _send: Send) -> bool:
        return False  # the SDK's server answers

    inner = hostile_app(on_call, stateless=False)

    async def app(scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            location = (b"location", b"/mcp/")
            await answer(send, 307, b'{"moved": "/mcp/"}', "application/json", [location])
            return
        if scope["type"] == "http" and scope["path"] == "/mcp/":
            scope = {**scope, "path": "/mcp", "raw_path": b"/mcp"}
        await inner(scope, receive, send)

    async with (
        running_server(app, timeout_graceful_shutdown=1) as base,
        gateway(backend, tmp_path, entry(f"{base}/mcp")) as client,
    ):
        answered = await ping(client)
    assert answered.status_code == 200, answered.text


# -- Finding 12: a credential echoed in the content type reaches the caller, lowercased ---------


async def test_a_credential_echoed_in_the_content_type_is_never_shown(
    backend: Backend, tmp_path: Path
):
    """The entry's headers are scrubbed from what the upstream answers ("an upstream that
    echoes its request headers cannot write a token into the audit trail", docs/gateway.md).
    ``_answer`` lowercases the content type and puts it in its error, "Unexpected content
    type: …"; the scrubber matches the credential as configured, case and all, so the
    lowercased credential passes: in the problem the caller gets, in the audit row, in the
    event. (A hex or lowercase token is then shown as is; any other, up to its case. The SDK's
    transport words it the same way, so calls with progress leak it too.)"""
    secret = "Sk-Live-0123456789-AbCdEf"

    async def on_call(_message: dict[str, Any], scope: dict[str, Any], send: Send) -> bool:
        echoed = dict(scope["headers"]).get(b"x-api-key", b"")
        await answer(send, 200, b"{}", "text/x-debug; key=" + echoed.decode())
        return True

    config = entry("", headers={"X-Api-Key": secret})
    async with hostile_upstream(on_call) as url:
        config["url"] = url
        async with gateway(backend, tmp_path, config) as client:
            answered = await ping(client)
    rows = await audit_rows(backend)
    events = await published(backend)
    assert answered.status_code == 502, answered.text
    for seen in (answered.text, repr(rows), repr([e.payload for e in events])):
        assert secret.lower() not in seen.lower(), seen


# -- Finding 13: the aiohttp egress guard does not see addresses written as addresses -----------


async def test_the_aiohttp_egress_guard_refuses_a_literal_address() -> None:
    """``guarded_aiohttp_session`` promises "every connection the session opens goes through
    ``GuardedResolver``", but aiohttp's ``TCPConnector`` never asks a resolver for a host that
    is already an IP address: ``http://127.0.0.1:…/`` (or ``http://169.254.169.254/``, the
    cloud metadata service) is connected to whatever the policy says. Today the direct calls
    reach only the URL the SDK's (guarded) client already connected to; any other use of this
    helper — a future URL taken from an answer, another feature — is an SSRF the policy does not
    stop."""
    hits: list[str] = []

    async def app(scope: dict[str, Any], _receive: Any, send: Send) -> None:
        if scope["type"] == "http":
            hits.append(scope["path"])
            await answer(send, 200, b"{}")

    policy = EgressPolicy.build("only.example")  # loopback not allowed
    session = guarded_aiohttp_session(policy, connect_timeout=2, max_connections=1)
    try:
        async with running_server(app, timeout_graceful_shutdown=1) as base:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(f"{base}/metadata", allow_redirects=False):
                    pass
    finally:
        await session.close()
    assert hits == [], "the guarded session connected to a loopback address the policy refuses"


# -- Finding 14: an upstream's own JSON-RPC error -32000 is taken for a broken connection --------


async def test_an_upstreams_server_error_is_not_a_lost_connection(backend: Backend, tmp_path: Path):
    """JSON-RPC leaves -32000…-32099 to servers ("Server error"; -32000 is the usual generic
    one). The SDK uses -32000 for its own ``CONNECTION_CLOSED``, and ``DirectCalls.call``
    raises the upstream's error with its code unchanged, so an upstream answering -32000 is
    worded "The connection to upstream 'h' ended during the call" (502
    ``UPSTREAM_CONNECTION_LOST``) and counted as a transport failure: five calls whose
    arguments make the tool fail that way (one caller's) open the circuit, and every tool of
    the upstream answers 503 to everyone for 30 s. (The SDK's session passes the code on
    alike; the direct path, which tells what it read from what it synthesised, can do better.)"""

    async def on_call(message: dict[str, Any], _scope: Any, send: Send) -> bool:
        if message["params"]["name"] != "sleep":
            return False
        error = {"code": -32000, "message": "Server error: bad argument"}
        await answer(send, 200, rpc(message["id"], error=error))
        return True

    async with hostile_upstream(on_call) as url, gateway(backend, tmp_path, entry(url)) as client:
        codes = []
        for _ in range(5):
            failed = await client.post("/execute", json={"tool": "h__sleep", "args": {}})
            codes.append(failed.json()["code"])
        other = await ping(client, "someone-else")
    assert other.status_code == 200, (other.text, codes)
    assert codes == ["UPSTREAM_FAILED"] * 5, codes
