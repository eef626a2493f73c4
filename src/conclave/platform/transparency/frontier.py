"""The append frontier: the right border of a tree, all a writer needs to add leaves.

A tree of ``n`` leaves is, left to right, one complete subtree per set bit of ``n`` (largest
first): at most ``log2(n) + 1`` hashes. Appending a leaf pushes a level-0 subtree and merges
equal neighbours, like a binary counter's carry; every merge completes a subtree whose hash never
changes again, which is exactly what storage keeps. The root is the fold of the frontier.

So a batch append reads the frontier (or keeps it from the last batch), folds the batch's leaf
hashes in, and writes the new complete subtrees and the new checkpoint together: one sequence
allocation for the batch, O(batch + log n) hashing, and no read of older leaves. The frontier is
immutable: :meth:`AppendFrontier.append` returns a new one beside what to store, so a
transaction that fails leaves the caller's frontier as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from conclave.platform.transparency.errors import MalformedInput, OutOfRange
from conclave.platform.transparency.hashing import (
    EMPTY_ROOT,
    MAX_TREE_SIZE,
    check_hash,
    check_tree_size,
    node_hash,
)
from conclave.platform.transparency.subtrees import (
    HashSource,
    Subtree,
    SubtreeHash,
    fold,
    range_subtrees,
)


class AppendedBatch(NamedTuple):
    """What appending a batch produced."""

    frontier: AppendFrontier
    """The frontier after the batch (its ``size`` is the new tree size)."""
    first_index: int
    """The leaf index given to the batch's first leaf; the others follow in order."""
    stored: list[SubtreeHash]
    """Every subtree the batch completed, leaves (level 0) included, in the order completed:
    what storage adds for later roots and proofs (a stored log keeps the subtrees of 16 leaves
    and more, and computes the lower ones from its leaf hashes: ``platform.tlog.tiles``)."""
    root: bytes
    """The root hash of the tree after the batch."""


class AppendFrontier:
    """The right border of a tree of ``size`` leaves: the hashes of the complete subtrees of
    ``[0, size)``, largest first."""

    __slots__ = ("_hashes", "_size")

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        check_tree_size(size)
        if len(hashes) != size.bit_count():
            raise MalformedInput(
                f"a tree of {size} leaves has {size.bit_count()} frontier hashes, not {len(hashes)}"
            )
        self._size = size
        self._hashes = tuple(check_hash(h, "a frontier hash") for h in hashes)

    @staticmethod
    def subtrees_of(size: int) -> list[Subtree]:
        """The complete subtrees whose hashes make up the frontier of a tree of ``size``
        leaves, largest first: what to read to resume appending to a stored tree."""
        check_tree_size(size)
        return range_subtrees(0, size)

    @classmethod
    def read(cls, source: HashSource, size: int) -> AppendFrontier:
        """The frontier of the first ``size`` leaves that ``source`` holds, read with one
        lookup (a writer resuming after a restart, or after another writer's batch)."""
        subtrees = cls.subtrees_of(size)
        hashes = source.subtree_hashes(subtrees) if subtrees else []
        return cls(size, hashes)

    @property
    def size(self) -> int:
        """The number of leaves in the tree."""
        return self._size

    @property
    def subtrees(self) -> list[SubtreeHash]:
        """The frontier's subtrees and their hashes, largest first."""
        return [
            SubtreeHash(subtree, h)
            for subtree, h in zip(range_subtrees(0, self._size), self._hashes, strict=True)
        ]

    def root(self) -> bytes:
        """The root hash of the tree (:data:`EMPTY_ROOT` when it has no leaf)."""
        return fold(self._hashes) if self._hashes else EMPTY_ROOT

    def append(self, leaf_hashes: Iterable[bytes], *, lowest_kept: int = 0) -> AppendedBatch:
        """Fold a batch of leaf hashes, in order, into the tree; see :class:`AppendedBatch`.
        Its ``stored`` holds the completed subtrees of level ``lowest_kept`` and above (a store
        that keeps only the upper levels need not have the others made)."""
        # The border as (level, hash), smallest subtree last, as a carry chain works on it.
        border = [
            (subtree.level, h)
            for subtree, h in zip(range_subtrees(0, self._size), self._hashes, strict=True)
        ]
        size = self._size
        stored: list[SubtreeHash] = []
        for leaf in leaf_hashes:
            check_hash(leaf, "a leaf hash")
            if size == MAX_TREE_SIZE:
                raise OutOfRange("the tree is full: 2^64 - 1 leaves")
            if lowest_kept <= 0:
                stored.append(SubtreeHash(Subtree(0, size), leaf))
            level, h = 0, leaf
            # Each carry merges the two rightmost equal subtrees into the one above them.
            while border and border[-1][0] == level:
                _, left = border.pop()
                level, h = level + 1, node_hash(left, h)
                if level >= lowest_kept:
                    stored.append(SubtreeHash(Subtree(level, size >> level), h))
            border.append((level, h))
            size += 1
        frontier = AppendFrontier(size, [h for _, h in border])
        return AppendedBatch(frontier, self._size, stored, frontier.root())

    def __repr__(self) -> str:
        return f"AppendFrontier(size={self._size}, root={self.root().hex()})"
