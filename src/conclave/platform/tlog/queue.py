"""Queued leaves (:meth:`TransparencyLog.queued`): the SQL of ``tlog_queue``, and the integrator's
step that turns the first queued leaves into sequenced ones. Functions take a connection inside the
caller's transaction and never commit."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from conclave.platform.clock import as_utc
from conclave.platform.db.schema import (
    tlog_queue,
)
from conclave.platform.tlog import store
from conclave.platform.tlog.sequencer import Limits
from conclave.platform.transparency.hashing import leaf_hash

log = logging.getLogger(__name__)

ARRIVAL_GRACE = timedelta(seconds=30)
"""How long after its record a queued leaf may still be missing from the log's checkpoints (the
checkpoint interval and a pass, with room for a slow integrator)."""

CLOCK_SKEW = timedelta(minutes=5)
"""How far in the future a record's time may lie (another replica's clock) before it counts as
written by hand."""


_MOVE_QUEUED = text(
    "WITH taken AS ("
    "DELETE FROM tlog_queue WHERE log_id = :log_id AND queue_id = ANY(CAST(:ids AS BIGINT[])) "
    "AND length(data) <= :leaf_bytes RETURNING queue_id, data), "
    "counted AS (SELECT count(*) AS n FROM taken), "
    "allocated AS (UPDATE tlog_logs SET sequenced_size = sequenced_size + (SELECT n FROM counted) "
    "WHERE log_id = :log_id RETURNING sequenced_size) "
    "INSERT INTO tlog_leaves (log_id, leaf_index, leaf_hash, data) "
    "SELECT :log_id, allocated.sequenced_size - counted.n "
    "+ row_number() OVER (ORDER BY taken.queue_id) - 1, "
    "sha256('\\x00'::bytea || taken.data), taken.data "
    "FROM taken CROSS JOIN counted CROSS JOIN allocated "
    "RETURNING leaf_index, leaf_hash"
)
"""PostgreSQL moves the chosen queued leaves to the log in one statement: deletes them, gives
exactly as many indices as rows it deleted (the same ``UPDATE`` of the log's row as an append, its
lock held to the pass's commit), and inserts them hashing each leaf's data itself. The leaves never
travel to the integrator and back (that round trip through Python was most of a pass's CPU), what
the tree commits to is still the data, and a row that does not move (kept by a trigger written by
hand) leaves no gap: it stays queued."""


@dataclass(frozen=True)
class Sequenced:
    """The queued leaves a pass took: the index of the first, and their leaf hashes in index
    order (recomputed from their data)."""

    first: int
    hashes: list[bytes]
    dropped: int = 0
    """Queued rows that held no leaf, deleted by the pass (see :func:`_report_dropped`)."""


async def sequence_queued(
    connection: AsyncConnection, log_id: int, name: str, room: int, limits: Limits
) -> Sequenced:
    """Give up to ``room`` queued leaves of the log the next indices, in queue order, and move
    them to its leaves. The allocation's row lock lasts until the caller's pass commits: a
    direct append waits for the pass, which is short and at most one per checkpoint interval."""
    # A pass holds what it takes in memory: as many leaves as fit the batch byte limit (16 MiB
    # by default, at least one), not 65,536 leaves of up to 1 MiB each.
    chosen: list[tuple[int, int | None]] = []
    total = 0
    for queue_id, size in await queued_sizes(connection, log_id, room):
        total += size or 0
        if chosen and total > limits.batch_bytes:
            break
        chosen.append((queue_id, size))
    if not chosen:
        return Sequenced(0, [])
    if connection.dialect.name == "sqlite":
        return await _sequence_in_python(connection, log_id, name, len(chosen), limits)
    good = [queue_id for queue_id, size in chosen if size is not None and size <= limits.leaf_bytes]
    kept = set(good)
    dropped = [queue_id for queue_id, _ in chosen if queue_id not in kept]
    if dropped:
        await connection.execute(tlog_queue.delete().where(tlog_queue.c.queue_id.in_(dropped)))
        _report_dropped(name, dropped)
    if not good:
        return Sequenced(0, [], len(dropped))
    # The size is checked again as the rows move: a row grown since its size was read stays
    # queued, and the next pass drops it.
    values = {"log_id": log_id, "ids": good, "leaf_bytes": limits.leaf_bytes}
    moved = sorted(tuple(row) for row in await connection.execute(_MOVE_QUEUED, values))
    if not moved:
        return Sequenced(0, [], len(dropped))
    return Sequenced(moved[0][0], [bytes(hashed) for _, hashed in moved], len(dropped))


async def _sequence_in_python(
    connection: AsyncConnection, log_id: int, name: str, count: int, limits: Limits
) -> Sequenced:
    """:func:`sequence_queued` on SQLite (no ``sha256`` in SQL), where a hand-written row's data
    may be of any type."""
    taken = await take_queued(connection, log_id, count)
    entries = [data for _, data in taken if data is not None and len(data) <= limits.leaf_bytes]
    dropped = [
        queue_id for queue_id, data in taken if data is None or len(data) > limits.leaf_bytes
    ]
    if dropped:
        _report_dropped(name, dropped)
    if not entries:
        return Sequenced(0, [], len(dropped))
    first = await store.allocate(connection, log_id, len(entries))
    hashes = [leaf_hash(entry) for entry in entries]
    await store.insert_leaves(connection, log_id, first, hashes, entries)
    return Sequenced(first, hashes, len(dropped))


def _report_dropped(name: str, dropped: list[int]) -> None:
    # Only a hand-written row can hold no leaf (the writers' API checks what they queue): it must
    # not stop every later pass, so it is dropped, and said so.
    log.error(
        "queued rows that hold no leaf were dropped from a transparency log's queue",
        extra={"log": name, "queue_ids": dropped[:20], "count": len(dropped)},
    )


async def take_queued(
    connection: AsyncConnection, log_id: int, limit: int
) -> list[tuple[int, bytes | None]]:
    """Delete the first ``limit`` leaves queued for the log and return ``(queue id, data)`` of
    each, in queue order: exactly the rows taken, in one statement (a leaf whose writer commits
    meanwhile is neither taken nor deleted: it waits for the next pass)."""
    first = (
        select(tlog_queue.c.queue_id)
        .where(tlog_queue.c.log_id == log_id)
        .order_by(tlog_queue.c.queue_id)
        .limit(limit)
    )
    rows = await connection.execute(
        tlog_queue.delete()
        .where(tlog_queue.c.queue_id.in_(first.scalar_subquery()))
        .returning(tlog_queue.c.queue_id, tlog_queue.c.data)
    )
    return sorted((row.queue_id, _queued_data(row.data)) for row in rows)


def _queued_data(value: Any) -> bytes | None:
    """A queued row's data, or None when it holds no blob (a hand-written row on SQLite, whose
    columns keep any type): such a row is no leaf."""
    return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None


async def queued_sizes(
    connection: AsyncConnection, log_id: int, limit: int
) -> list[tuple[int, int | None]]:
    """``(queue id, byte size of the data)`` of the first ``limit`` leaves queued for the log, in
    queue order (None: the row holds no data)."""
    rows = await connection.execute(
        select(tlog_queue.c.queue_id, func.length(tlog_queue.c.data))
        .where(tlog_queue.c.log_id == log_id)
        .order_by(tlog_queue.c.queue_id)
        .limit(limit)
    )
    return [(int(queue_id), None if size is None else int(size)) for queue_id, size in rows]


async def oldest_queued_at(connection: AsyncConnection, log_id: int) -> datetime | None:
    """When the log's oldest queued leaf was queued (None: its queue is empty)."""
    moment = await connection.scalar(
        select(tlog_queue.c.queued_at)
        .where(tlog_queue.c.log_id == log_id)
        .order_by(tlog_queue.c.queue_id)
        .limit(1)
    )
    return None if moment is None else as_utc(moment)


async def queued_count(connection: AsyncConnection, log_id: int, at_most: int) -> int:
    """How many leaves are queued for the log, counted up to ``at_most`` (an index range scan
    that stops there, however long the queue)."""
    first = (
        select(tlog_queue.c.queue_id).where(tlog_queue.c.log_id == log_id).limit(at_most).subquery()
    )
    return int(await connection.scalar(select(func.count()).select_from(first)) or 0)
