"""The consumer kit: marks of consumed events, rejection of bad events, the listener's life."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel, ValidationError

from conclave.platform.bus.base import Event, EventRejected
from conclave.platform.bus.memory import MemoryBus
from conclave.platform.consumed_store import mark_consumed
from conclave.platform.errors import BusUnavailable, Conflict, StoreUnavailable
from conclave.platform.listener import ConsumerMetrics, Listener, dedupe_group, rejecting
from conclave.platform.metrics import ServiceMetrics
from tests.conftest import Backend, eventually

CHANNEL = "things.created"


async def test_an_event_is_marked_once_per_group_and_only_with_a_committed_transaction(
    backend: Backend,
) -> None:
    class WorkFailed(Exception):
        pass

    with pytest.raises(WorkFailed):
        async with backend.engine.begin() as connection:
            assert await mark_consumed(connection, "g", "e1")
            raise WorkFailed  # the work failed: the mark rolls back with it
    async with backend.engine.begin() as connection:
        assert await mark_consumed(connection, "g", "e1")
        assert not await mark_consumed(connection, "g", "e1")
        assert await mark_consumed(connection, "other-group", "e1")
    async with backend.engine.begin() as connection:
        assert not await mark_consumed(connection, "g", "e1")
        assert await mark_consumed(connection, dedupe_group("g", "a.channel"), "e1")


class Payload(BaseModel):
    n: int


def test_rejecting_turns_bad_input_into_a_rejection_and_lets_outages_through() -> None:
    class BadThing(EventRejected):
        pass

    with (
        pytest.raises(BadThing, match="valid integer"),
        rejecting(ValidationError, rejection=BadThing),
    ):
        Payload.model_validate({"n": "x"})
    with pytest.raises(EventRejected, match=r"^taken$"), rejecting(Conflict):
        raise Conflict("taken")
    # What may pass on redelivery is left pending, whatever was named.
    with pytest.raises(StoreUnavailable), rejecting(StoreUnavailable):
        raise StoreUnavailable()
    with pytest.raises(ConnectionError), rejecting(OSError):
        raise ConnectionError("reset")
    # What was not named is a bug, not a bad event.
    with pytest.raises(KeyError), rejecting(ValueError):
        raise KeyError("n")


class DropRefusingBus(MemoryBus):
    """The in-process bus, unreachable for deleting groups (Redis down at shutdown)."""

    async def drop_group(self, channel: str, group: str) -> None:
        raise BusUnavailable("The bus (Redis) is not reachable.")


async def test_listener_starts_once_stops_once_and_counts_outcomes() -> None:
    bus = MemoryBus(claim_idle_seconds=0.5)
    metrics = ServiceMetrics("demo")
    listener = Listener(bus, "c1", ConsumerMetrics(metrics))
    handled: list[int] = []

    async def handle(event: Event) -> None:
        if event.payload["n"] < 0:
            raise EventRejected("negative")
        handled.append(event.payload["n"])

    listener.subscribe(CHANNEL, "g", handle, start="0")
    listener.subscribe(CHANNEL, "mine", handle, start="0", drop_group_on_stop=True)
    await listener.start()
    await listener.start()
    with pytest.raises(RuntimeError):
        listener.subscribe("other", "g", handle)
    await bus.publish([Event(channel=CHANNEL, payload={"n": n}, source="t") for n in (-1, 1)])

    async def both_groups_handled() -> bool:
        return handled == [1, 1]

    await eventually(both_groups_handled)
    await listener.stop()
    await listener.stop()
    assert not listener.running

    def count(outcome: str) -> float | None:
        labels = {"channel": CHANNEL, "outcome": outcome}
        return metrics.registry.get_sample_value("conclave_demo_events_consumed_total", labels)

    assert (count("handled"), count("rejected"), count("failed")) == (2, 2, None)
    # Only the group of this process went away: "g" goes on where it was, "mine" starts over.
    await bus.publish([Event(channel=CHANNEL, payload={"n": 2}, source="t")])
    again = Listener(bus, "c1", ConsumerMetrics(ServiceMetrics("demo")))
    again.subscribe(CHANNEL, "g", handle, start="0")
    again.subscribe(CHANNEL, "mine", handle, start="0")
    await again.start()

    async def caught_up() -> bool:
        return len(handled) == 5

    await eventually(caught_up)
    await asyncio.sleep(0.3)
    await again.stop()
    assert sorted(handled) == [1, 1, 1, 2, 2]


async def test_a_bus_that_is_down_does_not_fail_the_stop() -> None:
    bus = DropRefusingBus(claim_idle_seconds=0.5)
    listener = Listener(bus, "c1", ConsumerMetrics(ServiceMetrics("demo")))

    async def ignore(_event: Event) -> None:
        return None

    listener.subscribe(CHANNEL, "mine", ignore, drop_group_on_stop=True)
    await listener.start()
    await listener.stop()
    assert not listener.running


async def test_the_listener_measures_each_groups_lag() -> None:
    bus = MemoryBus(claim_idle_seconds=0.5)
    metrics = ServiceMetrics("demo")
    listener = Listener(bus, "c1", ConsumerMetrics(metrics), lag_interval_seconds=0.05)
    release = asyncio.Event()

    async def slow(_event: Event) -> None:
        await release.wait()

    listener.subscribe(CHANNEL, "g", slow, start="0")
    await bus.publish([Event(channel=CHANNEL, payload={"n": n}, source="t") for n in range(4)])
    await listener.start()

    def lag() -> float | None:
        labels = {"channel": CHANNEL, "group": "g"}
        return metrics.registry.get_sample_value("conclave_demo_bus_consumer_lag_entries", labels)

    async def lag_is(value: float) -> bool:
        return lag() == value

    await eventually(lambda: lag_is(4))
    release.set()
    await eventually(lambda: lag_is(0))
    await listener.stop()
