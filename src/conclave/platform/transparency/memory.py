"""An in-memory :class:`HashSource`: the stored complete subtrees of one tree, level by level.

It holds every complete subtree hash, from the rows that :meth:`AppendFrontier.append` yields
(a stored log keeps the upper levels as rows and computes the lowest from its leaf hashes: this is
the reference it is tested against) in one ``bytearray`` per level, 32 bytes a hash, so ten
million leaves take about 640 MB rather than several gigabytes of ``bytes`` objects. It serves
tests and anything that holds a whole tree in memory; it is not shared between threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from conclave.platform.transparency.errors import MalformedInput, SubtreeNotStored
from conclave.platform.transparency.frontier import AppendedBatch, AppendFrontier
from conclave.platform.transparency.hashing import HASH_SIZE, check_hash, leaf_hash
from conclave.platform.transparency.subtrees import Subtree, SubtreeHash


class InMemoryHashSource:
    """The complete subtree hashes of a tree held in memory, and its append frontier."""

    __slots__ = ("_frontier", "_levels")

    def __init__(self) -> None:
        self._levels: list[bytearray] = []
        self._frontier = AppendFrontier()

    @classmethod
    def of_entries(cls, entries: Iterable[bytes]) -> InMemoryHashSource:
        """The tree whose leaves are ``entries`` (hashed as RFC 9162 leaves), in order."""
        source = cls()
        source.append([leaf_hash(entry) for entry in entries])
        return source

    @property
    def size(self) -> int:
        """The number of leaves."""
        return self._frontier.size

    @property
    def frontier(self) -> AppendFrontier:
        """The tree's append frontier."""
        return self._frontier

    def append(self, leaf_hashes: Iterable[bytes]) -> AppendedBatch:
        """Append a batch of leaf hashes and keep every subtree it completes."""
        batch = self._frontier.append(leaf_hashes)
        self._store(batch.stored)
        self._frontier = batch.frontier
        return batch

    def _store(self, rows: Iterable[SubtreeHash]) -> None:
        """Keep subtree hashes; each must be the next one of its level, as a writer yields them."""
        levels = self._levels
        for subtree, h in rows:
            check_hash(h, "a subtree hash")
            while len(levels) <= subtree.level:
                levels.append(bytearray())
            level = levels[subtree.level]
            if len(level) != subtree.index * HASH_SIZE:
                raise MalformedInput(f"subtree {subtree} is not the next one of its level")
            level += h

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> list[bytes]:
        """The hash of each complete subtree, in order; :class:`SubtreeNotStored` for one the tree
        does not hold."""
        hashes = []
        for subtree in subtrees:
            level, offset = subtree.level, subtree.index * HASH_SIZE
            if not 0 <= level < len(self._levels) or not 0 <= offset < len(self._levels[level]):
                raise SubtreeNotStored(f"no stored subtree {subtree}")
            hashes.append(bytes(self._levels[level][offset : offset + HASH_SIZE]))
        return hashes
