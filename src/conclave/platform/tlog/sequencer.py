"""The sequencer: batches of leaves get contiguous indices, one allocation per transaction.

A transaction allocates with one ``UPDATE tlog_logs SET sequenced_size = sequenced_size + n …
RETURNING`` and inserts the leaves. The update's row lock is held until the transaction ends, so
transactions from any number of processes and replicas are serialised at that one row only, for
as long as one short transaction takes: they commit in the order of their indices (**commit order
= index order**), and a transaction that fails, or whose process dies before commit, takes its
allocation back with its leaves. So there is never a gap, and nothing can read an index whose leaf
is not committed yet.

Within a process, batches appended while a transaction is in flight wait for it and then share the
next one (a group commit): one allocation for all of them, each batch still given consecutive
indices, in the order the batches were appended. The row lock is then taken once per transaction
rather than once per caller, which is what keeps the lock from serialising a busy service: its
throughput grows with the callers instead of being one commit at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.db.engine import store_errors
from conclave.platform.tlog import store
from conclave.platform.tlog.errors import LeafTooLarge
from conclave.platform.transparency.errors import MalformedInput
from conclave.platform.transparency.hashing import leaf_hash

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]

MAX_LEAF_BYTES = 1 << 20
"""The largest leaf a log accepts by default (1 MiB)."""

MAX_BATCH_LEAVES = 10_000
"""The most leaves one append takes by default, and one transaction: the transaction holds the
log's sequence row while it inserts them, so it stays short."""

MAX_BATCH_BYTES = 16 << 20
"""The most leaf bytes one append takes by default, and one transaction (16 MiB)."""


@dataclass(frozen=True)
class Limits:
    """What one append, and one transaction, may hold."""

    leaf_bytes: int = MAX_LEAF_BYTES
    batch_leaves: int = MAX_BATCH_LEAVES
    batch_bytes: int = MAX_BATCH_BYTES

    def check(self, entries: Sequence[bytes]) -> list[bytes]:
        """``entries`` as a list; :class:`MalformedInput` unless a sequence of bytes,
        :class:`LeafTooLarge` beyond the limits."""
        if isinstance(entries, bytes | bytearray | str) or not isinstance(entries, Sequence):
            raise MalformedInput("a batch is a sequence of leaves, each bytes")
        # Counted while iterating, never taken from len(): a sequence may report fewer items
        # than it yields, and what is appended is what it yields.
        leaves: list[bytes] = []
        total = 0
        for entry in entries:
            if len(leaves) == self.batch_leaves:
                raise LeafTooLarge(f"a batch holds at most {self.batch_leaves} leaves")
            if not isinstance(entry, bytes):
                raise MalformedInput("a leaf is bytes")
            if len(entry) > self.leaf_bytes:
                raise LeafTooLarge(f"a leaf is at most {self.leaf_bytes} bytes")
            total += len(entry)
            if total > self.batch_bytes:
                raise LeafTooLarge(f"a batch holds at most {self.batch_bytes} bytes of leaves")
            leaves.append(entry)
        return leaves


@dataclass
class _Batch:
    leaves: list[bytes]
    hashes: list[bytes]
    size: int
    inside_transaction: Hook | None
    done: asyncio.Future[range] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class LogSequencer:
    """Appends batches to one log; see the module's docstring."""

    def __init__(
        self,
        engine: AsyncEngine,
        log_id: int,
        limits: Limits,
        committed: Callable[[], None],
    ) -> None:
        self._engine = engine
        self._log_id = log_id
        self._limits = limits
        self._committed = committed
        self._waiting: deque[_Batch] = deque()
        self._task: asyncio.Task[None] | None = None

    @property
    def limits(self) -> Limits:
        """What one append may hold."""
        return self._limits

    async def append(
        self, entries: Sequence[bytes], *, inside_transaction: Hook | None = None
    ) -> range:
        """Append ``entries`` in the order given: the consecutive indices they got, once
        committed. An empty batch touches nothing and gets an empty range."""
        leaves = self._limits.check(entries)
        if not leaves:
            return range(0)
        batch = _Batch(
            leaves,
            [leaf_hash(entry) for entry in leaves],
            sum(map(len, leaves)),
            inside_transaction,
        )
        self._waiting.append(batch)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="tlog-sequencer")
        # A caller that gives up does not take its batch back: it may be committing already.
        return await asyncio.shield(batch.done)

    def _next_group(self) -> list[_Batch]:
        group = [self._waiting.popleft()]
        leaves, size = len(group[0].leaves), group[0].size
        while self._waiting:
            following = self._waiting[0]
            leaves += len(following.leaves)
            size += following.size
            if leaves > self._limits.batch_leaves or size > self._limits.batch_bytes:
                break
            group.append(self._waiting.popleft())
        return group

    async def _run(self) -> None:
        while self._waiting:
            group = self._next_group()
            try:
                first = await self._commit(group)
            except asyncio.CancelledError:  # the event loop is closing: so are the callers
                for batch in (*group, *self._waiting):
                    batch.done.cancel()
                self._waiting.clear()
                raise
            except Exception as exc:
                for batch in group:
                    if not batch.done.done():
                        batch.done.set_exception(exc)
                continue
            for batch in group:
                if not batch.done.done():
                    batch.done.set_result(range(first, first + len(batch.leaves)))
                first += len(batch.leaves)
            try:
                self._committed()
            except Exception:  # a listener's fault must not stop the batches behind
                log.exception("a transparency log append listener failed")

    async def _commit(self, group: list[_Batch]) -> int:
        leaves = [entry for batch in group for entry in batch.leaves]
        hashes = [h for batch in group for h in batch.hashes]
        with store_errors():
            async with self._engine.begin() as connection:
                first = await store.allocate(connection, self._log_id, len(leaves))
                await store.insert_leaves(connection, self._log_id, first, hashes, leaves)
                for batch in group:
                    if batch.inside_transaction is not None:
                        await batch.inside_transaction()
        return first
