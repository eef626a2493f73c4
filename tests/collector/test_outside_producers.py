"""Producers outside Conclave: a raw ``XADD`` on the real Redis starts an expedition.

An orchestrator does not know Conclave's envelope; it sends ``payload`` and perhaps ``emitter``,
``timestamp`` and ``correlation_id`` (docs/architecture.md, "Publishing from outside Conclave").
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector.events import REQUESTED
from conclave.platform.bus.redis_streams import RedisStreamsBus
from conclave.platform.db.schema import consumed_events
from tests.collector.conftest import collector_app, collector_settings, wait_terminal
from tests.conftest import REDIS_URL, Backend, eventually


@pytest.fixture
def production(postgres_engine: AsyncEngine, redis_client: Redis) -> AsyncEngine:
    """PostgreSQL, with Redis running (in embedded mode nobody outside the process publishes)."""
    return postgres_engine


@asynccontextmanager
async def collector(
    engine: AsyncEngine, redis_prefix: str, tmp_path: Any, **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """The collector on its own bus over this test's prefix. The reclaim idle time is long:
    whatever is dead-lettered within a test was dead-lettered at once, not after redeliveries."""
    bus = RedisStreamsBus(REDIS_URL, stream_prefix=redis_prefix, claim_idle_seconds=60)
    try:
        backend = Backend("production", engine, bus)
        async with collector_app(backend, collector_settings(tmp_path, **overrides)) as served:
            yield served
    finally:
        await bus.close()


async def expeditions(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    return (await client.get("/expedition/history")).json()["expeditions"]


async def test_an_entry_with_only_a_payload_starts_an_expedition(
    production, redis_client: Redis, redis_prefix: str, tmp_path
) -> None:
    async with collector(production, redis_prefix, tmp_path) as (client, _app):
        entry_id = await redis_client.xadd(
            redis_prefix + REQUESTED,
            {"payload": json.dumps({"expedition_type": "audit", "priority": "high"})},
        )
        [expedition] = await eventually(lambda: expeditions(client), timeout=60)
        record = await wait_terminal(client, expedition["expedition_id"])
    assert record["status"] == "completed"
    assert record["priority"] == "high"
    assert record["requested_by"] is None  # nobody was named: the record does not invent one
    assert record["correlation_id"] is None
    # The entry id is the event id: a redelivery of this entry is recognised.
    async with production.connect() as connection:
        rows = (await connection.execute(consumed_events.select())).all()
    assert [(row.consumer_group, row.event_id) for row in rows] == [("collector", entry_id)]


async def test_emitter_timestamp_and_correlation_id_are_kept(
    production, redis_client: Redis, redis_prefix: str, tmp_path
) -> None:
    async with collector(production, redis_prefix, tmp_path) as (client, _app):
        await redis_client.xadd(
            redis_prefix + REQUESTED,
            {
                "emitter": "orchestrator",
                "payload": json.dumps({"expedition_type": "audit"}),
                "timestamp": "2026-05-01T12:00:00+02:00",
                "correlation_id": "orch-42",
            },
        )
        [expedition] = await eventually(lambda: expeditions(client), timeout=60)
        record = await wait_terminal(client, expedition["expedition_id"])
    assert record["status"] == "completed"
    assert record["requested_by"] == "orchestrator"
    assert record["correlation_id"] == "orch-42"


async def test_hostile_entries_are_dead_lettered_at_once_and_the_next_one_runs(
    production, redis_client: Redis, redis_prefix: str, tmp_path
) -> None:
    key = redis_prefix + REQUESTED
    audit = json.dumps({"expedition_type": "audit"})
    hostile: list[tuple[dict[str, str], str]] = [
        ({"emitter": "o"}, "malformed entry: no payload field"),
        ({"payload": "{not json"}, "malformed entry: payload is not JSON"),
        ({"payload": '{"expedition_type": "audit", "x": "\\ud800"}'}, "lone_surrogate"),
        ({"payload": '{"expedition_type": "audit", "x": NaN}'}, "non_finite_number"),
        ({"payload": "[" * 100_000 + "]" * 100_000}, "nested too deeply"),
        ({"payload": audit, "timestamp": "yesterday"}, "timestamp is no time"),
        ({"payload": audit, "timestamp": "1e400"}, "timestamp is no time"),
        ({"payload": audit, "event_id": "e" * 37}, "event_id is longer than 36"),
        ({"payload": audit, "correlation_id": "c" * 129}, "correlation_id is longer than 128"),
        ({"payload": audit, "channel": "another.channel"}, "names another channel"),
        # Valid entries, invalid requests: refused by the listener, dead-lettered at once too
        # (a value longer than its column was once taken for a store outage and redelivered).
        ({"payload": json.dumps({"expedition_type": 42})}, "rejected: "),
        (
            {"payload": json.dumps({"expedition_type": "audit", "requested_by": "r" * 257})},
            "rejected: requested_by is longer than 256",
        ),
        ({"payload": audit, "emitter": "e" * 257}, "source is longer than 256"),
    ]
    async with collector(production, redis_prefix, tmp_path) as (client, _app):
        for fields, _reason in hostile:
            await redis_client.xadd(key, fields)
        # Raw bytes that are not UTF-8, the way any Redis client can write them.
        raw = Redis.from_url(REDIS_URL)
        await raw.xadd(key, {b"payload": b'{"expedition_type": "audit", "x": "\xff"}'})
        await raw.aclose()
        await redis_client.xadd(key, {"payload": audit, "emitter": "after-the-poison"})
        started = time.monotonic()

        [expedition] = await eventually(lambda: expeditions(client), timeout=60)
        # The dead letters keep the bytes as they were: read them as the bus does.
        reader = Redis.from_url(REDIS_URL, decode_responses=True, encoding_errors="surrogateescape")
        try:
            dead = await eventually(
                lambda: _at_least(reader, key + ".dlq", len(hostile) + 1), timeout=60
            )
        finally:
            await reader.aclose()
        assert time.monotonic() - started < 30  # far below one reclaim (60 s)
    assert expedition["requested_by"] == "after-the-poison"
    reasons = [fields["dlq_reason"] for _, fields in dead]
    for (_fields, expected), reason in zip(hostile, reasons, strict=False):
        assert expected in reason
    assert "invalid_utf8" in reasons[-1] or "lone_surrogate" in reasons[-1]
    assert all(fields["dlq_group"] == "collector" for _, fields in dead)
    assert (await redis_client.xpending(key, "collector"))["pending"] == 0


async def _at_least(client: Redis, key: str, count: int) -> list[Any] | None:
    entries = await client.xrange(key)
    return entries if len(entries) >= count else None


async def test_the_same_producer_event_id_twice_runs_once(
    production, redis_client: Redis, redis_prefix: str, tmp_path
) -> None:
    # A producer that retries its XADD (no answer the first time) sends its own event id: the
    # second entry is recognised as the same event.
    fields = {"payload": json.dumps({"expedition_type": "audit"}), "event_id": "order-7-run"}
    async with collector(production, redis_prefix, tmp_path) as (client, _app):
        await redis_client.xadd(redis_prefix + REQUESTED, fields)
        await redis_client.xadd(redis_prefix + REQUESTED, fields)
        [expedition] = await eventually(lambda: expeditions(client), timeout=60)
        await eventually(
            lambda: _pending_is(redis_client, redis_prefix + REQUESTED, "collector", 0), timeout=60
        )
        assert len(await expeditions(client)) == 1
        await wait_terminal(client, expedition["expedition_id"])


async def _pending_is(client: Redis, key: str, group: str, count: int) -> bool:
    try:
        info = await client.xinfo_groups(key)
    except Exception:
        return False
    return any(g["name"] == group and g["pending"] == count and g["lag"] == 0 for g in info)


async def test_bridged_channels_do_not_share_entry_ids(
    production, redis_client: Redis, redis_prefix: str, tmp_path
) -> None:
    # Entry ids are unique per stream only: the same id on two bridged streams is two events.
    bridge = {"site.a.reported": "audit", "site.b.reported": "audit"}
    async with collector(production, redis_prefix, tmp_path, bridge_channels=bridge) as (
        client,
        _app,
    ):
        for channel in bridge:
            await redis_client.xadd(redis_prefix + channel, {"payload": "{}"}, id="1-1")

        async def both() -> list[dict[str, Any]] | None:
            runs = await expeditions(client)
            return runs if len(runs) == 2 else None

        runs = await eventually(both, timeout=60)
    assert sorted(run["parameters"]["channel"] for run in runs) == sorted(bridge)
