"""Attack on the tiled transparency log (subtree rows from TILE_LEVEL up, the lower hashes read
from the leaves) as a database administrator who edits, inserts or deletes rows: each test
reproduces a finding and fails on the code attacked. Severities are in the comment above each
group; what was tried and held is in the attack report, not here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.bus.memory import MemoryBus
from conclave.platform.clock import utc_now
from conclave.platform.tlog import FindingKind, LogCorrupted, audit_log
from conclave.platform.transparency import VerifierSet
from conclave.platform.transparency.errors import TransparencyError
from tests.conftest import Backend
from tests.gateway.test_log_endpoints import BEARER, integrated, publishing
from tests.platform.transparency.stored_logs import open_test_log
from tests.platform.transparency.test_log_tamper import INTEGRATED, built_log


async def _edit_sqlite(engine: AsyncEngine, statement: str, **values: Any) -> None:
    """``statement`` run as whoever owns the SQLite file: the append-only triggers dropped
    first (a file's owner may)."""
    async with engine.begin() as connection:
        for table in ("tlog_leaves", "tlog_subtrees", "tlog_checkpoints"):
            for operation in ("update", "delete"):
                await connection.execute(text(f"DROP TRIGGER IF EXISTS {table}_no_{operation}"))
        await connection.execute(text(statement), values)


# 1. (medium) On SQLite a stored subtree hash (level >= TILE_LEVEL) edited to text is read with
# bytes(text): a TypeError, where the leaf hashes beside it go through stored_bytes. Every proof
# and receipt through that subtree is a 500 instead of SubtreeNotStored, the integrator whose
# frontier holds it crashes instead of refusing with LogCorrupted, and the audit, the one tool
# that says what is wrong, crashes instead of reporting the subtree. (A number there is read as
# bytes(n): n zero bytes, as much memory as the number says.)


async def test_a_stored_subtree_hash_written_as_text_is_a_finding_not_a_crash(
    sqlite_engine: AsyncEngine,
) -> None:
    log = await built_log(sqlite_engine)  # 40 leaves: the frontier is [0, 32) and [32, 40)
    await _edit_sqlite(
        sqlite_engine,
        "UPDATE tlog_subtrees SET hash = 'not a hash' WHERE level = 5 AND subtree_index = 0",
    )
    # Leaf 35's path runs through the stored hash of [0, 32); the log refuses it, as for any
    # hash it does not hold.
    with pytest.raises(TransparencyError):
        await log.inclusion_proof(35, INTEGRATED)
    with pytest.raises(TransparencyError):
        await log.receipt(35)
    fresh = await open_test_log(sqlite_engine, log.keys)  # reads its frontier from the store
    with pytest.raises(LogCorrupted):
        await fresh.integrate()
    audit = await audit_log(sqlite_engine, log.name, VerifierSet(log.keys.verifiers))
    assert (FindingKind.SUBTREE_ALTERED, 0) in [(f.kind, f.position) for f in audit.findings]


# 2. (medium) A receipt is built on the latest checkpoint row's note, read for its size without
# being opened: a row INSERTed into tlog_checkpoints (what the append-only triggers allow, no
# trigger to switch off) makes every receipt of the log a 500. A note that is no note fails on
# its missing blank line (ValueError); a note of size 2^64 - 1 sends indices beyond BIGINT to the
# tiled read (PostgreSQL: out of int64 range; SQLite: OverflowError). The log's readers, and the
# edge's devices fetching their receipts, get a crash instead of a problem.


@pytest.mark.parametrize(
    "note",
    [
        pytest.param("no checkpoint at all", id="no-blank-line"),
        pytest.param(
            "conclave.localhost/calls\n18446744073709551615\n" + "A" * 43 + "=\n\n- x\n",
            id="size-2^64-1",
        ),
    ],
)
async def test_a_forged_latest_checkpoint_row_is_not_served_as_the_latest(
    backend: Backend, tmp_path: Path, note: str
) -> None:
    async with publishing(backend, tmp_path) as (client, log):
        await log.append([b"a", b"b", b"c"])
        await integrated(log, 3)
        state = await log.state()
        async with backend.engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO tlog_checkpoints (log_id, tree_size, root_hash, note, created_at)"
                    " VALUES (:log_id, 1000, :root, :note, :now)"
                ),
                {"log_id": state.log_id, "root": b"\x00" * 32, "note": note, "now": utc_now()},
            )
        leaf_hash = (await log.leaf(1)).leaf_hash.hex()
        # The log's latest checkpoint is the one of its integrated size (set by the pass that
        # signed it): the inserted row is never served, and receipts stay proofs of the real one.
        for path in ("/logs/calls/receipt/1", f"/logs/calls/receipt/by-hash/{leaf_hash}"):
            answer = await client.get(path, headers=BEARER)
            assert answer.status_code == 200, (path, answer.text)
            assert answer.json()["checkpoint"].split("\n")[1] == "3", path
        latest = await client.get("/logs/calls/checkpoint", headers=BEARER)
        assert latest.status_code == 200 and latest.text.split("\n")[1] == "3"


async def test_a_proof_through_a_corrupted_subtree_is_a_problem_naming_the_log(
    sqlite_engine: AsyncEngine, tmp_path: Path
) -> None:
    """Over HTTP, a proof or receipt through a stored hash that is no hash answers 503
    ``LOG_CORRUPTED`` (a problem the operator can act on), not an anonymous 500."""
    backend = Backend("embedded", sqlite_engine, MemoryBus())
    async with publishing(backend, tmp_path) as (client, log):
        await log.append([b"leaf %d" % n for n in range(20)])
        await integrated(log, 20)
        await _edit_sqlite(
            sqlite_engine,
            "UPDATE tlog_subtrees SET hash = 'not a hash' WHERE level = 4 AND subtree_index = 0",
        )
        for path in ("/logs/calls/receipt/17", "/logs/calls/proof/inclusion?index=17&size=20"):
            answer = await client.get(path, headers=BEARER)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["code"] == "LOG_CORRUPTED", path
