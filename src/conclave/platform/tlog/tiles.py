"""Which complete subtrees a stored log keeps as rows, and how it answers the others.

A log stores the hash of every complete subtree at level :data:`TILE_LEVEL` and above (one row
per 2^TILE_LEVEL leaves and fewer above: about 1/8 of a row per leaf at level 4). Below it, a
subtree's hash is computed on read from the leaf hashes of ``tlog_leaves``: every such subtree
lies inside one aligned block of ``2^TILE_LEVEL`` leaves, so a root, a proof or a frontier reads
at most one short range of leaf hashes per block it touches (RFC 9162 plans touch one or two),
beside its stored keys. See docs/transparency.md, "Storage".

Rows below this level written by earlier versions stay in ``tlog_subtrees`` and are never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from conclave.platform.transparency.hashing import HASH_SIZE, node_hash
from conclave.platform.transparency.subtrees import Subtree, SubtreeHash

TILE_LEVEL = 4
"""The lowest level of ``tlog_subtrees`` rows: subtrees of 16 leaves and larger are stored."""

TILE_SIZE = 1 << TILE_LEVEL
"""Leaves per aligned block whose inner subtrees are computed from the leaf hashes."""


def is_stored(subtree: Subtree) -> bool:
    """Whether storage keeps ``subtree``'s hash as a row."""
    return subtree.level >= TILE_LEVEL


def rows_to_store(completed: Iterable[SubtreeHash]) -> list[SubtreeHash]:
    """The subtrees an integration pass completed that become ``tlog_subtrees`` rows."""
    return [row for row in completed if is_stored(row.subtree)]


@dataclass(frozen=True, slots=True)
class TiledRead:
    """What to read for a set of subtrees: stored keys, and leaf ranges (one per block)."""

    stored: tuple[Subtree, ...]
    """The subtrees read by primary key from ``tlog_subtrees``."""
    leaf_ranges: tuple[tuple[int, int], ...]
    """``[start, end)`` of the leaf hashes to read, each inside one aligned block, in order."""


def plan_read(subtrees: Iterable[Subtree]) -> TiledRead:
    """Split ``subtrees`` into stored keys and the leaf ranges the others are computed from."""
    stored: set[Subtree] = set()
    blocks: dict[int, tuple[int, int]] = {}
    for subtree in subtrees:
        if is_stored(subtree):
            stored.add(subtree)
            continue
        block = subtree.start >> TILE_LEVEL
        start, end = blocks.get(block, (subtree.start, subtree.end))
        blocks[block] = (min(start, subtree.start), max(end, subtree.end))
    return TiledRead(tuple(sorted(stored)), tuple(blocks[block] for block in sorted(blocks)))


def subtree_of_leaves(subtree: Subtree, leaf_hashes: Mapping[int, bytes]) -> bytes | None:
    """The hash of a complete subtree from its leaves' hashes (``None`` if one is missing, or
    is no hash)."""
    level: list[bytes] = []
    for index in range(subtree.start, subtree.end):
        found = leaf_hashes.get(index)
        if found is None or len(found) != HASH_SIZE:
            return None  # a hand-written leaf hash that is no hash: the subtree is not stored
        level.append(found)
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def resolve(
    subtrees: Sequence[Subtree],
    stored: Mapping[Subtree, bytes],
    leaf_hashes: Mapping[int, bytes],
) -> dict[Subtree, bytes]:
    """The hash of each of ``subtrees`` found: stored rows as read, the others computed from
    ``leaf_hashes``. A subtree whose row or leaves are missing is left out (the caller reports
    it)."""
    found: dict[Subtree, bytes] = {}
    for subtree in subtrees:
        if is_stored(subtree):
            held = stored.get(subtree)
        else:
            held = subtree_of_leaves(subtree, leaf_hashes)
        if held is not None:
            found[subtree] = held
    return found
