"""Verify a stored log against its signed checkpoints, and say exactly what is wrong with it.

:func:`audit_log` reads the whole log as one snapshot of the store (a live log's appends and
checkpoints made meanwhile are not seen), a slice at a time (memory stays bounded by leaves and by
bytes), and checks:

- the latest checkpoint opens with the given verifier keys, for the log's origin, matches its row
  and agrees with the log's row; if it does not, the checkpoint at the log's integrated size is
  trusted instead;
- every index below the sequenced size has a leaf, and no leaf lies beyond it or below 0;
- each leaf's data hashes to the leaf hash stored beside it; where they differ, the block of
  ``2^TILE_LEVEL`` leaves around it says which one the tree holds: the one whose block makes the
  block's stored subtree hash (or, in the last, partial block, the trusted checkpoint's root);
  a block whose leaves make neither, though the hashes above vouch for its stored hash, had
  leaves moved or rewritten with their hashes (:mod:`.audit_blocks`);
- every stored subtree hash (levels ``TILE_LEVEL`` and up) is what the tree's leaves make, and
  none is missing or extra; rows below ``TILE_LEVEL`` (kept from earlier versions) are not read;
- every stored checkpoint opens, matches its row, and its root is the stored tree's at its size
  (a checkpoint edited in the store, or a second history, is a fork); none lies beyond the
  trusted latest one (a row there is what readers would be served, or jams the next integration);
- the leaves' data make the latest checkpoint's root.

Only the signed checkpoint is trusted: a leaf edited in the store or deleted shows as a finding at
its index, one moved or inserted with its hash as a finding at its block, and each as a root that
the data no longer makes. The work beyond the
trusted checkpoint follows the rows stored, not the log's (mutable) sequenced size, and at most
1000 missing and 1000 unexpected leaves are listed one by one.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.platform.tlog import audit_store, store
from conclave.platform.tlog.audit_blocks import (
    BlockHolds,
    Hashes,
    block_rows,
    complete_blocks,
    last_block,
)
from conclave.platform.tlog.records import LogState
from conclave.platform.tlog.tiles import TILE_LEVEL, TILE_SIZE
from conclave.platform.transparency.checkpoint import Checkpoint, open_checkpoint
from conclave.platform.transparency.errors import TransparencyError
from conclave.platform.transparency.frontier import AppendFrontier
from conclave.platform.transparency.hashing import HASH_SIZE, leaf_hash
from conclave.platform.transparency.note import VerifierSet
from conclave.platform.transparency.subtrees import Subtree

AUDIT_SLICE = 10_000
"""Leaves walked per slice by :func:`audit_log` (their hashes, subtrees and checkpoints)."""

AUDIT_SLICE_BYTES = 4 << 20
"""Leaf data read per statement by :func:`audit_log`, at most (a larger leaf is read alone)."""

_LISTED = 1000
"""At most this many missing, and this many unexpected, leaves are listed one by one."""


class FindingKind(StrEnum):
    """What an audit found wrong."""

    CHECKPOINT_INVALID = "checkpoint_invalid"
    """A stored checkpoint that does not open with the log's keys, does not match its row or the
    log's, whose root is not the stored tree's at its size, or that lies beyond the latest
    trusted checkpoint (or below size 0). ``position``: its tree size."""
    MISSING_LEAF = "missing_leaf"
    """No leaf at an index below the sequenced size. ``position``: the index (beyond the first
    1000, one finding counts the rest: ``position`` is the first of them)."""
    UNEXPECTED_LEAF = "unexpected_leaf"
    """A leaf at or beyond the sequenced size, or below 0. ``position``: its index."""
    LEAF_DATA_ALTERED = "leaf_data_altered"
    """A leaf whose data does not hash to the leaf hash the tree holds at its index."""
    LEAF_HASH_ALTERED = "leaf_hash_altered"
    """A leaf whose data is the tree's, but whose stored leaf hash is not its data's."""
    BLOCK_ALTERED = "block_altered"
    """A block of ``2^TILE_LEVEL`` leaves whose leaves, data and leaf hashes alike, do not make
    the tree: not its stored subtree hash, for which the hashes above vouch, or (in the last,
    partial block) not the checkpoint's root. Leaves moved, inserted or rewritten with their leaf
    hashes: which of them, one copy of the leaf hashes cannot tell. ``position``: its first
    leaf."""
    SUBTREE_ALTERED = "subtree_altered"
    """A stored subtree hash that is not what the tree's leaves make. ``detail`` names it."""
    MISSING_SUBTREE = "missing_subtree"
    """A complete subtree of the integrated tree that is not stored (or, with no trusted
    checkpoint, leaf hashes missing from the first position up to the log's integrated size)."""
    UNEXPECTED_SUBTREES = "unexpected_subtrees"
    """More subtree hashes stored than the integrated tree has. ``position``: how many more."""
    ROOT_MISMATCH = "root_mismatch"
    """The stored leaves do not make the latest checkpoint's root. ``position``: its size."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong with a stored log."""

    kind: FindingKind
    position: int | None
    detail: str


@dataclass(frozen=True, slots=True)
class LogAudit:
    """The result of :func:`audit_log`."""

    name: str
    checkpoint: Checkpoint | None
    """The latest trusted checkpoint, opened and verified: the latest row's, else the one at the
    log's integrated size (``None`` if neither verified)."""
    sequenced_size: int
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        """Whether nothing is wrong."""
        return not self.findings

    def of_kind(self, kind: FindingKind) -> list[int | None]:
        """The positions of the findings of ``kind``, in order."""
        return [finding.position for finding in self.findings if finding.kind is kind]


class _Audit:
    """The state of one audit as it walks the log from index 0."""

    def __init__(
        self, state: LogState, verifiers: VerifierSet, size: int, root: bytes | None
    ) -> None:
        self.state = state
        self.verifiers = verifiers
        self.size = size
        self.root = root
        self.findings: list[Finding] = []
        # The tree as stored (folded from the leaf hashes it holds), and as the data makes it.
        self.tree: AppendFrontier | None = AppendFrontier()
        # The block being walked: what the tree holds there, and the tree where it starts.
        self.holds = BlockHolds.STORED
        self.block_base: AppendFrontier | None = None
        self.data: AppendFrontier | None = AppendFrontier()
        self.missing_listed = 0
        self.missing_unlisted: tuple[int, int] | None = None  # (first index, how many)

    def add(self, kind: FindingKind, position: int | None, detail: str) -> None:
        self.findings.append(Finding(kind, position, detail))

    def missing(self, start: int, end: int) -> None:
        """No leaf in ``[start, end)``: listed one by one up to the limit, then only counted (an
        UPDATE of the sequenced size must not make the findings, or the work, unbounded)."""
        listed = min(end - start, _LISTED - self.missing_listed)
        for index in range(start, start + listed):
            self.add(FindingKind.MISSING_LEAF, index, f"no leaf {index}")
        self.missing_listed += listed
        if end - start > listed:
            first, count = self.missing_unlisted or (start + listed, 0)
            self.missing_unlisted = (first, count + end - start - listed)

    def leaves(
        self,
        start: int,
        end: int,
        rows: dict[int, Hashes],
        tree: dict[Subtree, bytes],
        holds: dict[int, BlockHolds],
    ) -> None:
        """The integrated leaves ``[start, end)``, folded into both trees. ``rows`` holds every
        leaf of the blocks the range touches (slices are whole blocks), ``holds`` what the tree
        holds in each complete one (:mod:`.audit_blocks`)."""
        index = start
        while index < end:
            block = index >> TILE_LEVEL
            first = block << TILE_LEVEL
            if index == first:
                self._enter(block, rows, holds)
            stop = min(end, first + TILE_SIZE)
            self._fold(index, stop, rows, tree)
            if stop == first + TILE_SIZE and self.tree is None:
                self._resume(block, tree)
            index = stop

    def _enter(self, block: int, rows: dict[int, Hashes], holds: dict[int, BlockHolds]) -> None:
        first = block << TILE_LEVEL
        self.block_base = self.tree
        if block in holds:
            self.holds = holds[block]
        else:
            found = block_rows(rows, first, min(first + TILE_SIZE, self.size))
            self.holds = last_block(self.tree, found, self.root)
        if self.holds in (BlockHolds.TILE, BlockHolds.UNKNOWN):
            self.add(
                FindingKind.BLOCK_ALTERED,
                first,
                f"the leaves from {first} do not make the tree ({self.holds.value})",
            )
            self.tree = None

    def _resume(self, block: int, tree: dict[Subtree, bytes]) -> None:
        """Go on with the tree past a complete block that misses a leaf, or whose leaves do not
        make it: from its stored subtree hash, so the subtrees and checkpoints beyond are still
        checked."""
        base, tile = self.block_base, tree.get(Subtree(TILE_LEVEL, block))
        if base is None or tile is None:
            return
        # Above TILE_LEVEL, a tree is the tree whose leaves are its blocks' hashes.
        blocks = AppendFrontier(base.size >> TILE_LEVEL, [h for _, h in base.subtrees])
        batch = blocks.append([tile])
        self.tree = AppendFrontier(
            batch.frontier.size << TILE_LEVEL, [h for _, h in batch.frontier.subtrees]
        )
        above = [(Subtree(s.level + TILE_LEVEL, s.index), h) for s, h in batch.stored[1:]]
        self._compare(above, tree)

    def _compare(self, computed: list[tuple[Subtree, bytes]], tree: dict[Subtree, bytes]) -> None:
        """Each stored subtree hash (``TILE_LEVEL`` and up) against the one the tree makes."""
        for subtree, made in computed:
            if subtree.level < TILE_LEVEL:
                continue
            kept = tree.get(subtree)
            if kept is None:
                self.add(FindingKind.MISSING_SUBTREE, subtree.start, f"no stored {subtree}")
            elif kept != made:
                self.add(FindingKind.SUBTREE_ALTERED, subtree.start, f"{subtree} changed")

    def _fold(
        self, start: int, end: int, rows: dict[int, Hashes], tree: dict[Subtree, bytes]
    ) -> None:
        """The leaves ``[start, end)`` of one block, folded into both trees."""
        tree_hashes: list[bytes] = []
        data_hashes: list[bytes] = []
        for index in range(start, end):
            hashes = rows.get(index)
            if hashes is None:
                self.missing(index, index + 1)
                self.data = self.tree = None
                continue
            computed, stored = hashes
            held = computed if self.holds is BlockHolds.DATA else stored
            if computed != held:
                self.add(FindingKind.LEAF_DATA_ALTERED, index, f"leaf {index}'s data changed")
            elif stored != computed:
                self.add(FindingKind.LEAF_HASH_ALTERED, index, f"leaf {index}'s hash changed")
            if len(held) != HASH_SIZE:
                self.tree = None  # a stored "hash" that is none: no tree to fold past it
            tree_hashes.append(held)
            data_hashes.append(computed)
        if self.data is not None:
            self.data = self.data.append(data_hashes).frontier
        if self.tree is not None and self.holds in (BlockHolds.STORED, BlockHolds.DATA):
            batch = self.tree.append(tree_hashes)
            self.tree = batch.frontier
            self._compare(list(batch.stored), tree)

    def pending(self, start: int, end: int, rows: dict[int, Hashes]) -> None:
        """The stored leaves of ``[start, end)``, sequenced but beyond the trusted checkpoint:
        no tree to fold them into, only gaps and hashes to check."""
        expected = start
        for index, (computed, stored) in rows.items():
            if index > expected:
                self.missing(expected, index)
            if stored != computed:
                self.add(FindingKind.LEAF_HASH_ALTERED, index, f"leaf {index}'s hash changed")
            expected = index + 1
        if end > expected:
            self.missing(expected, end)

    def checkpoint(self, size: int, root_hash: bytes, note: str, tree_root: bytes | None) -> None:
        opened = self.opened(size, root_hash, note)
        if opened is not None and tree_root is not None and tree_root != root_hash:
            self.add(FindingKind.CHECKPOINT_INVALID, size, f"checkpoint {size} is another tree's")

    def opened(self, size: int, root_hash: bytes, note: str) -> Checkpoint | None:
        """The checkpoint row's note, opened and matching the row; else a finding."""
        try:
            opened = open_checkpoint(note, self.verifiers, origin=self.state.origin).checkpoint
        except TransparencyError as error:
            self.add(FindingKind.CHECKPOINT_INVALID, size, f"checkpoint {size}: {error}")
            return None
        if (opened.size, opened.root_hash) != (size, root_hash):
            self.add(FindingKind.CHECKPOINT_INVALID, size, f"checkpoint {size}'s note differs")
            return None
        return opened

    def finish(self, checkpoint: Checkpoint | None) -> None:
        if self.missing_unlisted is not None:
            first, count = self.missing_unlisted
            self.add(FindingKind.MISSING_LEAF, first, f"{count} more leaves missing (not listed)")
        if checkpoint is None:
            return
        if self.data is None:
            self.add(FindingKind.ROOT_MISMATCH, self.size, "leaves are missing: no root to compare")
        elif self.data.root() != checkpoint.root_hash:
            self.add(
                FindingKind.ROOT_MISMATCH, self.size, "the leaves do not make the checkpoint's root"
            )


async def audit_log(
    engine: AsyncEngine, name: str, verifiers: VerifierSet, *, slice_size: int = AUDIT_SLICE
) -> LogAudit:
    """Check the stored log ``name`` against its checkpoints signed by ``verifiers`` (the log's
    published keys); see the module's docstring. Reads every leaf, in one read transaction held
    for the whole audit: an offline check, not for a request path."""
    async with engine.connect() as connection:
        await audit_store.read_snapshot(connection)
        state = await store.log_state(connection, name)
        if state is None:
            raise LookupError(f"no transparency log {name!r}")
        checkpoint = await _trusted_latest(connection, state, verifiers)
        if checkpoint is not None:
            size = checkpoint.size
        else:
            # Nothing signed bounds the tree: the log's row (one UPDATE away from 2^62) is
            # bounded by the leaf hashes actually stored, so the walk's work is too.
            size = min(
                state.integrated_size, await audit_store.leaf_hash_count(connection, state.log_id)
            )
        root = checkpoint.root_hash if checkpoint is not None else None
        audit = _Audit(state, verifiers, size, root)
        if size < state.integrated_size:
            audit.add(
                FindingKind.MISSING_SUBTREE,
                size,
                f"no stored leaf hashes in [{size}, {state.integrated_size}): the log's "
                "integrated size is beyond its stored tree",
            )
        if checkpoint is not None and (checkpoint.size, checkpoint.root_hash) != (
            state.integrated_size,
            state.root_hash,
        ):
            audit.add(
                FindingKind.CHECKPOINT_INVALID,
                checkpoint.size,
                "the latest checkpoint is not the log's integrated size and root",
            )
        await _walk(connection, audit, slice_size)
        await _pending(connection, audit, slice_size)
        await _extras(connection, audit)
    audit.finish(checkpoint)
    return LogAudit(name, checkpoint, state.sequenced_size, tuple(audit.findings))


async def _trusted_latest(
    connection: AsyncConnection, state: LogState, verifiers: VerifierSet
) -> Checkpoint | None:
    """The latest checkpoint row's, if it opens and matches its row; else the one at the log's
    integrated size. The rows beyond it are reported by :func:`_extras`."""
    latest = await audit_store.latest_checkpoint_row(connection, state.log_id)
    candidates = [latest] if latest is not None else []
    if latest is None or latest[0] != state.integrated_size:
        candidates += await audit_store.checkpoints_between(
            connection, state.log_id, state.integrated_size - 1, state.integrated_size
        )
    for size, root_hash, note in candidates:
        with contextlib.suppress(TransparencyError):  # reported with the other checkpoints
            opened = open_checkpoint(note, verifiers, origin=state.origin).checkpoint
            if (opened.size, opened.root_hash) == (size, root_hash):
                return opened
    return None


async def _hashed(
    connection: AsyncConnection, log_id: int, sizes: list[tuple[int, int]]
) -> dict[int, Hashes]:
    """The hashes of the leaves listed in ``sizes`` (``(index, data length)``, in order), their
    data read in ranges of at most :data:`AUDIT_SLICE_BYTES` and dropped once hashed."""
    ranges: list[tuple[int, int]] = []
    first, last, held = -1, -1, 0
    for index, length in sizes:
        if first >= 0 and held + length > AUDIT_SLICE_BYTES:
            ranges.append((first, last + 1))
            first = -1
        if first < 0:
            first, held = index, 0
        last, held = index, held + length
    if first >= 0:
        ranges.append((first, last + 1))
    hashes: dict[int, Hashes] = {}
    for start, end in ranges:
        for row in await audit_store.leaves_between(connection, log_id, start, end):
            hashes[row.index] = (leaf_hash(row.data), row.leaf_hash)
    return hashes


async def _walk(connection: AsyncConnection, audit: _Audit, slice_size: int) -> None:
    """Every leaf, subtree and checkpoint of the trusted tree from index 0, a slice of leaves at
    a time; within a slice the trees are folded up to each checkpoint's size, to compare its root
    there."""
    log_id, size = audit.state.log_id, audit.size
    # Whole blocks per slice: a leaf's block decides which of its two hashes the tree holds.
    slice_size = -(-max(slice_size, 1) // TILE_SIZE) * TILE_SIZE
    after = -1  # checkpoints of sizes up to here are checked (the first one has size 0)
    start = 0
    while True:
        end = min(start + slice_size, size)
        sizes = await audit_store.leaf_sizes(connection, log_id, start, end, end - start)
        rows = await _hashed(connection, log_id, sizes)
        tree = (
            await audit_store.subtrees_completed_between(connection, log_id, start, end)
            if start < end
            else {}
        )
        trusted = (size, audit.root) if audit.root is not None else None
        holds = await complete_blocks(connection, log_id, (start, end), rows, tree, trusted)
        position = start
        for checkpoint_size, root_hash, note in await audit_store.checkpoints_between(
            connection, log_id, after, end
        ):
            if checkpoint_size > position:
                audit.leaves(position, checkpoint_size, rows, tree, holds)
                position = checkpoint_size
            tree_root = audit.tree.root() if audit.tree is not None else None
            audit.checkpoint(checkpoint_size, root_hash, note, tree_root)
        if end > position:
            audit.leaves(position, end, rows, tree, holds)
        after = max(after, end)
        if end >= size:
            return
        start = end


async def _pending(connection: AsyncConnection, audit: _Audit, slice_size: int) -> None:
    """The leaves sequenced beyond the trusted tree, following the rows stored: the work is
    bounded by them, not by the sequenced size in the log's row."""
    log_id, position, end = audit.state.log_id, audit.size, audit.state.sequenced_size
    while position < end:
        sizes = await audit_store.leaf_sizes(connection, log_id, position, end, slice_size)
        stop = sizes[-1][0] + 1 if len(sizes) == slice_size else end
        audit.pending(position, stop, await _hashed(connection, log_id, sizes))
        position = stop


async def _extras(connection: AsyncConnection, audit: _Audit) -> None:
    """Leaves outside the sequenced range, checkpoint rows beyond the trusted one, and subtree
    hashes beyond the integrated tree."""
    log_id = audit.state.log_id
    for index in await audit_store.leaf_indices_outside(
        connection, log_id, 0, audit.state.sequenced_size, _LISTED
    ):
        if index >= 0:
            detail = f"leaf {index} was never sequenced"
        else:
            detail = f"leaf {index} has a negative index"
        audit.add(FindingKind.UNEXPECTED_LEAF, index, detail)
    for size in await audit_store.checkpoint_sizes_outside(
        connection, log_id, 0, audit.size, _LISTED
    ):
        where = "below size 0" if size < 0 else f"beyond the latest trusted one ({audit.size})"
        audit.add(FindingKind.CHECKPOINT_INVALID, size, f"a checkpoint row of size {size} {where}")
    expected = sum(audit.size >> level for level in range(TILE_LEVEL, audit.size.bit_length()))
    extra = await audit_store.subtree_count(connection, log_id, TILE_LEVEL) - expected
    if extra > 0:
        audit.add(FindingKind.UNEXPECTED_SUBTREES, extra, f"{extra} subtree hashes beyond the tree")
