"""The edge tables declared in ``store.py`` match what the migrations create."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from conclave.edge import store
from conclave.platform.db.schema import metadata


async def test_migration_matches_metadata(backend) -> None:
    def differences(connection) -> list:
        context = MigrationContext.configure(connection)
        return [diff for diff in compare_metadata(context, metadata) if "edge_" in repr(diff)]

    assert store.evidence_packs.name in metadata.tables
    async with backend.engine.connect() as connection:
        assert await connection.run_sync(differences) == []
