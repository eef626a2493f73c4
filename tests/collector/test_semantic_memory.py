"""One contract, two semantic memories: Qdrant Edge in its own process, and a Qdrant server.

No Qdrant server can be installed on the machines these tests run on, so the server side runs
qdrant-client over HTTP against the stand-in server of the fault suite (tests/faults/qdrant_server,
Qdrant's REST protocol over qdrant-client's own engine). Scores are checked against cosine
similarity computed here from the embedder's vectors, so both answer the same figures.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient
from qdrant_client.models import PointStruct
from qdrant_edge import Point, UpdateOperation

from conclave.collector.semantic.base import (
    SemanticMemory,
    SemanticMemoryUnavailable,
    StoredDocument,
    StoredPoint,
    VectorRecord,
    embedding_text,
    point_id,
)
from conclave.collector.semantic.edge import EdgeMemory
from conclave.collector.semantic.edge_shard import VECTOR, EdgeStore
from conclave.collector.semantic.server import ServerMemory
from conclave.platform.embedding import HashingEmbedder
from tests.faults import qdrant_server
from tests.httpserver import free_port

DIMENSIONS = 64
TEXTS = {
    "r1": "harbour crane inspection north pier",
    "r2": "river bridge survey after the flood",
    "r3": "dam spillway inspection report",
    "r4": "field notes: crane operator interview",
}


@pytest.fixture(scope="module")
def stand_in_port() -> object:
    port = free_port()
    process = qdrant_server.start(port)
    try:
        asyncio.run(qdrant_server.ready(port, process))
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(params=["edge", "server"])
async def memory(request, tmp_path, stand_in_port) -> AsyncIterator[SemanticMemory]:
    if request.param == "edge":
        store: SemanticMemory = EdgeMemory(tmp_path / "shard", "hashing", DIMENSIONS)
    else:
        client = AsyncQdrantClient(url=f"http://127.0.0.1:{stand_in_port}", timeout=10)
        prefix = f"t{uuid.uuid4().hex[:8]}_"
        store = ServerMemory(client, HashingEmbedder(DIMENSIONS), prefix)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def _records(collection: str, texts: dict[str, str]) -> list[VectorRecord]:
    return [VectorRecord(collection, key, f"h-{key}", text) for key, text in texts.items()]


def _cosine(a: str, b: str) -> float:
    left, right = np.asarray(HashingEmbedder(DIMENSIONS).embed([a, b]), dtype=np.float64)
    return float(left @ right / (np.linalg.norm(left) * np.linalg.norm(right)))


async def test_a_new_store_asks_for_a_reindex_once(memory: SemanticMemory) -> None:
    assert await memory.needs_reindex() is True
    await memory.reindex_started()
    assert await memory.needs_reindex() is False


async def test_points_are_kept_apart_by_collection_and_scored_by_cosine(
    memory: SemanticMemory,
) -> None:
    await memory.upsert(_records("docs", TEXTS) + _records("other", {"r1": "crane crane crane"}))
    assert await memory.count("docs") == 4
    assert await memory.count("other") == 1
    assert await memory.count("never-written") == 0
    assert sorted(await memory.scan("docs"), key=lambda p: p.key) == [
        StoredPoint(key, f"h-{key}") for key in sorted(TEXTS)
    ]
    hits = await memory.search("docs", "crane inspection", 3)
    expected = sorted(TEXTS, key=lambda key: -_cosine("crane inspection", TEXTS[key]))
    assert [key for key, _ in hits] == expected[:3]
    for key, score in hits:
        assert score == pytest.approx(_cosine("crane inspection", TEXTS[key]), abs=1e-5)
    # The other collection's "r1" (the same key, another point) is never an answer in "docs".
    assert all(score < 0.99 for _, score in hits)
    assert await memory.search("never-written", "crane", 5) == []


async def test_records_given_as_stored_json_get_the_points_of_their_texts(
    memory: SemanticMemory,
) -> None:
    data = {"title": "harbour crane inspection", "tags": ["north", "pier"], "n": 3}
    await memory.upsert_documents(
        [
            StoredDocument("docs", "json", "h1", json.dumps(data)),
            # JSON escapes of a lone surrogate and NUL: storable text, embedded escaped.
            StoredDocument("docs", "odd", "h2", '{"title": "crane \\ud800 \\u0000 survey"}'),
            # Only a store written by hand holds this: the vector of no text, nothing fails.
            StoredDocument("docs", "broken", "h3", '{"title": "crane", '),
        ]
    )
    assert sorted(await memory.scan("docs"), key=lambda p: p.key) == [
        StoredPoint("broken", "h3"),
        StoredPoint("json", "h1"),
        StoredPoint("odd", "h2"),
    ]
    hits = dict(await memory.search("docs", "harbour crane inspection", 3))
    text = embedding_text(data)
    assert hits["json"] == pytest.approx(_cosine("harbour crane inspection", text), abs=1e-5)
    assert hits.get("broken", 0.0) == 0.0
    assert hits["odd"] == pytest.approx(
        _cosine("harbour crane inspection", "title: crane \\ud800 \\u0000 survey"), abs=1e-5
    )


async def test_writing_a_record_again_replaces_its_point_and_delete_removes_it(
    memory: SemanticMemory,
) -> None:
    await memory.upsert(_records("docs", TEXTS))
    await memory.upsert([VectorRecord("docs", "r2", "h-new", "granite quarry blasting")])
    assert await memory.count("docs") == 4
    assert StoredPoint("r2", "h-new") in await memory.scan("docs")
    [(best, score)] = await memory.search("docs", "granite quarry blasting", 1)
    assert (best, round(score, 4)) == ("r2", 1.0)
    await memory.delete("docs", ["r2", "not-there"])
    assert await memory.count("docs") == 3
    assert "r2" not in {key for key, _ in await memory.search("docs", "granite", 4)}


async def test_a_reader_finds_and_counts_the_public_points_and_their_own(
    memory: SemanticMemory,
) -> None:
    text = "harbour crane inspection"
    await memory.upsert(
        [
            VectorRecord("docs", "public", "h", text),
            VectorRecord("docs", "alices", "h", text, owner="alice"),
            VectorRecord("docs", "bobs", "h", text, owner="bob"),
            VectorRecord("docs", "operators", "h", text, owner=""),
        ]
    )
    assert sorted(await memory.scan("docs"), key=lambda p: p.key) == [
        StoredPoint("alices", "h", "user:alice"),
        StoredPoint("bobs", "h", "user:bob"),
        StoredPoint("operators", "h", "operators"),
        StoredPoint("public", "h", "public"),
    ]
    assert {key for key, _ in await memory.search("docs", text, 10, "alice")} == {
        "public",
        "alices",
    }
    assert {key for key, _ in await memory.search("docs", text, 10)} == {
        "public",
        "alices",
        "bobs",
        "operators",
    }
    # The limit is spent on what the reader may find: bob's better hits do not crowd it out.
    [(only, _)] = await memory.search("docs", text, 1, "carol")
    assert only == "public"
    assert (await memory.count("docs", "alice"), await memory.count("docs")) == (2, 4)
    # A record that changed hands: its point is rewritten with the new owner.
    await memory.upsert([VectorRecord("docs", "public", "h2", text, owner="bob")])
    assert {key for key, _ in await memory.search("docs", text, 10, "alice")} == {"alices"}


async def test_hostile_text_is_stored_and_searched(memory: SemanticMemory) -> None:
    texts = {"nul": "a\x00b crane", "rtl": "\u202eevil\u202c crane", "cjk": "起重机 检查", "e": ""}
    await memory.upsert(_records("docs", texts))
    assert await memory.count("docs") == 4
    assert {key for key, _ in await memory.search("docs", "起重机", 4)} >= {"cjk"}
    # A query without a word embeds to the zero vector: it matches nothing, rather than every
    # point of the collection at score 0 in no order.
    for wordless in ("\x00", "", "!!!", "\u200d", "—"):
        assert await memory.search("docs", wordless, 4) == []


async def test_a_memory_that_cannot_be_reached_says_so(tmp_path) -> None:
    client = AsyncQdrantClient(
        url=f"http://127.0.0.1:{free_port()}", timeout=2, check_compatibility=False
    )
    server = ServerMemory(client, HashingEmbedder(DIMENSIONS), "t_")
    await server.open()  # a server that is down is not a start-up failure
    try:
        with pytest.raises(SemanticMemoryUnavailable):
            await server.ping()
        with pytest.raises(SemanticMemoryUnavailable):
            await server.upsert(_records("docs", TEXTS))
    finally:
        await server.close()


async def test_a_point_written_before_points_carried_access_is_found_by_operators_only(
    tmp_path, stand_in_port
) -> None:
    # Points written before migration 0016 have no `access`: until the indexer rewrites them
    # (0016 flags every record), a user's count and search must not see them, whoever's they
    # are, and a scan reports them unmarked so an audit calls them stale.
    legacy = {"collection": "docs", "record_key": "old", "content_hash": "h"}
    vector = HashingEmbedder(DIMENSIONS).embed(["harbour crane"])[0]
    shard = EdgeStore.open(tmp_path / "shard", DIMENSIONS)
    try:
        shard._shard.update(
            UpdateOperation.upsert_points(
                [Point(point_id("docs", "old"), {VECTOR: vector}, legacy)]
            )
        )
        assert (shard.count("docs"), shard.count("docs", "alice")) == (1, 0)
        query = np.asarray(vector, dtype=np.float32)
        assert [key for key, _ in shard.search("docs", query, 5)] == ["old"]
        assert shard.search("docs", query, 5, "alice") == []
        assert shard.scan("docs", None, 10)[0] == [StoredPoint("old", "h", None)]
    finally:
        shard.close()

    client = AsyncQdrantClient(url=f"http://127.0.0.1:{stand_in_port}", timeout=10)
    server = ServerMemory(client, HashingEmbedder(DIMENSIONS), f"t{uuid.uuid4().hex[:8]}_")
    try:
        await server.upsert([VectorRecord("docs", "new", "h", "harbour crane")])
        name = await server._collection_ready()
        await client.upsert(
            name,
            [PointStruct(id=point_id("docs", "old"), vector=list(vector), payload=legacy)],
            wait=True,
        )
        assert (await server.count("docs"), await server.count("docs", "alice")) == (2, 1)
        assert {key for key, _ in await server.search("docs", "harbour crane", 5, "alice")} == {
            "new"
        }
        assert StoredPoint("old", "h", None) in await server.scan("docs")
    finally:
        await server.close()
