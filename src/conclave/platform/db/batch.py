"""Group commit: many concurrent writers share one database transaction.

Every audited request must wait for its row to be durably committed. Committing each row on its
own makes the database's fsync the throughput limit; instead, writes submitted while a commit is in
flight are queued and committed together in the next one. Each caller still learns whether *its*
writes committed: if a batch fails (say one row breaks a unique constraint), its items are retried
one by one so only the offending caller sees the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, bindparam
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.platform.db.engine import is_sqlite, is_store_down
from conclave.platform.errors import StoreUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Insert:
    """Insert one row into ``table``; ``committed`` (if any) goes to the after-commit callbacks."""

    table: Table
    values: Mapping[str, Any]
    committed: Any = None


@dataclass(frozen=True)
class Update:
    """Update the row of ``table`` whose primary-key column ``key`` equals ``values[key]``."""

    table: Table
    key: str
    values: Mapping[str, Any]


Write = Insert | Update


@dataclass
class _Pending:
    writes: Sequence[Write]
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class _CopyPlan:
    """How the rows of one table are handed to PostgreSQL's ``COPY``: the columns to fill and
    each column's bind processor, so a value is stored exactly as SQLAlchemy would store it
    (JSON as JSON text, ``None`` in a JSON column as JSON ``null``, scalar column defaults)."""

    def __init__(self, table: Table, dialect: Any, given: tuple[str, ...]) -> None:
        defaults = {
            column.name: column.default.arg  # type: ignore[attr-defined]
            for column in table.columns
            if column.name not in given and column.default is not None and column.default.is_scalar
        }
        self.usable = all(
            column.name in given or column.name in defaults or column.default is None
            for column in table.columns
        )
        self.columns = [*given, *defaults]
        self.defaults = tuple(defaults.values())
        self.given = given
        self.processors = [
            table.c[name].type.dialect_impl(dialect).bind_processor(dialect) for name in given
        ]

    def records(self, writes: Sequence[Write]) -> list[tuple[Any, ...]]:
        rows = []
        for write in writes:
            values = write.values
            row = [
                values[name] if process is None else process(values[name])
                for name, process in zip(self.given, self.processors, strict=True)
            ]
            rows.append((*row, *self.defaults))
        return rows


_copy_plans: dict[tuple[str, tuple[str, ...]], _CopyPlan] = {}


async def _copy_inserts(connection: AsyncConnection, table: Table, writes: Sequence[Write]) -> bool:
    """Insert ``writes`` with one ``COPY`` (PostgreSQL); ``False`` when the table needs more than
    a plain copy (a column default computed in Python)."""
    given = tuple(sorted(writes[0].values))
    plan = _copy_plans.get((table.name, given))
    if plan is None:
        plan = _copy_plans[(table.name, given)] = _CopyPlan(table, connection.dialect, given)
    if not plan.usable:
        return False
    raw = await connection.get_raw_connection()
    # SQLAlchemy's asyncpg adapter sends BEGIN lazily, before the first statement *it* runs; a
    # COPY sent first straight to the driver would commit on its own. Begin through the adapter,
    # so the COPY joins the transaction that ``engine.begin()`` commits or rolls back. Without
    # that hook (another SQLAlchemy release) inserts take the executemany path.
    adapter = raw.dbapi_connection
    start = getattr(adapter, "_start_transaction", None)
    if start is None or not hasattr(adapter, "_transaction"):
        return False
    if adapter._transaction is None:  # type: ignore[union-attr]
        await start()
    await raw.driver_connection.copy_records_to_table(  # type: ignore[union-attr]
        table.name, records=plan.records(writes), columns=plan.columns
    )
    return True


async def apply_writes(
    connection: AsyncConnection, writes: Sequence[Write], *, copy: bool = False
) -> None:
    """Execute ``writes`` on ``connection``, one executemany per table and statement shape.

    Groups keep the order in which their first write appeared; writes submitted together must not
    depend on an order other than that. With ``copy`` (PostgreSQL), inserts go through ``COPY``:
    a quarter of a governed call's CPU was SQLAlchemy preparing the executemany of its two rows.
    """
    groups: dict[tuple[str, str, tuple[str, ...]], list[Write]] = {}
    for write in writes:
        kind = "insert" if isinstance(write, Insert) else "update"
        shape = (kind, write.table.name, tuple(sorted(write.values)))
        groups.setdefault(shape, []).append(write)
    for (kind, _, columns), members in groups.items():
        table = members[0].table
        if kind == "insert":
            if not (copy and await _copy_inserts(connection, table, members)):
                await connection.execute(table.insert(), [dict(w.values) for w in members])
            continue
        key = members[0].key  # type: ignore[union-attr]
        statement = (
            table.update()
            .where(table.c[key] == bindparam("k_" + key))
            .values({column: bindparam("v_" + column) for column in columns if column != key})
        )
        rows = [
            {
                ("k_" if column == key else "v_") + column: value
                for column, value in w.values.items()
            }
            for w in members
        ]
        await connection.execute(statement, rows)


class BatchWriter:
    """Commit concurrent writes together; :meth:`write` returns once they are durable."""

    def __init__(self, engine: AsyncEngine, *, max_batch: int = 256, committers: int = 1) -> None:
        self._engine = engine
        self._max_batch = max_batch
        # While one batch waits for its commit to reach disk, others gather and commit on other
        # connections (PostgreSQL flushes concurrent commits together). SQLite has one writer.
        self._committers = 1 if is_sqlite(engine) else max(1, committers)
        self._copy = not is_sqlite(engine)
        self._queue: asyncio.Queue[_Pending | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._after_commit: list[Callable[[list[Any]], None]] = []

    def after_commit(self, callback: Callable[[list[Any]], None]) -> None:
        """Call ``callback`` after every successful commit with the ``committed`` objects of its
        inserts (the outbox relay receives the events it is to publish this way)."""
        self._after_commit.append(callback)

    async def start(self) -> None:
        """Start the background committer."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._run(), name=f"batch-writer-{n}")
                for n in range(self._committers)
            ]

    async def stop(self) -> None:
        """Commit what is queued, then stop."""
        if not self._tasks:
            return
        for _ in self._tasks:  # each committer drains what was queued before its marker, then stops
            await self._queue.put(None)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks)
        self._tasks = []

    async def write(self, *writes: Write) -> None:
        """Queue ``writes`` to be committed atomically; wait until they are.

        Raises :class:`StoreUnavailable` when the store is down, or the database's own error (for
        example :class:`IntegrityError`) when these writes are wrong.
        """
        if not self._tasks:
            raise RuntimeError("BatchWriter.start() was not called")
        pending = _Pending(writes)
        await self._queue.put(pending)
        await pending.done

    async def _run(self) -> None:
        stopping = False
        while not stopping:
            batch: list[_Pending] = []
            item = await self._queue.get()
            while True:
                if item is None:
                    stopping = True
                else:
                    batch.append(item)
                if stopping or len(batch) >= self._max_batch or self._queue.empty():
                    break
                item = self._queue.get_nowait()
            if batch:
                await self._commit(batch)

    async def _commit(self, batch: list[_Pending], *, copy: bool | None = None) -> None:
        copy = self._copy if copy is None else copy
        try:
            async with self._engine.begin() as connection:
                writes = [w for item in batch for w in item.writes]
                await apply_writes(connection, writes, copy=copy)
        except Exception as exc:  # one bad item must not fail its neighbours: retry them alone
            # ... through SQLAlchemy's executemany, which raises its usual errors (for example
            # IntegrityError) where COPY raises the driver's own.
            if (len(batch) > 1 or copy) and not is_store_down(exc):
                for item in batch:
                    await self._commit([item], copy=False)
                return
            error = _translate(exc)
            for item in batch:
                if not item.done.done():
                    item.done.set_exception(error)
            return
        for item in batch:
            if not item.done.done():
                item.done.set_result(None)
        committed = [
            write.committed
            for item in batch
            for write in item.writes
            if isinstance(write, Insert) and write.committed is not None
        ]
        for callback in self._after_commit:
            callback(committed)


def _translate(exc: Exception) -> Exception:
    if is_store_down(exc):
        log.warning("store unavailable during batch commit: %s", type(exc).__name__)
        error = StoreUnavailable("The relational store is not reachable.")
        error.__cause__ = exc
        return error
    return exc
