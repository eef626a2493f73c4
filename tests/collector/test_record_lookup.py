"""Looking records up by key: right answers on both stores, and on PostgreSQL one primary-key
probe per key however stale the table's statistics are (a bulk load outruns autovacuum)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector import store
from conclave.collector.store.collected import _by_keys
from conclave.collector.store.tables import records


def _rows(keys: list[str], collection: str = "sites") -> list[store.CollectedRecord]:
    now = datetime.now(UTC)
    return [
        store.CollectedRecord(
            collection=collection,
            record_key=key,
            content_hash=f"hash-{key}",
            data={"name": key, "nested": {"n": index}},
            source="file",
            expedition_id=None,
            correlation_id=None,
            vector_pending=True,
            created_at=now,
            updated_at=now,
        )
        for index, key in enumerate(keys)
    ]


async def test_lookup_returns_only_stored_keys_of_the_collection(backend) -> None:
    engine = backend.engine
    async with engine.begin() as connection:
        await store.upsert_records(connection, _rows(["a", "b", "c"]))
        await store.upsert_records(connection, _rows(["a"], collection="other"))

    versions = await store.stored_versions(engine, "sites", ["a", "c", "missing"])
    assert versions == {"a": ("hash-a", None), "c": ("hash-c", None)}
    found = await store.get_records(engine, "sites", ["c", "missing", "b"])
    assert sorted((row.record_key, row.data["nested"]["n"]) for row in found) == [
        ("b", 1),
        ("c", 2),
    ]
    assert await store.stored_versions(engine, "nothing", ["a"]) == {}
    assert await store.get_records(engine, "sites", []) == []


async def test_postgres_lookup_probes_the_primary_key_without_statistics(
    postgres_engine: AsyncEngine,
) -> None:
    # 20,000 freshly inserted rows, never analysed: the state during a bulk discovery run. A
    # plain IN list is then planned as "read the whole collection and filter".
    keys = [f"r{index}" for index in range(20_000)]
    async with postgres_engine.begin() as connection:
        for start in range(0, len(keys), 2_000):
            await store.upsert_records(connection, _rows(keys[start : start + 2_000]))
    wanted = keys[5_000:6_000]
    statement = _by_keys(
        postgres_engine, "sites", wanted, records.c.record_key, records.c.content_hash
    )
    compiled = statement.compile(postgres_engine)
    async with postgres_engine.connect() as connection:
        plan = await connection.exec_driver_sql(
            f"EXPLAIN {compiled.string}",
            tuple(compiled.params[name] for name in compiled.positiontup),
        )
        lines = [line for (line,) in plan]
    index_conditions = [line for line in lines if "Index Cond" in line]
    assert any("record_key" in line for line in index_conditions), lines
    assert not any("Seq Scan on collected_records" in line for line in lines), lines
    async with postgres_engine.connect() as connection:
        analysed = await connection.execute(
            text(
                "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables "
                "WHERE relname = 'collected_records' AND schemaname = current_schema()"
            )
        )
        assert analysed.first() in (None, (None, None))
    assert len(await store.stored_versions(postgres_engine, "sites", wanted)) == 1_000
