"""Running a statement on an engine (a connection of its own) or in the caller's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

Executor = AsyncConnection | AsyncEngine


def is_sqlite(executor: Executor) -> bool:
    """Whether ``executor`` talks to SQLite (no ``SKIP LOCKED``, no lateral joins)."""
    return executor.dialect.name == "sqlite"


async def first_row(executor: Executor, statement: Any) -> Row[Any] | None:
    """The first row ``statement`` returns, or ``None``."""
    if isinstance(executor, AsyncEngine):
        async with executor.connect() as connection:
            return (await connection.execute(statement)).first()
    return (await executor.execute(statement)).first()


async def all_rows(executor: Executor, statement: Any) -> Sequence[Row[Any]]:
    """Every row ``statement`` returns."""
    if isinstance(executor, AsyncEngine):
        async with executor.connect() as connection:
            return (await connection.execute(statement)).all()
    return (await executor.execute(statement)).all()
