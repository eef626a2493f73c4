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
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    delete,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from conclave.gateway.outcome import RUNNING
from conclave.gateway.records import AuditRow
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
    Column("log_leaf_hash", LargeBinary, nullable=True),
    Column("upstream_credential", String(16), nullable=True),
    Column("on_behalf_of", String(256), nullable=True),
    Index("ix_mcp_tool_calls_created_at", "created_at"),
    # The audit trail's search (gateway/call_search.py): each filter that can pick few rows
    # among millions walks one of these backwards from the newest (migration 0014).
    Index("ix_mcp_tool_calls_tool_created", "tool_name", "created_at"),
    Index("ix_mcp_tool_calls_user_created", "user_id", "created_at"),
    # A rare outcome (rejected, failed, timed out, heretical, purified) is found without walking
    # the successes; only those rows pay for these two on the write path.
    Index(
        "ix_mcp_tool_calls_unsuccessful",
        "status",
        "created_at",
        sqlite_where=text("status <> 'succeeded'"),
        postgresql_where=text("(status)::text <> 'succeeded'::text"),  # as PostgreSQL reflects it
    ),
    Index(
        "ix_mcp_tool_calls_unblessed",
        "orthodoxy_status",
        "created_at",
        sqlite_where=text("orthodoxy_status <> 'blessed'"),
        postgresql_where=text("(orthodoxy_status)::text <> 'blessed'::text"),
    ),
    Index(
        "ix_mcp_tool_calls_correlation",
        "correlation_id",
        "created_at",
        sqlite_where=Column("correlation_id").is_not(None),
        postgresql_where=Column("correlation_id").is_not(None),
    ),
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


def record_running_call(row: AuditRow) -> Insert:
    """Insert the row of a call about to run a tool with side effects: ``running``, no outcome."""
    return Insert(mcp_tool_calls, _request_columns(row))


def record_call(row: AuditRow) -> Insert:
    """Insert the row of a finished call."""
    columns = _request_columns(row)
    columns.update(_outcome_columns(row))
    return Insert(mcp_tool_calls, columns)


def finish_call(row: AuditRow) -> Update:
    """Complete the row of a call that was recorded ``running``."""
    values = {"conclave_id": row.conclave_id, **_outcome_columns(row)}
    return Update(mcp_tool_calls, "conclave_id", values)


def _request_columns(row: AuditRow) -> dict[str, Any]:
    columns = {
        "conclave_id": row.conclave_id,
        "tool_name": row.tool_name,
        "requested_tool": row.requested_tool,
        "args": row.args,
        "user_id": row.user_id,
        "on_behalf_of": row.on_behalf_of,
        "correlation_id": row.correlation_id,
        "idempotency_key": row.idempotency_key,
        "request_hash": row.request_hash,
        "created_at": row.created_at,
        "status": row.status,
        "orthodoxy_status": row.orthodoxy_status,
    }
    if row.canonical_args is not None:  # left SQL NULL, not JSON null, for a call of a tool
        columns["canonical_args"] = row.canonical_args
    return columns


def _outcome_columns(row: AuditRow) -> dict[str, Any]:
    return {
        "status": row.status,
        "orthodoxy_status": row.orthodoxy_status,
        "http_status": row.http_status,
        "result": row.result,
        "warnings": row.warnings,
        "error_code": row.error_code,
        "error_message": row.error_message,
        "duration_ms": row.duration_ms,
        "completed_at": row.completed_at,
        "log_leaf_hash": row.log_leaf_hash,
        "upstream_credential": row.upstream_credential,
    }


async def settle_interrupted_call(connection: AsyncConnection, row: AuditRow) -> bool:
    """Write the outcome of ``row``, a call cut off by a dead gateway, if it is still ``running``;
    ``False`` when another replica settled it or it just finished."""
    result = await connection.execute(
        update(mcp_tool_calls)
        .where(mcp_tool_calls.c.conclave_id == row.conclave_id, mcp_tool_calls.c.status == RUNNING)
        .values(
            status=row.status,
            http_status=row.http_status,
            error_code=row.error_code,
            error_message=row.error_message,
            completed_at=row.completed_at,
        )
    )
    return result.rowcount == 1


async def running_calls_before(engine: AsyncEngine, cutoff: datetime) -> list[AuditRow]:
    """Calls still marked ``running`` that started before ``cutoff``, oldest first."""
    query = (
        select(mcp_tool_calls)
        .where(mcp_tool_calls.c.status == RUNNING, mcp_tool_calls.c.created_at < cutoff)
        .order_by(mcp_tool_calls.c.created_at)
        .limit(500)
    )
    async with engine.connect() as connection:
        return [AuditRow(**row._mapping) for row in await connection.execute(query)]


async def get_call(engine: AsyncEngine, conclave_id: str) -> AuditRow | None:
    """One audit row by id."""
    return await _one_call(engine, mcp_tool_calls.c.conclave_id == conclave_id)


async def find_by_idempotency_key(engine: AsyncEngine, user_id: str, key: str) -> AuditRow | None:
    """The call ``user_id`` made earlier with idempotency key ``key``."""
    return await _one_call(
        engine, mcp_tool_calls.c.user_id == user_id, mcp_tool_calls.c.idempotency_key == key
    )


async def _one_call(engine: AsyncEngine, *where: ColumnElement[bool]) -> AuditRow | None:
    async with engine.connect() as connection:
        row = (await connection.execute(select(mcp_tool_calls).where(*where))).first()
    return None if row is None else AuditRow(**row._mapping)


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


# Users' own credentials for upstream MCP servers, AES-GCM-encrypted (gateway/upstreams/
# credentials.py): the plaintext never reaches the store, and the ciphertext is bound to its
# (server, user_id), so a row copied to another user does not decrypt.
upstream_credentials = Table(
    "upstream_credentials",
    metadata,
    Column("server", String(32), nullable=False),
    Column("user_id", String(256), nullable=False),
    Column("key_id", String(16), nullable=False),
    Column("ciphertext", LargeBinary, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("server", "user_id", name="pk_upstream_credentials"),
)


async def put_upstream_credential(
    connection: AsyncConnection,
    server: str,
    user_id: str,
    key_id: str,
    ciphertext: bytes,
    at: datetime,
) -> None:
    """Store (or replace) ``user_id``'s encrypted credential for ``server``."""
    # One upsert, not UPDATE then INSERT: two first registrations at once would both insert.
    values = {"key_id": key_id, "ciphertext": ciphertext, "updated_at": at}
    dialect = sqlite if connection.dialect.name == "sqlite" else postgresql
    statement = dialect.insert(upstream_credentials).values(
        server=server, user_id=user_id, **values
    )
    await connection.execute(
        statement.on_conflict_do_update(
            index_elements=[upstream_credentials.c.server, upstream_credentials.c.user_id],
            set_=values,
        )
    )


async def delete_upstream_credential(
    connection: AsyncConnection, server: str, user_id: str
) -> bool:
    """Remove ``user_id``'s credential for ``server``; whether there was one."""
    result = await connection.execute(
        delete(upstream_credentials).where(
            upstream_credentials.c.server == server, upstream_credentials.c.user_id == user_id
        )
    )
    return result.rowcount == 1


async def get_upstream_credential(
    engine: AsyncEngine, server: str, user_id: str
) -> tuple[str, bytes] | None:
    """``(key_id, ciphertext)`` of ``user_id``'s credential for ``server``."""
    query = select(upstream_credentials.c.key_id, upstream_credentials.c.ciphertext).where(
        upstream_credentials.c.server == server, upstream_credentials.c.user_id == user_id
    )
    async with engine.connect() as connection:
        row = (await connection.execute(query)).first()
    return None if row is None else (row.key_id, bytes(row.ciphertext))


async def upstreams_with_credential(engine: AsyncEngine, user_id: str) -> set[str]:
    """The servers ``user_id`` has registered a credential for."""
    query = select(upstream_credentials.c.server).where(upstream_credentials.c.user_id == user_id)
    async with engine.connect() as connection:
        return {row.server for row in await connection.execute(query)}


async def upstream_credential_key_ids(engine: AsyncEngine) -> set[str]:
    """Every key id a stored credential is encrypted with."""
    query = select(upstream_credentials.c.key_id).distinct()
    async with engine.connect() as connection:
        return {row.key_id for row in await connection.execute(query)}
