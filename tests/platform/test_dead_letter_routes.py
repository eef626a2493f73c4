"""``/dead-letters`` on a service: operators see, replay and discard what the pipeline set aside;
users see nothing; every action is published on ``ops.dead_letters``. On both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from conclave.platform.bus.base import Event, EventRejected
from conclave.platform.bus.redis_streams import RedisStreamsBus
from conclave.platform.db.schema import outbox_events
from conclave.platform.outbox import add_event
from conclave.platform.outbox_store import SetAside, set_aside
from conclave.platform.runtime import Platform
from tests.conftest import Backend, eventually, serve_app
from tests.hostile.conftest import build_app, service_settings

OPERATOR = {"Authorization": "Bearer olga-token"}
USER = {"Authorization": "Bearer alice-token"}
CHANNEL = "ops.test.orders"


@asynccontextmanager
async def gateway_of(backend: Backend, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway (auth on: alice, and olga an operator), in-process, in the test's task."""
    settings = service_settings(
        "gateway",
        tmp_path,
        auto_migrate=False,
        api_tokens="olga-token=olga,alice-token=alice",
        operators=["olga"],
    )
    async with (
        Platform.open(settings, engine=backend.engine, bus=backend.bus) as platform,
        serve_app(build_app("gateway", settings, platform)) as client,
    ):
        yield client


async def _dead_letter(bus: Any, payload: dict[str, Any]) -> Event:
    """Publish an event whose consumer rejects it: it lands in ``CHANNEL``'s dead letters."""
    event = Event(channel=CHANNEL, payload=payload, source="test")

    async def reject(_event: Event) -> None:
        raise EventRejected("the order names no customer")

    consumer = asyncio.create_task(bus.consume(CHANNEL, "orders", "c1", reject, start="0"))
    await bus.publish([event])
    try:
        await eventually(lambda: bus.dead_letters(CHANNEL))
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
    return event


async def _quarantined_outbox_event(backend: Backend) -> str:
    event = Event(channel="ops.test.refused", payload={"n": 1}, source="test")
    async with backend.engine.begin() as connection:
        await add_event(connection, event)
        await set_aside(connection, [SetAside(event.event_id, "too large", quarantine=True)])
    return event.event_id


async def _audit_events(backend: Backend) -> list[dict[str, Any]]:
    query = select(outbox_events.c.payload).where(outbox_events.c.channel == "ops.dead_letters")
    async with backend.engine.connect() as connection:
        return [row.payload for row in (await connection.execute(query)).all()]


async def test_an_operator_replays_and_discards_what_was_set_aside(
    backend: Backend, tmp_path: Path
) -> None:
    async with gateway_of(backend, tmp_path) as gateway:
        await _replay_and_discard(gateway, backend)


async def _replay_and_discard(gateway: httpx.AsyncClient, backend: Backend) -> None:
    rejected = await _dead_letter(backend.bus, {"order": 7})
    quarantined = await _quarantined_outbox_event(backend)

    refused = await gateway.get("/dead-letters", headers=USER)
    assert refused.status_code == 403 and refused.json()["code"] == "FORBIDDEN"
    assert (
        await gateway.post(f"/dead-letters/outbox/{quarantined}/discard", headers=USER)
    ).status_code == 403

    listed = (await gateway.get("/dead-letters", headers=OPERATOR)).json()
    assert [row["event_id"] for row in listed["outbox"]] == [quarantined]
    assert listed["outbox"][0]["last_error"] == "too large"
    (channel,) = [group for group in listed["bus"] if group["channel"] == CHANNEL]
    (entry,) = channel["entries"]
    assert entry["event_id"] == rejected.event_id and entry["replayable"] is True
    assert '"order":7' in entry["payload"]

    replayed = await gateway.post(
        f"/dead-letters/bus/{CHANNEL}/{entry['entry_id']}/replay", headers=OPERATOR
    )
    assert replayed.status_code == 200, replayed.text
    assert [event.event_id for event in await backend.bus.read(CHANNEL)][-1] == rejected.event_id
    assert await backend.bus.dead_letters(CHANNEL) == []
    again = await gateway.post(
        f"/dead-letters/bus/{CHANNEL}/{entry['entry_id']}/replay", headers=OPERATOR
    )
    assert again.status_code == 404

    discarded = await gateway.post(f"/dead-letters/outbox/{quarantined}/discard", headers=OPERATOR)
    assert discarded.status_code == 200
    assert (await gateway.get("/dead-letters", headers=OPERATOR)).json()["outbox"] == []

    audit = await _audit_events(backend)
    assert {(row["action"], row["kind"], row["by"]) for row in audit} == {
        ("replay", "bus", "olga"),
        ("discard", "outbox", "olga"),
    }


async def test_an_entry_that_is_no_event_can_only_be_discarded(
    backend: Backend, tmp_path: Path
) -> None:
    if not isinstance(backend.bus, RedisStreamsBus):
        pytest.skip("only a Redis stream can hold an entry that is not an event")
    async with gateway_of(backend, tmp_path) as gateway:
        await _only_discarded(gateway, backend)


async def _only_discarded(gateway: httpx.AsyncClient, backend: Backend) -> None:
    redis = backend.bus._redis
    key = backend.bus.key(f"{CHANNEL}.dlq")
    entry_id = await redis.xadd(key, {"note": "no payload", "dlq_reason": "malformed entry"})
    listed = (await gateway.get("/dead-letters", headers=OPERATOR)).json()
    (entry,) = next(g for g in listed["bus"] if g["channel"] == CHANNEL)["entries"]
    assert entry["replayable"] is False and entry["reason"] == "malformed entry"
    replay = await gateway.post(f"/dead-letters/bus/{CHANNEL}/{entry_id}/replay", headers=OPERATOR)
    assert replay.status_code == 409 and "no payload" in replay.json()["detail"]
    gone = await gateway.post(f"/dead-letters/bus/{CHANNEL}/{entry_id}/discard", headers=OPERATOR)
    assert gone.status_code == 200 and await redis.xlen(key) == 0


async def test_names_that_are_not_ids_are_refused(backend: Backend, tmp_path: Path) -> None:
    async with gateway_of(backend, tmp_path) as gateway:
        await _refusals(gateway)


async def _refusals(gateway: httpx.AsyncClient) -> None:
    for path in (
        f"/dead-letters/bus/{CHANNEL}/not-an-id/replay",
        f"/dead-letters/bus/{CHANNEL}/1-0/explode",
        "/dead-letters/bus/a%20b/1-0/replay",
        f"/dead-letters/bus/{CHANNEL}/{'9' * 30}-0/discard",
    ):
        answer = await gateway.post(path, headers=OPERATOR)
        assert answer.status_code == 422, (path, answer.text)
    missing = await gateway.post("/dead-letters/outbox/no-such-event/replay", headers=OPERATOR)
    assert missing.status_code == 404
    assert (await gateway.get("/dead-letters?limit=0", headers=OPERATOR)).status_code == 422
