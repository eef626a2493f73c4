"""Helpers of the transparency tests: trees to prove against and an RFC 9162 reference.

:func:`reference_root`, :func:`reference_path` and :func:`reference_proof` are RFC 9162 section
2.1's recursive definitions (MTH, PATH, PROOF/SUBPROOF) written out line for line over a list of
leaf entries: slow, obviously the RFC's text, and sharing no code with the stored-subtree
implementation they check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta

from hypothesis import HealthCheck, settings

from conclave.platform.transparency.hashing import leaf_hash, node_hash
from conclave.platform.transparency.memory import InMemoryHashSource
from conclave.platform.transparency.subtrees import Subtree

# The same examples on every run (as tests/hostile does): CI is reproducible, a failure
# reproduces locally.
PROPERTIES = settings(
    max_examples=200,
    deadline=timedelta(seconds=5),
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def entries(count: int, salt: bytes = b"") -> list[bytes]:
    """``count`` distinct leaf entries."""
    return [salt + index.to_bytes(8, "big") for index in range(count)]


def tree_of(count: int, salt: bytes = b"") -> InMemoryHashSource:
    """An in-memory tree of ``count`` distinct leaves."""
    return InMemoryHashSource.of_entries(entries(count, salt))


def _k(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def reference_root(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n])."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = _k(len(leaves))
    left, right = reference_root(leaves[:k]), reference_root(leaves[k:])
    return hashlib.sha256(b"\x01" + left + right).digest()


def reference_path(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n])."""
    n = len(leaves)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*reference_path(m, leaves[:k]), reference_root(leaves[k:])]
    return [*reference_path(m - k, leaves[k:]), reference_root(leaves[:k])]


def reference_proof(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) = SUBPROOF(m, D[n], true)."""
    return _subproof(m, leaves, True)


def _subproof(m: int, leaves: Sequence[bytes], b: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if b else [reference_root(leaves)]
    k = _k(n)
    if m <= k:
        return [*_subproof(m, leaves[:k], b), reference_root(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), reference_root(leaves[:k])]


def reference_path_sides(m: int, n: int) -> list[bool]:
    """For each hash of PATH(m, D[n]), whether its subtree lies left of the leaf: the shape of
    the fold, which is all a verifier learns from the index and the tree size."""
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*reference_path_sides(m, k), False]
    return [*reference_path_sides(m - k, n - k), True]


def reference_proof_sides(m: int, n: int, b: bool = True) -> list[bool | None]:
    """The same for PROOF(m, D[n]); ``None`` marks the old tree's own last subtree."""
    if m == n:
        return [] if b else [None]
    k = _k(n)
    if m <= k:
        return [*reference_proof_sides(m, k, b), False]
    return [*reference_proof_sides(m - k, n - k, False), True]


class SameLeafSource:
    """A real RFC 9162 tree of up to 2^64 - 1 identical leaves, answered in O(1) per subtree:
    every subtree of a level has the same hash. Proofs at sizes no memory could hold."""

    def __init__(self, entry: bytes = b"same") -> None:
        self.levels = [leaf_hash(entry)]
        for _ in range(64):
            self.levels.append(node_hash(self.levels[-1], self.levels[-1]))
        self.lookups = 0

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> list[bytes]:
        self.lookups += len(subtrees)
        return [self.levels[subtree.level] for subtree in subtrees]
