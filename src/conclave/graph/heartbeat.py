"""The liveness heartbeat: a background task that beats every interval on the event loop.

A beat that comes late means the event loop was blocked; no beat for longer than interval + grace
means the loop is blocked right now or the task died. Either way ``/health`` answers 503, so a
supervisor restarts a stuck process and leaves an idle one alone (the anti-restart guard). A late
beat is reported until the next on-time beat: a brief block shows up, a lasting one stays visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeartbeatReport:
    """A snapshot for /health: ``state`` is ``active``, ``stalled`` or ``stopped``."""

    state: str
    count: int
    last_beat: datetime | None
    age_seconds: float

    @property
    def healthy(self) -> bool:
        """Whether the heartbeat runs on time."""
        return self.state == "active"


class Heartbeat:
    """Counts beats of a background task and tells whether they come on time."""

    def __init__(self, interval: float, grace: float) -> None:
        self.interval = interval
        self.grace = grace
        self.count = 0
        self.last_beat: datetime | None = None
        self.last_lag = 0.0
        self._started = time.monotonic()
        self._last_mono: float | None = None
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        due = time.monotonic() + self.interval
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            self.last_lag = now - due
            self.count += 1
            self.last_beat = datetime.now(UTC)
            self._last_mono = now
            if self.last_lag > self.grace:
                log.warning("heartbeat late", extra={"lag_seconds": round(self.last_lag, 3)})
            due = now + self.interval

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Heartbeat]:
        """Run the heartbeat task for the duration of the block."""
        self._started = time.monotonic()
        self._task = asyncio.create_task(self._run(), name="graph-heartbeat")
        try:
            yield self
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def stop(self) -> None:
        """Cancel the task (what a crash of the task looks like to /health)."""
        if self._task is not None:
            self._task.cancel()

    def age(self) -> float:
        """Seconds since the last beat (since start before the first one)."""
        reference = self._last_mono if self._last_mono is not None else self._started
        return max(0.0, time.monotonic() - reference)

    def report(self) -> HeartbeatReport:
        """The heartbeat's state now."""
        age = self.age()
        if self._task is None or self._task.done():
            state = "stopped"
        elif age > self.interval + self.grace or self.last_lag > self.grace:
            state = "stalled"
        else:
            state = "active"
        return HeartbeatReport(state, self.count, self.last_beat, age)
