"""The outbox relay publishes every committed event, survives a bus outage, and never duplicates."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.bus.base import Event, EventBus
from conclave.platform.bus.redis_streams import RedisStreamsBus
from conclave.platform.clock import utc_now
from conclave.platform.db.engine import create_engine
from conclave.platform.db.schema import outbox_events
from conclave.platform.outbox import OutboxRelay, add_event, outbox_write
from conclave.platform.outbox_store import pending_count
from conclave.platform.runtime import Platform
from tests.conftest import POSTGRES_URL, REDIS_URL, Backend, eventually, open_platform
from tests.conftest import test_settings as make_settings

CHANNEL = "orders.placed"


def event(number: int) -> Event:
    return Event(channel=CHANNEL, payload={"n": number}, source="test", correlation_id="c-1")


def nothing_pending(engine: AsyncEngine) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await pending_count(engine) == 0

    return check


async def outbox_rows(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as connection:
        return list((await connection.execute(select(outbox_events))).all())


async def published_count(bus: EventBus, events: list[Event]) -> Counter[str]:
    wanted = {e.event_id for e in events}
    return Counter(e.event_id for e in await bus.read(CHANNEL, 10_000) if e.event_id in wanted)


async def test_committed_events_are_published_and_marked(backend: Backend) -> None:
    events = [event(n) for n in range(5)]
    async with open_platform(backend) as platform:
        await asyncio.gather(*(platform.writer.write(outbox_write(e)) for e in events))

        async def all_marked() -> bool:
            rows = await outbox_rows(backend.engine)
            return all(row.published_at is not None for row in rows)

        await eventually(all_marked)
    published = await backend.bus.read(CHANNEL)
    assert sorted(published, key=lambda e: e.payload["n"]) == events
    assert all(row.attempts == 1 for row in await outbox_rows(backend.engine))


async def test_events_wait_out_a_bus_outage_and_are_published_once(backend: Backend) -> None:
    down = RedisStreamsBus("redis://127.0.0.1:1/0")
    events = [event(n) for n in range(3)]
    try:
        async with Platform.open(make_settings(), engine=backend.engine, bus=down) as platform:
            await platform.writer.write(*(outbox_write(e) for e in events))

            async def failure_recorded() -> bool:
                rows = await outbox_rows(backend.engine)
                return all(row.attempts >= 1 and row.last_error for row in rows)

            await eventually(failure_recorded)
            checks = await platform.check()
    finally:
        await down.close()
    rows = await outbox_rows(backend.engine)
    assert all(row.published_at is None for row in rows)
    assert "not reachable" in rows[0].last_error
    assert checks["bus"]["status"] == "down"
    assert checks["store"]["status"] == "up"
    assert checks["outbox"]["pending"] == 3

    relay = OutboxRelay(backend.engine, backend.bus, poll_seconds=0.05, max_backoff_seconds=0.2)
    await relay.start()
    try:
        await eventually(nothing_pending(backend.engine))
        await asyncio.sleep(0.2)  # a few more relay passes: nothing is published twice
    finally:
        await relay.stop()
    assert await published_count(backend.bus, events) == {e.event_id: 1 for e in events}
    assert relay.bus_healthy


async def test_rolled_back_event_is_never_published(backend: Backend) -> None:
    kept, dropped = event(1), event(2)
    async with backend.engine.begin() as connection:
        await add_event(connection, kept)
    try:
        async with backend.engine.begin() as connection:
            await add_event(connection, dropped)
            raise RuntimeError("business write failed")
    except RuntimeError:
        pass
    relay = OutboxRelay(backend.engine, backend.bus)
    assert await relay.publish_pending() == 1
    assert await backend.bus.read(CHANNEL) == [kept]


async def test_two_relays_publish_each_event_exactly_once(
    postgres_engine: AsyncEngine, redis_client: Redis, redis_prefix: str
) -> None:
    events = [event(n) for n in range(300)]
    async with postgres_engine.begin() as connection:
        for e in events:
            await add_event(connection, e)
        schema = await connection.scalar(text("SELECT current_schema()"))
    # A second replica: its own engine and bus client on the same table and streams.
    other_engine = create_engine(POSTGRES_URL, schema=schema)
    buses = [RedisStreamsBus(REDIS_URL, stream_prefix=redis_prefix) for _ in range(2)]
    relays = [
        OutboxRelay(engine, bus, poll_seconds=0.05, batch_size=10)
        for engine, bus in zip([postgres_engine, other_engine], buses, strict=True)
    ]
    try:
        await asyncio.gather(*(relay.start() for relay in relays))
        await eventually(nothing_pending(postgres_engine), timeout=60)
    finally:
        for relay in relays:
            await relay.stop()
        for bus in buses:
            await bus.close()
        await other_engine.dispose()
    entries = await redis_client.xrange(redis_prefix + CHANNEL)
    counts = Counter(fields["event_id"] for _, fields in entries)
    assert counts == {e.event_id: 1 for e in events}


async def test_retention_deletes_only_published_rows(backend: Backend) -> None:
    relay = OutboxRelay(backend.engine, backend.bus)
    async with backend.engine.begin() as connection:
        await add_event(connection, event(1))
        await add_event(connection, event(2))
    assert await relay.publish_pending() == 2
    waiting = event(3)
    async with backend.engine.begin() as connection:
        await add_event(connection, waiting)

    assert await relay.delete_published_before(utc_now() - timedelta(hours=1)) == 0
    assert await relay.delete_published_before(utc_now() + timedelta(seconds=1)) == 2
    assert [row.event_id for row in await outbox_rows(backend.engine)] == [waiting.event_id]
