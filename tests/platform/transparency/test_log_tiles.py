"""A stored log keeps subtree rows from TILE_LEVEL up only (cheaper appends); every hash below is
computed from the leaf hashes on read, and roots, proofs, frontiers and receipts stay exactly the
in-memory reference's and the published vectors'. One copy of each leaf hash below TILE_LEVEL is
still enough for the audit and for readers to catch a leaf hash edited in the last, partial
block; rows below TILE_LEVEL that earlier versions wrote are never read."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog import FindingKind, LogCorrupted, TransparencyLog, audit_log
from conclave.platform.tlog.tiles import TILE_LEVEL
from conclave.platform.transparency import (
    InMemoryHashSource,
    RootMismatch,
    SubtreeNotStored,
    VerifierSet,
    consistency_proof,
    inclusion_proof,
    open_checkpoint,
    tree_root,
    verify_inclusion,
    verify_receipt,
)
from tests.platform.transparency.stored_logs import open_test_log
from tests.platform.transparency.test_log_tamper import INTEGRATED, built_log, tamper
from tests.platform.transparency.test_rfc9162_vectors import (
    CONSISTENCY_PROOFS,
    INCLUSION_PROOFS,
    LEAF_INPUTS,
    ROOTS,
)

SIZE = 70  # four complete blocks of 16 leaves and a partial one, levels 0 to 6


async def stored_subtree_keys(engine: AsyncEngine) -> list[tuple[int, int]]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT level, subtree_index FROM tlog_subtrees ORDER BY level, subtree_index")
        )
        return [(row.level, row.subtree_index) for row in rows]


async def grow_one_leaf_at_a_time(
    engine: AsyncEngine, entries: list[bytes], reference: InMemoryHashSource
) -> TransparencyLog:
    """Append and integrate ``entries`` one by one, every other pass by a second log object
    (another process: it reads the frontier from the store, partial blocks included); each
    checkpoint's root is the reference's."""
    log = await open_test_log(engine)
    other = await open_test_log(engine, log.keys)
    for size, entry in enumerate(entries, start=1):
        await log.append([entry])
        result = await (other if size % 2 else log).integrate()
        assert result.checkpoint is not None
        assert (result.checkpoint.size, result.checkpoint.root_hash) == (
            size,
            tree_root(reference, size),
        )
    return log


async def test_no_subtree_below_the_tile_level_is_stored_and_every_answer_is_the_reference(
    log_engine: AsyncEngine,
) -> None:
    entries = [f"leaf {i}".encode() for i in range(SIZE)]
    reference = InMemoryHashSource.of_entries(entries)
    log = await grow_one_leaf_at_a_time(log_engine, entries, reference)

    # Exactly the complete subtrees of 16 leaves and more: 4 + 2 + 1 rows for 70 leaves.
    assert await stored_subtree_keys(log_engine) == [
        (level, index)
        for level in range(TILE_LEVEL, SIZE.bit_length())
        for index in range(SIZE >> level)
    ]
    for size in range(1, SIZE + 1):
        for index in range(size):
            assert await log.inclusion_proof(index, size) == inclusion_proof(reference, index, size)
        for old in range(1, size + 1):
            assert await log.consistency_proof(old, size) == consistency_proof(reference, old, size)
    verifiers = VerifierSet(log.keys.verifiers)
    for index, entry in enumerate(entries):
        verify_receipt(await log.receipt(index), verifiers, entry)
    assert (await audit_log(log_engine, log.name, verifiers, slice_size=7)).ok


async def test_the_stored_log_serves_the_published_vectors(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)
    for size, entry in enumerate(LEAF_INPUTS, start=1):
        await log.append([entry])
        result = await log.integrate()
        assert result.checkpoint is not None and result.checkpoint.root_hash == ROOTS[size]
    for index, size, proof in INCLUSION_PROOFS:
        assert [h.hex() for h in await log.inclusion_proof(index, size)] == proof
    for old, new, proof in CONSISTENCY_PROOFS:
        assert [h.hex() for h in await log.consistency_proof(old, new)] == proof
    assert await stored_subtree_keys(log_engine) == []  # 8 leaves: not one block of 16


async def test_rows_below_the_tile_level_from_earlier_versions_are_never_read(
    log_engine: AsyncEngine,
) -> None:
    entries = [f"leaf {i}".encode() for i in range(40)]
    reference = InMemoryHashSource.of_entries(entries)
    log = await open_test_log(log_engine)
    await log.append(entries)
    await log.integrate()
    # What an earlier version stored below TILE_LEVEL, here forged: inside the tree, and beyond.
    async with log_engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO tlog_subtrees (log_id, level, subtree_index, hash) "
                "SELECT log_id, l, i, :x FROM tlog_logs, "
                "(SELECT 0 AS l, 5 AS i UNION ALL SELECT 1, 17 UNION ALL SELECT 3, 4 "
                "UNION ALL SELECT 0, 1000) AS legacy"
            ),
            {"x": b"\x05" * 32},
        )
    fresh = await open_test_log(log_engine, log.keys)  # its frontier read from the store
    for index in range(40):
        assert await fresh.inclusion_proof(index, 40) == inclusion_proof(reference, index, 40)
    await fresh.append([b"leaf 40"])
    result = await fresh.integrate()
    assert result.checkpoint is not None
    assert (
        result.checkpoint.root_hash
        == InMemoryHashSource.of_entries([*entries, b"leaf 40"]).frontier.root()
    )
    assert (await audit_log(log_engine, log.name, VerifierSet(log.keys.verifiers))).ok


async def test_a_leaf_hash_edited_in_the_partial_block_is_caught(
    postgres_engine: AsyncEngine,
) -> None:
    log = await built_log(postgres_engine)  # 40 integrated leaves: [32, 40) has no stored hash
    await tamper(
        postgres_engine, "UPDATE tlog_leaves SET leaf_hash = :x WHERE leaf_index = 35", x=b"#" * 32
    )
    verifiers = VerifierSet(log.keys.verifiers)
    audit = await audit_log(postgres_engine, log.name, verifiers, slice_size=16)
    assert [(f.kind, f.position) for f in audit.findings] == [(FindingKind.LEAF_HASH_ALTERED, 35)]

    # The leaf's own receipt is refused by the log; a neighbour's proof carries the edited hash
    # and is refused by the reader.
    with pytest.raises(LogCorrupted, match="leaf 35"):
        await log.receipt(35)
    with pytest.raises(RootMismatch):
        verify_receipt(await log.receipt(34), verifiers, b"leaf 34")
    checkpoint = open_checkpoint(await log.latest_checkpoint(), verifiers).checkpoint
    with pytest.raises(RootMismatch):
        verify_inclusion(
            (await log.leaf(32)).leaf_hash,
            32,
            INTEGRATED,
            await log.inclusion_proof(32, INTEGRATED),
            checkpoint.root_hash,
        )
    # An integrator that reads its frontier from the store signs nothing over it.
    fresh = await open_test_log(postgres_engine, log.keys)
    with pytest.raises(LogCorrupted, match="does not make its root"):
        await fresh.integrate()


async def test_leaf_data_edited_in_the_partial_block_is_caught(
    postgres_engine: AsyncEngine,
) -> None:
    log = await built_log(postgres_engine)
    await tamper(postgres_engine, "UPDATE tlog_leaves SET data = :x WHERE leaf_index = 38", x=b"!")
    audit = await audit_log(postgres_engine, log.name, VerifierSet(log.keys.verifiers))
    assert [(f.kind, f.position) for f in audit.findings] == [
        (FindingKind.LEAF_DATA_ALTERED, 38),
        (FindingKind.ROOT_MISMATCH, INTEGRATED),
    ]
    with pytest.raises(LogCorrupted, match="leaf 38"):
        await log.receipt(38)


async def test_a_leaf_hash_edited_in_a_complete_block_is_caught(
    postgres_engine: AsyncEngine,
) -> None:
    log = await built_log(postgres_engine)
    await tamper(
        postgres_engine, "UPDATE tlog_leaves SET leaf_hash = :x WHERE leaf_index = 20", x=b"#" * 32
    )
    audit = await audit_log(postgres_engine, log.name, VerifierSet(log.keys.verifiers))
    assert [(f.kind, f.position) for f in audit.findings] == [(FindingKind.LEAF_HASH_ALTERED, 20)]


async def test_a_leaf_hash_that_is_no_hash_is_a_finding_not_a_crash(
    postgres_engine: AsyncEngine,
) -> None:
    log = await built_log(postgres_engine)
    await tamper(
        postgres_engine,
        "UPDATE tlog_leaves SET leaf_hash = :x WHERE leaf_index IN (20, 35)",
        x=b"short",
    )
    audit = await audit_log(postgres_engine, log.name, VerifierSet(log.keys.verifiers))
    assert [(f.kind, f.position) for f in audit.findings] == [
        (FindingKind.LEAF_HASH_ALTERED, 20),
        (FindingKind.LEAF_HASH_ALTERED, 35),
    ]
    # A proof through it is refused by the log, as for a hash it does not hold.
    with pytest.raises(SubtreeNotStored):
        await log.inclusion_proof(34, INTEGRATED)
