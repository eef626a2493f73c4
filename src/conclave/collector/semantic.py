"""Semantic memory: one Qdrant collection per record collection, one point per record.

Local mode (qdrant-client on disk, no server; see :mod:`conclave.collector.local_qdrant`) in
embedded mode; a Qdrant server by URL in production. The point id is derived from (collection,
record key), so writing a record's vector again replaces it instead of adding a duplicate.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qdrant_client import AsyncQdrantClient, models

from conclave.collector.local_qdrant import LocalQdrant
from conclave.platform.embedding import Embedder
from conclave.settings import CollectorSettings

_POINT_NAMESPACE = uuid.UUID("5b0c6c52-4f3e-4b8e-9a77-c0111ec7a0e5")
_MAX_TEXT_CHARS = 8000


def point_id(collection: str, key: str) -> str:
    """The stable point id of a record."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{collection}\x00{key}"))


def embedding_text(data: Any) -> str:
    """The text embedded for a record: its scalar leaves as ``path: value`` lines."""
    lines: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for name, child in value.items():
                walk(child, f"{path}.{name}" if path else str(name))
        elif isinstance(value, list):
            for child in value:
                walk(child, path)
        elif value is not None:
            lines.append(f"{path}: {value}" if path else str(value))

    walk(data, "")
    return "\n".join(lines)[:_MAX_TEXT_CHARS] or json.dumps(data)[:_MAX_TEXT_CHARS]


@dataclass(frozen=True)
class VectorRecord:
    """What semantic memory holds about one record."""

    collection: str
    key: str
    content_hash: str
    text: str


@dataclass(frozen=True)
class StoredPoint:
    """A point read back from semantic memory."""

    key: str
    content_hash: str


class SemanticMemory:
    """Qdrant access for the collector: ensure collections, upsert, delete, scan, search."""

    def __init__(
        self, client: AsyncQdrantClient | LocalQdrant, embedder: Embedder, prefix: str
    ) -> None:
        self._client = client
        self.embedder = embedder
        self._prefix = prefix
        self._known: set[str] = set()
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: CollectorSettings, embedder: Embedder) -> SemanticMemory:
        """Local mode under the data folder, or the server at ``CONCLAVE_SEMANTIC_MEMORY_URL``."""
        if settings.semantic_memory_url:
            api_key = settings.semantic_memory_api_key.get_secret_value() or None
            client: AsyncQdrantClient | LocalQdrant = AsyncQdrantClient(
                url=settings.semantic_memory_url, api_key=api_key, timeout=10
            )
        else:
            path = settings.resolved_semantic_memory_path()
            path.mkdir(parents=True, exist_ok=True)
            client = LocalQdrant(str(path))
        return cls(client, embedder, settings.semantic_collection_prefix)

    def _name(self, collection: str) -> str:
        return self._prefix + collection

    async def close(self) -> None:
        """Release the client (and the local-mode folder lock)."""
        await self._client.close()

    async def ping(self) -> None:
        """Raise when semantic memory does not answer."""
        await self._client.get_collections()

    async def _ensure(self, collection: str) -> str:
        name = self._name(collection)
        if name in self._known:
            return name
        async with self._lock:
            if not await self._client.collection_exists(name):
                await self._client.create_collection(
                    name,
                    vectors_config=models.VectorParams(
                        size=self.embedder.dimensions, distance=models.Distance.COSINE
                    ),
                )
            self._known.add(name)
        return name

    async def exists(self, collection: str) -> bool:
        """Whether semantic memory has this collection."""
        return bool(await self._client.collection_exists(self._name(collection)))

    async def upsert(self, items: Sequence[VectorRecord]) -> None:
        """Embed and write the points of ``items`` (any collections)."""
        by_collection: dict[str, list[VectorRecord]] = {}
        for item in items:
            by_collection.setdefault(item.collection, []).append(item)
        for collection, members in by_collection.items():
            name = await self._ensure(collection)
            # Embedding is CPU work: keep the event loop free for requests and heartbeats.
            points = await asyncio.to_thread(self._points, collection, members)
            await self._client.upsert(name, points=points, wait=True)

    def _points(self, collection: str, members: Sequence[VectorRecord]) -> list[models.PointStruct]:
        vectors = self.embedder.embed([m.text for m in members])
        return [
            models.PointStruct(
                id=point_id(collection, m.key),
                vector=vector,
                payload={"record_key": m.key, "content_hash": m.content_hash},
            )
            for m, vector in zip(members, vectors, strict=True)
        ]

    async def delete(self, collection: str, keys: Sequence[str]) -> None:
        """Remove the points of ``keys``."""
        if not keys or not await self.exists(collection):
            return
        await self._client.delete(
            self._name(collection),
            points_selector=models.PointIdsList(points=[point_id(collection, k) for k in keys]),
            wait=True,
        )

    async def count(self, collection: str) -> int:
        """Points in the collection (0 when it does not exist)."""
        if not await self.exists(collection):
            return 0
        result = await self._client.count(self._name(collection), exact=True)
        return int(result.count)

    async def scan(self, collection: str, page: int = 1000) -> list[StoredPoint]:
        """Every point's record key and content hash."""
        if not await self.exists(collection):
            return []
        points: list[StoredPoint] = []
        offset: Any = None
        while True:
            batch, offset = await self._client.scroll(
                self._name(collection),
                limit=page,
                offset=offset,
                with_payload=True,
                with_vectors=False,
            )
            for point in batch:
                payload = point.payload or {}
                points.append(
                    StoredPoint(
                        str(payload.get("record_key", point.id)),
                        str(payload.get("content_hash", "")),
                    )
                )
            if offset is None:
                return points

    async def search(self, collection: str, query: str, limit: int) -> list[tuple[str, float]]:
        """``(record_key, score)`` of the points nearest to ``query``, best first."""
        if not await self.exists(collection):
            return []
        [vector] = await asyncio.to_thread(self.embedder.embed, [query])
        result = await self._client.query_points(
            self._name(collection), query=vector, limit=limit, with_payload=True
        )
        return [
            (str((p.payload or {}).get("record_key", p.id)), float(p.score)) for p in result.points
        ]
