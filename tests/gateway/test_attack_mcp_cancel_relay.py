"""An outside attack on the MCP cancellation relayed across replicas (bus channel
``conclave.mcp.cancel``): each test failed on the first version of the relay. Two gateways share
one store and one bus, as in tests/gateway/test_mcp_cancel_across_replicas.py."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.gateway.app import create_app
from conclave.gateway.mcp_cancel_relay import CHANNEL
from conclave.gateway.tools import Tool, ToolContext
from conclave.platform.bus.redis_streams import RedisStreamsBus
from tests.conftest import REDIS_URL, Backend, open_platform, test_settings
from tests.httpserver import running_server

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}
ADA = {**HEADERS, "Authorization": "Bearer tok-ada"}


class Naps:
    """A tool that sleeps ``seconds`` and counts the calls that started and were cancelled."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = 0
        self.cancelled = 0

    def tool(self) -> Tool:
        async def nap(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
            self.started += 1
            try:
                await asyncio.sleep(self.seconds)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            return {"slept": True}

        parameters = {"type": "object", "additionalProperties": False}
        return Tool(
            name="nap", description="Naps.", executor=nap, parameters=parameters,
            timeout_seconds=60,
        )  # fmt: skip


@asynccontextmanager
async def replicas(backend: Backend, tool: Tool, count: int) -> AsyncIterator[list[str]]:
    settings = test_settings(auth="enabled", api_tokens="tok-ada=ada,tok-bob=bob")
    async with AsyncExitStack() as stack:
        urls = []
        for _ in range(count):
            platform = await stack.enter_async_context(open_platform(backend, settings))
            app = create_app(settings, platform=platform, extra_tools=(tool,))
            urls.append(await stack.enter_async_context(running_server(app)))
        yield urls


def call(request_id: Any) -> str:
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
         "params": {"name": "nap", "arguments": {}}}
    )  # fmt: skip


def cancel(request_id: Any) -> str:
    return json.dumps(
        {"jsonrpc": "2.0", "method": "notifications/cancelled",
         "params": {"requestId": request_id}}
    )  # fmt: skip


async def until(check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_an_ambiguous_id_is_relayed_and_cancels_another_sessions_call(backend: Backend):
    """Ada runs two MCP sessions (two agents, one token) on replica 1, each with a call of
    JSON-RPC id 7 (SDK ids restart at every session), and a third session whose call id 7 runs
    on replica 2. The first agent gives up on its call: its ``notifications/cancelled`` reaches
    replica 1, where the id names two calls.

    Documented (docs/gateway.md, /mcp "Cancellation"): "a notification naming an id that two
    running calls of the same user share cancels neither", and the relay applies "the same rules
    as at home". A user notices instead that the third agent's call, on replica 2, which nobody
    cancelled, is stopped and audited CALL_CANCELLED (-32800).

    Why: ``McpHandlers.cancel`` (gateway/mcp.py) relays whenever ``InFlightCalls.cancel_id``
    returns False, and ``cancel_id`` (gateway/mcp_relay.py) returns False both for "no such
    call here" and for "the id is ambiguous here" (``len(scopes) != 1``): an ambiguous id is
    published on the bus and the other replica, seeing one call, cancels it."""
    naps = Naps(seconds=4)
    async with (
        replicas(backend, naps.tool(), 2) as (first, second),
        httpx.AsyncClient(timeout=60) as http,
    ):
        running = [
            asyncio.create_task(http.post(f"{first}/mcp", content=call(7), headers=ADA)),
            asyncio.create_task(http.post(f"{first}/mcp", content=call(7), headers=ADA)),
            asyncio.create_task(http.post(f"{second}/mcp", content=call(7), headers=ADA)),
        ]
        await until(lambda: naps.started == 3)
        sent = await http.post(f"{first}/mcp", content=cancel(7), headers=ADA)
        answers = await asyncio.wait_for(asyncio.gather(*running), 30)

    assert sent.status_code == 202
    assert naps.cancelled == 0, "a call nobody cancelled was stopped"
    assert [a.json().get("error") for a in answers] == [None, None, None]


async def test_any_user_makes_every_replica_dead_letter_an_entry(
    postgres_engine: AsyncEngine, redis_bus: RedisStreamsBus
):
    """Any authenticated MCP client POSTs ``notifications/cancelled`` with ``requestId``
    18446744073709551616 (2**64) or ``"a\\u0000b"``: ids no call can have (the gateway refuses
    such values in a call as UNSAFE_INPUT). Each is published on ``conclave.mcp.cancel``, and
    every replica's consumer refuses it as a malformed entry (``event_from_entry``:
    integer_out_of_range / nul) and writes it to ``conclave.mcp.cancel.dlq`` with an ERROR log.
    An operator notices dead letters (an alert, /dead-letters) that any user can add at will,
    N per POST with N replicas, unlimited (notifications are not rate limited); the in-process
    bus (embedded) handles the same entries without a dead letter.

    Why: ``CancelRelay.relay`` (gateway/mcp_cancel_relay.py ``_too_long``) bounds an integer id
    at 850 bits and checks nothing else, and ``McpEndpoint.__call__`` (gateway/mcp.py) calls
    ``handlers.cancel`` before any ``find_unsafe`` check; the bus's reader refuses what does not
    fit 64 bits or holds NUL. Fix: relay only ids ``find_unsafe`` accepts (and within ±2**53,
    the limit the gateway uses for tokens)."""
    backend = Backend("production", postgres_engine, redis_bus)
    naps = Naps(seconds=30)
    async with (
        replicas(backend, naps.tool(), 2) as (first, second),
        httpx.AsyncClient(timeout=60) as http,
    ):
        for bad in (2**64, "a\u0000b", -(2**70)):
            answer = await http.post(f"{first}/mcp", content=cancel(bad), headers=ADA)
            assert answer.status_code == 202
        # A good relayed cancellation after them: once it has stopped its call, both
        # replicas have read the entries before it.
        running = asyncio.create_task(http.post(f"{second}/mcp", content=call("g"), headers=ADA))
        await until(lambda: naps.started == 1)
        await http.post(f"{first}/mcp", content=cancel("g"), headers=ADA)
        stopped = await asyncio.wait_for(running, 30)
        await asyncio.sleep(1.0)  # the first replica's consumer reads the same entries
        letters = await redis_bus.dead_letters(CHANNEL)

    assert stopped.json()["error"]["code"] == -32800
    assert [letter.reason for letter in letters] == []


class Silent:
    """A TCP server that accepts connections and never answers: a bus that hangs (a Redis stuck
    in a slow command or a fork, or a network that drops its answers)."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.port = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Silent:
        async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._writers.append(writer)

        self.server = await asyncio.start_server(hold, "127.0.0.1", 0)
        sock: socket.socket = self.server.sockets[0]
        self.port = sock.getsockname()[1]
        return self

    async def __aexit__(self, *_exc: Any) -> None:
        assert self.server is not None
        for writer in self._writers:
            writer.close()
        self.server.close()


async def test_a_hung_bus_holds_every_cancellation_notification(sqlite_engine: AsyncEngine):
    """The bus (Redis) hangs: it accepts connections and answers nothing. An MCP client
    cancels a call that runs on another replica (or has just ended): its
    ``notifications/cancelled`` POST, answered 202 at once before ccdbef3, now waits for the
    relay's publish, about Redis's socket time-out (6 s), and every such POST holds a request
    slot for that long. Documented: "with the bus down the notification is lost as it would be
    without the relay" and "Delivery is best effort and takes milliseconds". The SDK client's
    cancellation waits for that answer.

    Why: ``McpEndpoint.__call__`` (gateway/mcp.py) awaits ``handlers.cancel`` ->
    ``CancelRelay.relay`` -> ``bus.publish`` on the request's path, with no bound of its own
    (gateway/mcp_cancel_relay.py ``relay``). Fix: publish in the background (a bounded queue,
    dropped when full), or bound the publish with a short time-out."""
    async with Silent() as silent:
        bus = RedisStreamsBus(f"redis://127.0.0.1:{silent.port}/0", claim_idle_seconds=0.5)
        backend = Backend("hung bus", sqlite_engine, bus)
        try:
            async with (
                replicas(backend, Naps(1).tool(), 1) as (only,),
                httpx.AsyncClient(timeout=60) as http,
            ):
                started = time.monotonic()
                answer = await http.post(f"{only}/mcp", content=cancel(3), headers=ADA)
                took = time.monotonic() - started
        finally:
            await bus.close()

    assert answer.status_code == 202
    assert took < 1.0, f"the notification was answered after {took:.1f} s"


async def test_concurrent_cancellations_open_one_redis_connection_each(
    sqlite_engine: AsyncEngine,
):
    """The bus is slow to answer (here: not at all), and a client POSTs 60
    ``notifications/cancelled`` at once (no rate limit applies to notifications). Each one
    takes a Redis connection of its own for as long as Redis takes to answer: an authenticated
    client opens as many connections to the deployment's shared Redis as it sends
    notifications, towards Redis's ``maxclients`` (10,000), where every service's bus and every
    replica's rate limiter are refused. An operator notices Redis's connection count follow one
    client's notifications.

    Why: ``CancelRelay.relay`` (gateway/mcp_cancel_relay.py) publishes on the request's path,
    the only request-path publish of the gateway (the others go through the outbox), and
    ``RedisStreamsBus`` (platform/bus/redis_streams.py ``__init__``) gives redis-py's pool no
    ``max_connections`` bound. Fix: publish from one background task (a bounded queue,
    dropped when full), or bound the concurrent relays."""
    async with Silent() as silent:
        bus = RedisStreamsBus(f"redis://127.0.0.1:{silent.port}/0", claim_idle_seconds=0.5)
        backend = Backend("hung bus", sqlite_engine, bus)
        try:
            async with (
                replicas(backend, Naps(1).tool(), 1) as (only,),
                httpx.AsyncClient(timeout=60) as http,
            ):
                posts = [
                    asyncio.create_task(http.post(f"{only}/mcp", content=cancel(n), headers=ADA))
                    for n in range(60)
                ]
                await asyncio.sleep(2.0)
                connections = len(silent._writers)
                await asyncio.gather(*posts)
        finally:
            await bus.close()

    assert connections <= 10, f"{connections} connections to the bus for 60 notifications"


async def test_a_stale_relayed_cancellation_stops_a_later_call_reusing_its_id(
    postgres_engine: AsyncEngine,
    redis_bus: RedisStreamsBus,
    redis_client: Redis,
    redis_prefix: str,
):
    """Replica 1 loses Redis for a moment (a network blip, a Redis fail-over). Meanwhile Ada's
    agent gives up on its call of JSON-RPC id 5: the notification reaches replica 2 and is
    relayed (best effort: replica 1, where the call ran, cannot read it now; the call ends on
    its own). Then Ada opens a new session (the SDK's ids start again) and its call id 5 runs on
    replica 1. Replica 1's link comes back and it reads the backlog of its consumer group.

    A user notices the new call, which nobody cancelled, stopped (-32800, audited
    CALL_CANCELLED) seconds after it started. Documented: "Delivery is best effort and takes
    milliseconds"; a cancellation that arrives late should be lost, not applied to whatever
    call bears that id by then.

    Why: ``CancelRelay._on_cancel`` (gateway/mcp_cancel_relay.py) applies every entry its group
    delivers, whatever its age (the envelope's ``emitted_at`` is not looked at), and the group
    keeps its place across a reconnection (``RedisStreamsBus.consume``). Fix: ignore relayed
    cancellations older than a few seconds (``event.emitted_at``)."""
    from tests.netproxy import CuttableProxy

    proxy = CuttableProxy("127.0.0.1", int(REDIS_URL.rsplit(":", 1)[1].split("/")[0]))
    await proxy.start()
    cut_bus = RedisStreamsBus(
        f"redis://127.0.0.1:{proxy.port}/0", stream_prefix=redis_prefix, claim_idle_seconds=0.5
    )
    naps = Naps(seconds=8)
    settings = test_settings(auth="enabled", api_tokens="tok-ada=ada,tok-bob=bob")
    try:
        async with AsyncExitStack() as stack:
            urls = []
            for bus in (cut_bus, redis_bus):
                backend = Backend("production", postgres_engine, bus)
                platform = await stack.enter_async_context(open_platform(backend, settings))
                app = create_app(settings, platform=platform, extra_tools=(naps.tool(),))
                urls.append(await stack.enter_async_context(running_server(app)))
            first, second = urls
            key = redis_bus.key(CHANNEL)

            async def both_groups() -> bool:
                try:
                    return len(await redis_client.xinfo_groups(key)) == 2
                except Exception:
                    return False

            deadline = time.monotonic() + 30
            while not await both_groups():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            async with httpx.AsyncClient(timeout=60) as http:
                await proxy.cut()
                await asyncio.sleep(0.5)
                gave_up = await http.post(f"{second}/mcp", content=cancel(5), headers=ADA)
                assert gave_up.status_code == 202
                later = asyncio.create_task(http.post(f"{first}/mcp", content=call(5), headers=ADA))
                await until(lambda: naps.started == 1)
                await proxy.restore()
                answer = await asyncio.wait_for(later, 30)
    finally:
        await cut_bus.close()
        await proxy.close()

    assert naps.cancelled == 0
    assert answer.json().get("error") is None, answer.text
