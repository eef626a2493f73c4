"""A call waiting for a free connection to its upstream is not a failure of the upstream.

The gateway holds at most ``GATEWAY_UPSTREAM_MAX_CONNECTIONS`` connections to one upstream per
session (100 by default; 4 here, two of them for calls, so that a handful of calls fill them).
Before, the direct path's wait for one of them was bounded by ``connect_timeout_seconds``
(aiohttp's ``connect`` time-out covers the pool's wait as well as the connect): one user's slow,
legitimate calls made the next ones fail 502 ``UPSTREAM_CONNECTION_LOST`` after 10 s, each a
breaker failure, and five paused the healthy upstream for every user. On the SDK's path the pool's
wait ended in ``PoolTimeout``, which the SDK's transport does not catch: it ended the whole
connection, and the upstream restarted (503 for every user meanwhile). The wait is now bounded by
the call's own time-out, which is neutral (docs/gateway.md). A real failure to connect still
counts."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from conclave.platform.egress import EgressPolicy
from conclave.platform.egress_aiohttp import guarded_aiohttp_session
from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.json_mcp_server import JsonServer
from tests.httpserver import running_server


@asynccontextmanager
async def small_pool_upstream(
    backend: Backend, tmp_path: Path, server: JsonServer, connections: int, **entry: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, contextlib.AsyncExitStack]]:
    """A gateway holding at most ``connections`` to ``server``; the stack running the server
    (closed, it stops the upstream under the gateway)."""
    async with contextlib.AsyncExitStack() as upstream:
        base = await upstream.enter_async_context(running_server(server))
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp", **entry}
        async with gateway(backend, tmp_path, spec, upstream_max_connections=connections) as client:
            await eventually(lambda: _ready(client))
            yield client, upstream


async def _ready(client: httpx.AsyncClient) -> bool:
    return (await _status(client))["state"] == "ready"


async def _status(client: httpx.AsyncClient) -> dict[str, Any]:
    return dict((await client.get("/upstreams")).json()["upstreams"][0])


async def _call(client: httpx.AsyncClient, tool: str, **args: Any) -> httpx.Response:
    return await client.post("/execute", json={"tool": f"json__{tool}", "args": args})


def _seen(answer: httpx.Response) -> tuple[int, Any]:
    body = answer.json()
    return answer.status_code, body.get("result") or body.get("code")


async def test_calls_waiting_for_a_connection_are_served_and_do_not_open_the_circuit(
    backend: Backend, tmp_path: Path
):
    # Direct path: eight slow calls on the two connections calls may take run two at a time,
    # four rounds; six wait
    # longer than the connect time-out for a connection, all within the call's time-out.
    server = JsonServer()
    async with small_pool_upstream(
        backend, tmp_path, server, 4, connect_timeout_seconds=0.3, timeout_seconds=20
    ) as (client, _):
        restarts = (await _status(client))["restarts"]
        slow = await asyncio.gather(*[_call(client, "slow", seconds=0.6) for _ in range(8)])
        status = await _status(client)
        other = await _call(client, "echo", message="another user's call")
    # Observed before: 2 x (200, "slept"), then 6 x (502, "UPSTREAM_CONNECTION_LOST") after
    # 0.3 s; the circuit open and the other call (503, "UPSTREAM_UNAVAILABLE").
    assert [_seen(answer) for answer in slow] == [(200, "slept")] * 8
    assert (status["circuit"], status["state"], status["restarts"]) == ("closed", "ready", restarts)
    assert _seen(other) == (200, "another user's call")
    assert sorted(call[1] for call in server.calls()) == sorted(f"direct-{n}" for n in range(1, 10))


async def test_a_wait_past_the_calls_time_out_is_that_time_out(backend: Backend, tmp_path: Path):
    # Direct path: two calls hold both connections past the time-out; the four waiting for one
    # end in the time-out as well (a neutral one).
    server = JsonServer()
    async with small_pool_upstream(
        backend, tmp_path, server, 4, connect_timeout_seconds=0.3, timeout_seconds=1.5
    ) as (client, _):
        slow = await asyncio.gather(*[_call(client, "slow", seconds=30) for _ in range(6)])
        status = await _status(client)
        other = await _call(client, "echo", message="another user's call")
    assert [_seen(answer) for answer in slow] == [(504, "TOOL_TIMEOUT")] * 6
    assert (status["circuit"], status["state"]) == ("closed", "ready")
    assert _seen(other) == (200, "another user's call")


async def test_the_sdk_paths_wait_for_a_connection_does_not_end_the_connection(
    backend: Backend, tmp_path: Path
):
    # The SDK's path (an upstream answering event streams): two of the four connections are kept
    # for the session's event stream and listings, two carry calls; six calls past the time-out.
    server = JsonServer(json_response=False)
    async with small_pool_upstream(
        backend, tmp_path, server, 4, connect_timeout_seconds=2, timeout_seconds=1.5
    ) as (client, _):
        restarts = (await _status(client))["restarts"]
        slow = await asyncio.gather(*[_call(client, "slow", seconds=30) for _ in range(6)])
        status = await _status(client)
        other = await _call(client, "echo", message="another user's call")
        after = await _status(client)
    # Observed before: the pool's PoolTimeout ended the connection ("restarting", last_error
    # "PoolTimeout"), and the other call answered (503, "UPSTREAM_UNAVAILABLE").
    assert [_seen(answer) for answer in slow] == [(504, "TOOL_TIMEOUT")] * 6
    assert _seen(other) == (200, "another user's call"), after
    for seen in (status, after):
        assert (seen["circuit"], seen["state"]) == ("closed", "ready"), seen
        assert seen["restarts"] == restarts, seen


async def test_an_upstream_that_refuses_connections_still_opens_the_circuit(
    backend: Backend, tmp_path: Path
):
    server = JsonServer()
    async with small_pool_upstream(
        backend, tmp_path, server, 4, connect_timeout_seconds=0.3, timeout_seconds=20
    ) as (client, upstream):
        served = await _call(client, "echo", message="before")
        await upstream.aclose()  # the upstream goes away: its port refuses connections
        refused = [await _call(client, "echo", message="after") for _ in range(5)]
        status = await _status(client)
        paused = await _call(client, "echo", message="paused")
    assert _seen(served) == (200, "before")
    assert [_seen(answer) for answer in refused] == [(502, "UPSTREAM_CONNECTION_LOST")] * 5
    assert status["circuit"] == "open", status
    assert _seen(paused) == (503, "UPSTREAM_UNAVAILABLE")


async def test_a_name_that_does_not_resolve_in_time_fails_within_the_connect_time_out() -> None:
    # Resolving the name is bounded by the connect time-out still (aiohttp's `connect`, which
    # bounded it before, is off): a resolver that never answers is a connection error.
    async def hung(_host: str, _port: int) -> list[str]:
        await asyncio.Event().wait()
        return []

    session = guarded_aiohttp_session(
        EgressPolicy.build("upstream.example", resolver=hung),
        connect_timeout=0.3,
        max_connections=1,
    )
    started = time.monotonic()
    try:
        async with asyncio.timeout(10):
            try:
                async with session.get("http://upstream.example/mcp", allow_redirects=False):
                    raise AssertionError("connected")
            except aiohttp.ClientConnectorError as exc:
                failure = exc.os_error
    finally:
        await session.close()
    assert "did not resolve within 0.3 s" in str(failure)
    assert time.monotonic() - started < 5
