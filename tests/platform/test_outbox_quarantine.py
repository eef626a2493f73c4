"""One outbox row the bus refuses never stops the others: it is retried alone or quarantined, and
the quarantine shows in metrics and in every service's /health."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import select

from conclave.collector.app import create_app as create_collector
from conclave.edge.app import create_app as create_edge
from conclave.gateway.app import create_app as create_gateway
from conclave.graph.app import create_app as create_graph
from conclave.platform.bus.base import Event
from conclave.platform.db.schema import outbox_events
from conclave.platform.outbox import OutboxRelay, add_event, outbox_write
from conclave.platform.outbox_store import pending_count
from tests.collector.conftest import collector_settings
from tests.conftest import Backend, eventually, open_platform, serve_app
from tests.conftest import test_settings as gateway_settings
from tests.edge.conftest import edge_settings
from tests.graph.conftest import graph_settings

CHANNEL = "orders.placed"


def event(number: int, **payload: Any) -> Event:
    return Event(channel=CHANNEL, payload={"n": number, **payload}, source="test")


def poison(number: int) -> Event:
    """An event whose payload holds a lone surrogate: storable as JSON, not encodable as UTF-8."""
    return event(number, message="\ud800")


async def add_events(backend: Backend, *events: Event) -> None:
    for item in events:  # one transaction each: created_at orders them
        async with backend.engine.begin() as connection:
            await add_event(connection, item)


async def row(backend: Backend, event_id: str) -> Any:
    async with backend.engine.connect() as connection:
        query = select(outbox_events).where(outbox_events.c.event_id == event_id)
        return (await connection.execute(query)).one_or_none()


async def delivered(backend: Backend, channel: str = CHANNEL) -> list[Any]:
    return [item.payload["n"] for item in await backend.bus.read(channel, 1000)]


async def test_poison_row_is_quarantined_and_the_rows_behind_it_are_delivered(
    backend: Backend,
) -> None:
    bad = poison(0)
    await add_events(backend, bad, event(1), event(2), event(3))
    relay = OutboxRelay(backend.engine, backend.bus)

    assert await relay.publish_pending() == 4
    assert await delivered(backend) == [1, 2, 3]
    stored = await row(backend, bad.event_id)
    assert stored.quarantined_at is not None
    assert stored.published_at is None
    assert stored.attempts == 1
    assert "not encodable as UTF-8" in stored.last_error
    assert relay.quarantined_total == 1
    # Out of the due set: later passes neither re-read it nor count it as pending.
    await add_events(backend, event(4))
    assert await relay.publish_pending() == 1
    assert await delivered(backend) == [1, 2, 3, 4]
    assert await pending_count(backend.engine) == 0


async def test_handed_off_poison_event_is_quarantined_and_the_others_published(
    backend: Backend,
) -> None:
    bad = poison(0)
    async with open_platform(backend) as platform:
        # One group commit: the relay gets the events by hand-off. Their rows are reserved for it
        # for ten seconds, so what happens within five is the hand-off path's doing.
        await platform.writer.write(outbox_write(bad), *(outbox_write(event(n)) for n in (1, 2)))

        async def settled() -> bool:
            mine = await row(backend, bad.event_id)
            return mine.quarantined_at is not None and await pending_count(backend.engine) == 0

        await eventually(settled)
        assert platform.relay.quarantined_total == 1
    assert await delivered(backend) == [1, 2]
    assert "not encodable as UTF-8" in (await row(backend, bad.event_id)).last_error


async def test_refused_entry_is_retried_alone_then_quarantined(
    postgres_engine: Any, redis_bus: Any, redis_client: Redis, redis_prefix: str
) -> None:
    backend = Backend("production", postgres_engine, redis_bus)
    await redis_client.set(redis_prefix + "held.by.a.string", "not a stream")
    refused = Event(channel="held.by.a.string", payload={"n": 0}, source="test")
    await add_events(backend, refused, event(1))
    relay = OutboxRelay(
        backend.engine, backend.bus, max_backoff_seconds=0.01, quarantine_after_attempts=2
    )

    assert await relay.publish_pending() == 2
    first = await row(backend, refused.event_id)
    assert (first.attempts, first.quarantined_at) == (1, None)  # may be fixed: retried, alone
    assert first.last_error.startswith("WRONGTYPE")
    assert await delivered(backend) == [1]

    async def quarantined() -> bool:
        await relay.publish_pending()
        return (await row(backend, refused.event_id)).quarantined_at is not None

    await eventually(quarantined)
    assert (await row(backend, refused.event_id)).attempts == 2


async def test_two_relays_on_one_table_keep_flowing_past_poison_rows(backend: Backend) -> None:
    numbers = range(120)
    events = [poison(n) if n % 40 == 7 else event(n) for n in numbers]
    await add_events(backend, *events)
    relays = [OutboxRelay(backend.engine, backend.bus, poll_seconds=0.05, batch_size=10)]
    relays.append(OutboxRelay(backend.engine, backend.bus, poll_seconds=0.05, batch_size=10))
    try:
        await asyncio.gather(*(relay.start() for relay in relays))

        async def drained() -> bool:
            return await pending_count(backend.engine) == 0

        await eventually(drained, timeout=60)
    finally:
        for relay in relays:
            await relay.stop()
    counts = Counter(await delivered(backend))
    good = {n for n in numbers if n % 40 != 7}
    assert set(counts) == good
    async with backend.engine.connect() as connection:
        query = select(outbox_events.c.event_id).where(outbox_events.c.quarantined_at.is_not(None))
        set_aside = set((await connection.scalars(query)).all())
    assert set_aside == {e.event_id for e in events if e.payload.get("message")}
    if backend.name == "production":
        # Rows are locked by the relay that took them (SKIP LOCKED): each published once. SQLite
        # has no row locks; embedded mode runs one relay.
        assert counts == dict.fromkeys(good, 1)
        assert sum(relay.quarantined_total for relay in relays) == 3


async def test_quarantine_shows_in_metrics_and_in_every_services_health(
    backend: Backend, tmp_path: Any
) -> None:
    bad = poison(0)
    await add_events(backend, bad)
    async with open_platform(backend) as platform:

        async def quarantined() -> bool:
            return (await row(backend, bad.event_id)).quarantined_at is not None

        await eventually(quarantined)
        apps = {
            "gateway": create_gateway(gateway_settings(), platform=platform),
            "graph": create_graph(graph_settings(), platform=platform),
            "edge": create_edge(edge_settings(tmp_path / "edge"), platform=platform),
            "collector": create_collector(
                collector_settings(tmp_path / "collector"), platform=platform
            ),
        }
        for service, app in apps.items():
            async with serve_app(app) as client:
                health = await client.get("/health")
                metrics = (await client.get("/metrics")).text
            # A warning, not an outage: load balancers keep the replica (200, healthy).
            assert health.status_code == 200, service
            body = health.json()
            assert body["status"] == "healthy", service
            assert body["warnings"] == [
                "1 outbox event quarantined: the bus refused them and they are not delivered; "
                "see `conclave outbox list`"
            ], service
            if service != "graph":  # the graph's health keeps to the spec's fields otherwise
                assert body["checks"]["outbox"] == {
                    "status": "warning",
                    "pending": 0,
                    "quarantined": 1,
                }, service
            assert f"conclave_{service}_outbox_quarantined_total 1.0" in metrics, service
            assert f"conclave_{service}_outbox_quarantined_events 1.0" in metrics, service


async def test_health_has_no_warnings_without_quarantined_rows(backend: Backend) -> None:
    settings = gateway_settings()
    async with open_platform(backend, settings) as platform:
        app = create_gateway(settings, platform=platform)
        async with serve_app(app) as client:
            body = (await client.get("/health")).json()
    assert "warnings" not in body
    assert body["checks"]["outbox"] == {"status": "up", "pending": 0, "quarantined": 0}
