"""Async SQLAlchemy engine for SQLite (embedded) and PostgreSQL (production)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from conclave.platform.errors import StoreUnavailable
from conclave.platform.jsontext import json_encoder

# SQLAlchemy's default for JSON columns is json.dumps, which builds an encoder per value: a
# governed call writes four or five JSON values. Built once: the same text (and errors).
_json_column_text = json_encoder(same_errors=True)


def is_store_down(exc: BaseException) -> bool:
    """True when ``exc`` means the store is unreachable rather than that the statement is wrong."""
    if isinstance(exc, IntegrityError):
        return False
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated)
    # A pool with no connection free within its time-out (a flood of reads holds them all) is as
    # unavailable to this request as a store that is down: 503 with Retry-After, not a 500.
    return isinstance(exc, OSError | ConnectionError | TimeoutError | PoolTimeout)


@contextmanager
def store_errors() -> Iterator[None]:
    """Turn "store unreachable" errors raised inside the block into :class:`StoreUnavailable`."""
    try:
        yield
    except Exception as exc:
        if is_store_down(exc):
            raise StoreUnavailable("The relational store is not reachable.") from exc
        raise


def is_sqlite(engine: AsyncEngine) -> bool:
    """True for the embedded SQLite store."""
    return engine.dialect.name == "sqlite"


def create_engine(url: str, *, pool_size: int = 10, schema: str | None = None) -> AsyncEngine:
    """Create the engine for ``url``.

    SQLite gets WAL journaling, a busy time-out and enforced foreign keys; the database folder is
    created. PostgreSQL gets a bounded pool (no pre-ping: see docs/architecture.md) with short
    connect time-outs, and optionally a ``search_path`` (tests isolate each test in a schema).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(
            url, connect_args={"timeout": 30}, json_serializer=_json_column_text
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    # Plan every execution of a prepared statement with its parameters: a generic plan made while
    # a table was nearly empty keeps scanning the whole table until autovacuum next analyzes it
    # (docs/architecture.md, "Prepared statements").
    settings = {"plan_cache_mode": "force_custom_plan"}
    if schema:
        settings["search_path"] = schema
    connect_args: dict[str, Any] = {
        "timeout": 5,
        "command_timeout": 30,
        "server_settings": settings,
    }
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        pool_timeout=5,
        connect_args=connect_args,
        json_serializer=_json_column_text,
    )


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


async def ping(engine: AsyncEngine) -> None:
    """Run ``SELECT 1``; raise :class:`StoreUnavailable` when the store does not answer."""
    with store_errors():
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))


class HeldConnection:
    """A pooled PostgreSQL connection one task keeps between statements it sends straight to the
    driver (a group committer's one-statement batches): checking a connection out of the pool and
    back in for every batch cost a noticeable share of the batch's CPU in the service
    (docs/benchmarks.md).

    After a server-side error (say a unique violation) the connection is fine and kept; after any
    other failure (connection lost, cancelled mid-statement) it is discarded, and the next
    statement takes a fresh one from the pool.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._connection: AsyncConnection | None = None

    async def execute(self, sql: str, arguments: Sequence[Any]) -> None:
        """Run ``sql`` with ``arguments`` on the held connection, outside any transaction."""
        connection = self._connection
        if connection is None:
            connection = self._connection = await self._engine.connect()
        try:
            driver = (await connection.get_raw_connection()).driver_connection
            await driver.execute(sql, *arguments)  # type: ignore[union-attr]
        except BaseException as exc:
            if not isinstance(exc, asyncpg.PostgresError):
                await self.release(discard=True)
            raise

    async def release(self, *, discard: bool = False) -> None:
        """Give the connection back to the pool (or drop it, with ``discard``)."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        with contextlib.suppress(Exception):
            if discard:
                await connection.invalidate()
            await connection.close()
