"""mark_indexed against a binder rewriting the record while the flag clearing waits for its row
lock (outside review of issue 19): the new content stays pending on every PostgreSQL release."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector import store
from conclave.collector.agents.context import content_hash


def _batch(items, collection="sites"):
    return store.RecordBatch(
        collection=collection,
        source="s",
        expedition_id=None,
        correlation_id=None,
        at=datetime.now(UTC),
        keys=[i["id"] for i in items],
        hashes=[content_hash(i) for i in items],
        data=items,
        documents=[store.document_text(i) for i in items],
    )


async def _flag(engine: AsyncEngine, key: str):
    async with engine.connect() as c:
        row = (
            await c.execute(
                text(
                    "SELECT content_hash, vector_pending FROM collected_records "
                    "WHERE collection='sites' AND record_key=:k"
                ),
                {"k": key},
            )
        ).one()
    return row.content_hash, row.vector_pending


async def test_flag_of_changed_record_stays_pending_when_change_commits_during_clear(
    postgres_engine: AsyncEngine,
) -> None:
    engine = postgres_engine
    old = {"id": "a", "n": 1}
    new = {"id": "a", "n": 2}
    await store.bind_batch(engine, _batch([old]))
    # The indexer wrote the vector of `old`; meanwhile a binder is rewriting `a` to `new`
    # (its statement holds the row lock until it commits).
    async with engine.connect() as writer:
        await writer.execute(
            text(
                "UPDATE collected_records SET data = CAST(:d AS json), content_hash = :h, "
                "vector_pending = true WHERE collection = 'sites' AND record_key = 'a'"
            ),
            {"d": store.document_text(new), "h": content_hash(new)},
        )
        clearing = asyncio.create_task(
            store.mark_indexed(engine, [("sites", "a", content_hash(old))])
        )
        await asyncio.sleep(0.5)
        assert not clearing.done()  # waiting for the row lock
        await writer.commit()
    await clearing
    stored_hash, pending = await _flag(engine, "a")
    assert stored_hash == content_hash(new)
    # The vector of `new` was never written: the record must stay pending.
    assert pending is True, "changed record's flag cleared by the old hash's mark_indexed"
