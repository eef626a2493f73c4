"""Transactional outbox and its relay: the one way any Conclave service publishes an event.

A service writes its business row and the event in one database transaction (:func:`outbox_write`
with the :class:`~conclave.platform.db.batch.BatchWriter`, or :func:`add_event` on a connection it
owns). After commit the relay publishes pending events and marks them published; while the bus is
down it retries with capped exponential backoff. Delivery is at-least-once: a crash between publish
and mark publishes again, and consumers dedupe by ``event_id``.

Events written through the writer are handed to this process's relay when their commit succeeds,
so it publishes them without reading them back; their rows are reserved for it for
:data:`HANDOFF_RESERVATION` (other relays' polls skip them), after which any relay publishes what a
crashed process left behind. Events added on a caller's connection are found by polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.platform.bus.base import Event, EventBus
from conclave.platform.clock import as_utc, utc_now
from conclave.platform.db.batch import BatchWriter, Insert, UpdateAll
from conclave.platform.db.engine import is_sqlite, is_store_down
from conclave.platform.db.schema import outbox_events
from conclave.platform.errors import BusUnavailable

log = logging.getLogger(__name__)

HANDOFF_RESERVATION = timedelta(seconds=10)
"""How long polls leave an event to the relay of the process that committed it."""


def _row(event: Event) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "channel": event.channel,
        "source": event.source,
        "correlation_id": event.correlation_id,
        "payload": dict(event.payload),
        "created_at": event.emitted_at,
        "next_attempt_at": event.emitted_at,
        "attempts": 0,
    }


def outbox_write(event: Event) -> Insert:
    """The outbox row of ``event``, to commit with a batch of business writes; once committed,
    the writer hands the event to the relay (reserved for it, see the module's docstring)."""
    row = _row(event)
    row["next_attempt_at"] = event.emitted_at + HANDOFF_RESERVATION
    return Insert(outbox_events, row, committed=event)


async def add_event(connection: AsyncConnection, event: Event) -> None:
    """Insert ``event`` into the outbox inside the caller's open transaction."""
    await connection.execute(outbox_events.insert().values(**_row(event)))


def _event_from_row(row: Any) -> Event:
    return Event(
        channel=row.channel,
        payload=row.payload,
        source=row.source,
        event_id=row.event_id,
        emitted_at=as_utc(row.created_at),
        correlation_id=row.correlation_id,
    )


async def pending_count(engine: AsyncEngine) -> int:
    """Events committed but not yet published."""
    async with engine.connect() as connection:
        count = await connection.scalar(
            select(func.count())
            .select_from(outbox_events)
            .where(outbox_events.c.published_at.is_(None))
        )
    return int(count or 0)


async def _mark_published(connection: AsyncConnection, ids: Sequence[str]) -> None:
    await connection.execute(
        update(outbox_events)
        .where(outbox_events.c.event_id.in_(ids))
        .values(published_at=utc_now(), attempts=outbox_events.c.attempts + 1)
    )


class OutboxRelay:
    """Publishes committed outbox rows to the bus; any number of relays may share one store."""

    def __init__(
        self,
        engine: AsyncEngine,
        bus: EventBus,
        *,
        poll_seconds: float = 1.0,
        max_backoff_seconds: float = 10.0,
        retention: timedelta = timedelta(days=7),
        batch_size: int = 500,
        writer: BatchWriter | None = None,
    ) -> None:
        self._engine = engine
        self._bus = bus
        self._writer = writer
        self._handed: list[Event] = []
        self._poll_requested = True
        self._poll = poll_seconds
        self._max_backoff = max_backoff_seconds
        self._retention = retention
        self._batch_size = batch_size
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.bus_healthy = True

    def wake(self) -> None:
        """Ask the relay to look for new events now (called after a commit)."""
        self._poll_requested = True
        self._wake.set()

    def handoff(self, committed: list[Any]) -> None:
        """Take the events of a commit that just succeeded, to publish without reading them back
        (the writer's after-commit callback)."""
        events = [item for item in committed if isinstance(item, Event)]
        if events:
            self._handed.extend(events)
            self._wake.set()

    async def start(self) -> None:
        """Start the background loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="outbox-relay")

    async def stop(self) -> None:
        """Publish what can be published quickly, then stop."""
        if self._task is None:
            return
        # Ask the loop to finish its pass rather than cancelling it: cancelling a task inside a
        # database transaction can leave the driver (aiosqlite's thread) waiting forever.
        self._stopping = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=5)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_cleanup = last_poll = 0.0
        while True:
            self._wake.clear()
            stopping = self._stopping  # requested before this pass: make it the last one
            # Under load, hand-offs wake the relay every few milliseconds; the table is still
            # polled at least every `poll_seconds` for what they do not cover.
            poll = stopping or self._poll_requested or loop.time() - last_poll >= self._poll
            more = False
            try:
                await self._publish_handed()
                if poll:
                    self._poll_requested = False
                    last_poll = loop.time()
                    more = await self.publish_pending() >= self._batch_size
                if loop.time() - last_cleanup > 3600:
                    last_cleanup = loop.time()
                    await self.delete_published_before(utc_now() - self._retention)
            except Exception as exc:
                level = logging.WARNING if is_store_down(exc) else logging.ERROR
                log.log(level, "outbox relay pass failed", exc_info=not is_store_down(exc))
            if stopping:
                return
            if more:
                self._poll_requested = True  # more are waiting
                continue
            if self._handed:
                continue
            # asyncio.timeout, not wait_for: no task per wait, and no cancellation dropped
            # (Python 3.11's wait_for can lose one that arrives as the event is set).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll):
                    await self._wake.wait()

    async def _publish_handed(self) -> None:
        if not self._handed:
            return
        events, self._handed = self._handed, []
        ids = [event.event_id for event in events]
        try:
            await self._bus.publish(events)
        except BusUnavailable as exc:
            self.bus_healthy = False
            async with self._engine.begin() as connection:  # back to polling, with backoff
                await self._record_failure(connection, ids, 1, str(exc))
            return
        self.bus_healthy = True
        if self._writer is not None:  # rides along with the next group commit
            marks = {"published_at": utc_now(), "attempts": 1}
            await self._writer.write(UpdateAll(outbox_events, "event_id", ids, marks))
            return
        async with self._engine.begin() as connection:
            await _mark_published(connection, ids)

    async def publish_pending(self) -> int:
        """Publish one batch of due events; return how many were published."""
        now = utc_now()
        query = (
            select(outbox_events)
            .where(outbox_events.c.published_at.is_(None), outbox_events.c.next_attempt_at <= now)
            .order_by(outbox_events.c.created_at)
            .limit(self._batch_size)
        )
        if not is_sqlite(self._engine):
            # Several replicas relay from one table: each row is taken by one relay at a time.
            query = query.with_for_update(skip_locked=True)
        async with self._engine.begin() as connection:
            if not is_sqlite(self._engine):
                # Losing this mark in a crash only means publishing again (at-least-once, deduped
                # by event_id), so the mark need not wait for the disk.
                await connection.execute(text("SET LOCAL synchronous_commit TO OFF"))
            rows = (await connection.execute(query)).all()
            if not rows:
                return 0
            events = [_event_from_row(row) for row in rows]
            ids = [event.event_id for event in events]
            try:
                await self._bus.publish(events)
            except BusUnavailable as exc:
                self.bus_healthy = False
                attempts = max(row.attempts for row in rows) + 1
                await self._record_failure(connection, ids, attempts, str(exc))
                return 0
            self.bus_healthy = True
            await _mark_published(connection, ids)
        return len(events)

    async def _record_failure(
        self, connection: AsyncConnection, ids: Sequence[str], attempts: int, error: str
    ) -> None:
        delay = min(self._max_backoff, 0.25 * 2**attempts) * random.uniform(0.5, 1.0)
        log.warning(
            "bus down, %d events wait in the outbox",
            len(ids),
            extra={"retry_in_s": round(delay, 2)},
        )
        await connection.execute(
            update(outbox_events)
            .where(outbox_events.c.event_id.in_(ids))
            .values(
                attempts=outbox_events.c.attempts + 1,
                last_error=error[:1000],
                next_attempt_at=utc_now() + timedelta(seconds=delay),
            )
        )

    async def delete_published_before(self, cutoff: Any) -> int:
        """Drop published rows older than ``cutoff`` (the retention of the emitter audit log)."""
        async with self._engine.begin() as connection:
            result = await connection.execute(
                delete(outbox_events).where(
                    outbox_events.c.published_at.is_not(None), outbox_events.c.published_at < cutoff
                )
            )
        return int(result.rowcount or 0)
