"""Helpers of the stored-log tests: logs on a test store, what the store holds, and the checks
a reader of the log makes (every leaf proven against the latest signed checkpoint, every
checkpoint consistent with the one before)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.db.engine import create_engine
from conclave.platform.tlog import LogKeys, TransparencyLog
from conclave.platform.transparency import (
    Checkpoint,
    NoteSigner,
    VerifierSet,
    open_checkpoint,
    verify_extension,
    verify_inclusion,
)
from tests.conftest import POSTGRES_URL

ORIGIN_PREFIX = "tlog.test"


def test_keys(name: str = "calls") -> LogKeys:
    """A fresh key for the log ``name``."""
    origin = f"{ORIGIN_PREFIX}/{name}"
    return LogKeys(origin, (NoteSigner.generate(origin),))


test_keys.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


async def open_test_log(
    engine: AsyncEngine, keys: LogKeys | None = None, *, name: str = "calls", **options: Any
) -> TransparencyLog:
    """The log ``name`` on ``engine``, checkpoints allowed at any time unless told otherwise."""
    options.setdefault("checkpoint_interval", 0.0)
    return await TransparencyLog.open(engine, name, keys or test_keys(name), **options)


async def second_replica(engine: AsyncEngine) -> AsyncEngine:
    """Another engine (another "replica") on the store of ``engine``: the same SQLite file, or
    the same PostgreSQL schema."""
    if engine.dialect.name == "sqlite":
        return create_engine(engine.url.render_as_string(hide_password=False))
    async with engine.connect() as connection:
        schema = await connection.scalar(text("SELECT current_schema()"))
    return create_engine(POSTGRES_URL, schema=schema)


async def stored_checkpoints(engine: AsyncEngine, log: TransparencyLog) -> list[tuple[int, str]]:
    """``(size, note)`` of every stored checkpoint of ``log``, smallest first."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT c.tree_size, c.note FROM tlog_checkpoints c JOIN tlog_logs l "
                "ON l.log_id = c.log_id WHERE l.name = :name ORDER BY c.tree_size"
            ),
            {"name": log.name},
        )
        return [(row.tree_size, row.note) for row in rows]


async def stored_leaves(engine: AsyncEngine, log: TransparencyLog) -> list[tuple[int, bytes]]:
    """``(index, data)`` of every stored leaf of ``log``, in index order."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT f.leaf_index, f.data FROM tlog_leaves f JOIN tlog_logs l "
                "ON l.log_id = f.log_id WHERE l.name = :name ORDER BY f.leaf_index"
            ),
            {"name": log.name},
        )
        return [(row.leaf_index, bytes(row.data)) for row in rows]


@dataclass
class Verified:
    """What a reader established about a log."""

    checkpoint: Checkpoint
    checkpoint_sizes: list[int]


async def verify_as_a_reader(
    engine: AsyncEngine, log: TransparencyLog, *, leaves: int = 300
) -> Verified:
    """Open the latest checkpoint with the log's published keys, prove its leaves in it (all of
    them up to ``leaves``, else that many spread over the log, first and last included), and
    check every stored checkpoint extends the one before (with the log's consistency proofs)."""
    verifiers = VerifierSet(log.keys.verifiers)
    latest = open_checkpoint(await log.latest_checkpoint(), verifiers, origin=log.origin).checkpoint
    step = max(1, latest.size // leaves)
    indices = sorted({*range(0, latest.size, step), latest.size - 1} - {-1})
    for index in indices:
        leaf = await log.leaf(index)
        proof = await log.inclusion_proof(index, latest.size)
        verify_inclusion(leaf.leaf_hash, index, latest.size, proof, latest.root_hash)
    previous: Checkpoint | None = None
    sizes = []
    for size, note in await stored_checkpoints(engine, log):
        current = open_checkpoint(note, verifiers, origin=log.origin).checkpoint
        assert current.size == size
        if previous is not None:
            proof = await log.consistency_proof(previous.size, size) if previous.size else []
            verify_extension(previous, current, proof)
        previous = current
        sizes.append(size)
    assert previous == latest
    return Verified(latest, sizes)


@contextmanager
def recorded_statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """Every SQL statement ``engine`` sends while the block runs."""
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    listener: Callable[..., None] = record
    event.listen(engine.sync_engine, "before_cursor_execute", listener)
    try:
        yield statements
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", listener)
