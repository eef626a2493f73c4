"""Both bus implementations keep one contract: groups, ack after work, redelivery, DLQ, trim."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from redis.asyncio import Redis

from conclave.platform.bus.base import (
    Event,
    EventBus,
    EventRejected,
    Handler,
    dead_letter_channel,
)
from conclave.platform.bus.entry import PublishRefused
from conclave.platform.bus.envelope import MalformedEntry, event_from_entry
from conclave.platform.bus.factory import BusOptions, create_bus
from conclave.platform.bus.memory import MemoryBus
from conclave.platform.bus.redis_streams import RedisStreamsBus
from conclave.platform.errors import BusUnavailable, StoreUnavailable
from conclave.platform.logs import correlation_id_var
from tests.conftest import REDIS_URL, eventually

CHANNEL = "things.created"
IDLE = 0.5  # the fixtures' claim_idle_seconds
BusFactory = Callable[..., EventBus]


@pytest.fixture(params=["memory", "redis"])
def redis_isolation(request: pytest.FixtureRequest) -> str | None:
    """``None`` for the in-process bus; for Redis, this test's key prefix (keys cleaned after)."""
    if request.param == "memory":
        return None
    request.getfixturevalue("redis_client")  # skips without Redis; deletes the test's keys
    return str(request.getfixturevalue("redis_prefix"))


@pytest.fixture
async def make_bus(redis_isolation: str | None) -> AsyncIterator[BusFactory]:
    """Build buses of one implementation with custom options (isolated like the fixtures)."""
    created: list[EventBus] = []

    def factory(**options: int) -> EventBus:
        bus: EventBus
        if redis_isolation is None:
            bus = MemoryBus(claim_idle_seconds=IDLE, **options)
        else:
            bus = RedisStreamsBus(
                REDIS_URL, stream_prefix=redis_isolation, claim_idle_seconds=IDLE, **options
            )
        created.append(bus)
        return bus

    yield factory
    for bus in created:
        await bus.close()


@pytest.fixture
def bus(make_bus: BusFactory) -> EventBus:
    return make_bus()


def event(number: int = 0, **payload: object) -> Event:
    return Event(channel=CHANNEL, payload={"n": number, **payload}, source="test")


@asynccontextmanager
async def consuming(
    bus: EventBus, group: str, handler: Handler, *, consumer: str = "c1", start: str = "$"
) -> AsyncIterator[None]:
    """Run a consumer as a task for the duration of the block."""
    task = asyncio.create_task(bus.consume(CHANNEL, group, consumer, handler, start=start))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def until_listening(bus: EventBus, received: list[Event]) -> None:
    """Publish probes until the consumer's group exists and one probe came through."""

    async def probe_seen() -> bool:
        await bus.publish([event(-1, probe=True)])
        return any(e.payload.get("probe") for e in received)

    await eventually(probe_seen)


async def until(predicate: Callable[[], object], within: float = 5.0) -> None:
    """Wait until a plain (non-async) condition holds."""

    async def check() -> object:
        return predicate()

    await eventually(check, within)


def real(events: list[Event]) -> list[Event]:
    return [e for e in events if not e.payload.get("probe")]


async def test_consumer_receives_the_published_envelope_and_payload(bus: EventBus) -> None:
    sent = Event(
        channel=CHANNEL,
        payload={"name": "Zoë", "tags": ["a", "b"], "nested": {"x": 1.5, "none": None}},
        source="gateway",
        correlation_id="corr-123",
    )
    received: list[Event] = []

    async def handle(e: Event) -> None:
        received.append(e)

    async with consuming(bus, "g", handle, start="0"):
        await bus.publish([sent])
        await until(lambda: received)
    assert received == [sent]
    assert await bus.read(CHANNEL) == [sent]


async def test_handlers_log_under_each_event_correlation_id(bus: EventBus) -> None:
    events = [
        Event(channel=CHANNEL, payload={"n": n}, source="t", correlation_id=corr)
        for n, corr in enumerate(["corr-a", None, "corr-b"])
    ]
    seen: list[str | None] = []

    async def handle(e: Event) -> None:
        seen.append(correlation_id_var.get())

    async with consuming(bus, "g", handle, start="0"):
        await bus.publish(events)
        await until(lambda: len(seen) == 3)
    assert seen == ["corr-a", None, "corr-b"]  # nothing of one event leaks into the next


async def test_new_group_starts_at_the_end_or_replays_from_zero(bus: EventBus) -> None:
    old = event(1)
    await bus.publish([old])
    late: list[Event] = []
    replay: list[Event] = []

    async def handle_late(e: Event) -> None:
        late.append(e)

    async def handle_replay(e: Event) -> None:
        replay.append(e)

    async with (
        consuming(bus, "late", handle_late, start="$"),
        consuming(bus, "replay", handle_replay, start="0"),
    ):
        await until_listening(bus, late)
        new = event(2)
        await bus.publish([new])
        await until(lambda: new in late and new in replay)
    assert real(late) == [new]
    assert real(replay) == [old, new]


async def test_consumers_of_one_group_share_the_work_and_handle_each_event_once(
    bus: EventBus,
) -> None:
    handled: list[tuple[str, str]] = []

    def handler_for(consumer: str) -> Handler:
        async def handle(e: Event) -> None:
            await asyncio.sleep(0.02)  # busy: the next event goes to the other consumer
            handled.append((consumer, e.event_id))

        return handle

    events = [event(n) for n in range(30)]
    async with (
        consuming(bus, "workers", handler_for("a"), consumer="a", start="0"),
        consuming(bus, "workers", handler_for("b"), consumer="b", start="0"),
    ):
        for e in events:
            await bus.publish([e])
            await asyncio.sleep(0.01)
        await until(lambda: len(handled) >= len(events))
        await asyncio.sleep(IDLE * 2)  # long enough for an unacknowledged entry to come back
    assert sorted(event_id for _, event_id in handled) == sorted(e.event_id for e in events)
    assert {consumer for consumer, _ in handled} == {"a", "b"}


async def test_failed_event_is_redelivered_until_it_succeeds_then_acked(bus: EventBus) -> None:
    attempts: list[Event] = []

    async def flaky(e: Event) -> None:
        attempts.append(e)
        if len(attempts) < 3:
            raise RuntimeError("not yet")

    sent = event(1)
    async with consuming(bus, "g", flaky, start="0"):
        await bus.publish([sent])
        await until(lambda: len(attempts) >= 3, within=10)
        await asyncio.sleep(IDLE * 3)  # acked: it does not come back
    assert attempts == [sent, sent, sent]
    assert await bus.read(dead_letter_channel(CHANNEL)) == []


async def test_poison_event_moves_to_dlq_after_max_deliveries(make_bus: BusFactory) -> None:
    bus = make_bus(max_deliveries=2)
    poison, fine = event(1), event(2)
    calls: list[Event] = []

    async def handle(e: Event) -> None:
        calls.append(e)
        if e == poison:
            raise RuntimeError("cannot handle this one")

    async with consuming(bus, "g", handle, start="0"):
        await bus.publish([poison, fine])
        dlq = dead_letter_channel(CHANNEL)
        await eventually(lambda: bus.read(dlq), timeout=60)
        await asyncio.sleep(IDLE * 3)  # dead-lettered: it is not delivered again
    assert await bus.read(dlq) == [poison]
    assert calls.count(poison) == 2
    assert calls.count(fine) == 1


async def test_streams_are_trimmed_to_about_maxlen(make_bus: BusFactory) -> None:
    bus = make_bus(maxlen=10)
    events = [event(n) for n in range(1000)]
    for start in range(0, len(events), 100):
        await bus.publish(events[start : start + 100])
    kept = await bus.read(CHANNEL, count=10_000)
    # Redis trims approximately, whole radix-tree nodes (100 entries by default) at a time.
    assert 10 <= len(kept) <= 200
    assert kept == events[-len(kept) :]


async def test_a_channel_is_trimmed_to_its_recent_entries_by_the_bus_clock(bus: EventBus) -> None:
    old = [event(n) for n in range(250)]
    await bus.publish(old)
    await asyncio.sleep(3.0)
    new = [event(n) for n in range(250, 260)]
    await bus.publish(new)
    # By the bus's own clock (Redis's TIME), not the caller's: nothing the caller's clock says
    # can make it delete what was just published.
    await bus.trim_older_than(CHANNEL, timedelta(seconds=1.5))
    await bus.trim_older_than("nothing.here", timedelta(seconds=1.5))  # no stream: nothing to do
    kept = await bus.read(CHANNEL, count=1000)
    # Approximately on Redis: older entries sharing a radix-tree node (100) with newer ones stay.
    assert kept[-len(new) :] == new
    assert len(kept) <= len(new) + 100


async def test_the_groups_of_a_channel_are_named(bus: EventBus) -> None:
    assert await bus.group_names(CHANNEL, "reader:") == []
    received: list[Event] = []

    async def handle(e: Event) -> None:
        received.append(e)

    async with consuming(bus, "reader:one", handle), consuming(bus, "other", handle):
        await until_listening(bus, received)
        await eventually(lambda: _named(bus, ["reader:one"]))


async def _named(bus: EventBus, names: list[str]) -> bool:
    return sorted(await bus.group_names(CHANNEL, "reader:")) == names


async def test_unreachable_redis_raises_bus_unavailable() -> None:
    bus = RedisStreamsBus("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(BusUnavailable):
            await bus.ping()
        with pytest.raises(BusUnavailable):
            await bus.publish([event(1)])
    finally:
        await bus.close()


def test_bus_url_picks_the_implementation() -> None:
    assert isinstance(create_bus("memory://"), MemoryBus)
    redis_bus = create_bus("redis://127.0.0.1:6379/0", BusOptions(stream_prefix="p:"))
    assert isinstance(redis_bus, RedisStreamsBus)
    assert redis_bus.key("x") == "p:x"
    with pytest.raises(ValueError, match="kafka"):
        create_bus("kafka://broker:9092")


async def test_redis_entry_layout(
    redis_bus: RedisStreamsBus, redis_client: Redis, redis_prefix: str
) -> None:
    sent = Event(channel=CHANNEL, payload={"a": [1, "é"]}, source="gateway")
    await redis_bus.publish([sent])
    entries = await redis_client.xrange(redis_prefix + CHANNEL)
    assert len(entries) == 1
    fields = entries[0][1]
    assert set(fields) == {
        "event_id", "channel", "source", "emitted_at", "correlation_id", "payload",
    }  # fmt: skip
    assert fields["event_id"] == sent.event_id
    assert fields["channel"] == CHANNEL
    assert fields["source"] == "gateway"
    assert fields["emitted_at"].endswith("Z")
    assert fields["correlation_id"] == ""
    assert fields["payload"] == '{"a":[1,"é"]}'


async def test_redis_entries_keep_any_content_and_order(
    redis_bus: RedisStreamsBus, redis_client: Redis, redis_prefix: str
) -> None:
    # The XADD commands are packed by the bus itself: lengths, not delimiters, frame each value.
    tricky = ["", "line\r\nbreak", "$5\r\n*1\r\n", "é ☃ \x00 zero", "x" * 70_000]
    sent = [
        Event(
            channel=CHANNEL,
            payload={"text": text},
            source=text[:20],
            correlation_id=text[:128] or None,
        )
        for text in tricky
    ]
    await redis_bus.publish(sent)
    entries = await redis_client.xrange(redis_prefix + CHANNEL)
    assert [fields for _, fields in entries] == [e.to_fields() for e in sent]
    # A consumer reads back every event but the one holding NUL, which no store can keep: it is
    # refused as malformed (and dead-lettered by a consumer group, see the dead-letter tests).
    with_nul = 3
    read = [
        event_from_entry(fields, entry_id=entry_id, channel=CHANNEL)
        for index, (entry_id, fields) in enumerate(entries)
        if index != with_nul
    ]
    assert read == [e for index, e in enumerate(sent) if index != with_nul]
    entry_id, fields = entries[with_nul]
    with pytest.raises(MalformedEntry, match=r"unsafe value at payload\.text: nul"):
        event_from_entry(fields, entry_id=entry_id, channel=CHANNEL)


async def test_redis_refused_entry_is_named_and_spares_the_others_and_the_connection(
    redis_bus: RedisStreamsBus, redis_client: Redis, redis_prefix: str
) -> None:
    await redis_client.set(redis_prefix + "not.a.stream", "a plain string")
    wrong = Event(channel="not.a.stream", payload={}, source="t")
    with pytest.raises(PublishRefused) as refused:
        await redis_bus.publish([event(1), wrong, event(2)])
    [refusal] = refused.value.refusals
    assert refusal.event_id == wrong.event_id
    assert refusal.error.startswith("WRONGTYPE")
    assert not refusal.lasting  # the key may be fixed: the row is retried before quarantine
    # Replies left unread after the error must not be read by the next publish as its own.
    for attempt in range(3):
        await redis_bus.publish([event(10 + attempt)])
    entries = await redis_client.xrange(redis_prefix + CHANNEL)
    read = [event_from_entry(f, entry_id=i, channel=CHANNEL) for i, f in entries]
    assert [e.payload["n"] for e in read] == [1, 2, 10, 11, 12]


async def test_redis_drop_group(
    redis_bus: RedisStreamsBus, redis_client: Redis, redis_prefix: str
) -> None:
    key = redis_prefix + CHANNEL
    await redis_bus.publish([event(1)])
    for group in ("mine", "theirs"):
        await redis_client.xgroup_create(key, group, id="0")
    await redis_bus.drop_group(CHANNEL, "mine")
    await redis_bus.drop_group(CHANNEL, "mine")  # already gone: nothing happens
    await redis_bus.drop_group("no.such.channel", "mine")
    assert [group["name"] for group in await redis_client.xinfo_groups(key)] == ["theirs"]


async def test_redis_malformed_entry_goes_to_dlq(
    redis_bus: RedisStreamsBus, redis_client: Redis, redis_prefix: str
) -> None:
    key = redis_prefix + CHANNEL
    await redis_client.xadd(key, {"event_id": "x", "payload": "{not json"})
    good = event(1)
    await redis_bus.publish([good])
    received: list[Event] = []

    async def handle(e: Event) -> None:
        received.append(e)

    async with consuming(redis_bus, "g", handle, start="0"):
        await until(lambda: received)
        dead = await eventually(lambda: redis_client.xrange(dead_letter_channel(key)))
        pending = await redis_client.xpending(key, "g")
    assert received == [good]
    assert len(dead) == 1
    fields = dead[0][1]
    assert fields["payload"] == "{not json"
    assert fields["dlq_reason"].startswith("malformed entry")
    assert fields["dlq_group"] == "g"
    assert pending["pending"] == 0


async def test_a_dependency_outage_does_not_dead_letter_valid_events(make_bus: BusFactory) -> None:
    bus = make_bus(max_deliveries=2)
    sent = event(7)
    attempts: list[Event] = []
    handled: list[Event] = []

    async def handle(e: Event) -> None:
        attempts.append(e)
        if len(attempts) <= 4:  # the store is down for more deliveries than max_deliveries
            raise StoreUnavailable("The relational store is not reachable.")
        handled.append(e)

    async with consuming(bus, "g", handle, start="0"):
        await bus.publish([sent])
        await until(lambda: handled, within=15)
        await asyncio.sleep(IDLE * 2)  # handled and acknowledged: not delivered again
    assert handled == [sent]
    assert len(attempts) == 5
    assert await bus.read(dead_letter_channel(CHANNEL)) == []


async def test_memory_consumers_stop_when_cancelled_as_events_arrive() -> None:
    # Cancelling a consumer while a publish wakes it: the cancellation must be honoured (it was
    # dropped on Python 3.11 when the wait ran inside asyncio.wait_for, and stop() hung).
    bus = MemoryBus(claim_idle_seconds=0.5)
    shuffle = random.Random(7)

    async def handle(_event: Event) -> None:
        return None

    async with asyncio.timeout(30):
        for _ in range(300):
            consumers = [
                asyncio.create_task(bus.consume(CHANNEL, f"g{n}", "c", handle)) for n in range(3)
            ]
            for _ in range(shuffle.randint(0, 3)):
                await asyncio.sleep(0)
            await bus.publish([Event(channel="elsewhere", payload={}, source="t")])
            for _ in range(shuffle.randint(0, 2)):
                await asyncio.sleep(0)
            for consumer in consumers:
                consumer.cancel()
            results = await asyncio.gather(*consumers, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in results), results


async def test_unencodable_and_oversized_events_are_refused_by_name_and_the_others_published(
    make_bus: BusFactory,
) -> None:
    # Both buses refuse what Redis cannot take, so embedded mode fails the way production does.
    bus = make_bus(max_event_bytes=4096)
    surrogate = event(2, message="\ud800")
    huge = event(3, blob="x" * 5000)
    sent = [event(1), surrogate, huge, event(4)]
    with pytest.raises(PublishRefused) as refused:
        await bus.publish(sent)
    refusals = {refusal.event_id: refusal for refusal in refused.value.refusals}
    assert set(refusals) == {surrogate.event_id, huge.event_id}
    assert "UTF-8" in refusals[surrogate.event_id].error
    assert "exceeds" in refusals[huge.event_id].error
    assert all(refusal.lasting for refusal in refusals.values())
    assert [e.payload["n"] for e in await bus.read(CHANNEL)] == [1, 4]


async def test_redis_names_every_refused_entry(
    redis_bus: RedisStreamsBus, redis_client: Redis, redis_prefix: str
) -> None:
    for key in ("plain.a", "plain.b"):
        await redis_client.set(redis_prefix + key, "a plain string")
    wrong = [Event(channel=key, payload={}, source="t") for key in ("plain.a", "plain.b")]
    with pytest.raises(PublishRefused) as refused:
        await redis_bus.publish([wrong[0], event(1), wrong[1], event(2)])
    assert [r.event_id for r in refused.value.refusals] == [e.event_id for e in wrong]
    assert [e.payload["n"] for e in await redis_bus.read(CHANNEL)] == [1, 2]


async def test_a_rejected_event_is_dead_lettered_at_once(make_bus: BusFactory) -> None:
    # EventRejected: the event itself is bad input; redelivering it can only fail again.
    bus = make_bus(max_deliveries=5)
    bad, good = event(1), event(2)
    calls: list[Event] = []

    async def handle(e: Event) -> None:
        calls.append(e)
        if e == bad:
            raise EventRejected("not a valid request")

    async with consuming(bus, "g", handle, start="0"):
        await bus.publish([bad, good])
        await until(lambda: good in calls)
        await eventually(lambda: bus.read(dead_letter_channel(CHANNEL)), timeout=IDLE * 2)
        await asyncio.sleep(IDLE * 3)  # dead-lettered: it is not delivered again
    assert calls == [bad, good]
    assert await bus.read(dead_letter_channel(CHANNEL)) == [bad]


async def test_redis_rejection_reason_and_oversized_entries(
    redis_client: Redis, redis_prefix: str
) -> None:
    bus = RedisStreamsBus(
        REDIS_URL, stream_prefix=redis_prefix, claim_idle_seconds=IDLE, max_event_bytes=10_000
    )
    key = redis_prefix + CHANNEL
    await redis_client.xadd(key, {"payload": '{"big": "' + "x" * 20_000 + '"}'})
    await redis_client.xadd(key, {"payload": '{"n": 1}'})
    handled: list[Event] = []

    async def handle(e: Event) -> None:
        if e.payload == {"n": 1}:
            raise EventRejected("n must not be 1")
        handled.append(e)

    try:
        async with consuming(bus, "g", handle, start="0"):
            dead = await eventually(lambda: _entries(redis_client, key + ".dlq", 2))
    finally:
        await bus.close()
    assert handled == []
    reasons = [fields["dlq_reason"] for _, fields in dead]
    assert reasons[0].startswith("malformed entry: entry of about")
    assert reasons[1] == "rejected: n must not be 1"


async def _entries(client: Redis, key: str, count: int) -> list | None:
    entries = await client.xrange(key)
    return entries if len(entries) >= count else None


async def test_consumer_lag_counts_what_a_group_has_not_acknowledged(make_bus: BusFactory) -> None:
    bus = make_bus()
    release = asyncio.Event()
    seen: list[Event] = []

    async def slow(e: Event) -> None:
        seen.append(e)
        await release.wait()

    assert await bus.consumer_lag(CHANNEL, "g") is None  # no such group (nor stream)
    async with consuming(bus, "g", slow, start="0"):
        await bus.publish([event(n) for n in range(3)])
        await until(lambda: seen)  # one delivered and pending, two not delivered
        assert await bus.consumer_lag(CHANNEL, "g") == 3
        release.set()
        await until(lambda: len(seen) == 3)

        async def caught_up() -> bool:
            return await bus.consumer_lag(CHANNEL, "g") == 0

        await eventually(caught_up)
    assert await bus.consumer_lag(CHANNEL, "other") is None


async def test_dead_letters_are_listed_found_and_removed(make_bus: BusFactory) -> None:
    bus = make_bus()
    rejected = event(7)

    async def reject(_e: Event) -> None:
        raise EventRejected("no customer")

    async with consuming(bus, "orders", reject, start="0"):
        await bus.publish([rejected])
        await eventually(lambda: bus.dead_letters(CHANNEL))
    assert CHANNEL in await bus.dead_letter_channels()
    (letter,) = await bus.dead_letters(CHANNEL)
    assert letter.channel == CHANNEL and letter.group == "orders"
    assert "no customer" in letter.reason
    assert letter.event().event_id == rejected.event_id
    assert letter.event().payload == rejected.payload
    assert await bus.dead_letter(CHANNEL, letter.entry_id) == letter
    assert await bus.dead_letter(CHANNEL, "1-999") is None
    assert await bus.remove_dead_letter(CHANNEL, letter.entry_id) is True
    assert await bus.remove_dead_letter(CHANNEL, letter.entry_id) is False
    assert await bus.dead_letters(CHANNEL) == []
    assert CHANNEL not in await bus.dead_letter_channels()
