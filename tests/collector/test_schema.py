"""The collector tables declared in ``store.py`` match what the migration creates."""

from __future__ import annotations

from dataclasses import fields

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Table

from conclave.collector import store
from conclave.platform.db.schema import metadata

TABLES = ("collector_expeditions", "collected_records", "collector_schedules")


async def test_migration_matches_metadata(backend) -> None:
    def differences(connection) -> list:
        context = MigrationContext.configure(connection)
        return [d for d in compare_metadata(context, metadata) if any(t in repr(d) for t in TABLES)]

    assert store.expeditions.name in metadata.tables
    async with backend.engine.connect() as connection:
        assert await connection.run_sync(differences) == []


@pytest.mark.parametrize(
    ("record", "table"),
    [
        (store.ExpeditionRecord, store.expeditions),
        (store.CollectedRecord, store.records),
        (store.ScheduleRecord, store.schedules),
    ],
)
def test_row_types_have_their_tables_columns_in_order(record: type, table: Table) -> None:
    # The store converts rows by position (collector/records.py).
    assert [field.name for field in fields(record)] == list(table.columns.keys())
