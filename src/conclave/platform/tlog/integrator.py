"""The background loop that integrates a process's logs: :class:`LogIntegrator`.

Every process that appends may run one; at any moment one of them integrates a given log (the
others find its lock taken and try again one checkpoint interval later). A pass runs when leaves
may be waiting — after an append in this process (which wakes the loop), every
``poll_seconds`` (for appends of other processes), or again after a pass that left leaves waiting —
and never sooner than the log's checkpoint interval after its previous checkpoint, however many
appends wake it meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from conclave.platform.background import finish_or_cancel
from conclave.platform.db.engine import is_store_down
from conclave.platform.errors import StoreUnavailable
from conclave.platform.tlog.log import TransparencyLog
from conclave.platform.tlog.records import Integration, IntegrationOutcome

log = logging.getLogger(__name__)


@dataclass
class _Schedule:
    """When a log's next pass may run (event-loop time), and whether leaves may be waiting."""

    due: float = 0.0
    waiting: bool = True


class LogIntegrator:
    """Integrates ``logs`` in the background, like the outbox relay publishes: start, stop,
    woken by appends, and polling for the others'."""

    def __init__(
        self,
        logs: Sequence[TransparencyLog],
        *,
        poll_seconds: float = 5.0,
        retry_seconds: float = 1.0,
    ) -> None:
        self._logs = list(logs)
        self._poll = poll_seconds
        self._retry = retry_seconds
        self._schedules = {id(item): _Schedule() for item in self._logs}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.last: dict[str, Integration] = {}
        """The latest outcome of each log's passes, by log name."""
        self.checkpoints = 0
        """Checkpoints this loop signed since it was built."""
        self.failures = 0
        """Passes that failed since the loop was built (store down, corrupted log)."""

    def wake(self) -> None:
        """Tell the loop that leaves were appended (called after each committed append)."""
        # Only news wakes the loop: while a log is marked waiting, the loop's sleep already ends
        # at that log's due time. Waking it for every append (thousands a second) cost the
        # serving process a task switch and a timer per call.
        news = False
        for schedule in self._schedules.values():
            news |= not schedule.waiting
            schedule.waiting = True
        if news:
            self._wake.set()

    async def start(self) -> None:
        """Start the loop and listen to the logs' appends (nothing if started)."""
        if self._task is not None:
            return
        self._stopping = False
        for item in self._logs:
            item.add_append_listener(self.wake)
        self._task = asyncio.create_task(self._run(), name="tlog-integrator")

    async def stop(self) -> None:
        """Let the current pass finish (at most a few seconds), then stop. Leaves appended and not
        yet integrated stay sequenced: the next integrator, here or elsewhere, takes them."""
        if self._task is None:
            return
        for item in self._logs:
            item.remove_append_listener(self.wake)
        self._stopping = True
        self._wake.set()
        await finish_or_cancel(self._task)
        self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_poll = loop.time() + self._poll
        while not self._stopping:
            self._wake.clear()
            now = loop.time()
            if now >= next_poll:
                next_poll = now + self._poll
                for schedule in self._schedules.values():
                    schedule.waiting = True
            for item in self._logs:
                schedule = self._schedules[id(item)]
                if schedule.waiting and now >= schedule.due and not self._stopping:
                    await self._pass(item, schedule, loop.time())
            due = [s.due for s in self._schedules.values() if s.waiting]
            wake_at = min([next_poll, *due])
            delay = max(0.0, wake_at - loop.time())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    async def _pass(self, item: TransparencyLog, schedule: _Schedule, now: float) -> None:
        interval = item.checkpoint_interval
        # Cleared before the pass, and only ever set after it: an append that wakes the loop
        # while the pass runs may have come too late for it, and must not be forgotten.
        schedule.waiting = False
        try:
            result = await item.integrate()
        except Exception as exc:
            self.failures += 1
            down = isinstance(exc, StoreUnavailable) or is_store_down(exc)
            log.log(
                logging.WARNING if down else logging.ERROR,
                "transparency log integration failed",
                exc_info=not down,
                extra={"log": item.name},
            )
            schedule.due, schedule.waiting = now + self._retry, True
            return
        self.last[item.name] = result
        if result.outcome is IntegrationOutcome.INTEGRATED:
            self.checkpoints += 1
            # Whatever arrives next waits for the interval; a backlog is taken at that pace.
            schedule.due = now + interval
            schedule.waiting |= result.pending > 0
        elif result.outcome is IntegrationOutcome.TOO_SOON:
            schedule.due, schedule.waiting = now + result.wait_seconds, True
        elif result.outcome is IntegrationOutcome.BUSY:
            # Another process integrates; leaves appended after its pass began may be ours.
            schedule.due, schedule.waiting = now + interval, True
        else:  # up to date; or only rows holding no leaf were dropped, and more may wait
            # Back one interval later, not at once: a row that never moves (a trigger written by
            # hand keeping it) must not turn the loop into a busy one.
            schedule.due = now + (interval if result.pending else 0.0)
            schedule.waiting |= result.pending > 0
