"""The embedded and server semantic memories under hostile conditions (outside review of issue
#19): stores that come back empty, floods of abandoned requests, a frozen process, batches over
many collections."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time

import pytest
from qdrant_client import AsyncQdrantClient

from conclave.collector.semantic.base import SemanticMemoryUnavailable, VectorRecord
from conclave.collector.semantic.edge import EdgeMemory
from conclave.collector.semantic.server import ServerMemory
from conclave.platform.embedding import HashingEmbedder
from tests.collector.conftest import collector_app, collector_settings, inbox, write_jsonl
from tests.conftest import Backend, eventually
from tests.faults import qdrant_server
from tests.httpserver import free_port

DIMENSIONS = 32


async def test_a_shard_recreated_by_a_new_process_is_refilled(
    sqlite_engine, memory_bus, tmp_path
) -> None:
    """A shard lost with its process (crash, OOM) is created again by the next process, and the
    indexer refills it even though it was idle: it asks again whenever the store may have been
    replaced, not only after its own calls failed."""
    backend = Backend("embedded", sqlite_engine, memory_bus)
    source = write_jsonl(
        inbox(tmp_path) / "items.jsonl", [{"id": f"k{i}", "title": f"crane {i}"} for i in range(5)]
    )
    settings = collector_settings(tmp_path)
    async with collector_app(backend, settings) as (client, app):
        run = await client.post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "target_collections": ["docs"],
                "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
            },
        )
        assert run.status_code == 202

        async def indexed() -> bool:
            infos = (await client.get("/collections")).json()["collections"]
            return bool(infos) and infos[0]["vectors"] == 5 and infos[0]["pending_vectors"] == 0

        await eventually(indexed, timeout=30)
        memory = app.state.collector.memory
        shutil.rmtree(settings.resolved_semantic_memory_path())  # the shard is lost
        os.kill(memory.process_id, signal.SIGKILL)  # and its process goes (OOM, crash)
        await asyncio.sleep(5.5)  # a replacement is started at most every 5 s
        assert (
            await client.get("/collections/docs/search", params={"q": "crane"})
        ).status_code == 200
        assert await memory.needs_reindex() is True  # the new shard asks to be refilled

        async def refilled() -> bool:
            [info] = (await client.get("/collections")).json()["collections"]
            return info["vectors"] == 5

        await eventually(refilled, timeout=60)


async def test_a_qdrant_server_back_empty_gets_its_collection_and_a_reindex(tmp_path) -> None:
    """A Qdrant server that comes back empty (restarted without its volume) gets its collection
    made again and asks for a re-index, without restarting the collector."""
    port = free_port()
    server = qdrant_server.start(port)
    client = AsyncQdrantClient(url=f"http://127.0.0.1:{port}", timeout=5, check_compatibility=False)
    memory = ServerMemory(client, HashingEmbedder(DIMENSIONS), "atk_")
    try:
        await qdrant_server.ready(port, server)
        assert await memory.needs_reindex() is True
        await memory.reindex_started()
        await memory.upsert([VectorRecord("docs", "k1", "h", "crane")])
        server.terminate()
        server.wait(timeout=10)
        server = qdrant_server.start(port)  # the same server, back empty
        await qdrant_server.ready(port, server)

        async def recovered() -> bool:
            try:
                return await memory.needs_reindex()
            except SemanticMemoryUnavailable:
                return False

        await eventually(recovered, timeout=60)  # the indexer retries at most every 10 s
        await memory.upsert([VectorRecord("docs", "k1", "h", "crane")])
    finally:
        await memory.close()
        server.terminate()
        server.wait(timeout=10)


async def test_abandoned_requests_do_not_delay_the_others(tmp_path) -> None:
    """Callers that hang up before their turn leave without running: a flood of abandoned
    searches does not make /health's ping or another user's search wait behind it."""
    memory = EdgeMemory(tmp_path / "shard", "hashing", 384)
    await memory.open()
    try:
        for start in range(0, 100_000, 20_000):
            await memory.upsert(
                [
                    VectorRecord("mine", f"k{i}", "h", f"w{i} x{i % 97}")
                    for i in range(start, start + 20_000)
                ]
            )
        await memory.upsert([VectorRecord("victim", "v", "h", "victim record")])
        abandoned = [asyncio.ensure_future(memory.search("mine", f"w{i}", 100)) for i in range(200)]
        await asyncio.sleep(0.01)
        for call in abandoned:
            call.cancel()  # the HTTP clients hung up
        await asyncio.gather(*abandoned, return_exceptions=True)
        started = time.perf_counter()
        await memory.ping()  # what /health does
        waited = time.perf_counter() - started
        assert waited < 1.0, f"/health's ping waited {waited:.1f} s behind abandoned searches"
    finally:
        await memory.close()


async def test_a_stopped_process_is_replaced_even_during_a_large_write(
    tmp_path,
) -> None:
    """A semantic-memory process that stops reading (frozen, stuck) is given up after the call
    time-out even when the request is larger than the pipe buffer, and a new one takes over."""
    memory = EdgeMemory(
        tmp_path / "shard", "hashing", DIMENSIONS, call_timeout_seconds=1.0, respawn_seconds=0.1
    )
    await memory.open()
    pid = memory.process_id
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        batch = [VectorRecord("docs", f"k{i}", "h", "word " * 1600) for i in range(100)]
        with pytest.raises(SemanticMemoryUnavailable):
            async with asyncio.timeout(10):  # ten times the call time-out
                await memory.upsert(batch)
        assert memory.process_id is None  # the stuck process was killed
        await asyncio.sleep(0.2)
        await memory.upsert(batch[:3])  # and the next call is served by a new one
        assert await memory.count("docs") == 3
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        await memory.close()


async def test_a_batch_across_many_collections_is_written_in_one_flush(tmp_path) -> None:
    """An indexer batch spanning 1000 collections (many small discoveries, a re-index) is one
    update and one flush, like a batch in one collection."""
    memory = EdgeMemory(tmp_path / "shard", "hashing", 384)
    await memory.open()
    try:
        await memory.upsert([VectorRecord("warm", "w", "h", "warm up")])
        started = time.perf_counter()
        await memory.upsert([VectorRecord("one", f"k{i}", "h", f"text {i}") for i in range(1000)])
        together = time.perf_counter() - started
        started = time.perf_counter()
        await memory.upsert([VectorRecord(f"c{i}", f"k{i}", "h", f"text {i}") for i in range(1000)])
        spread = time.perf_counter() - started
        assert spread < 5 * together + 0.5, (
            f"1000 points: {together:.2f} s in one collection, {spread:.2f} s in 1000"
        )
    finally:
        await memory.close()
