"""The event-loop lateness probe under an outside review: cancellation of its stopper, and
serving twice on the same metrics."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram

from conclave.platform.event_loop_probe import EventLoopProbe


def _probe(interval: float = 0.005) -> tuple[EventLoopProbe, Histogram, Gauge]:
    registry = CollectorRegistry()
    lateness = Histogram("late_seconds", "x", registry=registry)
    largest = Gauge("late_max_seconds", "x", registry=registry)
    return EventLoopProbe(lateness, largest, interval_seconds=interval), lateness, largest


async def test_stop_does_not_swallow_a_cancellation_of_its_caller() -> None:
    """A shutdown task cancelled while it waits for the probe to end must end cancelled."""
    probe, _, _ = _probe()
    probe.start()
    await asyncio.sleep(0.02)
    reached_after_stop = asyncio.Event()

    async def shutdown() -> None:
        await probe.stop()
        reached_after_stop.set()  # must not run: this task was cancelled during stop()
        await asyncio.sleep(3600)

    task = asyncio.create_task(shutdown())
    await asyncio.sleep(0)  # shutdown() is now inside stop(), awaiting the cancelled probe
    task.cancel()
    await asyncio.sleep(0.01)
    try:
        assert not reached_after_stop.is_set(), "stop() swallowed the caller's cancellation"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_the_largest_lateness_starts_again_with_each_serving_period() -> None:
    """The gauge is the largest lateness since the service last began serving: a second serving
    period on the same metrics starts from zero on purpose, and then records its own stalls."""
    probe, _, largest = _probe()
    probe.start()
    await asyncio.sleep(0.02)
    _hold_the_loop(0.2)
    await asyncio.sleep(0.02)
    await probe.stop()
    assert _value(largest) >= 0.15
    probe.start()  # serving again (the same app under a second lifespan)
    await asyncio.sleep(0.05)
    assert _value(largest) < 0.15
    _hold_the_loop(0.1)
    await asyncio.sleep(0.02)
    await probe.stop()
    assert _value(largest) >= 0.07


def _value(gauge: Gauge) -> float:
    [metric] = gauge.collect()
    return float(metric.samples[0].value)


def _hold_the_loop(seconds: float) -> None:
    """What the probe is for: synchronous work on the event loop."""
    time.sleep(seconds)
