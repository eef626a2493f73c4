"""The event-loop lateness probe every service runs while it serves.

A coroutine that holds the event loop (CPU work, a synchronous call, an extension that keeps the
GIL) delays every other request, timer and heartbeat of its process, and no request metric says
where the time went. The probe sleeps :data:`PROBE_INTERVAL_SECONDS` in a loop and records how
much later than due each wake-up came: ``conclave_<service>_event_loop_lateness_seconds`` (a
histogram) and ``conclave_<service>_event_loop_lateness_max_seconds`` (the largest since the
service last began serving). A stall of 200 ms shows up as one wake-up up to 200 ms late: less
the part of the interval that had already passed when the stall began.
"""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import Gauge, Histogram

PROBE_INTERVAL_SECONDS = 0.025
PROBE_TASK_NAME = "event-loop-lateness-probe"


class EventLoopProbe:
    """Measures the lateness of the event loop it is started on (see the module docstring)."""

    def __init__(
        self,
        lateness: Histogram,
        largest: Gauge,
        *,
        interval_seconds: float = PROBE_INTERVAL_SECONDS,
    ) -> None:
        self._lateness = lateness
        self._largest = largest
        self._interval = interval_seconds
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start measuring on the running loop; a second call does nothing."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._measure(), name=PROBE_TASK_NAME
            )

    async def stop(self) -> None:
        """Stop measuring and wait until the task has ended; a second call does nothing."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # Only the probe's own cancellation is expected: a cancellation of the caller while
            # it waits here goes on to the caller.
            await asyncio.wait([task])
            with contextlib.suppress(asyncio.CancelledError):
                task.result()

    async def _measure(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._interval
        observe = self._lateness.observe
        # The gauge is the largest since the service last began serving: reset on purpose, so a
        # second serving period on the same metrics does not mix with the first.
        largest = 0.0
        self._largest.set(0.0)
        while True:
            due = loop.time() + interval
            await asyncio.sleep(interval)
            # asyncio runs a timer up to its clock resolution early: that is not lateness.
            late = max(0.0, loop.time() - due)
            observe(late)
            if late > largest:
                largest = late
                self._largest.set(late)
