"""Tampering with a stored log directly in PostgreSQL — editing, deleting, inserting or swapping
leaves, editing a subtree or a checkpoint — is found by the audit, which says exactly what is
wrong; a forked history (two signed checkpoints of one size, or a new one that does not extend an
old one) is refused by the check every reader makes."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog import (
    FindingKind,
    IntegrationOutcome,
    LogCorrupted,
    LogIntegrator,
    TransparencyLog,
    audit_log,
)
from conclave.platform.transparency import (
    RootMismatch,
    VerifierSet,
    open_checkpoint,
    verify_extension,
    verify_inclusion,
)
from tests.conftest import eventually
from tests.platform.transparency.stored_logs import open_test_log, test_keys

INTEGRATED, SEQUENCED = 40, 43


async def built_log(engine: AsyncEngine) -> TransparencyLog:
    """A log of 43 leaves, 40 of them integrated by checkpoints of 10, 25 and 40 leaves."""
    log = await open_test_log(engine)
    for size in (10, 25, 40):
        state = await log.state()
        await log.append([f"leaf {i}".encode() for i in range(state.sequenced_size, size)])
        assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED
    await log.append([f"leaf {i}".encode() for i in range(INTEGRATED, SEQUENCED)])
    return log


async def tamper(engine: AsyncEngine, *statements: str, **values: Any) -> None:
    """Run ``statements`` as someone with direct access to the database would: the append-only
    triggers switched off for the transaction (``session_replication_role``, superuser)."""
    async with engine.begin() as connection:
        await connection.execute(text("SET LOCAL session_replication_role = replica"))
        for statement in statements:
            await connection.execute(text(statement), values)


async def findings(engine: AsyncEngine, log: TransparencyLog) -> list[tuple[FindingKind, Any]]:
    audit = await audit_log(engine, log.name, VerifierSet(log.keys.verifiers), slice_size=16)
    return [(finding.kind, finding.position) for finding in audit.findings]


ROOT = (FindingKind.ROOT_MISMATCH, INTEGRATED)


async def test_an_intact_log_passes_the_audit(log_engine: AsyncEngine) -> None:
    log = await built_log(log_engine)
    audit = await audit_log(log_engine, log.name, VerifierSet(log.keys.verifiers), slice_size=7)
    assert audit.ok, audit.findings
    assert audit.checkpoint is not None and audit.checkpoint.size == INTEGRATED
    assert audit.sequenced_size == SEQUENCED


async def test_the_store_refuses_to_change_appended_rows(log_engine: AsyncEngine) -> None:
    await built_log(log_engine)
    for statement in (
        "UPDATE tlog_leaves SET data = :x WHERE leaf_index = 3",
        "DELETE FROM tlog_leaves WHERE leaf_index = 3",
        "UPDATE tlog_subtrees SET hash = :x WHERE level = 4 AND subtree_index = 0",
        "DELETE FROM tlog_subtrees",
        "UPDATE tlog_checkpoints SET note = 'x' WHERE tree_size = 10",
        "DELETE FROM tlog_checkpoints WHERE tree_size = 40",
    ):
        with pytest.raises(DBAPIError, match="append-only"):
            async with log_engine.begin() as connection:
                await connection.execute(text(statement), {"x": b"forged"})
    if log_engine.dialect.name == "postgresql":
        with pytest.raises(DBAPIError, match="append-only"):
            async with log_engine.begin() as connection:
                await connection.execute(text("TRUNCATE tlog_leaves"))


async def test_an_edited_leaf_is_found(postgres_engine: AsyncEngine) -> None:
    log = await built_log(postgres_engine)
    await tamper(postgres_engine, "UPDATE tlog_leaves SET data = :x WHERE leaf_index = 7", x=b"!")
    assert await findings(postgres_engine, log) == [(FindingKind.LEAF_DATA_ALTERED, 7), ROOT]


async def test_an_edited_leaf_hash_is_found(postgres_engine: AsyncEngine) -> None:
    log = await built_log(postgres_engine)
    await tamper(
        postgres_engine, "UPDATE tlog_leaves SET leaf_hash = :x WHERE leaf_index = 41", x=b"#" * 32
    )
    assert await findings(postgres_engine, log) == [(FindingKind.LEAF_HASH_ALTERED, 41)]


async def test_a_deleted_leaf_is_found(postgres_engine: AsyncEngine) -> None:
    log = await built_log(postgres_engine)
    await tamper(postgres_engine, "DELETE FROM tlog_leaves WHERE leaf_index = 12")
    assert await findings(postgres_engine, log) == [(FindingKind.MISSING_LEAF, 12), ROOT]


async def test_an_inserted_leaf_is_found(postgres_engine: AsyncEngine) -> None:
    log = await built_log(postgres_engine)
    # At the end, where the next append would go: a leaf the sequencer never gave out.
    await tamper(
        postgres_engine,
        "INSERT INTO tlog_leaves SELECT log_id, 43, :h, :x FROM tlog_logs",
        h=b"\0" * 32,
        x=b"slipped in",
    )
    assert await findings(postgres_engine, log) == [(FindingKind.UNEXPECTED_LEAF, 43)]


async def test_a_leaf_inserted_in_the_middle_is_found(postgres_engine: AsyncEngine) -> None:
    # Moved with their leaf hashes, the leaves from 30 on no longer make their blocks: [16, 32),
    # whose stored hash its stored parent vouches for, and the last, partial block [32, 40), which
    # the checkpoint's root covers (one copy of each leaf hash cannot say which leaf moved).
    log = await built_log(postgres_engine)
    # The leaves from 30 on move up one place (with their hashes), a new one takes index 30.
    await tamper(
        postgres_engine,
        "UPDATE tlog_leaves SET leaf_index = leaf_index + 1000 WHERE leaf_index >= 30",
        "UPDATE tlog_leaves SET leaf_index = leaf_index - 999 WHERE leaf_index >= 1000",
        "INSERT INTO tlog_leaves "
        "SELECT log_id, 30, sha256('\\x00'::bytea || :x), :x FROM tlog_logs",
        x=b"slipped in",
    )
    assert await findings(postgres_engine, log) == [
        (FindingKind.BLOCK_ALTERED, 16),
        (FindingKind.BLOCK_ALTERED, 32),
        (FindingKind.UNEXPECTED_LEAF, SEQUENCED),
        ROOT,
    ]


async def test_two_swapped_leaves_are_found(postgres_engine: AsyncEngine) -> None:
    log = await built_log(postgres_engine)
    await tamper(
        postgres_engine,
        "UPDATE tlog_leaves SET leaf_index = -1 WHERE leaf_index = 3",
        "UPDATE tlog_leaves SET leaf_index = 3 WHERE leaf_index = 21",
        "UPDATE tlog_leaves SET leaf_index = 21 WHERE leaf_index = -1",
    )
    # Each moved with its leaf hash: its block no longer makes its stored hash, for which the
    # hashes above vouch (the tree goes on from that hash, so nothing else is blamed).
    assert await findings(postgres_engine, log) == [
        (FindingKind.BLOCK_ALTERED, 0),
        (FindingKind.BLOCK_ALTERED, 16),
        ROOT,
    ]


async def test_an_edited_subtree_is_found_and_breaks_the_proofs_through_it(
    postgres_engine: AsyncEngine,
) -> None:
    log = await built_log(postgres_engine)
    await tamper(
        postgres_engine,
        "UPDATE tlog_subtrees SET hash = :x WHERE level = 4 AND subtree_index = 1",
        x=b"\x01" * 32,
    )
    audit = await audit_log(postgres_engine, log.name, VerifierSet(log.keys.verifiers))
    assert [(f.kind, f.detail) for f in audit.findings] == [
        (FindingKind.SUBTREE_ALTERED, "Subtree(level=4, index=1) changed")
    ]
    # A reader proving leaf 0 gets the forged hash in its path, and refuses the proof.
    checkpoint = audit.checkpoint
    assert checkpoint is not None
    leaf = await log.leaf(0)
    with pytest.raises(RootMismatch):
        verify_inclusion(
            leaf.leaf_hash,
            0,
            checkpoint.size,
            await log.inclusion_proof(0, checkpoint.size),
            checkpoint.root_hash,
        )


async def test_an_edited_checkpoint_is_found(postgres_engine: AsyncEngine) -> None:
    log = await built_log(postgres_engine)
    await tamper(
        postgres_engine,
        "UPDATE tlog_checkpoints SET root_hash = :x WHERE tree_size = 25",
        "UPDATE tlog_checkpoints SET note = replace(note, '\n\n', '\nextension\n\n') "
        "WHERE tree_size = 10",
        x=b"\x02" * 32,
    )
    assert await findings(postgres_engine, log) == [
        (FindingKind.CHECKPOINT_INVALID, 10),
        (FindingKind.CHECKPOINT_INVALID, 25),
    ]


async def test_the_integrator_signs_nothing_over_a_missing_leaf(
    postgres_engine: AsyncEngine,
) -> None:
    log = await built_log(postgres_engine)
    await tamper(postgres_engine, "DELETE FROM tlog_leaves WHERE leaf_index = 41")
    with pytest.raises(LogCorrupted, match="misses leaves"):
        await log.integrate()
    # The loop logs the failure and tries again later, signing nothing meanwhile.
    integrator = LogIntegrator([log], poll_seconds=60, retry_seconds=0.05)
    await integrator.start()
    try:

        async def failed_twice() -> bool:
            return integrator.failures >= 2

        await eventually(failed_twice)
    finally:
        await integrator.stop()
    assert integrator.checkpoints == 0
    await tamper(
        postgres_engine,
        "UPDATE tlog_subtrees SET hash = :x WHERE level = 5 AND subtree_index = 0",
        x=b"\x03" * 32,
    )
    fresh = await open_test_log(postgres_engine, log.keys)  # reads the frontier from the store
    with pytest.raises(LogCorrupted, match="does not make its root"):
        await fresh.integrate()
    assert (await log.state()).integrated_size == INTEGRATED


async def test_a_forked_history_is_refused_by_readers(
    sqlite_engine: AsyncEngine, postgres_engine: AsyncEngine
) -> None:
    # One key, two stores: the log shows one history here and another there.
    keys = test_keys()
    honest = await open_test_log(sqlite_engine, keys)
    forked = await open_test_log(postgres_engine, keys)
    verifiers = VerifierSet(keys.verifiers)

    async def grow(log: TransparencyLog, entries: list[bytes]) -> Any:
        await log.append(entries)
        result = await log.integrate()
        return open_checkpoint(result.note or "", verifiers, origin=keys.origin).checkpoint

    common = [f"leaf {i}".encode() for i in range(5)]
    honest_5, forked_5 = await grow(honest, common), await grow(forked, common)
    honest_8 = await grow(honest, [b"5", b"6", b"7"])
    forked_8 = await grow(forked, [b"five", b"six", b"seven"])
    forked_12 = await grow(forked, [b"8", b"9", b"10", b"11"])

    # Up to the fork, both are one history.
    assert honest_5 == forked_5
    verify_extension(honest_5, forked_12, await forked.consistency_proof(5, 12))
    # Two signed checkpoints of one size with different roots.
    with pytest.raises(RootMismatch):
        verify_extension(honest_8, forked_8, [])
    # A newer checkpoint that does not extend the one a reader holds.
    with pytest.raises(RootMismatch):
        verify_extension(honest_8, forked_12, await forked.consistency_proof(8, 12))
