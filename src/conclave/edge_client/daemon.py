"""Background sync: every period, send what is due when the server passes its health check."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable

from conclave.edge_client.client import EdgeClient
from conclave.edge_client.outbox import Outbox, SyncReport

log = logging.getLogger(__name__)

DEFAULT_EVERY_SECONDS = 15 * 60.0


class SyncDaemon:
    """Runs :meth:`Outbox.sync` on a fixed schedule.

    Runs start ``every`` seconds apart (measured from the start of the previous one, so the period
    does not drift by the time a sync takes); a run that overruns is followed at once by the next,
    and missed runs are not made up. ``clock`` (monotonic seconds) and ``sleep`` are injectable so
    the schedule can be tested without waiting.
    """

    def __init__(
        self,
        outbox: Outbox,
        client: EdgeClient,
        every: float = DEFAULT_EVERY_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        on_run: Callable[[SyncReport | None], None] | None = None,
        concurrency: int = 1,
    ) -> None:
        if every <= 0:
            raise ValueError("every must be a positive number of seconds")
        self.outbox = outbox
        self.client = client
        self.every = every
        self.concurrency = concurrency
        self._clock = clock
        self._sleep = sleep
        self._on_run = on_run

    async def run_once(self) -> SyncReport | None:
        """One scheduled run: None when the server did not pass its health check."""
        if not await self.client.health():
            log.info("edge server not reachable or unhealthy; sync skipped")
            return None
        try:
            return await self.outbox.sync(self.client, concurrency=self.concurrency)
        except sqlite3.OperationalError as exc:
            # A locked or full disk is worth a log line and another try next period, not a
            # dead daemon; a corrupt outbox (OutboxCorrupt) still stops it.
            log.warning("sync failed: %s", exc)
            return None

    async def run(self, max_runs: int | None = None) -> None:
        """Run forever (or ``max_runs`` times), the first run at once."""
        runs = 0
        next_start = self._clock()
        while max_runs is None or runs < max_runs:
            delay = next_start - self._clock()
            if delay > 0:
                await self._sleep(delay)
            started = self._clock()
            report = await self.run_once()
            runs += 1
            if self._on_run is not None:
                self._on_run(report)
            next_start = max(started + self.every, self._clock())
