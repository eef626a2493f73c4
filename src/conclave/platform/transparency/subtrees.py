"""Complete subtrees: what storage keeps, and what every root and proof is folded from.

A log never rewrites a leaf, so the hash of a *complete* subtree (``2^level`` leaves starting at a
multiple of ``2^level``) is fixed once its last leaf is in. Storage keeps those hashes (a table
keyed by level and index, or tlog tiles); every hash RFC 9162 needs for a root or a proof is the
hash of a range ``[start, end)`` that splits into at most ``log2(end - start) + 1`` complete
subtrees, folded from the right. So a root or a proof costs O(log n) stored hashes, never a walk
over the leaves.

The ranges RFC 9162 section 2.1 produces are always *left-balanced*: ``start`` is a multiple of
the smallest power of two at least ``end - start``. For such a range, ``MTH(D[start:end])`` is
``node(h1, node(h2, ... node(h_{k-1}, h_k)))`` over its complete subtrees ``h1 .. hk`` from left
(largest) to right (smallest), which is what :func:`fold` computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from conclave.platform.transparency.errors import MalformedInput
from conclave.platform.transparency.hashing import check_hash, node_hash


@dataclass(frozen=True, slots=True, order=True)
class Subtree:
    """The complete subtree of ``2^level`` leaves ``[index * 2^level, (index + 1) * 2^level)``.

    ``(level, index)`` is the storage key: level 0 holds the leaf hashes themselves."""

    level: int
    index: int

    @property
    def start(self) -> int:
        """The first leaf index in the subtree."""
        return self.index << self.level

    @property
    def end(self) -> int:
        """One past the last leaf index in the subtree."""
        return (self.index + 1) << self.level

    @property
    def size(self) -> int:
        """The number of leaves, ``2^level``."""
        return 1 << self.level


class SubtreeHash(NamedTuple):
    """A complete subtree and its hash: one row a writer stores."""

    subtree: Subtree
    hash: bytes


class HashSource(Protocol):
    """What answers the hashes of complete subtrees: storage's stored subtree hashes or tiles, or
    :class:`conclave.platform.transparency.memory.InMemoryHashSource`.

    One call per root or proof, with every subtree it needs, so a database answers a proof with
    one query of O(log n) keys."""

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> Sequence[bytes]:
        """The hash of each subtree, in the order asked; :class:`SubtreeNotStored` for one that
        is not (yet) complete in the tree the source holds."""
        ...


def range_subtrees(start: int, end: int) -> list[Subtree]:
    """The complete subtrees that make up the leaf range ``[start, end)``, left to right.

    For a left-balanced range (the only kind :mod:`proofs` asks for) these are the powers of two
    of ``end - start`` from the largest down, and folding their hashes gives the range's RFC 9162
    hash."""
    subtrees = []
    while start < end:
        level = (end - start).bit_length() - 1
        if start:
            # RFC 9162 ranges never start unaligned; any other range is still cut into aligned
            # complete subtrees, whose fold is then not an RFC 9162 hash.
            level = min(level, (start & -start).bit_length() - 1)
        subtrees.append(Subtree(level, start >> level))
        start += 1 << level
    return subtrees


def fold(hashes: Sequence[bytes]) -> bytes:
    """The hash of a left-balanced range from its complete subtrees' hashes, left to right."""
    if not hashes:
        raise MalformedInput("an empty range has no subtree to fold")
    result = hashes[-1]
    for left in reversed(hashes[:-1]):
        result = node_hash(left, result)
    return result


class ProofPlan(NamedTuple):
    """The stored hashes a root or proof needs, and how they fold into it.

    ``subtrees`` are read with one lookup (:meth:`HashSource.subtree_hashes`, or a storage query
    that may be asynchronous); ``groups[i]`` consecutive ones fold into the ``i``-th hash of the
    result. Planning needs no storage, so a reader can plan, fetch, then :meth:`assemble`."""

    subtrees: tuple[Subtree, ...]
    groups: tuple[int, ...]

    def assemble(self, hashes: Sequence[bytes]) -> list[bytes]:
        """The result's hashes, given the hash of each of :attr:`subtrees` in order."""
        if len(hashes) != len(self.subtrees):
            raise MalformedInput(
                f"expected {len(self.subtrees)} subtree hashes, received {len(hashes)}"
            )
        result = []
        position = 0
        for count in self.groups:
            part = [check_hash(h, "a subtree hash") for h in hashes[position : position + count]]
            result.append(fold(part))
            position += count
        return result


def plan_ranges(ranges: Sequence[tuple[int, int]]) -> ProofPlan:
    """The plan that yields the hash of each left-balanced range, in order."""
    subtrees: list[Subtree] = []
    groups = []
    for start, end in ranges:
        parts = range_subtrees(start, end)
        subtrees.extend(parts)
        groups.append(len(parts))
    return ProofPlan(tuple(subtrees), tuple(groups))
