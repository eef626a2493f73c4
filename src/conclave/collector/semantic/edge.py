"""The embedded semantic memory: a Qdrant Edge shard in a process of the collector's own.

:class:`EdgeMemory` starts ``python -m conclave.collector.semantic.edge_process`` (see there and
docs/collector.md for why a process) and sends it one request at a time. The process is the only
one allowed to open the shard folder; a second collector process on the same data folder finds it
held and has no semantic memory (its records keep their vectors pending, as when a server is
down). A process that died or hangs is replaced on a later call, at most once per
``respawn_seconds``, so a folder held elsewhere costs one start-up attempt per interval, not one
per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conclave.collector.semantic.base import (
    SemanticMemory,
    SemanticMemoryUnavailable,
    StoredDocument,
    StoredPoint,
    VectorRecord,
)
from conclave.collector.semantic.frames import encode, read_frame_async

log = logging.getLogger(__name__)

# Pages are unpickled on the event loop: 2000 points of long keys is a few milliseconds.
_SCAN_PAGE = 2000


class EdgeMemory(SemanticMemory):
    """Semantic memory on Qdrant Edge, served by a child process (see the module docstring)."""

    def __init__(
        self,
        folder: Path,
        embedder: str,
        dimensions: int,
        *,
        log_level: str = "WARNING",
        call_timeout_seconds: float = 120.0,
        start_timeout_seconds: float = 120.0,
        respawn_seconds: float = 5.0,
        max_waiting: int = 64,
    ) -> None:
        self._setup = {
            "folder": str(folder),
            "embedder": embedder,
            "dimensions": dimensions,
            "log_level": log_level,
            # An embedder plug-in importable in the collector is importable in its process: the
            # same import path, no more (``-P`` below keeps the working directory off it).
            "import_path": list(sys.path),
        }
        self.embedder_name = f"hashing-{dimensions}" if embedder == "hashing" else embedder
        self._call_timeout = call_timeout_seconds
        self._start_timeout = start_timeout_seconds
        self._respawn = respawn_seconds
        self._process: asyncio.subprocess.Process | None = None
        self._last_start = -float("inf")
        self._down_reason = "not started"
        self._max_waiting = max_waiting
        self._waiting = 0
        self._closed = False
        self._lock = asyncio.Lock()

    @property
    def process_id(self) -> int | None:
        """The semantic-memory process's pid while one runs (for operators and tests)."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    async def open(self) -> None:
        """Start the process; a bad embedder or folder fails here, a held folder does not."""
        async with self._lock:
            await self._start(fail_on_error=True)

    async def _start(self, *, fail_on_error: bool = False) -> None:
        self._last_start = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",  # the working directory is not put on the import path
            "-m",
            "conclave.collector.semantic.edge_process",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(encode(self._setup))
            await process.stdin.drain()
            async with asyncio.timeout(self._start_timeout):
                answer = await read_frame_async(process.stdout)
        except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError) as exc:
            answer = ("error", f"the semantic-memory process did not start ({exc!r})")
        if answer[0] == "ready":
            self._process, self.embedder_name = process, answer[1]
            self.generation += 1
            return
        await _end(process)
        self._down_reason = answer[1]
        if answer[0] == "error" and fail_on_error:
            raise RuntimeError(f"semantic memory could not start: {answer[1]}")
        log.warning("semantic memory unavailable: %s", answer[1])

    async def close(self) -> None:
        """Ask the process to flush and stop (closing its stdin), then wait for it."""
        self._closed = True
        async with self._lock:
            if self._process is not None:
                process, self._process = self._process, None
                await _end(process, graceful=True)

    async def _exchange(self, name: str, arguments: tuple[Any, ...]) -> Any:
        """One request and its answer; the caller holds the lock, released here at the end."""
        try:
            if self._closed:
                raise SemanticMemoryUnavailable("semantic memory is closed")
            if self._process is None or self._process.returncode is not None:
                self._process = None
                if time.monotonic() - self._last_start < self._respawn:
                    raise SemanticMemoryUnavailable(self._down_reason)
                await self._start()
                if self._process is None:
                    raise SemanticMemoryUnavailable(self._down_reason)
            process = self._process
            assert process.stdin is not None and process.stdout is not None
            try:
                # Writing waits too when a stopped process leaves the pipe full.
                async with asyncio.timeout(self._call_timeout):
                    process.stdin.write(encode((name, arguments)))
                    await process.stdin.drain()
                    answer = await read_frame_async(process.stdout)
            except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError) as exc:
                # Gone or stuck: a stuck process would answer this request to the next caller.
                self._process, self._down_reason = None, f"semantic-memory process lost ({exc!r})"
                await _end(process)
                raise SemanticMemoryUnavailable(self._down_reason) from exc
        finally:
            self._lock.release()
        if answer[0] != "ok":
            raise SemanticMemoryUnavailable(answer[1])
        return answer[1]

    async def _call(self, name: str, *arguments: Any) -> Any:
        # Requests wait their turn here, where a cancelled caller just leaves (nothing was sent);
        # a bounded queue makes a flood of requests fail fast instead of delaying everyone.
        if self._waiting >= self._max_waiting:
            raise SemanticMemoryUnavailable("semantic memory is busy")
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        # Once sent, the exchange runs to its end even when the caller is cancelled: an answer
        # left unread in the pipe would be taken by the next request as its own.
        exchange = asyncio.ensure_future(self._exchange(name, arguments))
        exchange.add_done_callback(_retrieve)
        return await asyncio.shield(exchange)

    async def ping(self) -> None:
        """See :meth:`SemanticMemory.ping`."""
        await self._call("ping")

    async def needs_reindex(self) -> bool:
        """See :meth:`SemanticMemory.needs_reindex`."""
        return bool(await self._call("needs_reindex"))

    async def reindex_started(self) -> None:
        """See :meth:`SemanticMemory.reindex_started`."""
        await self._call("reindex_started")

    async def upsert(self, items: Sequence[VectorRecord]) -> None:
        """See :meth:`SemanticMemory.upsert`."""
        if items:
            await self._call(
                "upsert", [(i.collection, i.key, i.content_hash, i.text, i.owner) for i in items]
            )

    async def upsert_documents(self, items: Sequence[StoredDocument]) -> None:
        """See :meth:`SemanticMemory.upsert_documents`: the records' texts are made in the
        semantic-memory process, so the service's process does no work per record."""
        if items:
            await self._call(
                "upsert_documents",
                [(i.collection, i.key, i.content_hash, i.document, i.owner) for i in items],
            )

    async def delete(self, collection: str, keys: Sequence[str]) -> None:
        """See :meth:`SemanticMemory.delete`."""
        if keys:
            await self._call("delete", collection, list(keys))

    async def count(self, collection: str, reader: str | None = None) -> int:
        """See :meth:`SemanticMemory.count`."""
        return int(await self._call("count", collection, reader))

    async def scan(self, collection: str) -> list[StoredPoint]:
        """See :meth:`SemanticMemory.scan`."""
        points: list[StoredPoint] = []
        offset: str | None = None
        while True:
            page, offset = await self._call("scan", collection, offset, _SCAN_PAGE)
            points += page
            if offset is None:
                return points

    async def search(
        self, collection: str, query: str, limit: int, reader: str | None = None
    ) -> list[tuple[str, float]]:
        """See :meth:`SemanticMemory.search`."""
        return list(await self._call("search", collection, query, limit, reader))


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # read, so an abandoned exchange's failure is not reported as unread


async def _end(process: asyncio.subprocess.Process, *, graceful: bool = False) -> None:
    """Stop ``process``: by closing its stdin when ``graceful`` (it flushes), else at once."""
    if process.returncode is None and not graceful:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    if process.stdin is not None:
        process.stdin.close()
    try:
        async with asyncio.timeout(30):
            await process.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
