"""The production semantic memory: a Qdrant server through qdrant-client.

One Qdrant collection, ``<COLLECTOR_SEMANTIC_COLLECTION_PREFIX>_records``, holds every record
collection's points, with the same point ids, payload and ``collection`` tenant index as the
embedded shard (:mod:`.base`). Earlier versions kept one Qdrant collection per record collection
(``<prefix><name>``); the double underscore keeps the new name apart from all of those (record
collection names start with a letter or digit), and they are no longer read: on first start the
new collection is created and every record re-indexed from the structured store. The payload
index is created last, once the re-index has been asked for, so a crash in between asks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx
from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from conclave.collector.semantic.base import (
    ACCESS_FIELD,
    COLLECTION_FIELD,
    SemanticMemory,
    SemanticMemoryUnavailable,
    StoredPoint,
    VectorRecord,
    point_id,
    point_payload,
    reader_access,
)
from conclave.platform.embedding import Embedder

_SCAN_PAGE = 1000
_UNREACHABLE = (
    ResponseHandlingException,
    UnexpectedResponse,
    httpx.HTTPError,
    OSError,
    TimeoutError,
)


def _collection(collection: str, reader: str | None = None) -> models.Filter:
    """The points of ``collection``; with ``reader``, those that user may find."""
    within = models.FieldCondition(key=COLLECTION_FIELD, match=models.MatchValue(value=collection))
    if reader is None:
        return models.Filter(must=[within])
    allowed = models.FieldCondition(
        key=ACCESS_FIELD, match=models.MatchAny(any=reader_access(reader))
    )
    return models.Filter(must=[within, allowed])


class ServerMemory(SemanticMemory):
    """Semantic memory on a Qdrant server (see the module docstring)."""

    def __init__(self, client: AsyncQdrantClient, embedder: Embedder, prefix: str) -> None:
        self._client = client
        self._embedder = embedder
        self.embedder_name = embedder.name
        self._name = f"{prefix}_records"
        self._ready = False
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        """Nothing to start: the collection is made on first use (the server may be down now)."""

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()

    async def _call(self, name: str, /, **arguments: Any) -> Any:
        try:
            return await getattr(self._client, name)(**arguments)
        except _UNREACHABLE as exc:
            # The server may come back empty (wiped, replaced): look for the collection again.
            self._ready = False
            raise SemanticMemoryUnavailable(f"Qdrant server: {type(exc).__name__}") from exc

    async def _collection_ready(self) -> str:
        if self._ready:
            return self._name
        async with self._lock:
            if not await self._call("collection_exists", collection_name=self._name):
                params = models.VectorParams(
                    size=self._embedder.dimensions, distance=models.Distance.COSINE
                )
                try:
                    await self._call(
                        "create_collection", collection_name=self._name, vectors_config=params
                    )
                except SemanticMemoryUnavailable:
                    # Another replica created it at the same moment: go on if it is there now.
                    if not await self._call("collection_exists", collection_name=self._name):
                        raise
            await self._access_index()
            self._ready = True
            self.generation += 1
        return self._name

    async def _access_index(self) -> None:
        """The keyword index of :data:`ACCESS_FIELD`, made when missing: a reader's filter on
        the shared collection narrows nothing by collection, and without it would read every
        point's payload."""
        info = await self._call("get_collection", collection_name=self._name)
        if ACCESS_FIELD in (info.payload_schema or {}):
            return
        await self._call(
            "create_payload_index",
            collection_name=self._name,
            field_name=ACCESS_FIELD,
            field_schema=models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD),
            wait=True,
        )

    async def ping(self) -> None:
        """See :meth:`SemanticMemory.ping`."""
        await self._call("get_collections")

    async def needs_reindex(self) -> bool:
        """See :meth:`SemanticMemory.needs_reindex`: the tenant index is made after a re-index
        was asked for, so its absence means the collection was never refilled."""
        name = await self._collection_ready()
        info = await self._call("get_collection", collection_name=name)
        return COLLECTION_FIELD not in (info.payload_schema or {})

    async def reindex_started(self) -> None:
        """See :meth:`SemanticMemory.reindex_started`."""
        name = await self._collection_ready()
        await self._call(
            "create_payload_index",
            collection_name=name,
            field_name=COLLECTION_FIELD,
            field_schema=models.KeywordIndexParams(
                type=models.KeywordIndexType.KEYWORD, is_tenant=True
            ),
            wait=True,
        )

    async def upsert(self, items: Sequence[VectorRecord]) -> None:
        """See :meth:`SemanticMemory.upsert` (``wait=True``: applied when it returns)."""
        if not items:
            return
        name = await self._collection_ready()
        # Embedding is CPU work: keep the event loop free for requests and heartbeats.
        points = await asyncio.to_thread(self._points, items)
        await self._call("upsert", collection_name=name, points=points, wait=True)

    def _points(self, items: Sequence[VectorRecord]) -> list[models.PointStruct]:
        vectors = self._embedder.embed([item.text for item in items])
        return [
            models.PointStruct(
                id=point_id(item.collection, item.key),
                vector=vector,
                payload=point_payload(item.collection, item.key, item.content_hash, item.owner),
            )
            for item, vector in zip(items, vectors, strict=True)
        ]

    async def delete(self, collection: str, keys: Sequence[str]) -> None:
        """See :meth:`SemanticMemory.delete`."""
        if not keys:
            return
        name = await self._collection_ready()
        selector = models.PointIdsList(points=[point_id(collection, key) for key in keys])
        await self._call("delete", collection_name=name, points_selector=selector, wait=True)

    async def count(self, collection: str, reader: str | None = None) -> int:
        """See :meth:`SemanticMemory.count`."""
        name = await self._collection_ready()
        result = await self._call(
            "count", collection_name=name, count_filter=_collection(collection, reader), exact=True
        )
        return int(result.count)

    async def scan(self, collection: str) -> list[StoredPoint]:
        """See :meth:`SemanticMemory.scan`."""
        name = await self._collection_ready()
        points: list[StoredPoint] = []
        offset: Any = None
        while True:
            batch, offset = await self._call(
                "scroll",
                collection_name=name,
                scroll_filter=_collection(collection),
                limit=_SCAN_PAGE,
                offset=offset,
                with_payload=True,
                with_vectors=False,
            )
            for point in batch:
                points.append(StoredPoint.of_payload(point.payload or {}))
            if offset is None:
                return points

    async def search(
        self, collection: str, query: str, limit: int, reader: str | None = None
    ) -> list[tuple[str, float]]:
        """See :meth:`SemanticMemory.search`."""
        name = await self._collection_ready()
        [vector] = await asyncio.to_thread(self._embedder.embed, [query])
        if not any(vector):  # no word in the query: every point would tie at score 0
            return []
        result = await self._call(
            "query_points",
            collection_name=name,
            query=vector,
            query_filter=_collection(collection, reader),
            limit=limit,
            with_payload=True,
        )
        return [
            (str((p.payload or {})["record_key"]), float(p.score))
            for p in result.points
            if p.payload
        ]
