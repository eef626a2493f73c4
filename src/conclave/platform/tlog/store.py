"""All SQL of the transparency logs (tables in :mod:`conclave.platform.db.schema`). Functions take
a connection inside the caller's transaction and never commit.

Reads of hashes go by primary key only: a root, a proof or a frontier is one statement naming its
O(log n) ``(level, subtree_index)`` keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from conclave.platform.clock import as_utc
from conclave.platform.db.schema import (
    tlog_checkpoints,
    tlog_leaves,
    tlog_logs,
    tlog_queue,
    tlog_subtrees,
)
from conclave.platform.tlog.records import LogState, StoredLeaf
from conclave.platform.transparency.subtrees import Subtree, SubtreeHash

# A 64-bit advisory lock key per schema and log: advisory locks are database-wide, and two
# deployments (or test schemas) sharing a database must not take each other's.
_INTEGRATION_LOCK = text(
    "SELECT pg_try_advisory_xact_lock("
    "('x' || substr(md5(current_schema() || '/conclave.tlog/' || :name), 1, 16))::bit(64)::bigint)"
)


# On PostgreSQL a batch's rows go as arrays in one statement: SQLAlchemy's executemany builds
# parameters row by row, which was most of the sequencer's CPU (docs/transparency.md, "Costs").
_INSERT_LEAVES = text(
    "INSERT INTO tlog_leaves (log_id, leaf_index, leaf_hash, data) "
    "SELECT :log_id, CAST(:first AS BIGINT) + n - 1, h, d "
    "FROM unnest(CAST(:hashes AS BYTEA[]), CAST(:data AS BYTEA[])) WITH ORDINALITY AS t(h, d, n)"
)
_INSERT_SUBTREES = text(
    "INSERT INTO tlog_subtrees (log_id, level, subtree_index, hash) "
    "SELECT :log_id, l, i, h FROM unnest("
    "CAST(:levels AS SMALLINT[]), CAST(:indices AS BIGINT[]), CAST(:hashes AS BYTEA[])"
    ") AS t(l, i, h)"
)

# One statement whatever the number of keys (prepared once): a nested loop of primary-key lookups.
_SUBTREE_HASHES = text(
    "SELECT s.level, s.subtree_index, s.hash "
    "FROM unnest(CAST(:levels AS SMALLINT[]), CAST(:indices AS BIGINT[])) AS k(level, idx) "
    "JOIN tlog_subtrees s "
    "ON s.log_id = :log_id AND s.level = k.level AND s.subtree_index = k.idx"
)


def _is_sqlite(connection: AsyncConnection) -> bool:
    return connection.dialect.name == "sqlite"


def _bytes(value: Any) -> bytes:
    # A row INSERTed by hand may hold text where the log writes bytes (SQLite keeps what it is
    # given): read as its UTF-8 bytes, which then fail the hash checks, instead of a TypeError.
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    # A number where bytes belong (SQLite keeps that too): its text, never bytes(n), which is n
    # zero bytes (50,000,000 of them for one hand-written row).
    return repr(value).encode("ascii", "replace")


def _state(row: Any) -> LogState:
    return LogState(
        log_id=row.log_id,
        name=row.name,
        origin=row.origin,
        sequenced_size=row.sequenced_size,
        integrated_size=row.integrated_size,
        root_hash=bytes(row.root_hash),
        integrated_at=as_utc(row.integrated_at),
        created_at=as_utc(row.created_at),
    )


async def create_log(
    connection: AsyncConnection, name: str, origin: str, root_hash: bytes, now: datetime
) -> bool:
    """Add the empty log ``name`` unless it exists: ``True`` when this call added it. A concurrent
    creator waits on the name until the first commits, then adds nothing."""
    dialect = sqlite if _is_sqlite(connection) else postgresql
    statement = (
        dialect.insert(tlog_logs)
        .values(
            name=name,
            origin=origin,
            sequenced_size=0,
            integrated_size=0,
            root_hash=root_hash,
            integrated_at=now,
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["name"])
    )
    result = await connection.execute(statement)
    return result.rowcount == 1


async def log_state(connection: AsyncConnection, name: str) -> LogState | None:
    """The row of the log ``name``, if it exists."""
    row = (await connection.execute(select(tlog_logs).where(tlog_logs.c.name == name))).first()
    return _state(row) if row is not None else None


async def allocate(connection: AsyncConnection, log_id: int, count: int) -> int:
    """Give ``count`` leaves the next indices of the log: the first of them.

    One statement whose row lock lasts until the caller's transaction ends, so batches commit in
    the order of their indices, and a batch that rolls back returns its allocation."""
    new_size = await connection.scalar(
        update(tlog_logs)
        .where(tlog_logs.c.log_id == log_id)
        .values(sequenced_size=tlog_logs.c.sequenced_size + count)
        .returning(tlog_logs.c.sequenced_size)
    )
    if new_size is None:
        raise LookupError(f"no transparency log {log_id}")
    return int(new_size) - count


async def insert_leaves(
    connection: AsyncConnection,
    log_id: int,
    first_index: int,
    leaf_hashes: Sequence[bytes],
    entries: Sequence[bytes],
) -> None:
    """Store leaves ``first_index`` onwards (one statement)."""
    if not _is_sqlite(connection):
        values = {"log_id": log_id, "first": first_index, "hashes": leaf_hashes, "data": entries}
        await connection.execute(_INSERT_LEAVES, values)
        return
    rows = [
        {"log_id": log_id, "leaf_index": first_index + offset, "leaf_hash": h, "data": data}
        for offset, (h, data) in enumerate(zip(leaf_hashes, entries, strict=True))
    ]
    await connection.execute(insert(tlog_leaves), rows)


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


async def first_index_of(connection: AsyncConnection, log_id: int, leaf_hash: bytes) -> int | None:
    """The smallest index of a stored leaf of this hash, if any (one index lookup)."""
    found = await connection.scalar(
        select(func.min(tlog_leaves.c.leaf_index)).where(
            tlog_leaves.c.log_id == log_id, tlog_leaves.c.leaf_hash == leaf_hash
        )
    )
    return None if found is None else int(found)


async def take_integration_lock(connection: AsyncConnection, log_id: int, name: str) -> bool:
    """Try to become the log's only integrator until the transaction ends; ``False`` when another
    integrator holds the lock (it is doing the work).

    PostgreSQL: a transaction-scoped advisory lock, released by commit, rollback or the end of the
    session (a killed process's session ends with its connection). SQLite: a write to the log's
    row, which takes the database's single write lock (waiting for it), so the reads that follow
    see everything committed before and nothing committed during the pass."""
    if _is_sqlite(connection):
        await connection.execute(
            update(tlog_logs)
            .where(tlog_logs.c.log_id == log_id)
            .values(integrated_size=tlog_logs.c.integrated_size)
        )
        return True
    return bool(await connection.scalar(_INTEGRATION_LOCK, {"name": name}))


async def leaf_hashes(
    connection: AsyncConnection, log_id: int, start: int, end: int
) -> list[tuple[int, bytes]]:
    """``(index, leaf hash)`` of the stored leaves in ``[start, end)``, in index order."""
    rows = await connection.execute(
        select(tlog_leaves.c.leaf_index, tlog_leaves.c.leaf_hash)
        .where(
            tlog_leaves.c.log_id == log_id,
            tlog_leaves.c.leaf_index >= start,
            tlog_leaves.c.leaf_index < end,
        )
        .order_by(tlog_leaves.c.leaf_index)
    )
    return [(row.leaf_index, bytes(row.leaf_hash)) for row in rows]


async def subtree_hashes(
    connection: AsyncConnection, log_id: int, subtrees: Sequence[Subtree]
) -> dict[Subtree, bytes]:
    """The stored hashes of ``subtrees`` (those stored; a caller checks none is missing), read
    with one statement of one primary-key lookup per subtree."""
    if not subtrees:
        return {}
    keys = sorted({(subtree.level, subtree.index) for subtree in subtrees})
    if _is_sqlite(connection):
        # Each key whole in its own term: SQLite then looks each up in the primary key (a
        # row-value IN list, or log_id outside the terms, scanned the whole log).
        statement = select(
            tlog_subtrees.c.level, tlog_subtrees.c.subtree_index, tlog_subtrees.c.hash
        ).where(
            or_(
                *(
                    and_(
                        tlog_subtrees.c.log_id == log_id,
                        tlog_subtrees.c.level == level,
                        tlog_subtrees.c.subtree_index == index,
                    )
                    for level, index in keys
                )
            )
        )
        rows = await connection.execute(statement)
    else:
        values = {
            "log_id": log_id,
            "levels": [level for level, _ in keys],
            "indices": [index for _, index in keys],
        }
        rows = await connection.execute(_SUBTREE_HASHES, values)
    return {Subtree(row.level, row.subtree_index): bytes(row.hash) for row in rows}


async def insert_subtrees(
    connection: AsyncConnection, log_id: int, subtrees: Iterable[SubtreeHash]
) -> None:
    """Store the hashes of newly completed subtrees (one statement)."""
    if not _is_sqlite(connection):
        listed = list(subtrees)
        if listed:
            values = {
                "log_id": log_id,
                "levels": [s.level for s, _ in listed],
                "indices": [s.index for s, _ in listed],
                "hashes": [h for _, h in listed],
            }
            await connection.execute(_INSERT_SUBTREES, values)
        return
    rows = [
        {"log_id": log_id, "level": s.level, "subtree_index": s.index, "hash": h}
        for s, h in subtrees
    ]
    if rows:
        await connection.execute(insert(tlog_subtrees), rows)


async def insert_checkpoint(
    connection: AsyncConnection,
    log_id: int,
    size: int,
    root_hash: bytes,
    note: str,
    now: datetime,
) -> None:
    """Store a signed checkpoint (one per tree size: the primary key refuses a second)."""
    await connection.execute(
        insert(tlog_checkpoints).values(
            log_id=log_id, tree_size=size, root_hash=root_hash, note=note, created_at=now
        )
    )


async def set_integrated(
    connection: AsyncConnection,
    log_id: int,
    old_size: int,
    new_size: int,
    root_hash: bytes,
    now: datetime,
) -> bool:
    """Move the log's integrated size from ``old_size`` to ``new_size``: ``False`` (nothing
    changed) if it was no longer ``old_size`` or the leaves were never sequenced."""
    result = await connection.execute(
        update(tlog_logs)
        .where(
            tlog_logs.c.log_id == log_id,
            tlog_logs.c.integrated_size == old_size,
            tlog_logs.c.sequenced_size >= new_size,
        )
        .values(integrated_size=new_size, root_hash=root_hash, integrated_at=now)
    )
    return result.rowcount == 1


async def latest_checkpoint(connection: AsyncConnection, log_id: int) -> str | None:
    """The signed note of the log's largest checkpoint."""
    note = await connection.scalar(
        select(tlog_checkpoints.c.note)
        .where(tlog_checkpoints.c.log_id == log_id)
        .order_by(tlog_checkpoints.c.tree_size.desc())
        .limit(1)
    )
    return None if note is None else str(note)


async def checkpoint_note(connection: AsyncConnection, log_id: int, size: int) -> str | None:
    """The signed note of the log's checkpoint of ``size`` leaves, if there is one."""
    note = await connection.scalar(
        select(tlog_checkpoints.c.note).where(
            tlog_checkpoints.c.log_id == log_id, tlog_checkpoints.c.tree_size == size
        )
    )
    return None if note is None else str(note)


async def leaf(connection: AsyncConnection, log_id: int, index: int) -> StoredLeaf | None:
    """The stored leaf ``index``, if there is one."""
    row = (
        await connection.execute(
            select(tlog_leaves.c.data, tlog_leaves.c.leaf_hash).where(
                tlog_leaves.c.log_id == log_id, tlog_leaves.c.leaf_index == index
            )
        )
    ).first()
    if row is None:
        return None
    return StoredLeaf(index, _bytes(row.data), _bytes(row.leaf_hash))


# The audit's reads (conclave.platform.tlog.audit): the whole log, a slice at a time.


async def read_snapshot(connection: AsyncConnection) -> None:
    """Make every read of ``connection`` until its transaction ends see one snapshot of the
    store; call it before any statement. PostgreSQL: a REPEATABLE READ transaction. SQLite: an
    explicit read transaction (the driver begins one only before a write), which in WAL mode sees
    the database as of its first read."""
    if _is_sqlite(connection):
        await connection.execute(text("BEGIN"))
    else:
        await connection.execution_options(isolation_level="REPEATABLE READ")


async def latest_checkpoint_row(
    connection: AsyncConnection, log_id: int
) -> tuple[int, bytes, str] | None:
    """``(size, root hash, note)`` of the log's largest checkpoint row."""
    row = (
        await connection.execute(
            select(
                tlog_checkpoints.c.tree_size, tlog_checkpoints.c.root_hash, tlog_checkpoints.c.note
            )
            .where(tlog_checkpoints.c.log_id == log_id)
            .order_by(tlog_checkpoints.c.tree_size.desc())
            .limit(1)
        )
    ).first()
    return None if row is None else (row.tree_size, _bytes(row.root_hash), str(row.note))


async def checkpoint_sizes_outside(
    connection: AsyncConnection, log_id: int, first: int, last: int, limit: int
) -> list[int]:
    """The sizes of the log's checkpoint rows below ``first`` or above ``last`` (at most
    ``limit``, smallest first)."""
    rows = await connection.execute(
        select(tlog_checkpoints.c.tree_size)
        .where(
            tlog_checkpoints.c.log_id == log_id,
            or_(tlog_checkpoints.c.tree_size < first, tlog_checkpoints.c.tree_size > last),
        )
        .order_by(tlog_checkpoints.c.tree_size)
        .limit(limit)
    )
    return [row.tree_size for row in rows]


async def leaf_sizes(
    connection: AsyncConnection, log_id: int, start: int, end: int, limit: int
) -> list[tuple[int, int]]:
    """``(index, data length)`` of the first ``limit`` stored leaves in ``[start, end)``, in
    index order (the data itself is not read)."""
    rows = await connection.execute(
        select(tlog_leaves.c.leaf_index, func.length(tlog_leaves.c.data).label("length"))
        .where(
            tlog_leaves.c.log_id == log_id,
            tlog_leaves.c.leaf_index >= start,
            tlog_leaves.c.leaf_index < end,
        )
        .order_by(tlog_leaves.c.leaf_index)
        .limit(limit)
    )
    return [(row.leaf_index, int(row.length or 0)) for row in rows]


async def leaves_between(
    connection: AsyncConnection, log_id: int, start: int, end: int
) -> list[StoredLeaf]:
    """The stored leaves in ``[start, end)``, in index order."""
    rows = await connection.execute(
        select(tlog_leaves.c.leaf_index, tlog_leaves.c.data, tlog_leaves.c.leaf_hash)
        .where(
            tlog_leaves.c.log_id == log_id,
            tlog_leaves.c.leaf_index >= start,
            tlog_leaves.c.leaf_index < end,
        )
        .order_by(tlog_leaves.c.leaf_index)
    )
    return [StoredLeaf(row.leaf_index, _bytes(row.data), _bytes(row.leaf_hash)) for row in rows]


async def leaf_indices_outside(
    connection: AsyncConnection, log_id: int, start: int, end: int, limit: int
) -> list[int]:
    """The indices of stored leaves below ``start`` or at or beyond ``end`` (at most ``limit``,
    in order)."""
    rows = await connection.execute(
        select(tlog_leaves.c.leaf_index)
        .where(
            tlog_leaves.c.log_id == log_id,
            or_(tlog_leaves.c.leaf_index < start, tlog_leaves.c.leaf_index >= end),
        )
        .order_by(tlog_leaves.c.leaf_index)
        .limit(limit)
    )
    return [row.leaf_index for row in rows]


async def subtrees_completed_between(
    connection: AsyncConnection, log_id: int, start: int, end: int
) -> dict[Subtree, bytes]:
    """The stored subtrees whose last leaf is in ``[start, end)``, every level (one statement)."""
    ranges = []
    for level in range(end.bit_length()):
        # A subtree of this level ends at (index + 1) << level, which must be in (start, end].
        first, last = start >> level, (end >> level) - 1
        if first <= last:
            ranges.append(
                and_(
                    tlog_subtrees.c.level == level,
                    tlog_subtrees.c.subtree_index >= first,
                    tlog_subtrees.c.subtree_index <= last,
                )
            )
    if not ranges:
        return {}
    rows = await connection.execute(
        select(tlog_subtrees.c.level, tlog_subtrees.c.subtree_index, tlog_subtrees.c.hash).where(
            tlog_subtrees.c.log_id == log_id, or_(*ranges)
        )
    )
    return {Subtree(row.level, row.subtree_index): bytes(row.hash) for row in rows}


async def subtree_count(connection: AsyncConnection, log_id: int) -> int:
    """How many subtree hashes the log stores."""
    count = await connection.scalar(
        select(func.count()).select_from(tlog_subtrees).where(tlog_subtrees.c.log_id == log_id)
    )
    return int(count or 0)


async def leaf_hash_count(connection: AsyncConnection, log_id: int) -> int:
    """How many level-0 subtree hashes (the tree's leaf hashes) the log stores at indices from 0:
    a bound on its integrated size that no single row can raise."""
    count = await connection.scalar(
        select(func.count())
        .select_from(tlog_subtrees)
        .where(
            tlog_subtrees.c.log_id == log_id,
            tlog_subtrees.c.level == 0,
            tlog_subtrees.c.subtree_index >= 0,
        )
    )
    return int(count or 0)


async def checkpoints_between(
    connection: AsyncConnection, log_id: int, after: int, upto: int
) -> list[tuple[int, bytes, str]]:
    """``(size, root hash, note)`` of the checkpoints of sizes in ``(after, upto]``, smallest
    first."""
    rows = await connection.execute(
        select(tlog_checkpoints.c.tree_size, tlog_checkpoints.c.root_hash, tlog_checkpoints.c.note)
        .where(
            tlog_checkpoints.c.log_id == log_id,
            tlog_checkpoints.c.tree_size > after,
            tlog_checkpoints.c.tree_size <= upto,
        )
        .order_by(tlog_checkpoints.c.tree_size)
    )
    return [(row.tree_size, _bytes(row.root_hash), str(row.note)) for row in rows]
