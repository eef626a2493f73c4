"""All SQL of the transparency logs (tables in :mod:`conclave.platform.db.schema`). Functions take
a connection inside the caller's transaction and never commit.

Reads of hashes go by primary key only: a root, a proof or a frontier is one statement naming its
O(log n) stored ``(level, subtree_index)`` keys and the one or two short ranges of leaf hashes
below ``TILE_LEVEL`` it needs (:mod:`.tiles`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, literal, or_, select, text, union_all, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from conclave.platform.clock import as_utc
from conclave.platform.db.schema import (
    tlog_checkpoints,
    tlog_leaves,
    tlog_logs,
    tlog_subtrees,
)
from conclave.platform.tlog import tiles
from conclave.platform.tlog.errors import LogCorrupted
from conclave.platform.tlog.records import LogState, StoredLeaf
from conclave.platform.transparency.hashing import HASH_SIZE
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

# One statement whatever the number of keys and blocks (prepared once): a nested loop of
# primary-key lookups for the stored subtrees, and one primary-key range per block of leaf hashes
# (level -1 marks those rows: tiles.py computes the subtrees below TILE_LEVEL from them). The
# LIMIT tells the planner what a range holds at most (a block), so that a generic plan never
# prefers scanning the leaves to the primary key.
_SUBTREE_HASHES = text(
    "SELECT s.level, s.subtree_index, s.hash "
    "FROM unnest(CAST(:levels AS SMALLINT[]), CAST(:indices AS BIGINT[])) AS k(level, idx) "
    "JOIN tlog_subtrees s "
    "ON s.log_id = :log_id AND s.level = k.level AND s.subtree_index = k.idx "
    "UNION ALL "
    "SELECT CAST(-1 AS SMALLINT), f.leaf_index, f.leaf_hash "
    "FROM unnest(CAST(:starts AS BIGINT[]), CAST(:ends AS BIGINT[])) AS r(lo, hi) "
    "CROSS JOIN LATERAL (SELECT b.leaf_index, b.leaf_hash FROM tlog_leaves b "
    "WHERE b.log_id = :log_id AND b.leaf_index >= r.lo AND b.leaf_index < r.hi "
    f"ORDER BY b.leaf_index LIMIT {tiles.TILE_SIZE}) AS f"
)
_LEAF_ROW = -1


def _is_sqlite(connection: AsyncConnection) -> bool:
    return connection.dialect.name == "sqlite"


def stored_bytes(value: Any) -> bytes:
    """A stored hash or leaf as bytes, whatever a hand-written row holds (see below)."""
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
        root_hash=stored_bytes(row.root_hash),
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


async def require_log_state(connection: AsyncConnection, name: str) -> LogState:
    """The row of the log ``name``; ``LookupError`` when there is none."""
    state = await log_state(connection, name)
    if state is None:
        raise LookupError(f"no transparency log {name!r}")
    return state


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
    return [(row.leaf_index, stored_bytes(row.leaf_hash)) for row in rows]


async def subtree_hashes(
    connection: AsyncConnection, log_id: int, subtrees: Sequence[Subtree]
) -> dict[Subtree, bytes]:
    """The hashes of ``subtrees`` that the store holds (a caller checks none is missing), read
    with one statement: one primary-key lookup per stored subtree (level >= ``TILE_LEVEL``), and
    one primary-key range of leaf hashes per aligned block the lower ones lie in, from which
    those are computed (:mod:`.tiles`)."""
    if not subtrees:
        return {}
    read = tiles.plan_read(subtrees)
    if _is_sqlite(connection):
        rows = await connection.execute(_sqlite_tiled_read(log_id, read))
    else:
        values = {
            "log_id": log_id,
            "levels": [subtree.level for subtree in read.stored],
            "indices": [subtree.index for subtree in read.stored],
            "starts": [start for start, _ in read.leaf_ranges],
            "ends": [end for _, end in read.leaf_ranges],
        }
        rows = await connection.execute(_SUBTREE_HASHES, values)
    stored: dict[Subtree, bytes] = {}
    leaves: dict[int, bytes] = {}
    for level, index, value in rows:
        if level == _LEAF_ROW:
            leaves[index] = stored_bytes(value)
        else:
            stored[Subtree(level, index)] = _hash_of(Subtree(level, index), value)
    return tiles.resolve(subtrees, stored, leaves)


def _hash_of(subtree: Subtree, value: Any) -> bytes:
    """A stored subtree hash; :class:`LogCorrupted` for a row that holds no hash (SQLite keeps
    whatever a hand-written row gives it)."""
    hashed = stored_bytes(value)
    if len(hashed) != HASH_SIZE:
        raise LogCorrupted(f"the stored hash of {subtree} is not a hash ({len(hashed)} bytes)")
    return hashed


def _sqlite_tiled_read(log_id: int, read: tiles.TiledRead) -> Any:
    # Each key and range whole in its own term: SQLite then looks each up in the primary key (a
    # row-value IN list, or log_id outside the terms, scanned the whole log).
    parts = []
    if read.stored:
        keys = (
            and_(
                tlog_subtrees.c.log_id == log_id,
                tlog_subtrees.c.level == subtree.level,
                tlog_subtrees.c.subtree_index == subtree.index,
            )
            for subtree in read.stored
        )
        parts.append(
            select(
                tlog_subtrees.c.level, tlog_subtrees.c.subtree_index, tlog_subtrees.c.hash
            ).where(or_(*keys))
        )
    if read.leaf_ranges:
        ranges = (
            and_(
                tlog_leaves.c.log_id == log_id,
                tlog_leaves.c.leaf_index >= start,
                tlog_leaves.c.leaf_index < end,
            )
            for start, end in read.leaf_ranges
        )
        parts.append(
            select(
                literal(_LEAF_ROW).label("level"),
                tlog_leaves.c.leaf_index.label("subtree_index"),
                tlog_leaves.c.leaf_hash.label("hash"),
            ).where(or_(*ranges))
        )
    return parts[0] if len(parts) == 1 else union_all(*parts)


async def insert_subtrees(
    connection: AsyncConnection, log_id: int, subtrees: Iterable[SubtreeHash]
) -> None:
    """Store the hashes of newly completed subtrees (one statement); the caller passes only those
    at ``TILE_LEVEL`` and above (:func:`.tiles.rows_to_store`)."""
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
    """The signed note of the log's latest checkpoint: the one of its integrated size, which the
    pass that signed it set in the same transaction. A row inserted above it by hand (the
    append-only triggers let INSERTs through) is never served as the log's latest; the audit
    reports it."""
    note = await connection.scalar(
        select(tlog_checkpoints.c.note)
        .join(tlog_logs, tlog_logs.c.log_id == tlog_checkpoints.c.log_id)
        .where(
            tlog_checkpoints.c.log_id == log_id,
            tlog_checkpoints.c.tree_size == tlog_logs.c.integrated_size,
        )
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
    return StoredLeaf(index, stored_bytes(row.data), stored_bytes(row.leaf_hash))
