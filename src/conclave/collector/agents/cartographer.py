"""Cartographer: the consistency map between the structured store and the semantic memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conclave.collector import store
from conclave.collector.agents.context import ExpeditionContext
from conclave.collector.semantic.base import access_of

_PAGE = 1000
_MAX_KEYS = 50


@dataclass
class ConsistencyMap:
    """What is where. Keys are full lists (healing needs them); the summary caps them."""

    collection: str
    records: int = 0
    points: int = 0
    pending: list[str] = field(default_factory=list)
    missing_vectors: list[str] = field(default_factory=list)
    stale_vectors: list[str] = field(default_factory=list)
    orphan_points: list[str] = field(default_factory=list)

    @property
    def consistent(self) -> bool:
        """True when every record has an up-to-date point and every point a record."""
        return not (self.missing_vectors or self.stale_vectors or self.orphan_points)

    def summary(self) -> dict[str, Any]:
        """The results-summary form."""
        return {
            "collection": self.collection,
            "records": self.records,
            "points": self.points,
            "consistent": self.consistent,
            "pending_vectors": len(self.pending),
            "missing_vectors": len(self.missing_vectors),
            "stale_vectors": len(self.stale_vectors),
            "orphan_points": len(self.orphan_points),
            "examples": {
                "missing_vectors": self.missing_vectors[:_MAX_KEYS],
                "stale_vectors": self.stale_vectors[:_MAX_KEYS],
                "orphan_points": self.orphan_points[:_MAX_KEYS],
            },
        }


class Cartographer:
    """Compares both stores record by record.

    A record whose vector is merely pending (the indexer has not caught up) is reported as
    pending, not missing: only a record marked indexed without a matching point is drift.
    """

    name = "cartographer"

    def __init__(self, context: ExpeditionContext) -> None:
        self._context = context

    async def map(self, collection: str) -> ConsistencyMap:
        """Build the map of ``collection``."""
        result = ConsistencyMap(collection)
        points = {p.key: p for p in await self._context.memory.scan(collection)}
        result.points = len(points)
        seen: set[str] = set()
        after: str | None = None
        while rows := await store.iter_collection(
            self._context.engine, collection, after=after, limit=_PAGE
        ):
            for row in rows:
                seen.add(row.record_key)
                result.records += 1
                stored = points.get(row.record_key)
                if row.vector_pending:
                    result.pending.append(row.record_key)
                elif stored is None:
                    result.missing_vectors.append(row.record_key)
                elif stored.content_hash != row.content_hash or stored.access != access_of(
                    row.owner
                ):
                    # Old content, or found by other readers than the record's (a point
                    # written before owners existed, or before the record changed hands).
                    result.stale_vectors.append(row.record_key)
            self._context.progress.advance(len(rows))
            after = rows[-1].record_key
        result.orphan_points = sorted(set(points) - seen)
        return result
