"""All SQL on the outbox table: the rows services add, the relay's due rows and marks, and the
refused events and the operators who deal with them.

A row the bus refused for a reason of its own is either rescheduled with its own backoff or
**quarantined**: ``quarantined_at`` set, so it leaves the due set (the relay's query and the
pending index skip it) until an operator replays or discards it (``conclave outbox``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.platform.clock import as_utc, utc_now
from conclave.platform.db.schema import outbox_events
from conclave.platform.inputs import escape_unsafe

_ERROR_CHARS = 1000

_quarantined = outbox_events.c.quarantined_at.is_not(None)


@dataclass(frozen=True)
class SetAside:
    """What becomes of one refused row: quarantined, or retried after ``retry_in``."""

    event_id: str
    error: str
    quarantine: bool
    retry_in: timedelta = timedelta(0)


@dataclass(frozen=True)
class QuarantinedEvent:
    """A quarantined outbox row, as operators see it."""

    event_id: str
    channel: str
    source: str
    attempts: int
    last_error: str | None
    created_at: datetime
    quarantined_at: datetime
    payload: Any


@dataclass(frozen=True)
class OutboxFigures:
    """Rows waiting to be published, and rows set aside in quarantine."""

    pending: int
    quarantined: int


async def set_aside(connection: AsyncConnection, rows: Sequence[SetAside]) -> None:
    """Record each refused row's attempt and error, then quarantine or reschedule it (in the
    caller's transaction). A row published meanwhile (by another relay) is left alone."""
    now = utc_now()
    for row in rows:
        values: dict[str, Any] = {
            "attempts": outbox_events.c.attempts + 1,
            "last_error": row.error[:_ERROR_CHARS],
        }
        if row.quarantine:
            values["quarantined_at"] = now
        else:
            values["next_attempt_at"] = now + row.retry_in
        await connection.execute(
            update(outbox_events)
            .where(outbox_events.c.event_id == row.event_id, outbox_events.c.published_at.is_(None))
            .values(**values)
        )


async def outbox_figures(engine: AsyncEngine) -> OutboxFigures:
    """How many rows wait to be published and how many are quarantined (one round trip; both
    counts are served by partial indexes)."""
    unpublished = outbox_events.c.published_at.is_(None)
    pending = (
        select(func.count())
        .select_from(outbox_events)
        .where(unpublished, outbox_events.c.quarantined_at.is_(None))
        .scalar_subquery()
    )
    quarantined = select(func.count()).select_from(outbox_events).where(_quarantined)
    async with engine.connect() as connection:
        row = (await connection.execute(select(pending, quarantined.scalar_subquery()))).one()
    return OutboxFigures(pending=int(row[0] or 0), quarantined=int(row[1] or 0))


async def quarantined_count(engine: AsyncEngine) -> int:
    """Rows in quarantine now."""
    async with engine.connect() as connection:
        count = await connection.scalar(
            select(func.count()).select_from(outbox_events).where(_quarantined)
        )
    return int(count or 0)


async def list_quarantined(engine: AsyncEngine, limit: int = 1000) -> list[QuarantinedEvent]:
    """Quarantined rows, oldest quarantine first."""
    query = (
        select(outbox_events)
        .where(_quarantined)
        .order_by(outbox_events.c.quarantined_at, outbox_events.c.created_at)
        .limit(limit)
    )
    async with engine.connect() as connection:
        rows = (await connection.execute(query)).all()
    return [
        QuarantinedEvent(
            event_id=row.event_id,
            channel=row.channel,
            source=row.source,
            attempts=row.attempts,
            last_error=row.last_error,
            created_at=as_utc(row.created_at),
            quarantined_at=as_utc(row.quarantined_at),
            payload=row.payload,
        )
        for row in rows
    ]


def _chosen(event_ids: Sequence[str] | None) -> Any:
    if event_ids is None:
        return _quarantined
    return and_(_quarantined, outbox_events.c.event_id.in_(list(event_ids)))


async def replay(
    engine: AsyncEngine, event_ids: Sequence[str] | None, *, escape: bool = False
) -> list[str]:
    """Put quarantined rows (``None``: all of them) back in the due set, due now, with a fresh
    attempt count; ``escape`` first rewrites each payload with text the bus cannot carry escaped
    (:func:`~conclave.platform.inputs.escape_unsafe`). Returns the ids replayed; ids that are not
    quarantined are left alone."""
    async with engine.begin() as connection:
        rows = (
            await connection.execute(
                select(outbox_events.c.event_id, outbox_events.c.payload).where(_chosen(event_ids))
            )
        ).all()
        ids = [row.event_id for row in rows]
        if not ids:
            return []
        reset = {"quarantined_at": None, "next_attempt_at": utc_now(), "attempts": 0}
        if escape:
            for row in rows:
                await connection.execute(
                    update(outbox_events)
                    .where(outbox_events.c.event_id == row.event_id)
                    .values(payload=escape_unsafe(row.payload), **reset)
                )
        else:
            await connection.execute(
                update(outbox_events).where(outbox_events.c.event_id.in_(ids)).values(**reset)
            )
    return ids


async def discard(engine: AsyncEngine, event_ids: Sequence[str] | None) -> list[str]:
    """Delete quarantined rows (``None``: all of them); their events are never published.
    Returns the ids deleted; ids that are not quarantined are left alone."""
    async with engine.begin() as connection:
        ids = list(
            (
                await connection.scalars(select(outbox_events.c.event_id).where(_chosen(event_ids)))
            ).all()
        )
        if ids:
            await connection.execute(
                delete(outbox_events).where(_quarantined, outbox_events.c.event_id.in_(ids))
            )
    return ids


async def insert_event(connection: AsyncConnection, row: dict[str, Any]) -> None:
    """Insert one outbox row in the caller's open transaction."""
    await connection.execute(outbox_events.insert().values(**row))


async def pending_count(engine: AsyncEngine) -> int:
    """Events committed but not yet published (quarantined ones not included)."""
    async with engine.connect() as connection:
        count = await connection.scalar(
            select(func.count())
            .select_from(outbox_events)
            .where(outbox_events.c.published_at.is_(None), ~_quarantined)
        )
    return int(count or 0)


async def due_rows(connection: AsyncConnection, now: datetime, limit: int) -> Sequence[Any]:
    """The oldest ``limit`` rows due for publishing, taken for this transaction: on PostgreSQL,
    locked and skipped by the other relays."""
    query = (
        select(outbox_events)
        .where(
            outbox_events.c.published_at.is_(None),
            ~_quarantined,
            outbox_events.c.next_attempt_at <= now,
        )
        .order_by(outbox_events.c.created_at)
        .limit(limit)
    )
    if connection.dialect.name != "sqlite":
        # Several replicas relay from one table: each row is taken by one relay at a time.
        query = query.with_for_update(skip_locked=True)
        # Losing the marks of this transaction in a crash only means publishing again
        # (at-least-once, deduped by event_id), so its commit need not wait for the disk.
        await connection.execute(text("SET LOCAL synchronous_commit TO OFF"))
    return (await connection.execute(query)).all()


async def mark_published(connection: AsyncConnection, ids: Sequence[str]) -> None:
    """Mark rows published (one more attempt each)."""
    await connection.execute(
        update(outbox_events)
        .where(outbox_events.c.event_id.in_(ids))
        .values(published_at=utc_now(), attempts=outbox_events.c.attempts + 1)
    )


async def record_failure(
    connection: AsyncConnection, ids: Sequence[str], error: str, retry_at: datetime
) -> None:
    """Rows the bus could not take (it is down): one more attempt, the error, the next try."""
    await connection.execute(
        update(outbox_events)
        .where(outbox_events.c.event_id.in_(ids))
        .values(
            attempts=outbox_events.c.attempts + 1,
            last_error=error[:_ERROR_CHARS],
            next_attempt_at=retry_at,
        )
    )


async def delete_published_before(connection: AsyncConnection, cutoff: datetime) -> int:
    """Drop published rows older than ``cutoff``; how many went."""
    result = await connection.execute(
        delete(outbox_events).where(
            outbox_events.c.published_at.is_not(None), outbox_events.c.published_at < cutoff
        )
    )
    return int(result.rowcount or 0)
