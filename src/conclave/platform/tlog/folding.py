"""What an integration pass computes before it writes: the leaf hashes it folds, the leaves folded
into the tree, and the checkpoint signed by every signing key of the log."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncConnection

from conclave.platform.tlog import store
from conclave.platform.tlog.errors import LogCorrupted
from conclave.platform.tlog.keys import LogKeys
from conclave.platform.tlog.queue import Sequenced
from conclave.platform.tlog.records import LogState
from conclave.platform.transparency.checkpoint import Checkpoint, sign_checkpoint
from conclave.platform.transparency.errors import TransparencyError
from conclave.platform.transparency.frontier import AppendedBatch, AppendFrontier
from conclave.platform.transparency.records import NoteSignature
from conclave.platform.transparency.subtrees import SubtreeHash

_FOLD_SLICE = 2048


async def hashes_to_fold(
    connection: AsyncConnection,
    name: str,
    state: LogState,
    taken: Sequenced,
    max_per_checkpoint: int,
) -> list[bytes]:
    """The leaf hashes a pass folds, in index order: the leaves sequenced before it, then those
    it just took from the queue (known already, unless a direct append allocated indices between
    them: then all are read). :class:`LogCorrupted` if the store misses one."""
    start = state.integrated_size
    sequenced = state.sequenced_size - start
    count = min(sequenced + len(taken.hashes), max_per_checkpoint)
    follows = taken.first == start + sequenced and sequenced + len(taken.hashes) == count
    known = taken.hashes if follows else []
    read = count - len(known)
    rows = await store.leaf_hashes(connection, state.log_id, start, start + read)
    if [index for index, _ in rows] != list(range(start, start + read)):
        raise LogCorrupted(
            f"the log {name!r} misses leaves in [{start}, {start + read}) below its sequenced size"
        )
    return [hashed for _, hashed in rows] + known


async def fold(
    frontier: AppendFrontier, leaf_hashes: list[bytes], lowest_kept: int = 0
) -> AppendedBatch:
    """``frontier.append(leaf_hashes, lowest_kept=...)``, letting the event loop run between
    slices: a pass of 65,536 leaves is about 130,000 SHA-256, too long to hold the loop in one
    go."""
    stored: list[SubtreeHash] = []
    batch = frontier.append(())
    for start in range(0, len(leaf_hashes), _FOLD_SLICE):
        batch = batch.frontier.append(
            leaf_hashes[start : start + _FOLD_SLICE], lowest_kept=lowest_kept
        )
        stored += batch.stored
        await asyncio.sleep(0)
    return AppendedBatch(batch.frontier, frontier.size, stored, batch.root)


def sign(checkpoint: Checkpoint, keys: LogKeys) -> str:
    """The checkpoint's signed note, signed by every signing key of the log (two during a key
    rotation's change-over)."""
    first, *others = keys.signers
    message = checkpoint.text().encode("utf-8")
    also = [NoteSignature(key.name, key.key_id, key.sign(message)) for key in others]
    return sign_checkpoint(checkpoint, first, keep=also).decode("utf-8")


def signed_size(name: str, note: str) -> int:
    """The tree size a stored checkpoint note states; :class:`LogCorrupted` for a note that is no
    checkpoint (a row edited by hand)."""
    try:
        return Checkpoint.parse(note[: note.index("\n\n") + 1]).size
    except (ValueError, TransparencyError) as error:
        raise LogCorrupted(f"the latest checkpoint of {name!r} is unreadable: {error}") from None
