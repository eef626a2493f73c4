"""Running a statement on an engine (a connection of its own) or in the caller's transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

Executor = AsyncConnection | AsyncEngine


def is_sqlite(executor: Executor) -> bool:
    """Whether ``executor`` talks to SQLite (no ``SKIP LOCKED``, no lateral joins)."""
    return executor.dialect.name == "sqlite"


@asynccontextmanager
async def alone(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection whose statements each run as a transaction of their own.

    For a single statement (a read, or a write complete in itself) that is one round trip on
    PostgreSQL, where the driver otherwise sends ``BEGIN`` before it and ``ROLLBACK`` or
    ``COMMIT`` after it: three, each waiting for the event loop to read the answer and send the
    next, which on a busy process costs more than the statement. SQLite keeps its transaction."""
    async with engine.connect() as connection:
        if is_sqlite(engine):
            yield connection
        else:
            yield await connection.execution_options(isolation_level="AUTOCOMMIT")


async def first_row(executor: Executor, statement: Any) -> Row[Any] | None:
    """The first row ``statement`` returns, or ``None``."""
    if isinstance(executor, AsyncEngine):
        async with alone(executor) as connection:
            return (await connection.execute(statement)).first()
    return (await executor.execute(statement)).first()


async def all_rows(executor: Executor, statement: Any) -> Sequence[Row[Any]]:
    """Every row ``statement`` returns."""
    if isinstance(executor, AsyncEngine):
        async with alone(executor) as connection:
            return (await connection.execute(statement)).all()
    return (await executor.execute(statement)).all()
