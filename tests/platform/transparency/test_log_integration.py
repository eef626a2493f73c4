"""The integrator: sequenced leaves become a signed checkpoint that proves each of them, at most
once per checkpoint interval, under a lock one integrator holds; and the loop that runs it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog import IntegrationOutcome, LogIntegrator, audit_log
from conclave.platform.transparency import (
    EMPTY_ROOT,
    Checkpoint,
    InMemoryHashSource,
    VerifierSet,
    consistency_proof,
    inclusion_proof,
    open_checkpoint,
    tree_root,
)
from tests.conftest import eventually
from tests.platform.transparency.stored_logs import (
    open_test_log,
    stored_checkpoints,
    test_keys,
    verify_as_a_reader,
)


class Clock:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


async def test_a_new_log_starts_with_a_signed_empty_checkpoint(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)
    opened = open_checkpoint(
        await log.latest_checkpoint(), VerifierSet(log.keys.verifiers), origin=log.origin
    )
    assert opened.checkpoint == Checkpoint("tlog.test/calls", 0, EMPTY_ROOT)

    # Opening it again (another process, a restart) adds nothing.
    again = await open_test_log(log_engine, log.keys)
    assert await again.latest_checkpoint() == await log.latest_checkpoint()
    assert len(await stored_checkpoints(log_engine, log)) == 1


async def test_integration_signs_a_checkpoint_proving_every_leaf(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)
    entries = [f"entry {i}".encode() for i in range(37)]
    await log.append(entries[:20])
    await log.append(entries[20:])

    result = await log.integrate()

    assert result.outcome is IntegrationOutcome.INTEGRATED
    assert result.checkpoint is not None and result.checkpoint.size == 37
    assert result.note == await log.latest_checkpoint()
    assert result.pending == 0
    verified = await verify_as_a_reader(log_engine, log)
    assert verified.checkpoint_sizes == [0, 37]
    assert [(await log.leaf(i)).data for i in range(37)] == entries
    state = await log.state()
    assert (state.sequenced_size, state.integrated_size) == (37, 37)
    assert state.root_hash == result.checkpoint.root_hash


async def test_checkpoints_only_grow_and_extend_each_other(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)
    for size in (1, 2, 3, 5, 8, 13, 21, 64, 65):
        state = await log.state()
        await log.append([f"{size}:{i}".encode() for i in range(size - state.sequenced_size)])
        result = await log.integrate()
        assert result.checkpoint is not None and result.checkpoint.size == size

    verified = await verify_as_a_reader(log_engine, log)
    assert verified.checkpoint_sizes == [0, 1, 2, 3, 5, 8, 13, 21, 64, 65]


async def test_nothing_waiting_means_no_checkpoint(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)
    assert (await log.integrate()).outcome is IntegrationOutcome.UP_TO_DATE
    await log.append([b"a"])
    assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED
    assert (await log.integrate()).outcome is IntegrationOutcome.UP_TO_DATE
    assert [size for size, _ in await stored_checkpoints(log_engine, log)] == [0, 1]


async def test_at_most_one_checkpoint_per_interval(log_engine: AsyncEngine) -> None:
    clock = Clock()
    log = await open_test_log(log_engine, checkpoint_interval=1.0, clock=clock)
    await log.append([b"a"])

    early = await log.integrate()
    assert early.outcome is IntegrationOutcome.TOO_SOON
    assert (early.pending, early.wait_seconds) == (1, 1.0)

    clock.advance(1.0)
    assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED
    await log.append([b"b", b"c"])
    clock.advance(0.75)
    too_soon = await log.integrate()
    assert too_soon.outcome is IntegrationOutcome.TOO_SOON
    assert too_soon.pending == 2
    assert too_soon.wait_seconds == pytest.approx(0.25)
    clock.advance(0.25)
    assert (await log.integrate()).checkpoint.size == 3  # type: ignore[union-attr]
    assert [size for size, _ in await stored_checkpoints(log_engine, log)] == [0, 1, 3]
    # A clock behind the last checkpoint's (another replica's) waits one interval at most.
    await log.append([b"d"])
    clock.advance(-30)
    assert (await log.integrate()).wait_seconds == 1.0


async def test_a_backlog_is_folded_in_bounded_slices(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine, max_leaves_per_checkpoint=10)
    await log.append([bytes([i]) for i in range(25)])

    results = [await log.integrate() for _ in range(4)]

    assert [r.checkpoint.size if r.checkpoint else None for r in results] == [10, 20, 25, None]
    assert [r.pending for r in results] == [15, 5, 0, 0]
    await verify_as_a_reader(log_engine, log)


async def test_a_large_pass_makes_the_tree_an_independent_fold_makes(
    log_engine: AsyncEngine,
) -> None:
    entries = [f"entry {i}".encode() for i in range(5000)]  # folded in several slices
    log = await open_test_log(log_engine)
    await log.append(entries)

    result = await log.integrate()

    reference = InMemoryHashSource.of_entries(entries)
    assert result.checkpoint is not None
    assert result.checkpoint.root_hash == tree_root(reference, 5000)
    for index in (0, 2047, 2048, 4095, 4999):
        assert await log.inclusion_proof(index, 5000) == inclusion_proof(reference, index, 5000)
    assert await log.consistency_proof(2049, 5000) == consistency_proof(reference, 2049, 5000)
    audit = await audit_log(log_engine, log.name, VerifierSet(log.keys.verifiers))
    assert audit.ok, audit.findings


async def test_one_integrator_at_a_time(postgres_engine: AsyncEngine) -> None:
    keys = test_keys()
    first, second = [await open_test_log(postgres_engine, keys) for _ in range(2)]
    await first.append([b"a", b"b"])
    inside, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        inside.set()
        await release.wait()

    holding = asyncio.create_task(first.integrate(inside_transaction=hold))
    await inside.wait()

    assert (await second.integrate()).outcome is IntegrationOutcome.BUSY
    # The held integration does not stop appends: their row is not locked until its commit.
    assert await asyncio.wait_for(second.append([b"c"]), timeout=30) == range(2, 3)

    release.set()
    assert (await holding).checkpoint.size == 2  # type: ignore[union-attr]
    assert (await second.integrate()).checkpoint.size == 3  # type: ignore[union-attr]
    await verify_as_a_reader(postgres_engine, second)


async def test_on_sqlite_a_second_integrator_waits_its_turn(sqlite_engine: AsyncEngine) -> None:
    keys = test_keys()
    first, second = [await open_test_log(sqlite_engine, keys) for _ in range(2)]
    await first.append([b"a", b"b"])
    inside, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        inside.set()
        await release.wait()

    holding = asyncio.create_task(first.integrate(inside_transaction=hold))
    await inside.wait()
    waiting = asyncio.create_task(second.integrate())
    await asyncio.sleep(0.2)
    assert not waiting.done()  # SQLite's one write lock: it waits, then finds nothing to do

    release.set()
    assert (await holding).checkpoint.size == 2  # type: ignore[union-attr]
    assert (await waiting).outcome is IntegrationOutcome.UP_TO_DATE


async def test_the_integrator_loop_paces_checkpoints(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine, checkpoint_interval=0.2)
    integrator = LogIntegrator([log], poll_seconds=60)
    await integrator.start()
    try:
        started = time.monotonic()
        appended = 0
        while time.monotonic() - started < 0.7:
            appended += len(await log.append([b"x"] * 10))
            await asyncio.sleep(0.01)

        async def all_in() -> bool:
            return (await log.state()).integrated_size == appended

        await eventually(all_in, timeout=60)
        elapsed = time.monotonic() - started
        sizes = [size for size, _ in await stored_checkpoints(log_engine, log)]
        # Woken by each append, it still makes one checkpoint per interval at most.
        assert 2 <= len(sizes) - 1 <= elapsed / 0.2 + 1
        await asyncio.sleep(0.4)
        assert [size for size, _ in await stored_checkpoints(log_engine, log)] == sizes
    finally:
        await integrator.stop()
    await verify_as_a_reader(log_engine, log, leaves=50)


async def test_the_loop_finds_appends_of_other_processes_by_polling(
    log_engine: AsyncEngine,
) -> None:
    keys = test_keys()
    log = await open_test_log(log_engine, keys)
    elsewhere = await open_test_log(log_engine, keys)  # not watched by the loop
    integrator = LogIntegrator([log], poll_seconds=0.2)
    await integrator.start()
    try:
        await elsewhere.append([b"from another process"])

        async def integrated() -> bool:
            return (await log.state()).integrated_size == 1

        await eventually(integrated, timeout=60)
    finally:
        await integrator.stop()
        await integrator.stop()  # idempotent
    assert integrator.last["calls"].outcome in (
        IntegrationOutcome.INTEGRATED,
        IntegrationOutcome.UP_TO_DATE,
    )
