"""The hand-written migrations build exactly the schema the code declares, once, under a lock."""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import re
import uuid
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

import conclave
from conclave.platform.clock import utc_now
from conclave.platform.db.engine import create_engine
from conclave.platform.db.migrate import current_revision, head_revision, migrate
from conclave.platform.db.schema import consumed_events, metadata
from tests.conftest import POSTGRES_URL, missing_service


def _register_service_tables() -> list[str]:
    # Each service declares its tables on the shared metadata in its ``store.py``; the migrations
    # create all of them, so every service's store is imported (new services are picked up too).
    stores = []
    for module in pkgutil.iter_modules(conclave.__path__):
        if module.ispkg and importlib.util.find_spec(f"conclave.{module.name}.store"):
            stores.append(importlib.import_module(f"conclave.{module.name}.store").__name__)
    return stores


SERVICE_STORES = _register_service_tables()


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> AsyncEngine:
    engine: AsyncEngine = request.getfixturevalue(f"{request.param}_engine")
    return engine


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


def _normalised(predicate: Any) -> str:
    return re.sub(r"[()\s]", "", str(predicate)).lower()


def _partial_index_predicates(connection: Connection) -> tuple[dict[str, str], dict[str, str]]:
    # compare_metadata does not compare the WHERE of partial indexes, so compare those here.
    dialect = connection.dialect.name
    declared: dict[str, str] = {}
    for table in metadata.tables.values():
        for index in table.indexes:
            where = index.dialect_options[dialect]["where"]
            if where is not None:
                compiled = where.compile(dialect=connection.dialect)
                declared[str(index.name)] = _normalised(compiled)
    reflected: dict[str, str] = {}
    inspector = inspect(connection)
    for table_name in metadata.tables:
        for index in inspector.get_indexes(table_name):
            where = index.get("dialect_options", {}).get(f"{dialect}_where")
            if where is not None:
                reflected[str(index["name"])] = _normalised(where)
    return declared, reflected


async def test_migrated_schema_matches_the_declared_tables(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        differences = await connection.run_sync(_differences)
        declared, reflected = await connection.run_sync(_partial_index_predicates)
    assert differences == []
    assert declared == reflected
    assert "conclave.gateway.store" in SERVICE_STORES
    assert {"ix_outbox_events_pending", "uq_mcp_tool_calls_user_id_idempotency_key"} <= set(
        declared
    )


async def test_migrating_again_is_a_no_op(engine: AsyncEngine) -> None:
    row = {"consumer_group": "g", "event_id": "e1", "consumed_at": utc_now()}
    async with engine.begin() as connection:
        await connection.execute(consumed_events.insert().values(**row))

    await migrate(engine)

    assert await current_revision(engine) == head_revision()
    async with engine.connect() as connection:
        assert await connection.scalar(text("SELECT event_id FROM consumed_events")) == "e1"


async def test_fresh_sqlite_store_migrates_to_head(tmp_path: Any) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'fresh' / 'conclave.db'}")
    try:
        assert await current_revision(engine) is None
        await migrate(engine)
        assert await current_revision(engine) == head_revision()
    finally:
        await engine.dispose()


async def test_concurrent_migrations_on_a_fresh_postgres_schema_both_succeed() -> None:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    try:
        async with admin.begin() as connection:
            await connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:
        await admin.dispose()
        missing_service(f"PostgreSQL not reachable at {POSTGRES_URL}: {type(exc).__name__}")
    replicas = [create_engine(POSTGRES_URL, schema=schema) for _ in range(2)]
    try:
        await asyncio.gather(*(migrate(replica) for replica in replicas))
        assert [await current_revision(replica) for replica in replicas] == [head_revision()] * 2
        async with replicas[0].connect() as connection:
            differences = await connection.run_sync(_differences)
        assert differences == []
    finally:
        for replica in replicas:
            await replica.dispose()
        async with admin.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()
