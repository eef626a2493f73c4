"""Binder: stores records with dedupe by content hash; the structured store is the truth."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from conclave.collector import store
from conclave.collector.agents.context import ExpeditionContext, content_hash
from conclave.collector.agents.restorer import Restored
from conclave.collector.store import CollectedRecord
from conclave.platform.clock import utc_now


@dataclass
class BindStats:
    """Outcome counts of binding."""

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0

    def add(self, other: BindStats) -> None:
        """Accumulate ``other``."""
        self.inserted += other.inserted
        self.updated += other.updated
        self.unchanged += other.unchanged


class Binder:
    """Upserts records by (collection, key): new content is written and flagged for its vector,
    identical content is skipped, so binding is idempotent and re-runs are safe."""

    name = "binder"

    def __init__(self, context: ExpeditionContext) -> None:
        self._context = context

    async def bind(self, collection: str, records: Sequence[Restored], source: str) -> BindStats:
        """Bind one batch; the last item wins when a key repeats within it."""
        latest = {record.key: record for record in records}
        hashes = {key: content_hash(record.data) for key, record in latest.items()}
        engine = self._context.engine
        existing = await store.existing_hashes(engine, collection, list(latest))
        stats = BindStats()
        now = utc_now()
        rows = []
        for key, record in latest.items():
            before = existing.get(key)
            if before == hashes[key]:
                stats.unchanged += 1
                continue
            if before is None:
                stats.inserted += 1
            else:
                stats.updated += 1
            rows.append(
                CollectedRecord(
                    collection=collection,
                    record_key=key,
                    content_hash=hashes[key],
                    data=record.data,
                    source=source,
                    expedition_id=self._context.expedition_id,
                    correlation_id=self._context.correlation_id,
                    vector_pending=True,
                    created_at=now,
                    updated_at=now,
                )
            )
        if rows:
            # Shielded: a cancellation (time-out, shutdown) must not cut a transaction in half
            # inside the driver; the batch commits or fails as a whole, then the run stops.
            await asyncio.shield(self._write(rows))
            self._context.indexer.wake()
        metrics = self._context.metrics.records
        for outcome in ("inserted", "updated", "unchanged"):
            metrics.labels(outcome).inc(getattr(stats, outcome))
        return stats

    async def _write(self, rows: list[CollectedRecord]) -> None:
        async with self._context.engine.begin() as connection:
            await store.upsert_records(connection, rows)
