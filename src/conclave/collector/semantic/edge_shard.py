"""The Qdrant Edge shard behind the embedded semantic memory, as synchronous operations.

Only the semantic-memory process (:mod:`.edge_process`) uses this: every Qdrant Edge call holds
the GIL for its whole duration, so the service's event loop must not share a process with it.

A shard folder holds ``edge_config.json``, ``segments/`` and ``wal/``. Every write is followed by
``flush()`` before it is acknowledged: the write-ahead log alone survives a kill -9, but only a
flush makes points durable against a power cut, and the collector clears a record's pending flag
on the acknowledgement. A folder that still holds qdrant-client's local mode (``meta.json``,
``collection/``) from an earlier version is replaced by an empty shard, and the shard then asks
for a re-index from the structured store (the source of truth) until the service confirms it
flagged every record again: the file :data:`REINDEX_MARKER` survives a crash in between.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    KeywordIndexParams,
    MatchAny,
    MatchValue,
    Point,
    Query,
    ScrollRequest,
    SearchRequest,
    UpdateOperation,
)

from conclave.collector.semantic.base import (
    ACCESS_FIELD,
    COLLECTION_FIELD,
    StoredPoint,
    point_id,
    point_payload,
    reader_access,
)

VECTOR = "text"
REINDEX_MARKER = "reindex-needed"
_LEGACY_LOCAL_MODE = ("collection", "meta.json", ".lock")


class ShardHeld(Exception):
    """Another process has the shard open (Qdrant Edge allows one handle per folder)."""


def _collection(collection: str, reader: str | None = None) -> Filter:
    """The points of ``collection``; with ``reader``, those that user may find."""
    within = FieldCondition(key=COLLECTION_FIELD, match=MatchValue(collection))
    if reader is None:
        return Filter(must=[within])
    allowed = FieldCondition(key=ACCESS_FIELD, match=MatchAny(reader_access(reader)))
    return Filter(must=[within, allowed])


def _retire_local_mode(folder: Path) -> bool:
    """Remove what qdrant-client's local mode left in ``folder``; whether there was any."""
    found = False
    for name in _LEGACY_LOCAL_MODE:
        path = folder / name
        if path.is_dir():
            shutil.rmtree(path)
            found = True
        elif path.exists():
            path.unlink()
            found = True
    return found


class EdgeStore:
    """One Qdrant Edge shard holding the points of every record collection."""

    def __init__(self, shard: EdgeShard, folder: Path) -> None:
        self._shard = shard
        self._folder = folder

    @classmethod
    def open(cls, folder: Path, dimensions: int) -> EdgeStore:
        """Load the shard in ``folder``, or create it (then a re-index is asked for)."""
        folder.mkdir(parents=True, exist_ok=True)
        config = EdgeConfig(
            vectors={VECTOR: EdgeVectorParams(size=dimensions, distance=Distance.Cosine)}
        )
        try:
            if (folder / "edge_config.json").exists():
                shard = EdgeShard.load(str(folder), config)
            else:
                # The marker first: a crash after creating the shard still re-indexes.
                (folder / REINDEX_MARKER).touch()
                _retire_local_mode(folder)
                shard = EdgeShard.create(str(folder), config)
                shard.update(
                    UpdateOperation.create_field_index(
                        COLLECTION_FIELD, KeywordIndexParams(is_tenant=True)
                    )
                )
                shard.flush()
            if ACCESS_FIELD not in shard.info().payload_schema:
                # A reader's filter on the shared collection narrows nothing by collection:
                # without this index a user's count or search reads every point's payload.
                shard.update(UpdateOperation.create_field_index(ACCESS_FIELD, KeywordIndexParams()))
                shard.flush()
        except Exception as exc:
            if "WouldBlock" in str(exc):
                message = f"semantic memory folder {folder} is open in another process"
                raise ShardHeld(message) from exc
            raise
        return cls(shard, folder)

    def close(self) -> None:
        """Flush and release the folder."""
        self._shard.flush()
        self._shard.close()

    def needs_reindex(self) -> bool:
        """Whether the shard was created and not refilled from the structured store yet."""
        return (self._folder / REINDEX_MARKER).exists()

    def reindex_started(self) -> None:
        """The service flagged every record pending again."""
        (self._folder / REINDEX_MARKER).unlink(missing_ok=True)

    def upsert(
        self, members: Sequence[tuple[str, str, str, str | None]], vectors: np.ndarray
    ) -> None:
        """Write ``(collection, key, content_hash, owner)`` points with their vectors, then
        flush once (a batch may span any number of collections)."""
        # An embedder plug-in could answer NaN or infinities; the engine would store them and
        # every search touching the point would rank by NaN. Such a point matches nothing.
        vectors = np.nan_to_num(vectors, nan=0.0, posinf=0.0, neginf=0.0)
        # Lists, converted in one call: the engine takes a list row in about half the time of a
        # numpy row (measured: 16 against 30 ms per 1000 points of 384 floats).
        points = [
            Point(point_id(c, key), {VECTOR: vector}, point_payload(c, key, content_hash, owner))
            for (c, key, content_hash, owner), vector in zip(members, vectors.tolist(), strict=True)
        ]
        self._shard.update(UpdateOperation.upsert_points(points))
        self._shard.flush()

    def delete(self, collection: str, keys: Sequence[str]) -> None:
        """Remove the points of ``keys``, then flush."""
        if keys:
            ids: list[int | uuid.UUID | str] = [point_id(collection, key) for key in keys]
            self._shard.update(UpdateOperation.delete_points(ids))
            self._shard.flush()

    def count(self, collection: str, reader: str | None = None) -> int:
        """Points of ``collection`` (those ``reader`` may find, when given)."""
        request = CountRequest(filter=_collection(collection, reader), exact=True)
        return int(self._shard.count(request))

    def scan(
        self, collection: str, offset: str | None, limit: int
    ) -> tuple[list[StoredPoint], str | None]:
        """One page of ``collection``'s points and the offset of the next page (None at the end)."""
        page, following = self._shard.scroll(
            ScrollRequest(
                offset=offset, limit=limit, filter=_collection(collection), with_payload=True
            )
        )
        points = [StoredPoint.of_payload(p.payload) for p in page if p.payload is not None]
        return points, None if following is None else str(following)

    def search(
        self, collection: str, vector: np.ndarray, limit: int, reader: str | None = None
    ) -> list[tuple[str, float]]:
        """``(record_key, score)`` nearest to ``vector`` within ``collection`` (among the points
        ``reader`` may find, when given), best first."""
        hits = self._shard.search(
            SearchRequest(
                query=Query.Nearest(vector.tolist(), using=VECTOR),
                filter=_collection(collection, reader),
                limit=limit,
                with_payload=True,
            )
        )
        return [(str(h.payload["record_key"]), float(h.score)) for h in hits if h.payload]
