"""The reads of a stored log: each proof is one statement of O(log n) rows, and every hostile
index or size is a typed error of the transparency kit, never a crash or a query with it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog import BeyondIntegrated, CheckpointNotFound, TransparencyLog
from conclave.platform.transparency import (
    EMPTY_ROOT,
    Checkpoint,
    OutOfRange,
    TransparencyError,
    VerifierSet,
    leaf_hash,
    open_checkpoint,
    verify_consistency,
    verify_inclusion,
)
from conclave.platform.transparency.verify import (
    consistency_proof_length,
    inclusion_proof_length,
)
from tests.platform.transparency.stored_logs import open_test_log, recorded_statements

NOT_INTEGERS: list[Any] = [None, True, False, 1.0, 1.5, "3", b"1", [1], float("nan")]
NOT_UINT64: list[Any] = [-1, -(2**64), 2**64, 10**400]


async def built_log(engine: AsyncEngine) -> TransparencyLog:
    """A log with checkpoints of 10 and 20 leaves, and 5 more leaves sequenced."""
    log = await open_test_log(engine)
    for size in (10, 20):
        await log.append([f"leaf {i}".encode() for i in range(size - 10, size)])
        await log.integrate()
    await log.append([b"not yet integrated"] * 5)
    return log


async def test_reads_answer_what_a_reader_verifies(log_engine: AsyncEngine) -> None:
    log = await built_log(log_engine)
    verifiers = VerifierSet(log.keys.verifiers)
    at_10 = open_checkpoint(await log.checkpoint(10), verifiers, origin=log.origin).checkpoint
    at_20 = open_checkpoint(await log.latest_checkpoint(), verifiers, origin=log.origin).checkpoint
    empty = open_checkpoint(await log.checkpoint(0), verifiers, origin=log.origin).checkpoint
    assert (at_10.size, at_20.size, empty) == (10, 20, Checkpoint(log.origin, 0, EMPTY_ROOT))

    leaf = await log.leaf(13)
    assert (leaf.index, leaf.data, leaf.leaf_hash) == (13, b"leaf 13", leaf_hash(b"leaf 13"))
    for size, root in ((10, at_10.root_hash), (20, at_20.root_hash)):
        for index in range(size):
            proof = await log.inclusion_proof(index, size)
            verify_inclusion((await log.leaf(index)).leaf_hash, index, size, proof, root)
    verify_consistency(
        10, 20, at_10.root_hash, at_20.root_hash, await log.consistency_proof(10, 20)
    )
    assert await log.consistency_proof(20, 20) == []
    assert await log.inclusion_proof(0, 1) == []


async def test_each_proof_is_one_statement(log_engine: AsyncEngine) -> None:
    log = await built_log(log_engine)
    await log.state()  # what the log knows of its integrated size, as after any earlier read
    with recorded_statements(log_engine) as statements:
        inclusion = await log.inclusion_proof(5, 19)
        consistency = await log.consistency_proof(7, 20)
    assert len(statements) == 2
    # Below TILE_LEVEL (all of a 20-leaf tree but one subtree) the hashes come from the leaves.
    assert all("tlog_leaves" in statement for statement in statements)
    assert len(inclusion) == inclusion_proof_length(5, 19)
    assert len(consistency) == consistency_proof_length(7, 20)


async def test_hostile_indices_and_sizes_are_typed_errors(log_engine: AsyncEngine) -> None:
    log = await built_log(log_engine)
    reads = {
        "checkpoint": lambda v: log.checkpoint(v),
        "leaf": lambda v: log.leaf(v),
        "inclusion index": lambda v: log.inclusion_proof(v, 20),
        "inclusion size": lambda v: log.inclusion_proof(0, v),
        "consistency old": lambda v: log.consistency_proof(v, 20),
        "consistency new": lambda v: log.consistency_proof(1, v),
    }
    for name, read in reads.items():
        for value in [*NOT_INTEGERS, *NOT_UINT64]:
            with pytest.raises(OutOfRange):
                await read(value)
        # A uint64 beyond what the log integrated (the last one a BIGINT cannot even hold).
        for value in (21, 25, 2**63, 2**64 - 1):
            with pytest.raises(TransparencyError) as raised:
                await read(value)
            assert isinstance(raised.value, BeyondIntegrated | OutOfRange), name

    with pytest.raises(BeyondIntegrated):
        await log.leaf(20)  # sequenced, not yet in a checkpoint
    with pytest.raises(BeyondIntegrated):
        await log.checkpoint(25)
    with pytest.raises(CheckpointNotFound):
        await log.checkpoint(15)  # never signed at that size
    for index, size in ((0, 0), (20, 20), (19, 10)):
        with pytest.raises(OutOfRange):
            await log.inclusion_proof(index, size)
    for old, new in ((0, 0), (0, 20), (20, 10), (21, 21)):
        with pytest.raises(OutOfRange):
            await log.consistency_proof(old, new)


async def test_an_empty_log_answers_its_empty_checkpoint_and_nothing_else(
    log_engine: AsyncEngine,
) -> None:
    log = await open_test_log(log_engine)
    note = await log.latest_checkpoint()
    assert note == await log.checkpoint(0)
    assert open_checkpoint(note, VerifierSet(log.keys.verifiers)).checkpoint.size == 0
    with pytest.raises(BeyondIntegrated):
        await log.leaf(0)
    with pytest.raises(BeyondIntegrated):
        await log.inclusion_proof(0, 1)
    with pytest.raises(OutOfRange):
        await log.consistency_proof(0, 0)
