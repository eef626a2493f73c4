"""Which leaf hashes the tree holds, block by block, for the audit (:mod:`.audit`).

Below ``TILE_LEVEL`` a log keeps one copy of each leaf hash, beside its data in ``tlog_leaves``
(:mod:`.tiles`). Where the two disagree, or where a block's leaves no longer make the hash stored
for it, the audit asks what the tree holds in that block of ``2^TILE_LEVEL`` leaves:

- the stored leaf hashes, when they make the block's stored subtree hash (then a leaf whose data
  hashes otherwise had its data changed);
- the data's leaf hashes, when those make it instead (then the stored leaf hash was changed);
- the block's stored subtree hash alone, when neither makes it but the stored hashes above it
  vouch for it (they make its stored ancestors, or prove it in the signed checkpoint): the leaves
  were moved, inserted or rewritten together with their hashes, and which of them cannot be told
  from one copy;
- in the last, partial block (no stored hash yet), the same question is asked of the trusted
  checkpoint's root.

Otherwise (nothing vouches for the block's stored hash) the stored leaf hashes are taken, and
the stored subtree hash is what the audit reports as altered.
"""

from __future__ import annotations

from enum import Enum

from sqlalchemy.ext.asyncio import AsyncConnection

from conclave.platform.tlog import store
from conclave.platform.tlog.tiles import TILE_LEVEL, TILE_SIZE, subtree_of_leaves
from conclave.platform.transparency.errors import TransparencyError
from conclave.platform.transparency.frontier import AppendFrontier
from conclave.platform.transparency.hashing import HASH_SIZE, node_hash
from conclave.platform.transparency.proofs import inclusion_plan
from conclave.platform.transparency.subtrees import ProofPlan, Subtree
from conclave.platform.transparency.verify import verify_inclusion

Hashes = tuple[bytes, bytes]
"""A stored leaf as the audit keeps it: its data's leaf hash, and the leaf hash stored beside."""


class BlockHolds(Enum):
    """What the tree holds in one block of ``2^TILE_LEVEL`` leaves."""

    STORED = "the stored leaf hashes"
    DATA = "the data's leaf hashes"
    TILE = "the block's stored subtree hash, which its leaves do not make"
    UNKNOWN = "nothing its leaves make"


def block_hash(leaf_hashes: list[bytes]) -> bytes | None:
    """The hash of a complete block from its leaf hashes (``None`` if one is no hash)."""
    return subtree_of_leaves(Subtree(TILE_LEVEL, 0), dict(enumerate(leaf_hashes)))


def block_rows(rows: dict[int, Hashes], first: int, end: int) -> list[Hashes] | None:
    """The leaves ``[first, end)`` of a block, or ``None`` if one is missing."""
    found = [rows.get(index) for index in range(first, end)]
    return None if any(hashes is None for hashes in found) else [h for h in found if h is not None]


async def complete_blocks(
    connection: AsyncConnection,
    log_id: int,
    span: tuple[int, int],
    rows: dict[int, Hashes],
    tree: dict[Subtree, bytes],
    checkpoint: tuple[int, bytes] | None,
) -> dict[int, BlockHolds]:
    """What the tree holds in each complete block of the slice ``span`` whose leaves are all
    there (a block missing a leaf goes on from its stored hash: :meth:`.audit._Audit._resume`).
    ``checkpoint``: the trusted ``(size, root)``, if there is one; ``span`` ends at most at the
    size walked."""
    start, end = span
    holds = {}
    for block in range(start >> TILE_LEVEL, end >> TILE_LEVEL):
        first = block << TILE_LEVEL
        found = block_rows(rows, first, first + TILE_SIZE)
        tile = tree.get(Subtree(TILE_LEVEL, block))
        if found is None or tile is None:
            holds[block] = BlockHolds.STORED  # the missing leaf or row is reported as such
        elif block_hash([stored for _, stored in found]) == tile:
            holds[block] = BlockHolds.STORED
        elif block_hash([computed for computed, _ in found]) == tile:
            holds[block] = BlockHolds.DATA
        elif checkpoint is None:
            holds[block] = BlockHolds.STORED
        elif await _vouched_for(connection, log_id, block, tile, checkpoint):
            holds[block] = BlockHolds.TILE
        else:
            holds[block] = BlockHolds.STORED
    return holds


def last_block(
    base: AppendFrontier | None, found: list[Hashes] | None, root: bytes | None
) -> BlockHolds:
    """What the tree holds in the last, partial block, whose leaves ``found`` follow the tree
    ``base``: the hashes that make the trusted checkpoint's ``root``."""
    if base is None or found is None or root is None:
        return BlockHolds.STORED
    stored = [stored for _, stored in found]
    if all(len(h) == HASH_SIZE for h in stored) and base.append(stored).root == root:
        return BlockHolds.STORED
    if base.append([computed for computed, _ in found]).root == root:
        return BlockHolds.DATA
    return BlockHolds.UNKNOWN


async def _vouched_for(
    connection: AsyncConnection,
    log_id: int,
    block: int,
    tile: bytes,
    checkpoint: tuple[int, bytes],
) -> bool:
    """Whether the stored hashes above ``block`` vouch for its stored ``tile`` hash: each stored
    complete ancestor is what it and its stored neighbours make, or else its inclusion proof in
    the trusted checkpoint (without the part inside the block) verifies. The first does not
    depend on the last, partial block, whose leaves may be what was changed."""
    return await _ancestors_agree(connection, log_id, block, tile, checkpoint[0]) or (
        await _proven(connection, log_id, block, tile, checkpoint)
    )


async def _ancestors_agree(
    connection: AsyncConnection, log_id: int, block: int, tile: bytes, size: int
) -> bool:
    """Whether ``tile`` and the stored neighbours on its way up make every stored complete
    ancestor of ``block`` (at least one) in the tree of ``size`` leaves."""
    steps = []
    subtree = Subtree(TILE_LEVEL, block)
    while (parent := Subtree(subtree.level + 1, subtree.index >> 1)).end <= size:
        steps.append((Subtree(subtree.level, subtree.index ^ 1), parent))
        subtree = parent
    if not steps:
        return False
    try:
        found = await store.subtree_hashes(connection, log_id, [s for step in steps for s in step])
    except TransparencyError:  # a stored hash that is no hash (LogCorrupted) vouches for nothing
        return False
    made, subtree = tile, Subtree(TILE_LEVEL, block)
    for neighbour, parent in steps:
        other = found.get(neighbour)
        if other is None:
            return False
        made = node_hash(made, other) if subtree.index % 2 == 0 else node_hash(other, made)
        if found.get(parent) != made:
            return False
        subtree = parent
    return True


async def _proven(
    connection: AsyncConnection,
    log_id: int,
    block: int,
    tile: bytes,
    checkpoint: tuple[int, bytes],
) -> bool:
    """Whether the stored hashes above ``block`` prove its stored ``tile`` hash in the trusted
    checkpoint: its inclusion proof without the part inside the block, read and verified."""
    size, root = checkpoint
    plan = inclusion_plan(block << TILE_LEVEL, size)
    # Bottom-up, the first TILE_LEVEL hashes of the path are the block's own subtrees.
    inside = sum(plan.groups[:TILE_LEVEL])
    above = ProofPlan(plan.subtrees[inside:], plan.groups[TILE_LEVEL:])
    try:
        found = await store.subtree_hashes(connection, log_id, above.subtrees)
        if any(subtree not in found for subtree in above.subtrees):
            return False
        path = above.assemble([found[subtree] for subtree in above.subtrees])
        # Above TILE_LEVEL a tree is the tree whose leaves are its blocks' hashes.
        verify_inclusion(tile, block, (size + TILE_SIZE - 1) >> TILE_LEVEL, path, root)
    except TransparencyError:
        return False
    return True
