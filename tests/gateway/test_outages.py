"""Dependencies going down: the bus (events wait in the outbox) and the store (nothing runs)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest
from sqlalchemy import select

from conclave.gateway.app import create_app
from conclave.platform.bus.redis_streams import RedisStreamsBus
from conclave.platform.db.schema import outbox_events
from tests.conftest import (
    POSTGRES_URL,
    REDIS_URL,
    Backend,
    eventually,
    isolated_postgres,
    open_platform,
    serve_app,
    test_settings,
)
from tests.gateway.conftest import CHANNEL, Calls, audit_rows
from tests.netproxy import CuttableProxy, through


async def _proxy(url: str, default_port: int) -> CuttableProxy:
    parsed = urlparse(url.replace("+asyncpg", ""))
    proxy = CuttableProxy(parsed.hostname or "127.0.0.1", parsed.port or default_port)
    await proxy.start()
    return proxy


@pytest.fixture
async def redis_proxy(redis_client) -> AsyncIterator[CuttableProxy]:
    proxy = await _proxy(REDIS_URL, 6379)
    yield proxy
    await proxy.close()


async def test_events_wait_in_the_outbox_while_redis_is_down(
    postgres_engine, redis_client, redis_prefix, redis_proxy, test_tools
):
    bus = RedisStreamsBus(f"redis://127.0.0.1:{redis_proxy.port}/0", stream_prefix=redis_prefix)
    backend = Backend("production", postgres_engine, bus)
    settings = test_settings()
    try:
        async with open_platform(backend, settings) as platform:
            app = create_app(settings, platform=platform, extra_tools=test_tools)
            async with serve_app(app) as client:
                await redis_proxy.cut()
                ids = []
                for i in range(5):
                    response = await client.post(
                        "/execute", json={"tool": "echo", "args": {"message": f"m{i}"}}
                    )
                    assert response.status_code == 200  # executions go on without the bus
                    ids.append(response.json()["conclave_id"])
                health = await client.get("/health")
                assert health.status_code == 503
                assert health.json()["checks"]["bus"]["status"] == "down"
                assert len(await audit_rows(backend)) == 5

                async def waiting():
                    async with postgres_engine.connect() as connection:
                        rows = (await connection.execute(select(outbox_events))).all()
                    return len(rows) == 5 and all(
                        r.published_at is None and r.attempts >= 1 and r.last_error for r in rows
                    )

                await eventually(waiting)

                await redis_proxy.restore()

                async def delivered():
                    entries = await redis_client.xrange(redis_prefix + CHANNEL)
                    return entries if len(entries) >= 5 else None

                entries = await eventually(delivered, timeout=60)
                assert (await client.get("/health")).status_code == 200
        event_ids = [fields["event_id"] for _, fields in entries]
        assert len(event_ids) == len(set(event_ids)) == 5  # each event once
        payload_ids = sorted(json.loads(fields["payload"])["conclave_id"] for _, fields in entries)
        assert payload_ids == sorted(ids)
    finally:
        await bus.close()


async def test_store_down_refuses_execution_with_503(redis_bus, calls: Calls, test_tools):
    proxy = await _proxy(POSTGRES_URL, 5432)
    proxied = through(proxy, POSTGRES_URL)
    try:
        async with isolated_postgres(proxied) as engine:
            backend = Backend("production", engine, redis_bus)
            settings = test_settings()
            async with open_platform(backend, settings) as platform:
                app = create_app(settings, platform=platform, extra_tools=test_tools)
                async with serve_app(app) as client:
                    await proxy.cut()
                    response = await client.post(
                        "/execute", json={"tool": "billing.count", "args": {}}
                    )
                    assert response.status_code == 503
                    assert response.json()["code"] == "STORE_UNAVAILABLE"
                    assert calls.count == 0  # no execution without an audit trail
                    health = await client.get("/health")
                    assert health.status_code == 503
                    assert health.json()["checks"]["store"]["status"] == "down"

                    await proxy.restore()  # recovers without a restart
                    response = await client.post(
                        "/execute", json={"tool": "billing.count", "args": {}}
                    )
                    assert response.status_code == 200
                    assert calls.count == 1
                    [row] = await audit_rows(backend)
                    assert row.status == "succeeded"
    finally:
        await proxy.close()


async def test_a_commit_whose_answer_was_lost_is_not_recorded_twice(redis_bus, test_tools):
    """The network fails after PostgreSQL committed a call's audit row and before the gateway
    heard so: the gateway retries, meets its own row, and answers the call (it used to answer
    500 from an idempotency check for a call that had no key)."""
    proxy = await _proxy(POSTGRES_URL, 5432)
    proxied = through(proxy, POSTGRES_URL)
    try:
        async with isolated_postgres(proxied) as engine:
            backend = Backend("production", engine, redis_bus)
            settings = test_settings()
            async with open_platform(backend, settings) as platform:
                app = create_app(settings, platform=platform, extra_tools=test_tools)
                async with serve_app(app) as client:
                    warm = await client.post(
                        "/execute", json={"tool": "echo", "args": {"message": "warm-up"}}
                    )
                    assert warm.status_code == 200
                    # The audit row's group commit carries the arguments: its answer is lost.
                    proxy.lose_reply_to(b"lost-ack-probe")
                    response = await client.post(
                        "/execute", json={"tool": "echo", "args": {"message": "lost-ack-probe"}}
                    )
                    assert proxy.lost_replies == 1
                    assert response.status_code == 200, response.text
                    body = response.json()
                    assert body["status"] == "succeeded"
                    probes = await audit_rows(backend)
                    rows = [r for r in probes if r.args.get("message") == "lost-ack-probe"]
                    assert [(r.conclave_id, r.status) for r in rows] == [
                        (body["conclave_id"], "succeeded")
                    ]
                    async with engine.connect() as connection:
                        events = (
                            await connection.execute(
                                select(outbox_events.c.payload).where(
                                    outbox_events.c.channel == CHANNEL
                                )
                            )
                        ).all()
                    mine = [e for e in events if body["conclave_id"] in json.dumps(e.payload)]
                    assert len(mine) == 1
    finally:
        await proxy.close()
