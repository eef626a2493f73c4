"""The SQL of a stored log's audit (:mod:`conclave.platform.tlog.audit`): the whole log read a
slice at a time. Functions take a connection inside the caller's transaction and never commit."""

from __future__ import annotations

from sqlalchemy import and_, func, or_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from conclave.platform.db.schema import (
    tlog_checkpoints,
    tlog_leaves,
    tlog_subtrees,
)
from conclave.platform.tlog.records import StoredLeaf
from conclave.platform.tlog.store import stored_bytes
from conclave.platform.tlog.tiles import TILE_LEVEL
from conclave.platform.transparency.subtrees import Subtree


async def read_snapshot(connection: AsyncConnection) -> None:
    """Make every read of ``connection`` until its transaction ends see one snapshot of the
    store; call it before any statement. PostgreSQL: a REPEATABLE READ transaction. SQLite: an
    explicit read transaction (the driver begins one only before a write), which in WAL mode sees
    the database as of its first read."""
    if connection.dialect.name == "sqlite":
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
    return None if row is None else (row.tree_size, stored_bytes(row.root_hash), str(row.note))


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
    return [
        StoredLeaf(row.leaf_index, stored_bytes(row.data), stored_bytes(row.leaf_hash))
        for row in rows
    ]


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
    """The stored subtrees whose last leaf is in ``[start, end)``, every level from
    ``TILE_LEVEL`` (one statement; rows below it, from earlier versions, are never read)."""
    ranges = []
    for level in range(TILE_LEVEL, end.bit_length()):
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
    return {Subtree(row.level, row.subtree_index): stored_bytes(row.hash) for row in rows}


async def subtree_count(connection: AsyncConnection, log_id: int, lowest_level: int) -> int:
    """How many subtree hashes the log stores at ``lowest_level`` and above."""
    count = await connection.scalar(
        select(func.count())
        .select_from(tlog_subtrees)
        .where(tlog_subtrees.c.log_id == log_id, tlog_subtrees.c.level >= lowest_level)
    )
    return int(count or 0)


async def leaf_hash_count(connection: AsyncConnection, log_id: int) -> int:
    """How many leaves (and so leaf hashes) the log stores at indices from 0: a bound on its
    integrated size that no single row can raise by more than one."""
    count = await connection.scalar(
        select(func.count())
        .select_from(tlog_leaves)
        .where(tlog_leaves.c.log_id == log_id, tlog_leaves.c.leaf_index >= 0)
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
    return [(row.tree_size, stored_bytes(row.root_hash), str(row.note)) for row in rows]
