"""Entries written by producers outside Conclave, read back as events (real Redis)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from conclave.platform.bus.base import Event
from conclave.platform.bus.envelope import MalformedEntry, event_from_entry, parse_time
from conclave.platform.bus.redis_streams import RedisStreamsBus
from tests.conftest import eventually

CHANNEL = "orders.placed"


def _at_least(handled: list[Event], count: int):
    async def check() -> bool:
        return len(handled) >= count

    return check


async def received_events(bus: RedisStreamsBus, count: int, *, fail_first: bool = False):
    """Consume ``CHANNEL`` until ``count`` events were handled; with ``fail_first`` the first
    delivery of each event fails (so it is redelivered)."""
    handled: list[Event] = []
    failed: set[str] = set()

    async def handle(event: Event) -> None:
        if fail_first and event.event_id not in failed:
            failed.add(event.event_id)
            raise RuntimeError("try again")
        handled.append(event)

    task = asyncio.create_task(bus.consume(CHANNEL, "g", "c1", handle, start="0"))
    try:
        await eventually(_at_least(handled, count), timeout=60)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return handled


async def test_a_minimal_entry_takes_its_envelope_from_the_stream(
    redis_bus: RedisStreamsBus, redis_client: Redis, redis_prefix: str
) -> None:
    entry_id = await redis_client.xadd(redis_prefix + CHANNEL, {"payload": '{"order": 7}'})
    [event] = await received_events(redis_bus, 1)
    assert event.payload == {"order": 7}
    assert event.event_id == entry_id
    assert event.channel == CHANNEL  # the key without the prefix
    milliseconds = int(entry_id.split("-")[0])
    assert event.emitted_at == datetime.fromtimestamp(milliseconds / 1000, UTC)
    assert event.source == ""
    assert event.correlation_id is None


async def test_the_reference_producer_fields_are_kept(
    redis_bus: RedisStreamsBus, redis_client: Redis, redis_prefix: str
) -> None:
    key = redis_prefix + CHANNEL
    times = {
        "2026-05-01T12:00:00+02:00": datetime(2026, 5, 1, 10, tzinfo=UTC),
        "2026-05-01T10:00:00Z": datetime(2026, 5, 1, 10, tzinfo=UTC),
        "2026-05-01T10:00:00.250000": datetime(2026, 5, 1, 10, 0, 0, 250000, tzinfo=UTC),
        "1777629600": datetime(2026, 5, 1, 10, tzinfo=UTC),  # epoch seconds
        "1777629600.5": datetime(2026, 5, 1, 10, 0, 0, 500000, tzinfo=UTC),
        "1777629600500": datetime(2026, 5, 1, 10, 0, 0, 500000, tzinfo=UTC),  # milliseconds
    }
    for number, timestamp in enumerate(times):
        await redis_client.xadd(
            key,
            {
                "emitter": "orchestrator",
                "payload": f'{{"n": {number}}}',
                "timestamp": timestamp,
                "correlation_id": f"corr-{number}",
            },
        )
    events = await received_events(redis_bus, len(times))
    assert [e.emitted_at for e in events] == list(times.values())
    assert {e.source for e in events} == {"orchestrator"}
    assert [e.correlation_id for e in events] == [f"corr-{n}" for n in range(len(times))]
    # The bus's own read (diagnostics) sees the same events.
    assert await redis_bus.read(CHANNEL) == events


async def test_a_redelivered_entry_keeps_its_event_id(
    redis_bus: RedisStreamsBus, redis_client: Redis, redis_prefix: str
) -> None:
    # Handlers dedupe by event id: an entry delivered twice must carry the same id twice.
    entry_id = await redis_client.xadd(redis_prefix + CHANNEL, {"payload": "{}"})
    [event] = await received_events(redis_bus, 1, fail_first=True)
    assert event.event_id == entry_id


@pytest.mark.parametrize(
    "text",
    [
        *("", "now", "NaN", "inf", "1e400", "-5", "99999999999999999999", "2026-13-01", "١٢٣"),
        "0001-01-01T00:00+01:00",
    ],
)
def test_times_that_are_no_time_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)


def test_an_event_id_named_after_another_entry_is_refused() -> None:
    # Entry ids are the default event ids and easy to predict: a producer naming its event after
    # the next entry would make that entry's event a "duplicate", dropped without a word.
    fields = {"payload": "{}", "event_id": "1718000000001-0"}
    with pytest.raises(MalformedEntry, match="stream entry id"):
        event_from_entry(fields, entry_id="1718000000000-0", channel="c")
    own = event_from_entry({**fields, "event_id": "1718000000000-0"}, entry_id="1718000000000-0",
                           channel="c")  # fmt: skip
    assert own.event_id == "1718000000000-0"
    named = event_from_entry({**fields, "event_id": "order-42"}, entry_id="1-0", channel="c")
    assert named.event_id == "order-42"
