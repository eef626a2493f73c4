"""The vector indexer's pipelined sweep, on both stores with the real embedded semantic memory:
every pending record is written once, oldest write first, with the next batch read while the
previous one is written; a record written during a bulk load waits only for what was written
before it; a write that fails mid-sweep leaves exactly the unacknowledged batches pending;
records flagged behind the sweep are written by the next one; a record whose stored data is not
JSON does not block the others; point ids never change."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector import store
from conclave.collector.agents.binder import Binder
from conclave.collector.agents.context import content_hash
from conclave.collector.agents.restorer import Restorer
from conclave.collector.indexer import VectorIndexer
from conclave.collector.metrics import CollectorMetrics
from conclave.collector.semantic.base import (
    SemanticMemory,
    SemanticMemoryUnavailable,
    StoredDocument,
    StoredPoint,
    VectorRecord,
    point_id,
)
from conclave.collector.semantic.edge import EdgeMemory
from conclave.collector.store.collected import INDEX_SCAN_ONLY, pending_statement
from conclave.collector.store.tables import records
from tests.conftest import eventually, process_gone

DIMENSIONS = 64


class Failing(SemanticMemory):
    """A real embedded semantic memory whose ``fail_at``-th upsert fails (a fault injected
    around it), recording the keys each upsert carried."""

    def __init__(self, memory: EdgeMemory, fail_at: int | None = None) -> None:
        self.memory = memory
        self.embedder_name = memory.embedder_name
        self.fail_at = fail_at
        self.batches: list[list[str]] = []
        self.upserted = asyncio.Event()  # set at each upsert
        self.on_write: Callable[[], Awaitable[None]] | None = None

    @property  # type: ignore[override]
    def generation(self) -> int:
        return self.memory.generation

    async def open(self) -> None:
        await self.memory.open()

    async def close(self) -> None:
        await self.memory.close()

    async def ping(self) -> None:
        await self.memory.ping()

    async def needs_reindex(self) -> bool:
        return await self.memory.needs_reindex()

    async def reindex_started(self) -> None:
        await self.memory.reindex_started()

    async def upsert(self, items: Sequence[VectorRecord]) -> None:
        await self.memory.upsert(items)

    async def upsert_documents(self, items: Sequence[StoredDocument]) -> None:
        self.batches.append([i.key for i in items])
        self.upserted.set()
        if self.on_write is not None:
            await self.on_write()  # another writer of the structured store, meanwhile
        if self.fail_at is not None and len(self.batches) == self.fail_at:
            raise SemanticMemoryUnavailable("injected: the write failed")
        await asyncio.sleep(0.02)  # a slower write, so reads and flag clearing overlap it
        await self.memory.upsert_documents(items)

    async def delete(self, collection: str, keys: Sequence[str]) -> None:
        await self.memory.delete(collection, keys)

    async def count(self, collection: str) -> int:
        return await self.memory.count(collection)

    async def scan(self, collection: str) -> list[StoredPoint]:
        return await self.memory.scan(collection)

    async def search(self, collection: str, query: str, limit: int) -> list[tuple[str, float]]:
        return await self.memory.search(collection, query, limit)


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> AsyncEngine:
    return request.getfixturevalue(f"{request.param}_engine")  # type: ignore[no-any-return]


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[EdgeMemory]:
    memory = EdgeMemory(tmp_path / "shard", "hashing", DIMENSIONS)
    await memory.open()
    yield memory
    await memory.close()


async def _bind(
    engine: AsyncEngine, keys: list[str], collection: str = "sites", at: datetime | None = None
) -> None:
    await _bind_items(engine, [{"id": key, "title": f"site {key}"} for key in keys], collection, at)


async def _bind_items(
    engine: AsyncEngine,
    items: list[dict[str, Any]],
    collection: str = "sites",
    at: datetime | None = None,
) -> None:
    await store.bind_batch(
        engine,
        store.RecordBatch(
            collection=collection,
            source="s",
            expedition_id=None,
            correlation_id=None,
            at=at or datetime.now(UTC),
            keys=[i["id"] for i in items],
            hashes=[content_hash(i) for i in items],
            data=items,
            documents=[store.document_text(i) for i in items],
        ),
    )


async def _pending(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            select(records.c.record_key).where(records.c.vector_pending.is_(True))
        )
        return {row.record_key for row in rows}


async def _count(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(select(func.count()).select_from(records))).one()[0])


def _keys(count: int) -> list[str]:
    return [f"k{i:04d}" for i in range(count)]


async def test_one_sweep_writes_every_pending_record_once_oldest_first(
    engine: AsyncEngine, memory: EdgeMemory
) -> None:
    await _bind(engine, _keys(250))
    await _bind(engine, _keys(30), collection="alpha")  # written later, though it sorts first
    failing = Failing(memory)
    indexer = VectorIndexer(engine, failing, CollectorMetrics(), batch_size=40)

    assert await indexer.index_pending() == 280
    assert await _pending(engine) == set()
    written = [key for batch in failing.batches for key in batch]
    assert written == _keys(250) + _keys(30)  # each key once, in the order of the writes
    assert [len(b) for b in failing.batches] == [40] * 7
    assert await memory.count("sites") == 250
    assert await memory.count("alpha") == 30
    # Nothing is left: the next sweep finds nothing and writes nothing.
    assert await indexer.index_pending() == 0
    assert len(failing.batches) == 7


async def test_a_record_written_during_a_bulk_load_waits_only_for_older_writes(
    engine: AsyncEngine, memory: EdgeMemory
) -> None:
    bulk = [f"b{i:04d}" for i in range(300)]
    await _bind(engine, bulk[:100], collection="bulk")
    failing = Failing(memory)
    indexer = VectorIndexer(engine, failing, CollectorMetrics(), batch_size=20)

    async def load_on() -> None:
        await failing.upserted.wait()
        await _bind(engine, ["upload-1"], collection="evidence")
        for start in range(100, 300, 50):  # the bulk load goes on after the upload
            await _bind(engine, bulk[start : start + 50], collection="bulk")

    loader = asyncio.create_task(load_on())
    total = await indexer.index_pending()
    await loader
    total += await indexer.drain()
    assert total == 301
    written = [key for batch in failing.batches for key in batch]
    assert written.index("upload-1") < written.index("b0100")
    assert await _pending(engine) == set()


async def test_a_failed_write_leaves_its_batch_and_the_rest_pending(
    engine: AsyncEngine, memory: EdgeMemory
) -> None:
    await _bind(engine, _keys(200))
    failing = Failing(memory, fail_at=3)
    indexer = VectorIndexer(engine, failing, CollectorMetrics(), batch_size=50)

    with pytest.raises(SemanticMemoryUnavailable):
        await indexer.index_pending()
    # Batches 1 and 2 were acknowledged (cleared); batch 3 failed and batch 4 was never sent.
    assert await _pending(engine) == set(_keys(200)[100:])
    assert await memory.count("sites") == 100

    failing.fail_at = None
    assert await indexer.index_pending() == 100
    assert await _pending(engine) == set()
    assert await memory.count("sites") == 200


async def test_records_flagged_behind_the_sweep_are_written_by_the_next(
    engine: AsyncEngine, memory: EdgeMemory
) -> None:
    await _bind(engine, _keys(60))
    assert await VectorIndexer(engine, memory, CollectorMetrics()).index_pending() == 60
    await _bind(engine, _keys(120)[60:])
    failing = Failing(memory)
    indexer = VectorIndexer(engine, failing, CollectorMetrics(), batch_size=20)

    async def flag_behind() -> None:
        await failing.upserted.wait()
        # Flagged again with their old write time (as healing and a re-index do): the sweep has
        # passed their place.
        async with engine.begin() as connection:
            await store.mark_pending(connection, "sites", _keys(60))

    flagger = asyncio.create_task(flag_behind())
    first = await indexer.index_pending()
    await flagger
    assert first == 60
    assert await _pending(engine) == set(_keys(60))
    assert await indexer.index_pending() == 60
    assert await _pending(engine) == set()
    assert await memory.count("sites") == 120


async def test_a_record_whose_data_is_not_json_does_not_block_the_others(
    sqlite_engine: AsyncEngine, memory: EdgeMemory
) -> None:
    # Only a store written by hand can hold this: SQLite keeps JSON as unchecked text.
    await _bind(sqlite_engine, _keys(30))
    async with sqlite_engine.begin() as connection:
        await connection.exec_driver_sql(
            'UPDATE collected_records SET data = \'{"id": "k0007", broken\' '
            "WHERE record_key = 'k0007'"
        )
    indexer = VectorIndexer(sqlite_engine, memory, CollectorMetrics(), batch_size=10)
    assert await indexer.index_pending() == 30
    assert await _pending(sqlite_engine) == set()
    assert await memory.count("sites") == 30
    hits = dict(await memory.search("sites", "site k0008", 30))
    assert max(hits, key=hits.__getitem__) == "k0008"
    assert hits.get("k0007", 0.0) == 0.0  # its point is the vector of no text: like nothing


async def test_stopping_mid_sweep_leaves_the_batch_in_flight_pending(
    engine: AsyncEngine, memory: EdgeMemory
) -> None:
    await _bind(engine, _keys(100))
    failing = Failing(memory)
    indexer = VectorIndexer(engine, failing, CollectorMetrics(), batch_size=25)
    sweep = asyncio.create_task(indexer.index_pending())
    while len(failing.batches) < 2:
        failing.upserted.clear()
        await failing.upserted.wait()
    sweep.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sweep
    pending = await _pending(engine)
    # Only acknowledged batches were cleared: whatever is left is whole batches, still owed.
    assert pending and len(pending) % 25 == 0
    assert set(_keys(100)) - pending == set(_keys(100)[: 100 - len(pending)])
    assert await VectorIndexer(engine, memory, CollectorMetrics()).index_pending() == len(pending)
    assert await _pending(engine) == set()


@settings(max_examples=300, deadline=None)
@given(collection=st.text(st.characters(exclude_categories=["Cs"])), key=st.text())
def test_point_ids_are_the_uuid5_of_collection_and_key(collection: str, key: str) -> None:
    namespace = uuid.UUID("5b0c6c52-4f3e-4b8e-9a77-c0111ec7a0e5")
    name = f"{collection}\x00{key}"
    try:
        expected = str(uuid.uuid5(namespace, name))
    except UnicodeEncodeError:  # a lone surrogate: neither can encode it
        with pytest.raises(UnicodeEncodeError):
            point_id(collection, key)
        return
    assert point_id(collection, key) == expected


def test_point_ids_of_stored_points_are_pinned() -> None:
    # Points already stored carry these ids: a change here would orphan every existing point.
    assert point_id("sites", "r1") == str(
        uuid.uuid5(uuid.UUID("5b0c6c52-4f3e-4b8e-9a77-c0111ec7a0e5"), "sites\x00r1")
    )
    assert point_id("evidence", "ép 🛰") == "5f93e8af-e91a-5a4f-8826-f252d17177b6"


async def test_postgres_pages_through_the_pending_index_without_statistics(
    postgres_engine: AsyncEngine,
) -> None:
    # 20,000 freshly bound records, never analysed: the state during a bulk discovery run, when
    # a page's starting point made PostgreSQL read the whole table and sort it for every page.
    keys = _keys(20_000)
    for start in range(0, len(keys), 2_000):
        await _bind(postgres_engine, keys[start : start + 2_000])
    [first] = await store.pending_vectors(postgres_engine, 1)
    statement = pending_statement(1000, first).compile(postgres_engine)
    async with postgres_engine.begin() as connection:
        await connection.execute(INDEX_SCAN_ONLY)
        plan = await connection.exec_driver_sql(
            f"EXPLAIN {statement.string}",
            tuple(statement.params[name] for name in statement.positiontup or ()),
        )
        lines = [line for (line,) in plan]
    assert any("ix_collected_records_pending" in line for line in lines), lines
    assert not any("Seq Scan" in line or "Sort" in line for line in lines), lines
    page = await store.pending_vectors(postgres_engine, 1000, first)
    assert [row.record_key for row in page] == keys[1:1001]


# Outside review of the sweep: a record changed and changed back while its page is written; a
# record stamped behind the sweep during a long load; a store that comes back empty mid-load;
# wide items holding the event loop.


async def test_a_record_changed_and_changed_back_while_its_page_is_written_keeps_no_stale_vector(
    engine: AsyncEngine, memory: EdgeMemory
) -> None:
    v1 = {"id": "r", "title": "first version"}
    v2 = {"id": "r", "title": "second version"}
    await _bind_items(engine, [{"id": "a", "title": "another record"}, v1])
    reads = 0

    async def read_page(*args: Any) -> list[Any]:
        # Two writers disagree about r while the page holding it as v1 is written: one rewrites
        # it to v2 just before the next page is read, the other back to v1 just after.
        nonlocal reads
        reads += 1
        if reads == 2:
            await _bind_items(engine, [v2])
        rows = await store.pending_vectors(*args)
        if reads == 2:
            await _bind_items(engine, [v1])
        return rows

    indexer = VectorIndexer(engine, memory, CollectorMetrics(), batch_size=2, read_page=read_page)
    await indexer.index_pending()
    await VectorIndexer(engine, memory, CollectorMetrics(), batch_size=2).drain()
    async with engine.connect() as connection:
        stored = (
            await connection.execute(
                select(records.c.content_hash, records.c.vector_pending).where(
                    records.c.record_key == "r"
                )
            )
        ).one()
    assert (stored.content_hash, stored.vector_pending) == (content_hash(v1), False)
    points = {p.key: p.content_hash for p in await memory.scan("sites")}
    assert points["r"] == content_hash(v1)  # the vector of what is stored, not of v2


async def test_a_record_stamped_behind_the_sweep_waits_for_a_few_pages_not_the_whole_load(
    engine: AsyncEngine, memory: EdgeMemory
) -> None:
    failing = Failing(memory)
    writes = 0

    async def load_goes_on() -> None:
        # A steady load a batch ahead of the indexer; during the second page another writer
        # (a replica whose clock is behind) commits a record stamped behind the sweep.
        nonlocal writes
        writes += 1
        if writes <= 60:
            await _bind(engine, [f"b{writes + 1:03d}-{i}" for i in range(3)], "bulk")
        if writes == 2:
            await _bind(engine, ["late"], "uploads", at=datetime.now(UTC) - timedelta(seconds=2))

    failing.on_write = load_goes_on
    await _bind(engine, [f"b000-{i}" for i in range(3)], "bulk")
    await _bind(engine, [f"b001-{i}" for i in range(3)], "bulk")
    indexer = VectorIndexer(engine, failing, CollectorMetrics(), batch_size=3)
    await indexer.drain()
    order = [key for batch in failing.batches for key in batch]
    assert order.count("late") == 1 and order.count("b061-0") == 1
    # Written by the next sweep, which starts after at most 16 pages: not after the load.
    assert order.index("late") < order.index("b030-0")


async def test_a_store_that_comes_back_empty_mid_load_is_refilled_at_once(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    folder = tmp_path / "shard"
    memory = EdgeMemory(folder, "hashing", DIMENSIONS, respawn_seconds=0.0)
    await memory.open()
    await memory.reindex_started()
    failing = Failing(memory)
    writes = 0

    async def load_goes_on() -> None:
        nonlocal writes
        writes += 1
        if writes <= 40:
            await _bind(engine, [f"b{writes + 1:03d}-{i}" for i in range(3)], "bulk")
        if writes == 3:  # the semantic-memory process dies and its folder is lost
            pid = memory.process_id
            assert pid is not None
            os.kill(pid, signal.SIGKILL)

            # Gone for the system and seen gone by the collector: asyncio reaps the child a
            # moment later, and until then a write meets a closed pipe (a plain outage).
            await eventually(
                lambda: asyncio.sleep(0, process_gone(pid) and memory.process_id is None)
            )
            shutil.rmtree(folder)

    failing.on_write = load_goes_on
    await _bind(engine, [f"b000-{i}" for i in range(3)], "bulk")
    await _bind(engine, [f"b001-{i}" for i in range(3)], "bulk")
    indexer = VectorIndexer(engine, failing, CollectorMetrics(), batch_size=3)
    try:
        # b000 and b001 are written, then the store is lost: the third page goes to a new
        # process on a new, empty shard (the old process is replaced at once).
        await indexer.drain()
        again = [key for batch in failing.batches[2:] for key in batch]
        # That write makes the new store known; the next page starts the refill from the
        # oldest record, not after the rest of the load.
        assert again.index("b000-0") < again.index("b010-0")
        assert await memory.count("bulk") == await _count(engine)
    finally:
        await memory.close()


async def test_wide_items_give_the_event_loop_turns_while_restored_and_bound(
    engine: AsyncEngine,
) -> None:
    # 100 items of about 110 KB each (5,000 short fields): the file source reads up to 100 MB.
    items = [{"id": f"r{i}", **{f"f{j}": f"value {j}" for j in range(5000)}} for i in range(100)]
    gaps: list[float] = []
    done = False

    # Measured in this thread's CPU time: a stretch of work between two turns of the loop, not
    # the time the process waited for a core (under xdist on 2 cores that alone passed 50 ms).
    async def ticker() -> None:
        last = time.thread_time()
        while not done:
            await asyncio.sleep(0)
            now = time.thread_time()
            gaps.append(now - last)
            last = now

    context = SimpleNamespace(
        engine=engine,
        expedition_id=None,
        correlation_id=None,
        indexer=SimpleNamespace(wake=lambda: None),
        metrics=CollectorMetrics(),
    )
    binder = Binder(context)  # type: ignore[arg-type]
    # The interpreter's own pauses (a full garbage collection over millions of live objects,
    # 100 ms and more in a test process) are not what is measured: the agents' stretches are.
    gc.disable()
    try:
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        restored = await Restorer("id").restore_batch(items)
        await binder.bind("wide", restored.records, "file")
        done = True
        await task
    finally:
        gc.enable()
    stats = await binder.flush()
    assert stats.inserted == 100
    # One item's own work (restore, hash and encode 110 KB) is a few ms; no stretch holds many
    # of them (before: 200 such items held the loop for 2 to 3 s).
    assert max(gaps) < 0.05, f"event loop held for {max(gaps) * 1000:.0f} ms"
