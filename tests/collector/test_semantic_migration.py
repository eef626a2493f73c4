"""An earlier version's semantic memory (qdrant-client local mode) moves to Qdrant Edge on the
first start: re-indexed from the structured store, with progress shown and every request served
meanwhile."""

from __future__ import annotations

import asyncio
import logging
import shutil

from qdrant_client import QdrantClient, models

from tests.collector.conftest import (
    collector_app,
    collector_settings,
    inbox,
    wait_terminal,
    write_jsonl,
)
from tests.conftest import eventually

RECORDS = 3000


def _local_mode_folder(folder) -> None:
    """What the previous version left: local mode with one collection of another layout."""
    shutil.rmtree(folder)
    client = QdrantClient(path=str(folder))
    client.create_collection(
        "conclave_docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT)
    )
    client.upsert("conclave_docs", points=[models.PointStruct(id=1, vector=[1, 0, 0, 0])])
    client.close()


async def test_local_mode_data_is_reindexed_on_first_start(backend, tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="conclave.collector.indexer")
    items = [
        {"id": f"k{i}", "title": f"crane survey {i}", "site": f"pier {i % 7}"}
        for i in range(RECORDS)
    ]
    source = write_jsonl(inbox(tmp_path) / "items.jsonl", items)
    settings = collector_settings(tmp_path)
    folder = settings.resolved_semantic_memory_path()
    async with collector_app(backend, settings) as (client, _app):
        body = {
            "expedition_type": "discovery",
            "target_collections": ["docs"],
            "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
        }
        run = await client.post("/expedition/run", json=body)
        assert (await wait_terminal(client, run.json()["expedition_id"], 60))[
            "status"
        ] == "completed"

    _local_mode_folder(folder)
    async with collector_app(backend, settings) as (client, _app):
        answers: list[int] = []
        progress: list[dict] = []

        async def keep_asking() -> None:
            while True:
                search = await client.get("/collections/docs/search", params={"q": "crane 17"})
                health = (await client.get("/health")).json()["checks"]["semantic_memory"]
                answers.append(search.status_code)
                if "reindex" in health:
                    progress.append(health["reindex"])
                await asyncio.sleep(0.01)

        asker = asyncio.create_task(keep_asking())

        async def refilled() -> bool:
            [info] = (await client.get("/collections")).json()["collections"]
            return info["vectors"] == RECORDS and info["pending_vectors"] == 0

        await eventually(refilled, timeout=120)
        asker.cancel()
        assert answers and set(answers) == {200}
        assert all(0 <= step["progress"] <= 1 for step in progress)
        hits = (
            await client.get("/collections/docs/search", params={"q": "crane survey 17"})
        ).json()
        assert hits["hits"][0]["record"]["record_key"] == "k17"

    assert not (folder / "meta.json").exists() and not (folder / "collection").exists()
    assert f"re-indexing {RECORDS} records" in caplog.text
    assert "re-index finished" in caplog.text
