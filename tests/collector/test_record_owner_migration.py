"""Migration 0016 gives the records already copied from Evidence Packs their uploader as owner
(or operators only, when their data names none) and flags their vectors for rewriting; other
records stay everyone's who may read their collection. Both stores, there and back."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from conclave.platform.db.migrate import current_revision, head_revision, migrate
from tests.edge.test_pack_ownership import _downgrade, store_at

ROWS = [
    # key, source, data
    ("bridged", "inline:", {"evidence_id": "bridged", "uploaded_by": "bob"}),
    ("discovered", "evidence:", {"evidence_id": "discovered", "uploaded_by": "alice"}),
    ("old-pack", "inline:", {"evidence_id": "old-pack", "uploaded_by": None}),
    ("odd-pack", "evidence:", {"evidence_id": "odd-pack", "uploaded_by": ["bob"]}),
    ("from-a-file", "file:notes.jsonl", {"uploaded_by": "mallory"}),
]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_records_copied_from_packs_become_their_uploaders(kind: str, tmp_path: Path) -> None:
    async with store_at("0015", kind, tmp_path) as engine:
        now = datetime.now(UTC)
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO collected_records (collection, record_key, content_hash, data, "
                    "source, vector_pending, created_at, updated_at) "
                    "VALUES ('evidence', :key, 'h', :data, :source, false, :now, :now)"
                ),
                [
                    {"key": key, "source": source, "data": json.dumps(data), "now": now}
                    for key, source, data in ROWS
                ],
            )
        await migrate(engine)
        assert await current_revision(engine) == head_revision()
        async with engine.connect() as connection:
            rows = (
                await connection.execute(
                    text("SELECT record_key, owner, vector_pending FROM collected_records")
                )
            ).all()
        assert {key: (owner, bool(pending)) for key, owner, pending in rows} == {
            "bridged": ("bob", True),
            "discovered": ("alice", True),
            "old-pack": ("", True),
            "odd-pack": ("", True),
            "from-a-file": (None, False),
        }

        await _downgrade(engine, "0015")
        async with engine.connect() as connection:
            columns = await connection.run_sync(
                lambda sync: [c["name"] for c in inspect(sync).get_columns("collected_records")]
            )
            count = (await connection.execute(text("SELECT count(*) FROM collected_records"))).one()
        assert "owner" not in columns
        assert count[0] == len(ROWS)
