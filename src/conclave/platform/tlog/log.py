"""A named transparency log on the platform's store: the sequencer, the integrator and the reads.

- **Sequencing** (:meth:`TransparencyLog.append`, :mod:`.sequencer`): a batch of leaves gets a
  contiguous range of indices from one allocation in a short transaction that also inserts the
  leaves; transactions commit in the order of their indices, and one that does not commit leaves
  no gap.
- **Integration** (:meth:`TransparencyLog.integrate`): under a lock only one integrator holds, the
  sequenced leaves not yet in the tree are folded into it with the append frontier; the new
  complete subtrees (from ``TILE_LEVEL`` up, :mod:`.tiles`), the signed checkpoint and the new
  integrated size and root commit in one transaction, or nothing does. Integration runs at most
  once per checkpoint interval (one checkpoint each time), and does nothing while no leaf waits.
- **Reads**: the latest checkpoint, the checkpoint of a size, a leaf, and inclusion and
  consistency proofs, each proof read as the first layer plans it: one statement of O(log n)
  stored subtree hashes and the few leaf hashes below ``TILE_LEVEL``. Only integrated leaves are
  served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TypedDict, Unpack

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.platform.clock import utc_now
from conclave.platform.db.batch import Insert
from conclave.platform.db.engine import store_errors
from conclave.platform.db.schema import tlog_queue
from conclave.platform.tlog import queue, store, tiles
from conclave.platform.tlog.errors import (
    BeyondIntegrated,
    CheckpointNotFound,
    LogCorrupted,
)
from conclave.platform.tlog.folding import fold, hashes_to_fold, sign, signed_size
from conclave.platform.tlog.keys import LogKeys, check_log_name
from conclave.platform.tlog.records import (
    Integration,
    IntegrationOutcome,
    LeafLocation,
    LogState,
    QueuedLeaf,
    StoredLeaf,
)
from conclave.platform.tlog.sequencer import (
    MAX_BATCH_BYTES,
    MAX_BATCH_LEAVES,
    MAX_LEAF_BYTES,
    Hook,
    Limits,
    LogSequencer,
)
from conclave.platform.transparency.checkpoint import Checkpoint, open_checkpoint
from conclave.platform.transparency.errors import (
    SubtreeNotStored,
    TransparencyError,
    UnexpectedOrigin,
)
from conclave.platform.transparency.frontier import AppendFrontier
from conclave.platform.transparency.hashing import EMPTY_ROOT, check_tree_size, leaf_hash
from conclave.platform.transparency.note import VerifierSet
from conclave.platform.transparency.proofs import consistency_plan, inclusion_plan
from conclave.platform.transparency.receipt import Receipt
from conclave.platform.transparency.subtrees import ProofPlan

log = logging.getLogger(__name__)

MAX_LEAVES_PER_CHECKPOINT = 1 << 16
"""The most leaves one integration folds in by default: a larger backlog takes several
checkpoints, one per interval."""


class LogOptions(TypedDict, total=False):
    """The keyword options of :class:`TransparencyLog` (see its constructor)."""

    checkpoint_interval: float
    max_leaf_bytes: int
    max_batch_leaves: int
    max_batch_bytes: int
    max_leaves_per_checkpoint: int
    clock: Callable[[], datetime]


class TransparencyLog:
    """One named log: append leaves, integrate them into signed checkpoints, read proofs.

    Build it with :meth:`open`. Any number of instances, in any number of processes and replicas,
    may share a log: appends are serialised by the store, and integration by its lock.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        state: LogState,
        keys: LogKeys,
        *,
        checkpoint_interval: float = 1.0,
        max_leaf_bytes: int = MAX_LEAF_BYTES,
        max_batch_leaves: int = MAX_BATCH_LEAVES,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        max_leaves_per_checkpoint: int = MAX_LEAVES_PER_CHECKPOINT,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if state.origin != keys.origin:
            raise UnexpectedOrigin(
                f"the log {state.name!r} was started with the origin {state.origin!r}, "
                f"not {keys.origin!r}: a log's origin is its identity and never changes"
            )
        self._engine = engine
        self._log_id = state.log_id
        self._name = state.name
        self._keys = keys
        self._interval = checkpoint_interval
        self._sequencer = LogSequencer(
            engine,
            state.log_id,
            Limits(max_leaf_bytes, max_batch_leaves, max_batch_bytes),
            self._appended,
        )
        self._max_per_checkpoint = max_leaves_per_checkpoint
        self._clock = clock
        # Integrated sizes only grow and what lies below one never changes, so the largest one
        # seen is a safe bound for reads without asking the store again.
        self._integrated = state.integrated_size
        self._frontier: AppendFrontier | None = None
        self._seen: tuple[tuple[int, datetime], datetime] | None = None
        self._listeners: list[Callable[[], None]] = []

    @classmethod
    async def open(
        cls,
        engine: AsyncEngine,
        name: str,
        keys: LogKeys,
        **options: Unpack[LogOptions],
    ) -> TransparencyLog:
        """The log ``name``, created empty (with its signed checkpoint of size 0) if the store
        does not hold it yet. :class:`UnexpectedOrigin` if the store's log has another origin
        than ``keys``."""
        check_log_name(name)
        with store_errors():
            async with engine.begin() as connection:
                now = options.get("clock", utc_now)()
                if await store.create_log(connection, name, keys.origin, EMPTY_ROOT, now):
                    created = await store.require_log_state(connection, name)
                    note = sign(Checkpoint(keys.origin, 0, EMPTY_ROOT), keys)
                    await store.insert_checkpoint(
                        connection, created.log_id, 0, EMPTY_ROOT, note, now
                    )
                state = await store.require_log_state(connection, name)
                latest = await store.latest_checkpoint(connection, state.log_id)
        opened = cls(engine, state, keys, **options)
        opened._check_latest(latest)
        return opened

    def _check_latest(self, note: str | None) -> None:
        # A signer key replaced without the rotation procedure leaves readers holding only the old
        # key: they can no longer verify anything new. Worth a warning, not a refusal to start.
        try:
            open_checkpoint(note or "", VerifierSet(self._keys.verifiers), origin=self.origin)
        except TransparencyError:
            log.warning(
                "the latest checkpoint of a transparency log is signed by none of its keys",
                extra={"log": self._name, "origin": self.origin},
            )

    @property
    def name(self) -> str:
        """The log's name."""
        return self._name

    @property
    def origin(self) -> str:
        """The log's origin (the first line of its checkpoints, the name of its keys)."""
        return self._keys.origin

    @property
    def keys(self) -> LogKeys:
        """The log's keys (:meth:`LogKeys.vkeys` are the ones to publish)."""
        return self._keys

    @property
    def checkpoint_interval(self) -> float:
        """The shortest time in seconds between two checkpoints."""
        return self._interval

    def add_append_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each append that committed (an integrator's wake-up)."""
        self._listeners.append(callback)

    def remove_append_listener(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback`` after appends."""
        if callback in self._listeners:
            self._listeners.remove(callback)

    # Sequencing.

    async def append(
        self, entries: Sequence[bytes], *, inside_transaction: Hook | None = None
    ) -> range:
        """Append a batch of leaves, in the order given: the consecutive indices they got.

        They are in the log (committed) when this returns; batches appended at the same time in
        this process share one transaction and one allocation (:mod:`.sequencer`). An empty batch
        touches nothing and returns an empty range. :class:`MalformedInput` for entries that are
        not bytes, :class:`LeafTooLarge` beyond the log's limits. ``inside_transaction`` is
        awaited once the leaves are written, before commit (tests stop a process there); if it
        raises, the transaction and every batch in it fail."""
        return await self._sequencer.append(entries, inside_transaction=inside_transaction)

    def _appended(self) -> None:
        for callback in self._listeners:
            callback()

    def queued(self, entry: bytes) -> QueuedLeaf:
        """The write that queues ``entry`` for the log, to commit in the caller's own transaction
        (a :class:`~conclave.platform.db.batch.BatchWriter` write beside the row it logs), and
        the leaf hash it will be found by. No lock and no index: the integrator gives queued
        leaves their indices, in queue order, in the pass that signs the checkpoint covering
        them. Call :meth:`notify_queued` once the write committed. :class:`MalformedInput` for an
        entry that is not bytes, :class:`LeafTooLarge` beyond the log's leaf limit."""
        [leaf] = self._sequencer.limits.check([entry])
        hashed = leaf_hash(leaf)
        values = {"log_id": self._log_id, "leaf_hash": hashed, "data": leaf}
        values["queued_at"] = self._clock()
        return QueuedLeaf(Insert(tlog_queue, values), hashed)

    def notify_queued(self) -> None:
        """Tell this process's integrator that queued leaves committed (it polls for other
        processes' anyway)."""
        self._appended()

    # Integration.

    async def integrate(self, *, inside_transaction: Hook | None = None) -> Integration:
        """Fold the leaves sequenced since the last checkpoint into the tree and sign a new
        checkpoint, if the log's integration lock is free, leaves wait, and the latest
        checkpoint is at least a checkpoint interval old (see :class:`Integration`).

        Everything it writes commits together, or nothing does: a process killed at any point
        leaves the log as it was, and the next integration does the work. ``inside_transaction``
        is awaited once the subtrees and checkpoint are written, before the log's row is moved
        and the transaction commits (tests stop a process there). :class:`LogCorrupted` if the
        stored log contradicts itself, or already holds a row where this pass writes (then
        nothing is signed)."""
        now = self._clock()
        with store_errors():
            async with self._engine.begin() as connection:
                if not await store.take_integration_lock(connection, self._log_id, self._name):
                    return Integration(IntegrationOutcome.BUSY)
                state = await store.require_log_state(connection, self._name)
                self._integrated = max(self._integrated, state.integrated_size)
                sequenced = state.sequenced_size - state.integrated_size
                room = max(0, self._max_per_checkpoint - sequenced)
                # Counted one past what this pass takes: enough to know whether more waits.
                queued = await queue.queued_count(connection, self._log_id, room + 1)
                waiting = sequenced + queued
                if waiting == 0:
                    return Integration(IntegrationOutcome.UP_TO_DATE)
                # The stored time holds the cadence across replicas, but it is another clock's
                # (or anyone's who may UPDATE the row): one interval after this process first saw
                # that checkpoint is enough, whatever the stored time says.
                elapsed = (now - state.integrated_at).total_seconds()
                wait = self._interval - max(elapsed, self._seen_for(state, now))
                if wait > 0:
                    return Integration(
                        IntegrationOutcome.TOO_SOON, pending=waiting, wait_seconds=wait
                    )
                frontier = await self._current_frontier(connection, state)
                taken = (
                    await queue.sequence_queued(
                        connection, self._log_id, self._name, room, self._sequencer.limits
                    )
                    if queued and room
                    else queue.Sequenced(0, [])
                )
                hashes = await hashes_to_fold(
                    connection, self._name, state, taken, self._max_per_checkpoint
                )
                if not hashes:
                    # The pass took only queued rows that hold no leaf: their drop commits (the
                    # next pass meets the rows behind them), and there is nothing to sign.
                    pending = max(0, waiting - taken.dropped)
                    return Integration(IntegrationOutcome.UP_TO_DATE, pending=pending)
                batch = await fold(frontier, hashes, tiles.TILE_LEVEL)
                checkpoint = Checkpoint(self.origin, batch.frontier.size, batch.root)
                note = sign(checkpoint, self._keys)
                try:
                    await store.insert_subtrees(
                        connection, self._log_id, tiles.rows_to_store(batch.stored)
                    )
                    await store.insert_checkpoint(
                        connection, self._log_id, checkpoint.size, batch.root, note, now
                    )
                except IntegrityError as error:
                    # Only this pass writes beyond the integrated tree, under the lock: a row
                    # already there was put by someone else, and every pass would meet it.
                    raise LogCorrupted(
                        f"the log {self._name!r} already stores a subtree or checkpoint beyond "
                        f"its integrated size {state.integrated_size}"
                    ) from error
                if inside_transaction is not None:
                    await inside_transaction()
                # Last, so the log's row (which appends update) is locked only for the commit.
                moved = await store.set_integrated(
                    connection, self._log_id, state.integrated_size, checkpoint.size, batch.root,
                    now,
                )  # fmt: skip
                if not moved:
                    raise LogCorrupted(f"the log {self._name!r} moved during integration")
        self._frontier = batch.frontier
        self._integrated = max(self._integrated, checkpoint.size)
        return Integration(
            IntegrationOutcome.INTEGRATED,
            checkpoint,
            note,
            pending=max(0, waiting - len(hashes)),
        )

    async def oldest_queued_at(self) -> datetime | None:
        """When the oldest leaf still queued was queued (None: none waits): how far behind the
        integrator is."""
        with store_errors():
            async with self._engine.connect() as connection:
                return await queue.oldest_queued_at(connection, self._log_id)

    async def may_still_come(self, written_at: datetime) -> bool:
        """Whether a leaf queued when its record was written at ``written_at``, and not found
        under a checkpoint, may still be on its way rather than missing: moments after (within
        :data:`.queue.ARRIVAL_GRACE` and a checkpoint interval), or while the queue still holds
        leaves queued before then (the integrator behind after an outage). A time more than
        :data:`.queue.CLOCK_SKEW` in the future is no record's: it was written by hand."""
        now = self._clock()
        if written_at > now + queue.CLOCK_SKEW:
            return False
        if now - written_at < queue.ARRIVAL_GRACE + timedelta(seconds=self._interval):
            return True
        behind = await self.oldest_queued_at()
        return behind is not None and behind <= written_at + queue.ARRIVAL_GRACE

    async def locate(self, hashed: bytes) -> LeafLocation:
        """Where the leaf of this leaf hash is: the smallest index of a leaf of that hash, and
        whether it is under the latest checkpoint. A queued leaf is not found until the pass
        that sequences it (and signs the checkpoint covering it) commits."""
        with store_errors():
            async with self._engine.connect() as connection:
                state = await store.require_log_state(connection, self._name)
                index = await store.first_index_of(connection, self._log_id, hashed)
        self._integrated = max(self._integrated, state.integrated_size)
        if index is None:
            return LeafLocation()
        return LeafLocation(index=index, integrated=index < state.integrated_size)

    def _seen_for(self, state: LogState, now: datetime) -> float:
        """Seconds since this log object first saw the log's latest checkpoint (as ``state``
        records it), by its own clock; counted again from ``now`` if that clock went back."""
        key = (state.integrated_size, state.integrated_at)
        if self._seen is None or self._seen[0] != key or now < self._seen[1]:
            self._seen = (key, now)
        return (now - self._seen[1]).total_seconds()

    async def _current_frontier(
        self, connection: AsyncConnection, state: LogState
    ) -> AppendFrontier:
        """The frontier of the integrated tree: this process's own after its last pass, else
        read (one statement); either way checked against the stored root."""
        frontier = self._frontier
        if frontier is None or frontier.size != state.integrated_size:
            subtrees = AppendFrontier.subtrees_of(state.integrated_size)
            found = await store.subtree_hashes(connection, self._log_id, subtrees)
            if len(found) != len(subtrees):
                raise LogCorrupted(f"the log {self._name!r} misses subtrees of its frontier")
            frontier = AppendFrontier(state.integrated_size, [found[s] for s in subtrees])
        if frontier.root() != state.root_hash:
            raise LogCorrupted(f"the stored tree of {self._name!r} does not make its root")
        return frontier

    # Reads.

    async def state(self) -> LogState:
        """The log's row as stored now."""
        with store_errors():
            async with self._engine.connect() as connection:
                state = await store.require_log_state(connection, self._name)
        self._integrated = max(self._integrated, state.integrated_size)
        return state

    async def integrated_size(self) -> int:
        """The size of the latest checkpoint."""
        return (await self.state()).integrated_size

    async def latest_checkpoint(self) -> str:
        """The signed note of the latest checkpoint (C2SP tlog-checkpoint), as published."""
        with store_errors():
            async with self._engine.connect() as connection:
                note = await store.latest_checkpoint(connection, self._log_id)
        if note is None:
            raise CheckpointNotFound(f"the log {self._name!r} has no checkpoint")
        return note

    async def checkpoint(self, size: int) -> str:
        """The signed note of the checkpoint of ``size`` leaves. :class:`OutOfRange` for a size
        that is no uint64, :class:`BeyondIntegrated` beyond the latest checkpoint,
        :class:`CheckpointNotFound` for a size the log never signed."""
        check_tree_size(size)
        await self._require_integrated(size, f"tree size {size}")
        with store_errors():
            async with self._engine.connect() as connection:
                note = await store.checkpoint_note(connection, self._log_id, size)
        if note is None:
            raise CheckpointNotFound(f"the log {self._name!r} has no checkpoint of {size} leaves")
        return note

    async def leaf(self, index: int) -> StoredLeaf:
        """The integrated leaf ``index``: its data and leaf hash. :class:`OutOfRange` for an
        index that is no uint64, :class:`BeyondIntegrated` for one not yet in a checkpoint,
        :class:`LogCorrupted` for a leaf missing or whose data does not hash to its leaf hash."""
        check_tree_size(index, "leaf index")
        await self._require_integrated(index + 1, f"leaf index {index}")
        with store_errors():
            async with self._engine.connect() as connection:
                found = await store.leaf(connection, self._log_id, index)
        if found is None:
            raise LogCorrupted(f"the log {self._name!r} misses its integrated leaf {index}")
        # A reader proves the leaf hash, not the data: data that is not the hash's would be
        # served under another entry's proof.
        if leaf_hash(found.data) != found.leaf_hash:
            raise LogCorrupted(f"the stored data of leaf {index} of {self._name!r} was altered")
        return found

    async def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """The RFC 9162 inclusion proof of leaf ``index`` in the tree of ``size`` leaves (at most
        the latest checkpoint's size), read with one statement. The first layer's errors for
        sizes and indices RFC 9162 rules out, :class:`BeyondIntegrated` beyond the log."""
        plan = inclusion_plan(index, size)
        await self._require_integrated(size, f"tree size {size}")
        return await self._read(plan)

    async def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        """The RFC 9162 consistency proof from the tree of ``old_size`` leaves to ``new_size``
        (at most the latest checkpoint's size), read with one statement."""
        plan = consistency_plan(old_size, new_size)
        await self._require_integrated(new_size, f"tree size {new_size}")
        return await self._read(plan)

    async def receipt(self, index: int) -> Receipt:
        """A receipt of leaf ``index`` against the latest checkpoint, read on one connection (the
        checkpoint, the leaf, and the proof's subtrees: three statements). :class:`OutOfRange` for
        an index that is no uint64, :class:`BeyondIntegrated` while the leaf is not under the
        latest checkpoint, :class:`LogCorrupted` for a leaf whose data is not its hash."""
        check_tree_size(index, "leaf index")  # 2^64 is no index at all, not a later one
        with store_errors():
            async with self._engine.connect() as connection:
                note = await store.latest_checkpoint(connection, self._log_id)
                if note is None:
                    raise CheckpointNotFound(f"the log {self._name!r} has no checkpoint")
                size = signed_size(self._name, note)
                if index >= size:
                    raise BeyondIntegrated(
                        f"leaf {index} is not under the latest checkpoint ({size} leaves) yet"
                    )
                found = await store.leaf(connection, self._log_id, index)
                plan = inclusion_plan(index, size)
                hashes = await store.subtree_hashes(connection, self._log_id, plan.subtrees)
        if found is None or leaf_hash(found.data) != found.leaf_hash:
            raise LogCorrupted(f"the stored leaf {index} of {self._name!r} is missing or altered")
        missing = [subtree for subtree in plan.subtrees if subtree not in hashes]
        if missing:
            raise SubtreeNotStored(f"the log {self._name!r} does not store {missing[0]}")
        proof = plan.assemble([hashes[subtree] for subtree in plan.subtrees])
        return Receipt(self.origin, index, found.leaf_hash, note, tuple(proof))

    async def _require_integrated(self, size: int, what: str) -> None:
        """Refuse, naming ``what``, a tree of ``size`` leaves beyond the latest checkpoint."""
        if size <= self._integrated or size <= (await self.state()).integrated_size:
            return
        raise BeyondIntegrated(
            f"{what} is beyond the log {self._name!r}, integrated up to {self._integrated} leaves"
        )

    async def _read(self, plan: ProofPlan) -> list[bytes]:
        if not plan.subtrees:
            return []
        with store_errors():
            async with self._engine.connect() as connection:
                found = await store.subtree_hashes(connection, self._log_id, plan.subtrees)
        missing = [subtree for subtree in plan.subtrees if subtree not in found]
        if missing:
            raise SubtreeNotStored(f"the log {self._name!r} does not store {missing[0]}")
        return plan.assemble([found[subtree] for subtree in plan.subtrees])
