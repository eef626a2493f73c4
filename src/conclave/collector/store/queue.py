"""SQL of expeditions: the record of each run and the work queue."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.collector.records import ExpeditionRecord
from conclave.collector.store.executor import Executor, all_rows, first_row, is_sqlite
from conclave.collector.store.tables import expeditions
from conclave.platform import keyset


def _record(row: Row[Any] | None) -> ExpeditionRecord | None:
    return ExpeditionRecord.from_row(row) if row is not None else None


async def insert_expedition(connection: AsyncConnection, record: ExpeditionRecord) -> None:
    """Insert a new (queued) expedition."""
    await connection.execute(expeditions.insert().values(**record.values()))


async def get_expedition(executor: Executor, expedition_id: str) -> ExpeditionRecord | None:
    """One expedition, or ``None``."""
    return _record(
        await first_row(
            executor, select(expeditions).where(expeditions.c.expedition_id == expedition_id)
        )
    )


async def claim_next(
    connection: AsyncConnection, worker_id: str, now: datetime, lease_until: datetime
) -> ExpeditionRecord | None:
    """Take the best queued expedition for ``worker_id`` (highest priority, then oldest).

    One statement, so SQLite (one writer) needs nothing more; on PostgreSQL ``SKIP LOCKED`` lets
    concurrent workers take different rows, and the repeated ``status`` test makes a worker that
    raced for the same row get nothing rather than a second claim.
    """
    candidate = (
        select(expeditions.c.expedition_id)
        .where(expeditions.c.status == "queued")
        .order_by(expeditions.c.priority_rank, expeditions.c.created_at)
        .limit(1)
    )
    if not is_sqlite(connection):
        candidate = candidate.with_for_update(skip_locked=True)
    statement = (
        update(expeditions)
        .where(
            expeditions.c.expedition_id == candidate.scalar_subquery(),
            expeditions.c.status == "queued",
        )
        .values(
            status="running",
            worker_id=worker_id,
            lease_expires_at=lease_until,
            attempts=expeditions.c.attempts + 1,
            started_at=func.coalesce(expeditions.c.started_at, now),
            updated_at=now,
        )
        .returning(*expeditions.c)
    )
    return _record((await connection.execute(statement)).first())


async def expired_leases(connection: AsyncConnection, now: datetime) -> list[ExpeditionRecord]:
    """Running expeditions whose worker stopped renewing its lease (locked on PostgreSQL)."""
    statement = select(expeditions).where(
        expeditions.c.status == "running", expeditions.c.lease_expires_at < now
    )
    if not is_sqlite(connection):
        statement = statement.with_for_update(skip_locked=True)
    return [ExpeditionRecord.from_row(row) for row in await connection.execute(statement)]


async def expired_lease_count(engine: AsyncEngine, now: datetime) -> int:
    """How many running expeditions have an expired lease (a cheap check before locking)."""
    row = await first_row(
        engine,
        select(func.count())
        .select_from(expeditions)
        .where(expeditions.c.status == "running", expeditions.c.lease_expires_at < now),
    )
    return int(row[0]) if row else 0


async def requeue(
    connection: AsyncConnection,
    expedition_id: str,
    now: datetime,
    *,
    claim: tuple[str, int] | None = None,
    errors: list[dict[str, Any]] | None = None,
) -> bool:
    """Put a running expedition back in the queue (its worker is gone or shutting down)."""
    conditions = [expeditions.c.expedition_id == expedition_id, expeditions.c.status == "running"]
    if claim is not None:
        conditions += [expeditions.c.worker_id == claim[0], expeditions.c.attempts == claim[1]]
    values: dict[str, Any] = {
        "status": "queued",
        "worker_id": None,
        "lease_expires_at": None,
        "updated_at": now,
    }
    if errors is not None:
        values["errors"] = errors
    result = await connection.execute(update(expeditions).where(*conditions).values(**values))
    return bool(result.rowcount)


async def renew_lease(
    engine: AsyncEngine,
    expedition_id: str,
    worker_id: str,
    lease_until: datetime,
    progress: dict[str, Any],
    agents: list[str],
    now: datetime,
    attempt: int,
) -> bool:
    """Extend the lease and save progress; ``False`` when the expedition is no longer ours.

    The claim is identified by worker *and* attempt: a worker whose lease lapsed and that claimed
    the same expedition again must not keep the stale run alive under the new claim.
    """
    async with engine.begin() as connection:
        result = await connection.execute(
            update(expeditions)
            .where(
                expeditions.c.expedition_id == expedition_id,
                expeditions.c.worker_id == worker_id,
                expeditions.c.attempts == attempt,
                expeditions.c.status == "running",
            )
            .values(
                lease_expires_at=lease_until,
                progress=progress,
                agents_deployed=agents,
                updated_at=now,
            )
        )
    return bool(result.rowcount)


async def finish(
    connection: AsyncConnection,
    expedition_id: str,
    values: dict[str, Any],
    *,
    claim: tuple[str, int] | None = None,
) -> ExpeditionRecord | None:
    """Move an active expedition to a terminal state; ``None`` if it already left that state.

    With ``claim=(worker_id, attempt)`` only that running claim qualifies (a run that lost its
    lease must not overwrite the outcome of the claim that took over).
    """
    conditions = [expeditions.c.expedition_id == expedition_id]
    if claim is None:
        conditions.append(expeditions.c.status.in_(("queued", "running")))
    else:
        conditions += [
            expeditions.c.status == "running",
            expeditions.c.worker_id == claim[0],
            expeditions.c.attempts == claim[1],
        ]
    result = await connection.execute(
        update(expeditions)
        .where(*conditions)
        .values(lease_expires_at=None, **values)
        .returning(*expeditions.c)
    )
    return _record(result.first())


async def history(
    engine: AsyncEngine,
    *,
    status: str | None,
    expedition_type: str | None,
    since: datetime | None,
    until: datetime | None,
    after: tuple[datetime, str] | None,
    limit: int,
    requested_by: str | None = None,
) -> list[ExpeditionRecord]:
    """Expeditions newest first, filtered, after a ``(created_at, expedition_id)`` cursor;
    only those of ``requested_by`` when given."""
    columns = expeditions.c
    statement = keyset.newest_first(
        select(expeditions),
        columns.created_at,
        columns.expedition_id,
        # An empty status or type filters nothing, as no filter.
        equal=(
            (columns.requested_by, requested_by),
            (columns.status, status or None),
            (columns.expedition_type, expedition_type or None),
        ),
        since=since,
        until=until,
        position=after,
        limit=limit,
    )
    return [ExpeditionRecord.from_row(row) for row in await all_rows(engine, statement)]


async def counts_by_status_and_type(
    engine: AsyncEngine, requested_by: str | None = None
) -> list[tuple[str, str, int]]:
    """``(status, expedition_type, count)`` triples (of ``requested_by``'s expeditions only,
    when given)."""
    statement = select(
        expeditions.c.status, expeditions.c.expedition_type, func.count().label("expeditions")
    ).group_by(expeditions.c.status, expeditions.c.expedition_type)
    if requested_by is not None:
        statement = statement.where(expeditions.c.requested_by == requested_by)
    rows = await all_rows(engine, statement)
    return [(row.status, row.expedition_type, int(row.expeditions)) for row in rows]


async def recent_durations(
    engine: AsyncEngine, limit: int = 1000, requested_by: str | None = None
) -> list[float]:
    """Run times in seconds of the newest finished expeditions (``requested_by``'s, when
    given)."""
    statement = select(expeditions.c.started_at, expeditions.c.completed_at).where(
        expeditions.c.status.in_(("completed", "failed")),
        expeditions.c.started_at.is_not(None),
    )
    if requested_by is not None:
        statement = statement.where(expeditions.c.requested_by == requested_by)
    rows = await all_rows(
        engine, statement.order_by(expeditions.c.completed_at.desc()).limit(limit)
    )
    return [(row.completed_at - row.started_at).total_seconds() for row in rows]


async def queue_depth(engine: AsyncEngine) -> int:
    """Expeditions waiting for a worker."""
    row = await first_row(
        engine,
        select(func.count()).select_from(expeditions).where(expeditions.c.status == "queued"),
    )
    return int(row[0]) if row else 0
