"""Migration 0016 gives the records already copied from Evidence Packs their uploader as owner:
the pack's own ``uploaded_by`` where the edge's table shares the store, else the one their data
names, else nobody's but operators'. Other records stay everyone's who may read their collection.
Every record's vector is flagged for rewriting (points now carry who may find them). Both
stores, there and back."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.edge.store import evidence_packs
from conclave.platform.db.migrate import current_revision, head_revision, migrate
from tests.edge.test_pack_ownership import _downgrade, store_at

BOBS_PACK, OLD_PACK = str(uuid.uuid4()), str(uuid.uuid4())


async def _store_pack(engine: AsyncEngine, evidence_id: str, uploaded_by: str | None) -> None:
    """A pack row as the edge keeps it at revision 0015."""
    async with engine.begin() as connection:
        await connection.execute(
            evidence_packs.insert().values(
                evidence_id=evidence_id, chain_seq=1 if uploaded_by else 2, media_type="image",
                format="PNG", mime_type="image/png", filename="p.png", sha256="0" * 64,
                size_bytes=1, client_metadata={}, extracted={}, device_id="cam",
                correlation_id=None, idempotency_key=None, part_index=0,
                sampling_policy_ref=None, event_id=str(uuid.uuid4()), created_at=datetime.now(UTC),
                prev_chain_hash=None, chain_hash=None, log_leaf_hash=None, uploaded_by=uploaded_by,
            )
        )  # fmt: skip


ROWS = [
    # key, source, data, (owner, pending) after the migration
    # Events made before 0016 name no uploader: the pack in the edge's table does.
    (BOBS_PACK, "inline:", {"evidence_id": BOBS_PACK}, ("bob", True)),
    (OLD_PACK, "inline:", {"evidence_id": OLD_PACK}, ("", True)),
    ("discovered", "evidence:", {"uploaded_by": "alice"}, ("alice", True)),
    ("odd", "evidence:", {"uploaded_by": ["bob"]}, ("", True)),
    ("long", "inline:", {"uploaded_by": "x" * 300}, ("", True)),
    ("empty", "inline:", {"uploaded_by": ""}, ("", True)),
    ("from-a-file", "file:notes.jsonl", {"uploaded_by": "mallory"}, (None, True)),
]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_records_copied_from_packs_become_their_uploaders(kind: str, tmp_path: Path) -> None:
    async with store_at("0015", kind, tmp_path) as engine:
        await _store_pack(engine, BOBS_PACK, "bob")
        await _store_pack(engine, OLD_PACK, None)
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
                    for key, source, data, _ in ROWS
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
            key: after for key, _, _, after in ROWS
        }

        await _downgrade(engine, "0015")
        async with engine.connect() as connection:
            columns = await connection.run_sync(
                lambda sync: [c["name"] for c in inspect(sync).get_columns("collected_records")]
            )
            count = (await connection.execute(text("SELECT count(*) FROM collected_records"))).one()
        assert "owner" not in columns
        assert count[0] == len(ROWS)
