"""Transactional outbox and its relay: the one way any Conclave service publishes an event.

A service writes its business row and the event in one database transaction (:func:`outbox_write`
with the :class:`~conclave.platform.db.batch.BatchWriter`, or :func:`add_event` on a connection it
owns). After commit the relay publishes pending events and marks them published; while the bus is
down it retries with capped exponential backoff. Delivery is at-least-once: a crash between publish
and mark publishes again, and consumers dedupe by ``event_id``.

No row can stop the others: an event the bus refuses for a reason of its own (it cannot be
encoded, is too large, or the server refuses its entry) is set aside while the rest of its batch
is published, in order per channel. One that can never be encoded is quarantined at once; one the
server refused is retried with its own backoff and quarantined at its
``quarantine_after_attempts``-th failed attempt (:mod:`conclave.platform.outbox_store`).

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

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.platform.background import finish_or_cancel
from conclave.platform.bus.base import Event, EventBus
from conclave.platform.bus.entry import PublishRefused, Refusal
from conclave.platform.clock import as_utc, utc_now
from conclave.platform.db.batch import BatchWriter, Insert, UpdateAll
from conclave.platform.db.engine import is_store_down
from conclave.platform.db.schema import outbox_events
from conclave.platform.errors import BusUnavailable
from conclave.platform.outbox_store import (
    SetAside,
    delete_published_before,
    due_rows,
    insert_event,
    mark_published,
    quarantined_count,
    record_failure,
    set_aside,
)

log = logging.getLogger(__name__)

HANDOFF_RESERVATION = timedelta(seconds=10)
"""How long polls leave an event to the relay of the process that committed it."""

_RECOUNT_SECONDS = 30.0
"""How often a relay counts the quarantined rows (for its gauge and health), besides its own."""


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
    await insert_event(connection, _row(event))


def _event_from_row(row: Any) -> Event:
    return Event(
        channel=row.channel,
        payload=row.payload,
        source=row.source,
        event_id=row.event_id,
        emitted_at=as_utc(row.created_at),
        correlation_id=row.correlation_id,
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
        quarantine_after_attempts: int = 3,
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
        self._quarantine_after = quarantine_after_attempts
        self.bus_healthy = True
        self.quarantined = 0
        """Rows in quarantine, as last counted (by this relay every 30 s, or by a health check)."""
        self.quarantined_total = 0
        """Rows this relay has quarantined since it started."""

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
        self._stopping = True
        self._wake.set()
        await finish_or_cancel(self._task)
        self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_cleanup = last_poll = 0.0
        last_recount = -_RECOUNT_SECONDS
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
                if loop.time() - last_recount >= _RECOUNT_SECONDS:
                    last_recount = loop.time()
                    self.quarantined = await quarantined_count(self._engine)
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
        try:
            published, refusals = await self._publish(events)
        except BusUnavailable as exc:
            self.bus_healthy = False
            async with self._engine.begin() as connection:  # back to polling, with backoff
                ids = [event.event_id for event in events]
                await self._record_failure(connection, ids, 1, str(exc))
            return
        self.bus_healthy = True
        if published:
            await self._mark_handed(published)
        if refusals:  # handed-off rows are fresh: no attempt before this one
            async with self._engine.begin() as connection:
                await self._set_aside(connection, events, refusals, {})

    async def _mark_handed(self, ids: list[str]) -> None:
        if self._writer is not None:  # rides along with the next group commit
            marks = {"published_at": utc_now(), "attempts": 1}
            await self._writer.write(UpdateAll(outbox_events, "event_id", ids, marks))
            return
        async with self._engine.begin() as connection:
            await mark_published(connection, ids)

    async def publish_pending(self) -> int:
        """Publish one batch of due events; return how many rows it dealt with (published, or
        set aside because the bus refused them)."""
        async with self._engine.begin() as connection:
            rows = await due_rows(connection, utc_now(), self._batch_size)
            if not rows:
                return 0
            events = [_event_from_row(row) for row in rows]
            try:
                published, refusals = await self._publish(events)
            except BusUnavailable as exc:
                self.bus_healthy = False
                attempts = max(row.attempts for row in rows) + 1
                ids = [event.event_id for event in events]
                await self._record_failure(connection, ids, attempts, str(exc))
                return 0
            self.bus_healthy = True
            if published:
                await mark_published(connection, published)
            if refusals:
                tried = {row.event_id: row.attempts for row in rows}
                await self._set_aside(connection, events, refusals, tried)
        return len(events)

    async def _publish(self, events: Sequence[Event]) -> tuple[list[str], list[Refusal]]:
        """Publish ``events``: the ids published and the refusals; raises ``BusUnavailable``."""
        try:
            await self._bus.publish(events)
        except PublishRefused as exc:
            refused = {refusal.event_id for refusal in exc.refusals}
            published = [event.event_id for event in events if event.event_id not in refused]
            return published, exc.refusals
        except BusUnavailable:
            raise
        except Exception:
            # Neither an outage nor blamed on an event: publishing one at a time finds the event
            # (if any) at fault, so that one alone is set aside.
            log.warning(
                "publish failed without naming an event; publishing one by one", exc_info=True
            )
            return await self._publish_one_by_one(events)
        return [event.event_id for event in events], []

    async def _publish_one_by_one(self, events: Sequence[Event]) -> tuple[list[str], list[Refusal]]:
        published: list[str] = []
        refusals: list[Refusal] = []
        for event in events:
            try:
                await self._bus.publish([event])
            except PublishRefused as exc:
                refusals += exc.refusals
            except BusUnavailable:
                raise  # what was published is published again later (at-least-once)
            except Exception as exc:
                refusals.append(Refusal(event.event_id, f"{type(exc).__name__}: {exc}", False))
            else:
                published.append(event.event_id)
        return published, refusals

    async def _set_aside(
        self,
        connection: AsyncConnection,
        events: Sequence[Event],
        refusals: Sequence[Refusal],
        attempts: dict[str, int],
    ) -> None:
        channels = {event.event_id: event.channel for event in events}
        rows: list[SetAside] = []
        for refusal in refusals:
            tried = attempts.get(refusal.event_id, 0) + 1
            quarantine = refusal.lasting or tried >= self._quarantine_after
            extra = {
                "event_id": refusal.event_id,
                "channel": channels.get(refusal.event_id),
                "error": refusal.error,
                "attempts": tried,
            }
            if quarantine:
                log.error("outbox event quarantined: the bus refused it", extra=extra)
                rows.append(SetAside(refusal.event_id, refusal.error, quarantine=True))
            else:
                delay = self._backoff(tried)
                log.warning("the bus refused an outbox event; retrying it alone", extra=extra)
                rows.append(
                    SetAside(refusal.event_id, refusal.error, False, timedelta(seconds=delay))
                )
        await set_aside(connection, rows)
        quarantined = sum(row.quarantine for row in rows)
        self.quarantined_total += quarantined
        self.quarantined += quarantined

    def _backoff(self, attempts: int) -> float:
        return min(self._max_backoff, 0.25 * 2.0**attempts) * random.uniform(0.5, 1.0)

    async def _record_failure(
        self, connection: AsyncConnection, ids: Sequence[str], attempts: int, error: str
    ) -> None:
        delay = self._backoff(attempts)
        log.warning(
            "bus down, %d events wait in the outbox",
            len(ids),
            extra={"retry_in_s": round(delay, 2)},
        )
        await record_failure(connection, ids, error, utc_now() + timedelta(seconds=delay))

    async def delete_published_before(self, cutoff: Any) -> int:
        """Drop published rows older than ``cutoff`` (the retention of the emitter audit log)."""
        async with self._engine.begin() as connection:
            return await delete_published_before(connection, cutoff)
