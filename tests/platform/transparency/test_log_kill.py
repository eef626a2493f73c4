"""kill -9 of a process inside a batch's transaction: an integrator killed mid-integration, or an
appender killed with its allocation taken, leaves no gap, no duplicate and checkpoints that only
grow; the next integration completes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog import IntegrationOutcome, TransparencyLog, audit_log
from conclave.platform.transparency import VerifierSet
from tests.conftest import eventually
from tests.platform.transparency.log_process import PAUSED
from tests.platform.transparency.stored_logs import (
    open_test_log,
    stored_checkpoints,
    stored_leaves,
    verify_as_a_reader,
)

ROOT = Path(__file__).resolve().parents[3]


async def _store_of(engine: AsyncEngine) -> tuple[str, str]:
    url = engine.url.render_as_string(hide_password=False)
    if engine.dialect.name == "sqlite":
        return url, ""
    async with engine.connect() as connection:
        return url, str(await connection.scalar(text("SELECT current_schema()")))


@asynccontextmanager
async def paused_process(
    engine: AsyncEngine, log: TransparencyLog, action: str, entries: list[str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A process doing ``action`` on ``log``, stopped inside its transaction; killed on exit."""
    url, schema = await _store_of(engine)
    order = {
        "url": url,
        "schema": schema,
        "skey": log.keys.signers[0].skey(),
        "action": action,
        "entries": entries or [],
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.platform.transparency.log_process",
        json.dumps(order),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        if line.decode().strip() != PAUSED:
            process.kill()
            raise AssertionError((await process.communicate())[1].decode())
        yield process
    finally:
        if process.returncode is None:
            process.kill()  # SIGKILL: no cleanup, no rollback sent, the connection just drops
        await process.communicate()
    assert process.returncode == -signal.SIGKILL


async def _subtree_rows(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int(await connection.scalar(text("SELECT count(*) FROM tlog_subtrees")) or 0)


async def test_an_integrator_killed_mid_batch_leaves_no_trace(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)
    await log.append([f"leaf {i}".encode() for i in range(30)])
    await log.integrate()
    await log.append([f"leaf {i}".encode() for i in range(30, 50)])
    subtrees_before = await _subtree_rows(log_engine)

    async with paused_process(log_engine, log, "integrate"):
        # It has written the subtrees and the checkpoint of 50 leaves, uncommitted. Appends go
        # on meanwhile on PostgreSQL (the log's row is not locked yet); SQLite's single write
        # lock holds them until the process dies.
        appending = asyncio.create_task(log.append([b"during"]))
        if log_engine.dialect.name == "postgresql":
            assert await asyncio.wait_for(appending, timeout=30) == range(50, 51)
            assert (await log.integrate()).outcome is IntegrationOutcome.BUSY
    assert await appending == range(50, 51)

    state = await log.state()
    assert (state.sequenced_size, state.integrated_size) == (51, 30)
    assert [size for size, _ in await stored_checkpoints(log_engine, log)] == [0, 30]
    assert await _subtree_rows(log_engine) == subtrees_before

    async def integrated() -> bool:
        # On PostgreSQL the lock goes with the dead session, a moment after the kill.
        return (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED

    await eventually(integrated, timeout=60)
    assert [index for index, _ in await stored_leaves(log_engine, log)] == list(range(51))
    assert (await verify_as_a_reader(log_engine, log)).checkpoint_sizes == [0, 30, 51]
    assert (await audit_log(log_engine, log.name, VerifierSet(log.keys.verifiers))).ok


async def test_an_appender_killed_with_its_allocation_leaves_no_gap(
    log_engine: AsyncEngine,
) -> None:
    log = await open_test_log(log_engine)
    await log.append([b"before"])

    async with paused_process(log_engine, log, "append", ["lost 1", "lost 2", "lost 3"]):
        # It holds indices 1-3 and the log's row: the next batch waits for it, not past it.
        waiting = asyncio.create_task(log.append([b"after 1", b"after 2"]))
        await asyncio.sleep(0.3)
        assert not waiting.done()
    assert await asyncio.wait_for(waiting, timeout=60) == range(1, 3)

    assert await stored_leaves(log_engine, log) == [
        (0, b"before"),
        (1, b"after 1"),
        (2, b"after 2"),
    ]
    assert (await log.integrate()).checkpoint.size == 3  # type: ignore[union-attr]
    await verify_as_a_reader(log_engine, log)
