"""The gateway's audit table ``mcp_tool_calls`` and its queries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Table,
    Text,
    select,
    text,
)
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.db.batch import Insert, Update
from conclave.platform.db.schema import metadata

mcp_tool_calls = Table(
    "mcp_tool_calls",
    metadata,
    Column("conclave_id", String(36), primary_key=True),
    Column("tool_name", String(128), nullable=False),
    Column("requested_tool", String(256), nullable=False),
    Column("args", JSON, nullable=True),
    Column("canonical_args", JSON, nullable=True),
    Column("result", JSON, nullable=True),
    Column("orthodoxy_status", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("http_status", Integer, nullable=True),
    Column("error_code", String(64), nullable=True),
    Column("error_message", Text, nullable=True),
    Column("warnings", JSON, nullable=True),
    Column("user_id", String(256), nullable=False),
    Column("correlation_id", String(128), nullable=True),
    Column("idempotency_key", String(256), nullable=True),
    Column("request_hash", String(64), nullable=True),
    Column("duration_ms", Float, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("completed_at", DateTime(timezone=True), nullable=True),
    Index("ix_mcp_tool_calls_created_at", "created_at"),
    Index("ix_mcp_tool_calls_tool_name", "tool_name"),
    Index(
        "ix_mcp_tool_calls_running",
        "created_at",
        sqlite_where=text("status = 'running'"),
        postgresql_where=text("(status)::text = 'running'::text"),  # as PostgreSQL reflects it
    ),
    Index(
        "uq_mcp_tool_calls_user_id_idempotency_key",
        "user_id",
        "idempotency_key",
        unique=True,
        sqlite_where=Column("idempotency_key").is_not(None),
        postgresql_where=Column("idempotency_key").is_not(None),
    ),
)


def record_call(row: dict[str, Any]) -> Insert:
    """Insert a call's audit row."""
    return Insert(mcp_tool_calls, row)


def finish_call(conclave_id: str, values: dict[str, Any]) -> Update:
    """Complete the audit row of a call that was recorded as ``running``."""
    return Update(mcp_tool_calls, "conclave_id", {"conclave_id": conclave_id, **values})


async def running_calls_before(engine: AsyncEngine, cutoff: datetime) -> list[Row[Any]]:
    """Calls still marked ``running`` that started before ``cutoff``, oldest first."""
    query = (
        select(mcp_tool_calls)
        .where(mcp_tool_calls.c.status == "running", mcp_tool_calls.c.created_at < cutoff)
        .order_by(mcp_tool_calls.c.created_at)
        .limit(500)
    )
    async with engine.connect() as connection:
        return list((await connection.execute(query)).all())


async def get_call(engine: AsyncEngine, conclave_id: str) -> Row[Any] | None:
    """One audit row by id."""
    async with engine.connect() as connection:
        result = await connection.execute(
            select(mcp_tool_calls).where(mcp_tool_calls.c.conclave_id == conclave_id)
        )
        return result.first()


async def find_by_idempotency_key(engine: AsyncEngine, user_id: str, key: str) -> Row[Any] | None:
    """The call ``user_id`` made earlier with idempotency key ``key``."""
    async with engine.connect() as connection:
        result = await connection.execute(
            select(mcp_tool_calls).where(
                mcp_tool_calls.c.user_id == user_id, mcp_tool_calls.c.idempotency_key == key
            )
        )
        return result.first()


# Observations about entities (sentiment, activity, ...), written by the deployment's pipelines;
# `query_signals` reads them when no signals backend is configured.
signals = Table(
    "signals",
    metadata,
    Column("signal_id", String(36), primary_key=True),
    Column("entity_id", String(128), nullable=False),
    Column("signal_type", String(64), nullable=False),
    Column("value", Float, nullable=True),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Column("source", String(128), nullable=True),
    Column("attributes", JSON, nullable=True),
    Index("ix_signals_entity_id_observed_at", "entity_id", "observed_at"),
)


async def query_signals(
    engine: AsyncEngine,
    entity_ids: list[str],
    signal_types: list[str] | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
) -> list[Row[Any]]:
    """Signals of ``entity_ids`` in the window, newest first."""
    query = select(signals).where(signals.c.entity_id.in_(entity_ids))
    if signal_types:
        query = query.where(signals.c.signal_type.in_(signal_types))
    if since is not None:
        query = query.where(signals.c.observed_at >= since)
    if until is not None:
        query = query.where(signals.c.observed_at <= until)
    query = query.order_by(signals.c.observed_at.desc(), signals.c.signal_id).limit(limit)
    async with engine.connect() as connection:
        return list((await connection.execute(query)).all())
