"""Queued leaves (:meth:`TransparencyLog.queued`): the SQL of ``tlog_queue``, and the integrator's
step that turns the first queued leaves into sequenced ones. Functions take a connection inside the
caller's transaction and never commit."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
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


async def sequence_queued(
    connection: AsyncConnection, log_id: int, name: str, room: int, limits: Limits
) -> int:
    """Give up to ``room`` queued leaves of the log the next indices, in queue order, and move
    them to its leaves: how many it took. The allocation's row lock lasts until the caller's
    pass commits: a direct append waits for the pass, which is short and at most one per
    checkpoint interval. The leaf hash is computed again from the data: what the tree commits
    to is the data."""
    # A pass holds what it takes in memory: as many leaves as fit the batch byte limit (16 MiB
    # by default, at least one), not 65,536 leaves of up to 1 MiB each.
    sizes = await queued_sizes(connection, log_id, room)
    count, total = 0, 0
    for size in sizes:
        total += size
        if count and total > limits.batch_bytes:
            break
        count += 1
    taken = await take_queued(connection, log_id, count) if count else []
    entries = [data for _, data in taken if data is not None and len(data) <= limits.leaf_bytes]
    if len(entries) < len(taken):
        # Only a hand-written row can be one (the writers' API checks what they queue): it must
        # not stop every later pass, so it is dropped, and said so.
        dropped = [
            queue_id for queue_id, data in taken if data is None or len(data) > limits.leaf_bytes
        ]
        log.error(
            "queued rows that hold no leaf were dropped from a transparency log's queue",
            extra={"log": name, "queue_ids": dropped[:20], "count": len(dropped)},
        )
    if not entries:
        return 0
    first = await store.allocate(connection, log_id, len(entries))
    hashes = [leaf_hash(entry) for entry in entries]
    await store.insert_leaves(connection, log_id, first, hashes, entries)
    return len(entries)


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


async def queued_sizes(connection: AsyncConnection, log_id: int, limit: int) -> list[int]:
    """The byte sizes of the first ``limit`` leaves queued for the log, in queue order."""
    rows = await connection.execute(
        select(func.length(tlog_queue.c.data))
        .where(tlog_queue.c.log_id == log_id)
        .order_by(tlog_queue.c.queue_id)
        .limit(limit)
    )
    return [int(size or 0) for size in rows.scalars()]


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
