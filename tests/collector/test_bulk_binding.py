"""Binding records in bulk (``store.bind_batch``) and clearing vector flags (``mark_indexed``):
the same records, counts and flags on both stores; on PostgreSQL one statement per batch,
planned as primary-key probes however stale the table's statistics, and safe against a writer
inserting the same keys meanwhile."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector import store
from conclave.collector.agents.context import content_hash
from conclave.collector.store.binding import _BIND_NEW_PLAINLY, statement_values
from conclave.collector.store.collected import _CLEAR_PENDING
from tests.conftest import Backend


def _batch(items: list[dict[str, Any]], collection: str = "sites") -> store.RecordBatch:
    return store.RecordBatch(
        collection=collection,
        source="file:sites.jsonl",
        expedition_id="00000000-0000-0000-0000-000000000001",
        correlation_id="corr-1",
        at=datetime.now(UTC),
        keys=[item["id"] for item in items],
        hashes=[content_hash(item) for item in items],
        data=items,
        documents=[store.document_text(item) for item in items],
    )


async def _stored(engine: AsyncEngine, collection: str = "sites") -> dict[str, tuple[Any, bool]]:
    rows = await store.iter_collection(engine, collection, after=None, limit=1000)
    return {row.record_key: (row.data, row.vector_pending) for row in rows}


async def test_a_batch_inserts_rewrites_and_leaves_alone(backend: Backend) -> None:
    engine = backend.engine
    first = [{"id": "a", "n": 1}, {"id": "b", "n": 1}, {"id": "c", "n": 1}]
    stats = await store.bind_batch(engine, _batch(first))
    assert (stats.inserted, stats.updated, stats.unchanged) == (3, 0, 0)
    await store.mark_indexed(engine, [("sites", item["id"], content_hash(item)) for item in first])

    again = [{"id": "a", "n": 1}, {"id": "b", "n": 2}, {"id": "d", "n": 1}]
    stats = await store.bind_batch(engine, _batch(again))
    assert (stats.inserted, stats.updated, stats.unchanged) == (1, 1, 1)
    assert await _stored(engine) == {
        "a": ({"id": "a", "n": 1}, False),  # unchanged: neither rewritten nor flagged
        "b": ({"id": "b", "n": 2}, True),
        "c": ({"id": "c", "n": 1}, False),
        "d": ({"id": "d", "n": 1}, True),
    }
    stored_b = await store.get_record(engine, "sites", "b")
    assert stored_b is not None
    assert (stored_b.source, stored_b.correlation_id) == ("file:sites.jsonl", "corr-1")
    assert stored_b.content_hash == content_hash({"id": "b", "n": 2})
    assert await store.bind_batch(engine, _batch([])) == store.BindStats()


async def test_bound_data_is_stored_as_the_json_column_stores_it(backend: Backend) -> None:
    """The statement takes the documents as text: the text must be the JSON type's own."""
    data = {"id": "x", "t": 'naïve ☃ \\ " \n', "f": [1.5, -0.0, 1e16], "n": None, "b": True}
    await store.bind_batch(backend.engine, _batch([data], "bulk"))
    reference = _batch([dict(data, id="y")], "typed")
    await _upsert_through_the_json_type(backend.engine, reference)
    as_text = text("SELECT collection, CAST(data AS TEXT) FROM collected_records")
    async with backend.engine.connect() as connection:
        texts = {collection: stored for collection, stored in await connection.execute(as_text)}
    assert texts["bulk"].replace('"x"', '"y"') == texts["typed"]


async def _upsert_through_the_json_type(engine: AsyncEngine, batch: store.RecordBatch) -> None:
    async with engine.begin() as connection:
        await store.upsert_records(
            connection,
            [
                store.CollectedRecord(
                    collection=batch.collection,
                    record_key=key,
                    content_hash=hashed,
                    data=data,
                    source=batch.source,
                    expedition_id=None,
                    correlation_id=None,
                    vector_pending=True,
                    created_at=batch.at,
                    updated_at=batch.at,
                )
                for key, hashed, data in zip(batch.keys, batch.hashes, batch.data, strict=True)
            ],
        )


async def test_flags_are_cleared_only_for_the_hash_that_was_embedded(backend: Backend) -> None:
    engine = backend.engine
    await store.bind_batch(engine, _batch([{"id": "a", "n": 1}, {"id": "b", "n": 1}]))
    await store.bind_batch(engine, _batch([{"id": "a", "n": 1}], "other"))
    # b changed after its vector was embedded: it must stay pending for its new content.
    await store.bind_batch(engine, _batch([{"id": "b", "n": 2}]))
    await store.mark_indexed(
        engine,
        [
            ("sites", "a", content_hash({"id": "a", "n": 1})),
            ("sites", "b", content_hash({"id": "b", "n": 1})),
            ("sites", "gone", "0" * 64),
        ],
    )
    assert {key: pending for key, (_, pending) in (await _stored(engine)).items()} == {
        "a": False,
        "b": True,
    }
    assert (await _stored(engine, "other"))["a"][1] is True


async def test_postgres_binds_a_batch_in_one_statement(postgres_engine: AsyncEngine) -> None:
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(postgres_engine.sync_engine, "before_cursor_execute", seen)
    try:
        items = [{"id": f"r{n}", "n": n} for n in range(500)]
        await store.bind_batch(postgres_engine, _batch(items))
        await store.bind_batch(postgres_engine, _batch(items))
    finally:
        event.remove(postgres_engine.sync_engine, "before_cursor_execute", seen)
    assert len(statements) == 2, statements


async def test_postgres_plans_probe_the_primary_key_without_statistics(
    postgres_engine: AsyncEngine,
) -> None:
    # 20,000 freshly bound rows, never analysed: the state during a bulk discovery run, when a
    # join planned from statistics reads the whole collection for every batch.
    items = [{"id": f"r{n}", "n": n} for n in range(20_000)]
    for start in range(0, len(items), 2_000):
        await store.bind_batch(postgres_engine, _batch(items[start : start + 2_000]))
    wanted = items[5_000:6_000]
    bind = _batch(wanted)
    clear = {
        "collections": ["sites"] * len(wanted),
        "keys": bind.keys,
        "hashes": bind.hashes,
        "identities": [
            f"5:sites{len(k)}:{k}{h}" for k, h in zip(bind.keys, bind.hashes, strict=True)
        ],
    }
    for statement, values in (
        (_BIND_NEW_PLAINLY, statement_values(bind)),
        (_CLEAR_PENDING, clear),
    ):
        lines = await _plan(postgres_engine, statement, values)
        assert any("Index Cond" in line and "record_key" in line for line in lines), lines
        assert not any("Seq Scan on collected_records" in line for line in lines), lines
    assert any("Tid Scan on collected_records" in line for line in lines), lines
    async with postgres_engine.connect() as connection:
        analysed = await connection.execute(
            text(
                "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables "
                "WHERE relname = 'collected_records' AND schemaname = current_schema()"
            )
        )
        assert analysed.first() in (None, (None, None))


async def _plan(engine: AsyncEngine, statement: Any, values: dict[str, Any]) -> list[str]:
    compiled = statement.compile(engine)
    given = {**compiled.params, **values}
    async with engine.connect() as connection:
        plan = await connection.exec_driver_sql(
            f"EXPLAIN {compiled.string}", tuple(given[name] for name in compiled.positiontup)
        )
        return [line for (line,) in plan]


async def test_postgres_batch_racing_another_writer_for_a_key_still_binds(
    postgres_engine: AsyncEngine,
) -> None:
    """The plain insert of new keys meets a key another transaction inserted after the
    statement's snapshot: the batch is bound again as upserts, and nothing is lost."""
    theirs = {"id": "k2", "by": "them"}
    async with postgres_engine.connect() as other:
        await _upsert_in(other, _batch([theirs]))  # inserted, not yet committed
        ours = [{"id": "k1", "by": "us"}, {"id": "k2", "by": "us"}]
        binding = asyncio.create_task(store.bind_batch(postgres_engine, _batch(ours)))
        await _until_waiting_for_a_lock(postgres_engine)
        await other.commit()
    stats = await binding
    assert (stats.inserted, stats.updated, stats.unchanged) == (1, 1, 0)
    assert await _stored(postgres_engine) == {
        "k1": ({"id": "k1", "by": "us"}, True),
        "k2": ({"id": "k2", "by": "us"}, True),
    }


async def _upsert_in(connection: Any, batch: store.RecordBatch) -> None:
    await store.upsert_records(
        connection,
        [
            store.CollectedRecord(
                collection=batch.collection,
                record_key=batch.keys[0],
                content_hash=batch.hashes[0],
                data=batch.data[0],
                source="elsewhere",
                expedition_id=None,
                correlation_id=None,
                vector_pending=True,
                created_at=batch.at,
                updated_at=batch.at,
            )
        ],
    )


async def _until_waiting_for_a_lock(engine: AsyncEngine) -> None:
    waiting = (
        select(text("count(*)"))
        .select_from(text("pg_stat_activity"))
        .where(text("wait_event_type = 'Lock' AND query LIKE '%collected_records%'"))
    )
    for _ in range(500):
        async with engine.connect() as connection:
            if (await connection.execute(waiting)).scalar_one():
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the batch never waited for the other writer's key")
