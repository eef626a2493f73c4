"""The vector indexer: drains ``vector_pending`` records into semantic memory after commit.

A record and its pending flag commit together, so the structured store never loses a vector it
owes; the indexer writes the vector afterwards and clears the flag only for the content hash it
embedded. While semantic memory is down it backs off and retries: vectors are delayed, not lost.
Several replicas may index the same rows at the same time; the write is an idempotent upsert.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector import store
from conclave.collector.metrics import CollectorMetrics
from conclave.collector.semantic import SemanticMemory, VectorRecord, embedding_text
from conclave.platform.db.engine import is_store_down
from conclave.platform.inputs import escape_text

log = logging.getLogger(__name__)


class VectorIndexer:
    """Background loop writing pending vectors; :meth:`wake` after a commit that added some."""

    def __init__(
        self,
        engine: AsyncEngine,
        memory: SemanticMemory,
        metrics: CollectorMetrics,
        *,
        batch_size: int = 1000,
        poll_seconds: float = 2.0,
        max_backoff_seconds: float = 10.0,
    ) -> None:
        self._engine = engine
        self._memory = memory
        self._metrics = metrics
        self._batch_size = batch_size
        self._poll = poll_seconds
        self._max_backoff = max_backoff_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.healthy = True

    def wake(self) -> None:
        """Look for pending vectors now."""
        self._wake.set()

    async def start(self) -> None:
        """Start the loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="collector-vector-indexer")

    async def stop(self) -> None:
        """Stop the loop (pending vectors stay flagged for the next start)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def index_pending(self) -> int:
        """Write one batch of pending vectors; return how many were written."""
        rows = await store.pending_vectors(self._engine, self._batch_size)
        if not rows:
            return 0
        # A record stored before text was checked may hold a lone surrogate: an embedder
        # encodes its text, and one such record would fail its whole batch, every time.
        items = [
            VectorRecord(
                row.collection,
                row.record_key,
                row.content_hash,
                escape_text(embedding_text(row.data)),
            )
            for row in rows
        ]
        await self._memory.upsert(items)
        await store.mark_indexed(
            self._engine, [(i.collection, i.key, i.content_hash) for i in items]
        )
        self._metrics.vectors.inc(len(items))
        return len(items)

    async def drain(self) -> int:
        """Write every pending vector now (healing waits for this)."""
        total = 0
        while written := await self.index_pending():
            total += written
        return total

    async def _run(self) -> None:
        backoff = 0.25
        while True:
            self._wake.clear()
            try:
                written = await self.index_pending()
                self.healthy = True
                backoff = 0.25
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                written = 0
                self.healthy = False
                self._metrics.vector_errors.inc()
                level = logging.WARNING
                log.log(level, "vector indexing failed, retrying", exc_info=not is_store_down(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            if written >= self._batch_size:
                continue
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation that
            # arrives as the event is set, and stop() then waits for a loop that goes on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll):
                    await self._wake.wait()
