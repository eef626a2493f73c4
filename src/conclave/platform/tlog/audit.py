"""Verify a stored log against its signed checkpoints, and say exactly what is wrong with it.

:func:`audit_log` reads the whole log a slice at a time (memory stays bounded) and checks:

- the latest checkpoint opens with the given verifier keys, for the log's origin, and agrees with
  the log's row;
- every index below the sequenced size has a leaf, and no leaf lies beyond it;
- each leaf's data hashes to the leaf hash the tree was built from (the stored level-0 subtree)
  and to the leaf hash stored beside it;
- every stored subtree hash is what the tree's leaf hashes make, and none is missing or extra;
- every stored checkpoint opens, matches its row, and its root is the stored tree's at its size
  (a checkpoint edited in the store, or a second history, is a fork);
- the leaves' data make the latest checkpoint's root.

Only the signed checkpoint is trusted: a leaf edited in the store, deleted, inserted or moved
shows as a finding at its index, and as a root that the data no longer makes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.platform.tlog import store
from conclave.platform.tlog.records import LogState, StoredLeaf
from conclave.platform.transparency.checkpoint import Checkpoint, open_checkpoint
from conclave.platform.transparency.errors import TransparencyError
from conclave.platform.transparency.frontier import AppendFrontier
from conclave.platform.transparency.hashing import leaf_hash
from conclave.platform.transparency.note import VerifierSet
from conclave.platform.transparency.subtrees import Subtree

AUDIT_SLICE = 10_000
"""Leaves read per statement by :func:`audit_log`."""

_LISTED = 1000
"""At most this many unexpected leaves are listed one by one."""


class FindingKind(StrEnum):
    """What an audit found wrong."""

    CHECKPOINT_INVALID = "checkpoint_invalid"
    """A stored checkpoint that does not open with the log's keys, does not match its row or the
    log's, or whose root is not the stored tree's at its size. ``position``: its tree size."""
    MISSING_LEAF = "missing_leaf"
    """No leaf at an index below the sequenced size. ``position``: the index."""
    UNEXPECTED_LEAF = "unexpected_leaf"
    """A leaf at or beyond the sequenced size. ``position``: its index."""
    LEAF_DATA_ALTERED = "leaf_data_altered"
    """A leaf whose data does not hash to the leaf hash the tree holds at its index."""
    LEAF_HASH_ALTERED = "leaf_hash_altered"
    """A leaf whose data is the tree's, but whose stored leaf hash is not its data's."""
    SUBTREE_ALTERED = "subtree_altered"
    """A stored subtree hash that is not what the tree's leaves make. ``detail`` names it."""
    MISSING_SUBTREE = "missing_subtree"
    """A complete subtree of the integrated tree that is not stored."""
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
    """The latest checkpoint, opened and verified (``None`` if it did not verify)."""
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

    def __init__(self, state: LogState, verifiers: VerifierSet, size: int) -> None:
        self.state = state
        self.verifiers = verifiers
        self.size = size
        self.findings: list[Finding] = []
        # The tree as stored (folded from its own level-0 hashes), and as the data makes it.
        self.tree: AppendFrontier | None = AppendFrontier()
        self.data: AppendFrontier | None = AppendFrontier()

    def add(self, kind: FindingKind, position: int | None, detail: str) -> None:
        self.findings.append(Finding(kind, position, detail))

    def leaves(
        self, start: int, end: int, rows: dict[int, StoredLeaf], tree: dict[Subtree, bytes]
    ) -> None:
        tree_hashes: list[bytes] = []
        data_hashes: list[bytes] = []
        for index in range(start, end):
            row = rows.get(index)
            integrated = index < self.size
            held = tree.get(Subtree(0, index)) if integrated else None
            if integrated:
                if held is None:
                    self.add(FindingKind.MISSING_SUBTREE, index, f"no stored leaf hash {index}")
                    self.tree = None
                else:
                    tree_hashes.append(held)
            if row is None:
                self.add(FindingKind.MISSING_LEAF, index, f"no leaf {index}")
                self.data = None
                continue
            computed = leaf_hash(row.data)
            if held is not None and computed != held:
                self.add(FindingKind.LEAF_DATA_ALTERED, index, f"leaf {index}'s data changed")
            elif row.leaf_hash != computed:
                self.add(FindingKind.LEAF_HASH_ALTERED, index, f"leaf {index}'s hash changed")
            if integrated:
                data_hashes.append(computed)
        if self.data is not None:
            self.data = self.data.append(data_hashes).frontier
        if self.tree is not None:
            batch = self.tree.append(tree_hashes)
            self.tree = batch.frontier
            for subtree, computed in batch.stored:
                if subtree.level == 0:
                    continue
                held = tree.get(subtree)
                if held is None:
                    self.add(FindingKind.MISSING_SUBTREE, subtree.start, f"no stored {subtree}")
                elif held != computed:
                    self.add(FindingKind.SUBTREE_ALTERED, subtree.start, f"{subtree} changed")

    def checkpoint(self, size: int, root_hash: bytes, note: str, tree_root: bytes | None) -> None:
        try:
            opened = open_checkpoint(note, self.verifiers, origin=self.state.origin).checkpoint
        except TransparencyError as error:
            self.add(FindingKind.CHECKPOINT_INVALID, size, f"checkpoint {size}: {error}")
            return
        if (opened.size, opened.root_hash) != (size, root_hash):
            self.add(FindingKind.CHECKPOINT_INVALID, size, f"checkpoint {size}'s note differs")
        elif tree_root is not None and tree_root != root_hash:
            self.add(FindingKind.CHECKPOINT_INVALID, size, f"checkpoint {size} is another tree's")


async def audit_log(
    engine: AsyncEngine, name: str, verifiers: VerifierSet, *, slice_size: int = AUDIT_SLICE
) -> LogAudit:
    """Check the stored log ``name`` against its checkpoints signed by ``verifiers`` (the log's
    published keys); see the module's docstring. Reads every leaf: an offline check, not for a
    request path."""
    async with engine.connect() as connection:
        state = await store.log_state(connection, name)
        if state is None:
            raise LookupError(f"no transparency log {name!r}")
        latest = await store.latest_checkpoint(connection, state.log_id)
        checkpoint: Checkpoint | None = None
        with contextlib.suppress(TransparencyError):  # reported with the other checkpoints
            checkpoint = open_checkpoint(latest or "", verifiers, origin=state.origin).checkpoint
        size = checkpoint.size if checkpoint is not None else state.integrated_size
        audit = _Audit(state, verifiers, size)
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
        await _extras(connection, audit)
    if checkpoint is not None:
        if audit.data is None:
            audit.add(FindingKind.ROOT_MISMATCH, size, "leaves are missing: no root to compare")
        elif audit.data.root() != checkpoint.root_hash:
            audit.add(
                FindingKind.ROOT_MISMATCH, size, "the leaves do not make the checkpoint's root"
            )
    return LogAudit(name, checkpoint, state.sequenced_size, tuple(audit.findings))


async def _walk(connection: AsyncConnection, audit: _Audit, slice_size: int) -> None:
    """Every leaf, subtree and checkpoint from index 0, a slice of leaves per statement; within a
    slice the trees are folded up to each checkpoint's size, to compare its root there."""
    log_id, size = audit.state.log_id, audit.size
    end_of_walk = max(audit.state.sequenced_size, size)
    after = -1  # checkpoints of sizes up to here are checked (the first one has size 0)
    start = 0
    while True:
        end = min(start + slice_size, end_of_walk)
        leaves = await store.leaves_between(connection, log_id, start, end)
        rows = {row.index: row for row in leaves}
        tree_end = min(end, size)
        tree = (
            await store.subtrees_completed_between(connection, log_id, start, tree_end)
            if start < tree_end
            else {}
        )
        position = start
        for checkpoint_size, root_hash, note in await store.checkpoints_between(
            connection, log_id, after, tree_end
        ):
            if checkpoint_size > position:
                audit.leaves(position, checkpoint_size, rows, tree)
                position = checkpoint_size
            tree_root = audit.tree.root() if audit.tree is not None else None
            audit.checkpoint(checkpoint_size, root_hash, note, tree_root)
        if end > position:
            audit.leaves(position, end, rows, tree)
        after = max(after, tree_end)
        if end >= end_of_walk:
            return
        start = end


async def _extras(connection: AsyncConnection, audit: _Audit) -> None:
    """Leaves beyond the sequenced size, and subtree hashes beyond the integrated tree."""
    log_id = audit.state.log_id
    for index in await store.leaf_indices_from(
        connection, log_id, audit.state.sequenced_size, _LISTED
    ):
        audit.add(FindingKind.UNEXPECTED_LEAF, index, f"leaf {index} was never sequenced")
    expected = sum(audit.size >> level for level in range(audit.size.bit_length()))
    extra = await store.subtree_count(connection, log_id) - expected
    if extra > 0:
        audit.add(FindingKind.UNEXPECTED_SUBTREES, extra, f"{extra} subtree hashes beyond the tree")
