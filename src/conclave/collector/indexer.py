"""The vector indexer: drains ``vector_pending`` records into semantic memory after commit.

A record and its pending flag commit together, so the structured store never loses a vector it
owes; the indexer writes the vector afterwards and clears the flag only for the content hash it
embedded. While semantic memory is down it backs off and retries: vectors are delayed, not lost.
Several replicas may index the same rows at the same time; the write is an idempotent upsert.

A semantic memory created empty (the first start, a move from an older layout, a lost shard) says
so; the indexer then flags every record pending again and refills it from the structured store,
the source of truth, reporting progress in the log and on ``/health`` while searches keep working
on what is already written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector import store
from conclave.collector.metrics import CollectorMetrics
from conclave.collector.records import PendingVector
from conclave.collector.semantic.base import SemanticMemory, StoredDocument
from conclave.platform.db.engine import is_store_down

log = logging.getLogger(__name__)

_PROGRESS_SECONDS = 5.0
_SWEEP_PAGES = 16
_PAGE_BYTES = 4 * 1024 * 1024

ReadPage = Callable[[AsyncEngine, int, PendingVector | None], Awaitable[list[PendingVector]]]


@dataclass
class Reindex:
    """A refill of semantic memory from the structured store, as ``/health`` shows it."""

    records: int
    written: int = 0
    started: float = 0.0
    reported: float = 0.0

    def view(self) -> dict[str, float]:
        """What ``/health`` reports: the share written, not counts (``/health`` is public, and
        the number of records of the whole deployment is not)."""
        return {"progress": round(min(1.0, self.written / self.records), 3)}


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
        read_page: ReadPage = store.pending_vectors,
    ) -> None:
        self._engine = engine
        self._memory = memory
        self._metrics = metrics
        self._batch_size = batch_size
        self._poll = poll_seconds
        self._max_backoff = max_backoff_seconds
        self._read_page = read_page  # the store's; a test puts another writer around it
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._checked_generation = -1
        self.healthy = True
        self.reindex: Reindex | None = None

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

    async def _refill_if_new(self) -> bool:
        """Flag every record pending again when semantic memory is new; whether it was.

        Asked before every page, since the store may have been replaced at any write (a new
        process, a server that came back empty), and cheaply: only when the memory's
        ``generation`` changed."""
        if self._checked_generation == self._memory.generation:
            return False
        refill = await self._memory.needs_reindex()
        if refill:
            records = await store.mark_all_pending(self._engine)
            await self._memory.reindex_started()
            if records:  # a first start with nothing stored has nothing to say
                now = time.monotonic()
                self.reindex = Reindex(records, started=now, reported=now)
                log.warning(
                    "semantic memory is new: re-indexing %d records from the structured store",
                    records,
                )
        self._checked_generation = self._memory.generation
        return refill

    def _progress(self, written: int) -> None:
        if self.reindex is None:
            return
        self.reindex.written += written
        now = time.monotonic()
        if not written:
            log.warning(
                "semantic memory re-index finished: %d vectors in %.1f s",
                self.reindex.written,
                now - self.reindex.started,
            )
            self.reindex = None
        elif now - self.reindex.reported >= _PROGRESS_SECONDS:
            self.reindex.reported = now
            log.warning(
                "semantic memory re-index: %d of %d records written",
                self.reindex.written,
                self.reindex.records,
            )

    async def index_pending(self) -> int:
        """Write the vectors pending now, in one sweep through the backlog, oldest write first;
        return how many were written.

        Pipelined: while semantic memory embeds and writes one page (in its own process, or on
        its server), the next page is read and the flags of the page before are cleared, so
        neither side waits for the other. A page's flags are cleared only after semantic memory
        acknowledged that page. A sweep ends after :data:`_SWEEP_PAGES` pages: records written
        behind its position (a replica whose clock is behind, flags set again by healing) wait
        for the next sweep, which starts at once, not for the end of a bulk load."""
        total = 0
        after: PendingVector | None = None
        writing: asyncio.Future[None] | None = None
        sent: list[StoredDocument] = []  # the page ``writing`` writes
        limit = self._batch_size
        try:
            for _ in range(_SWEEP_PAGES):
                if await self._refill_if_new():
                    after = None  # every record is pending again: from the oldest
                rows = await self._read_page(self._engine, limit, after)
                # A record of the page in flight that was rewritten since waits for a later
                # page: were it sent now, clearing the page in flight could match a version
                # changed back meanwhile and leave this newer vector under the older record.
                in_flight = {(i.collection, i.key) for i in sent}
                items = [
                    StoredDocument(r.collection, r.record_key, r.content_hash, r.document, r.owner)
                    for r in rows
                    if (r.collection, r.record_key) not in in_flight
                ]
                if writing is not None:
                    await writing
                writing = (
                    asyncio.ensure_future(self._memory.upsert_documents(items)) if items else None
                )
                if sent:  # its write was awaited above: acknowledged
                    await self._acknowledged(sent)
                    total += len(sent)
                sent = items
                if not rows:
                    break
                after = rows[-1]
                limit = self._page_limit(rows)
            if writing is not None:  # the sweep's last page
                await writing
                writing = None
                await self._acknowledged(sent)
                total += len(sent)
        finally:
            # The sweep failed or was stopped: the page in flight stays pending (and a write
            # that failed meanwhile is not reported as an unread exception).
            if writing is not None:
                writing.cancel()
                writing.add_done_callback(_quietly)
        if not total:
            self._progress(0)
        return total

    def _page_limit(self, page: list[PendingVector]) -> int:
        """Rows to read next: the batch size, fewer after a page of large records, so a page
        stays near :data:`_PAGE_BYTES` (what the semantic-memory process decodes and embeds in
        one request, while searches wait their turn)."""
        size = sum(len(row.document) for row in page)
        if size <= _PAGE_BYTES:
            return self._batch_size
        return max(1, min(self._batch_size, len(page) * _PAGE_BYTES // size))

    async def _acknowledged(self, items: list[StoredDocument]) -> None:
        """Clear the flags of a batch semantic memory acknowledged."""
        await store.mark_indexed(
            self._engine, [(i.collection, i.key, i.content_hash) for i in items]
        )
        self._metrics.vectors.inc(len(items))
        self._progress(len(items))

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
            if written:  # records may have been flagged behind the sweep meanwhile
                continue
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation that
            # arrives as the event is set, and stop() then waits for a loop that goes on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll):
                    await self._wake.wait()


def _quietly(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
