"""Local-mode semantic memory: batches commit once, survive a restart, and leave the loop free."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from qdrant_client import QdrantClient, models

from conclave.collector.local_qdrant import LocalQdrant

POINTS = 500


def _points(start: int, count: int) -> list[models.PointStruct]:
    return [
        models.PointStruct(id=i, vector=[1.0, float(i % 7), 0.5, 2.0], payload={"n": i})
        for i in range(start, start + count)
    ]


async def test_a_batch_is_on_disk_when_upsert_returns_and_the_loop_keeps_running(
    tmp_path,
) -> None:
    client = LocalQdrant(str(tmp_path))
    config = models.VectorParams(size=4, distance=models.Distance.COSINE)
    await client.create_collection("c", vectors_config=config)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    running = asyncio.create_task(ticker())
    await client.upsert("c", points=_points(0, POINTS), wait=True)
    running.cancel()
    # The event loop served other tasks while the batch was written on the client's thread.
    assert ticks > 1

    # qdrant-client's per-point transactions were joined into one, in write-ahead-log mode: if a
    # qdrant-client release moved its SQLite connection, local mode would be slow again.
    [storage] = tmp_path.glob("collection/c/storage.sqlite")
    with sqlite3.connect(storage) as reader:
        assert reader.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert reader.execute("SELECT count(*) FROM points").fetchone() == (POINTS,)

    await client.upsert("c", points=_points(POINTS - 10, 20), wait=True)  # 10 new, 10 replaced
    await client.delete("c", points_selector=models.PointIdsList(points=[0, 1]), wait=True)
    await client.close()

    reopened = LocalQdrant(str(tmp_path))
    assert (await reopened.count("c", exact=True)).count == POINTS + 10 - 2
    records, _next = await reopened.scroll("c", limit=1, offset=POINTS + 9, with_payload=True)
    assert records[0].payload == {"n": POINTS + 9}
    await reopened.close()


async def test_a_folder_held_by_another_client_is_unavailable_until_released(tmp_path) -> None:
    holder = QdrantClient(path=str(tmp_path))
    client = LocalQdrant(str(tmp_path))  # starts anyway: semantic memory is down, not the service
    try:
        with pytest.raises(RuntimeError, match="already accessed"):
            await client.get_collections()
        holder.close()
        config = models.VectorParams(size=4, distance=models.Distance.COSINE)
        await client.create_collection("c", vectors_config=config)
        await client.upsert("c", points=_points(0, 3), wait=True)
        assert (await client.count("c")).count == 3
    finally:
        holder.close()
        await client.close()
