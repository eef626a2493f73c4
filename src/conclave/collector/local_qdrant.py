"""qdrant-client's local mode (on disk, no server) on a thread of its own, one commit per call.

Local mode does all of its work in the calling thread: validation, numpy bookkeeping, and one
SQLite transaction per point, each committed and synced before the next (a rollback journal
created, synced and deleted per point). Awaited on the event loop, as ``AsyncQdrantClient`` does
it, every batch of vectors stalled the requests, heartbeats and runs of the whole process for
seconds.

:class:`LocalQdrant` changes three things and nothing else:

- Every call runs on one dedicated thread. That keeps the event loop free and serialises all
  access to the client and its SQLite connections (local mode is not thread-safe). A call whose
  caller is cancelled still completes there; later calls queue behind it, so writes keep order.
- The points a call writes share one SQLite transaction, committed (and synced) when the call
  returns, or rolled back when it fails. ``upsert`` returning still means every point is on disk,
  so clearing the records' pending flags afterwards stays safe, at one sync per batch instead of
  one per point. When a batch fails half-way, the points qdrant-client already applied in memory
  are not on disk; their records stay pending and the retry writes them again (an upsert).
- Collection files use write-ahead logging (``synchronous`` stays FULL): a commit appends to one
  log instead of creating a journal file.

qdrant-client offers no option for either: its local engine keeps one ``sqlite3`` connection per
collection at ``client._client.collections[name].storage.storage`` and wraps each point's write in
``with connection:``. Should a release move that, :func:`_batch_commits` finds nothing to wrap and
local mode is as slow as before, not wrong (``tests/collector/test_local_qdrant.py`` notices).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from qdrant_client import QdrantClient, models


class _JoinedTransaction:
    """Stands in for a collection's ``sqlite3`` connection inside qdrant-client: its per-point
    ``with connection:`` blocks neither commit nor roll back; :class:`LocalQdrant` does that once
    per call on the real connection."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def __enter__(self) -> _JoinedTransaction:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None  # an exception propagates; the whole call is rolled back

    def __getattr__(self, name: str) -> Any:
        return getattr(self.connection, name)


def _batch_commits(client: QdrantClient) -> list[sqlite3.Connection]:
    """Wrap the connection of every collection not wrapped yet; return all real connections."""
    connections = []
    local = getattr(client, "_client", None)
    for collection in getattr(local, "collections", {}).values():
        storage = getattr(collection, "storage", None)
        current = getattr(storage, "storage", None)
        if isinstance(current, sqlite3.Connection):
            current.commit()
            current.execute("PRAGMA journal_mode=WAL")
            storage.storage = _JoinedTransaction(current)  # type: ignore[union-attr]
            current = storage.storage  # type: ignore[union-attr]
        if isinstance(current, _JoinedTransaction):
            connections.append(current.connection)
    return connections


def _held_elsewhere(path: str) -> bool:
    """Whether another client holds the folder's lock. Checked before opening because a failed
    ``QdrantClient(path=...)`` first loads every stored point and leaves its files open."""
    lock_path = os.path.join(path, ".lock")
    if not os.path.exists(lock_path):
        return False
    import portalocker  # as qdrant-client does: importing it checks for writable folders

    with open(lock_path, "r+") as lock_file:
        try:
            portalocker.lock(
                lock_file, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
            )
        except portalocker.exceptions.LockException:
            return True
        portalocker.unlock(lock_file)
    return False


class LocalQdrant:
    """Local-mode Qdrant with the method names and arguments of ``AsyncQdrantClient`` (the subset
    the collector uses); see the module docstring."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qdrant-local")
        self._connections: list[sqlite3.Connection] = []
        self._client: QdrantClient | None = None
        # Opening loads every stored point: on the client's thread, like every later call. A
        # folder held by another client (another process on the same data folder) makes semantic
        # memory unavailable, not the service: every call tries to open it again until it is free.
        with contextlib.suppress(RuntimeError):
            self._executor.submit(self._opened).result()

    def _opened(self) -> QdrantClient:
        if self._client is None:
            if _held_elsewhere(self._path):
                raise RuntimeError(
                    f"Storage folder {self._path} is already accessed by another Qdrant client."
                )
            client = QdrantClient(path=self._path)
            self._connections = _batch_commits(client)
            self._client = client
        return self._client

    def _transaction(self, name: str, *args: Any, **kwargs: Any) -> Any:
        client = self._opened()
        try:
            result = getattr(client, name)(*args, **kwargs)
        except BaseException:
            for connection in self._connections:
                connection.rollback()
            raise
        # A call may have created a collection: its connection joins from now on.
        self._connections = _batch_commits(client)
        for connection in self._connections:
            connection.commit()
        return result

    async def _call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        # The method is looked up by name, so the result is untyped: each wrapper below casts it
        # to what that ``QdrantClient`` method returns.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(self._transaction, name, *args, **kwargs)
        )

    async def close(self) -> None:
        """Close the collections and release the folder lock."""
        loop = asyncio.get_running_loop()
        if self._client is not None:
            await loop.run_in_executor(self._executor, self._client.close)
        self._executor.shutdown(wait=True)

    async def get_collections(self) -> models.CollectionsResponse:
        """See ``QdrantClient.get_collections``."""
        return cast("models.CollectionsResponse", await self._call("get_collections"))

    async def collection_exists(self, collection_name: str) -> bool:
        """See ``QdrantClient.collection_exists``."""
        return cast("bool", await self._call("collection_exists", collection_name))

    async def create_collection(self, collection_name: str, **kwargs: Any) -> bool:
        """See ``QdrantClient.create_collection``."""
        return cast("bool", await self._call("create_collection", collection_name, **kwargs))

    async def upsert(self, collection_name: str, **kwargs: Any) -> models.UpdateResult:
        """See ``QdrantClient.upsert``; every point is on disk when this returns."""
        return cast("models.UpdateResult", await self._call("upsert", collection_name, **kwargs))

    async def delete(self, collection_name: str, **kwargs: Any) -> models.UpdateResult:
        """See ``QdrantClient.delete``."""
        return cast("models.UpdateResult", await self._call("delete", collection_name, **kwargs))

    async def count(self, collection_name: str, **kwargs: Any) -> models.CountResult:
        """See ``QdrantClient.count``."""
        return cast("models.CountResult", await self._call("count", collection_name, **kwargs))

    async def scroll(self, collection_name: str, **kwargs: Any) -> tuple[list[Any], Any]:
        """See ``QdrantClient.scroll``."""
        return cast("tuple[list[Any], Any]", await self._call("scroll", collection_name, **kwargs))

    async def query_points(self, collection_name: str, **kwargs: Any) -> models.QueryResponse:
        """See ``QdrantClient.query_points``."""
        return cast(
            "models.QueryResponse", await self._call("query_points", collection_name, **kwargs)
        )
