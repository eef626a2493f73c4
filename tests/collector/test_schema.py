"""The collector tables declared in ``store.py`` match what the migration creates."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

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
