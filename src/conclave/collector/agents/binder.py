"""Binder: stores records with dedupe by content hash; the structured store is the truth."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from conclave.collector import store
from conclave.collector.agents.context import (
    ExpeditionContext,
    LoopTurns,
    content_hash,
    record_digest,
)
from conclave.collector.agents.restorer import Restored
from conclave.collector.records import OPERATORS_ONLY
from conclave.collector.store import BindStats, RecordBatch
from conclave.platform.auth import user_id_problem
from conclave.platform.clock import utc_now


class Binder:
    """Upserts records by (collection, key): new content is written and flagged for its vector,
    identical content is skipped, so binding is idempotent and re-runs are safe.

    A batch's write runs while the caller reads and restores the next batch: the database and
    this process work at the same time instead of taking turns. Writes still happen one at a
    time and in order (a key in two batches ends with the later one's content), and
    :meth:`flush` waits for the last one.
    """

    name = "binder"

    def __init__(self, context: ExpeditionContext) -> None:
        self._context = context
        self._stats = BindStats()
        self._writing: asyncio.Task[BindStats] | None = None
        self._bound: dict[str, bytes] = {}

    @property
    def bound(self) -> Mapping[str, bytes]:
        """Every key bound so far, in the order first seen, with the digest of the record as
        its last batch stored it (:func:`record_digest`), which lets an inspection skip
        hashing again what is still exactly as written."""
        return self._bound

    async def bind(
        self,
        collection: str,
        records: Sequence[Restored],
        source: str,
        owner_field: str | None = None,
    ) -> None:
        """Hash one batch and start writing it once the previous batch's write has ended; the
        last item wins when a key repeats within it. A failed write raises here or in
        :meth:`flush`. With ``owner_field``, each record belongs to the user its data names
        there (:func:`owner_of`), and records of different owners are written as batches of
        their own."""
        latest = {record.key: record.data for record in records}
        if owner_field is None:
            await self._bind(collection, latest, source, None)
            return
        by_owner: dict[str, dict[str, Any]] = {}
        for key, item in latest.items():
            by_owner.setdefault(owner_of(item, owner_field), {})[key] = item
        for owner, items in by_owner.items():
            await self._bind(collection, items, source, owner)

    async def _bind(
        self, collection: str, latest: dict[str, Any], source: str, owner: str | None
    ) -> None:
        if not latest:
            return
        context = self._context
        keys, data = list(latest), list(latest.values())
        hashes: list[str] = []
        documents: list[str] = []
        turns = LoopTurns()
        for key, item in latest.items():
            hashed, document = content_hash(item), store.document_text(item)
            hashes.append(hashed)
            documents.append(document)
            self._bound[key] = record_digest(hashed, document)
            await turns.take()
        batch = RecordBatch(
            collection=collection,
            source=source,
            expedition_id=context.expedition_id,
            correlation_id=context.correlation_id,
            at=utc_now(),
            keys=keys,
            hashes=hashes,
            data=data,
            documents=documents,
            owner=owner,
        )
        await self._settle()
        self._writing = asyncio.create_task(self._write(batch))
        # A run stopped between batches never awaits its last write: its outcome is dropped
        # rather than logged as never retrieved.
        self._writing.add_done_callback(_retrieved)

    async def flush(self) -> BindStats:
        """Wait for the last write; the counts of every batch bound so far."""
        await self._settle()
        return self._stats

    async def _settle(self) -> None:
        writing, self._writing = self._writing, None
        if writing is None:
            return
        # Shielded: a cancellation (time-out, shutdown) must not cut a write in half inside the
        # driver; the batch commits or fails as a whole, then the run stops.
        stats = await asyncio.shield(writing)
        self._stats.add(stats)
        metrics = self._context.metrics.records
        for outcome in ("inserted", "updated", "unchanged"):
            metrics.labels(outcome).inc(getattr(stats, outcome))

    async def _write(self, batch: RecordBatch) -> BindStats:
        stats = await store.bind_batch(self._context.engine, batch)
        if stats.inserted or stats.updated:
            self._context.indexer.wake()
        return stats


def owner_of(item: Any, owner_field: str) -> str:
    """The user a record copied from another service's data belongs to: the user id in its
    ``owner_field``; when there is none (or it could be no user's id), nobody's
    (:data:`OPERATORS_ONLY`), never everyone's."""
    owner = item.get(owner_field) if isinstance(item, dict) else None
    if isinstance(owner, str) and user_id_problem(owner) is None:
        return owner
    return OPERATORS_ONLY


def _retrieved(task: asyncio.Task[BindStats]) -> None:
    if not task.cancelled():
        task.exception()
