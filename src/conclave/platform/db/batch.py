"""Group commit: many concurrent writers share one database transaction.

Every audited request must wait for its row to be durably committed. Committing each row on its
own makes the database's fsync the throughput limit; instead, writes submitted while a commit is in
flight are queued and committed together in the next one. Each caller still learns whether *its*
writes committed: if a batch fails (say one row breaks a unique constraint), each half is committed
again the same way, down to the offending item alone, so only its caller sees the error and the
others still share commits.
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

from conclave.platform.db.batch_statement import Group, batch_statement
from conclave.platform.db.driver_writes import (
    copy_inserts,
    execute_update_all,
    execute_updates,
    in_driver_transaction,
)
from conclave.platform.db.engine import HeldConnection, is_sqlite, is_store_down
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


@dataclass(frozen=True)
class UpdateAll:
    """Set ``values`` on every row of ``table`` whose primary-key column ``key`` is in ``keys``
    (one statement however many rows: the relay's "published" marks)."""

    table: Table
    key: str
    keys: Sequence[Any]
    values: Mapping[str, Any]


Write = Insert | Update | UpdateAll

Build = Callable[[], Sequence[Write]]
"""Makes a caller's writes when the committer assembles their batch (:meth:`BatchWriter.
write_built`)."""


@dataclass
class _Pending:
    writes: Sequence[Write]
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    build: Build | None = None


def group_writes(writes: Sequence[Write]) -> list[Group]:
    """``writes`` grouped by kind, table and value names (one statement per group), the groups in
    the order in which their first write appeared."""
    groups: dict[tuple[str, str, tuple[str, ...]], list[Write]] = {}
    shapes = _shapes
    for write in writes:
        # A service writes its rows with the same keys in the same order every time: the sorted
        # names are looked up by the names as given, not sorted again for every row.
        given = (type(write), write.table.name, *write.values)
        shape = shapes.get(given)
        if shape is None:
            if len(shapes) >= _MAX_SHAPES:
                shapes.clear()
            names = tuple(sorted(write.values))
            shape = shapes[given] = (type(write).__name__, write.table.name, names)
        groups.setdefault(shape, []).append(write)
    return [(kind, group[0].table, columns, group) for (kind, _, columns), group in groups.items()]


_shapes: dict[tuple[Any, ...], tuple[str, str, tuple[str, ...]]] = {}
_MAX_SHAPES = 4096
"""At most this many shapes are remembered (a service has a few dozen; a bound all the same)."""


async def apply_writes(
    connection: AsyncConnection, writes: Sequence[Write], *, copy: bool = False
) -> None:
    """Execute ``writes`` on ``connection``, one executemany per table and statement shape.

    Groups keep the order in which their first write appeared; writes submitted together must not
    depend on an order other than that. With ``copy`` (PostgreSQL) the writes go straight to the
    driver (:mod:`conclave.platform.db.driver_writes`): inserts as ``COPY``, updates as prepared
    executemany.
    """
    driver = await in_driver_transaction(connection) if copy else None
    for kind, table, columns, members in group_writes(writes):
        if kind == "UpdateAll":
            for write in members:
                await _update_all(connection, driver, write)
            continue
        if kind == "Insert":
            if not (driver and await copy_inserts(driver, connection.dialect, table, members)):
                await connection.execute(table.insert(), [dict(w.values) for w in members])
            continue
        key = members[0].key
        if driver is not None:
            await execute_updates(driver, connection.dialect, table, key, columns, members)
            continue
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


async def _update_all(connection: AsyncConnection, driver: Any | None, write: UpdateAll) -> None:
    if driver is not None:
        table, dialect = write.table, connection.dialect
        await execute_update_all(driver, dialect, table, write.key, write.keys, write.values)
        return
    column = write.table.c[write.key]
    await connection.execute(
        write.table.update().where(column.in_(write.keys)).values(dict(write.values))
    )


class BatchWriter:
    """Commit concurrent writes together; :meth:`write` returns once they are durable."""

    def __init__(self, engine: AsyncEngine, *, max_batch: int = 256, committers: int = 1) -> None:
        self._engine = engine
        self._max_batch = max_batch
        # While one batch waits for its commit to reach disk, others gather and commit on other
        # connections (PostgreSQL flushes concurrent commits together). SQLite has one writer.
        self._committers = 1 if is_sqlite(engine) else max(1, committers)
        self._copy = not is_sqlite(engine)
        self._dialect = engine.dialect
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
        self._check_running()
        pending = _Pending(writes)
        self._queue.put_nowait(pending)  # unbounded: never waits (and no coroutine to make)
        await pending.done

    async def write_built(self, build: Build) -> None:
        """Like ``write(*build())``, but ``build`` is called by the committer as it assembles the
        batch, one caller's after another's in one loop.

        Turning a record into rows (its values, its event, its log entry) costs about three times
        the CPU when done once per request, between the other code a request runs, as when the
        batch's records are turned one after another, where that code and its data stay in the
        processor's caches (measured: 39 µs against 13 µs for a call's log entry). ``build`` runs
        once, on the event loop, and must not await; what it raises is raised here, and the
        batch commits without this caller's writes."""
        self._check_running()
        pending = _Pending((), build=build)
        self._queue.put_nowait(pending)
        await pending.done

    def _check_running(self) -> None:
        if not self._tasks:
            raise RuntimeError("BatchWriter.start() was not called")
        for task in self._tasks:
            if not task.done():
                return
        # A bug ended every committer: fail at once rather than wait for good.
        raise StoreUnavailable("The group committer has stopped.")

    async def _run(self) -> None:
        held = HeldConnection(self._engine)
        try:
            await self._commit_until_stopped(held)
        finally:
            await held.release()

    async def _commit_until_stopped(self, held: HeldConnection) -> None:
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
                await self._commit(batch, held)

    async def _commit(
        self, batch: list[_Pending], held: HeldConnection | None = None, *, copy: bool | None = None
    ) -> None:
        batch = _built(batch)
        if not batch:
            return
        copy = self._copy if copy is None else copy
        writes = [w for item in batch for w in item.writes]
        try:
            # Retries (copy=False) and SQLite go through a transaction of their own.
            one_statement = (
                batch_statement(self._dialect, group_writes(writes)) if copy and held else None
            )
            if one_statement is not None and held is not None:
                # No transaction is opened: PostgreSQL runs the one statement as its own.
                await held.execute(*one_statement)
            else:
                async with self._engine.begin() as connection:
                    await apply_writes(connection, writes, copy=copy)
        except Exception as exc:  # one bad item must not fail its neighbours
            if len(batch) > 1 and not is_store_down(exc):
                # Each half again, the same way: a bad item costs its batch about 2 log2(n)
                # commits, not one per item (one idempotency race per batch, which any client
                # can make, would otherwise undo the group commit for everyone).
                middle = len(batch) // 2
                await self._commit(batch[:middle], held, copy=copy)
                await self._commit(batch[middle:], held, copy=copy)
                return
            if copy and not is_store_down(exc):
                # The bad item alone, through SQLAlchemy's executemany, which raises its usual
                # errors (for example IntegrityError) where COPY raises the driver's own.
                await self._commit(batch, copy=False)
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


def _built(batch: list[_Pending]) -> list[_Pending]:
    """``batch`` with every item's writes made (once: a batch committed again in halves keeps
    them), less the items whose build raised, which learn it at once."""
    ready = []
    for item in batch:
        build, item.build = item.build, None
        if build is not None:
            try:
                item.writes = tuple(build())
            except BaseException as exc:  # whatever a build raises is its caller's alone
                if not item.done.done():  # its caller may be gone (cancelled)
                    item.done.set_exception(_for_a_future(exc))
                continue
        ready.append(item)
    return ready


def _for_a_future(exc: BaseException) -> BaseException:
    """``exc`` as a future can hold it: asyncio refuses ``StopIteration`` (a future's result
    travels in one), and anything that is no ``Exception`` would end the task awaiting it as if
    that task itself were interrupted; both reach the caller as a ``RuntimeError``."""
    if isinstance(exc, Exception) and not isinstance(exc, StopIteration):
        return exc
    # Named by its type only: its own words may be what raises (a __str__ that fails).
    error = RuntimeError(f"making the writes raised {type(exc).__name__}")
    error.__cause__ = exc
    return error


def _translate(exc: Exception) -> Exception:
    if is_store_down(exc):
        log.warning("store unavailable during batch commit: %s", type(exc).__name__)
        error = StoreUnavailable("The relational store is not reachable.")
        error.__cause__ = exc
        return error
    return exc
