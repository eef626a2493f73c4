"""Async SQLAlchemy engine for SQLite (embedded) and PostgreSQL (production)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from conclave.platform.errors import StoreUnavailable


def is_store_down(exc: BaseException) -> bool:
    """True when ``exc`` means the store is unreachable rather than that the statement is wrong."""
    if isinstance(exc, IntegrityError):
        return False
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated)
    return isinstance(exc, OSError | ConnectionError | TimeoutError)


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
        engine = create_async_engine(url, connect_args={"timeout": 30})
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
