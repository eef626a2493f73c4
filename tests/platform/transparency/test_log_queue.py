"""Queued appends: a leaf written in its writer's own transaction (beside the row it logs, through
the group commit) and given its index by the integrator, in queue order, in the pass that signs
the checkpoint covering it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.clock import utc_now
from conclave.platform.db.batch import BatchWriter, Insert
from conclave.platform.db.schema import tlog_logs
from conclave.platform.tlog import IntegrationOutcome, LeafLocation, LogIntegrator, audit_log, queue
from conclave.platform.tlog import store as tlog_store
from conclave.platform.tlog.errors import LeafTooLarge
from conclave.platform.transparency import VerifierSet, leaf_hash
from conclave.platform.transparency.errors import MalformedInput
from tests.conftest import eventually
from tests.platform.transparency.stored_logs import (
    open_test_log,
    second_replica,
    stored_leaves,
    test_keys,
    verify_as_a_reader,
)
from tests.platform.transparency.test_log_kill import paused_process


@pytest.fixture
async def writer(log_engine: AsyncEngine) -> AsyncIterator[BatchWriter]:
    batch_writer = BatchWriter(log_engine, committers=2)
    await batch_writer.start()
    yield batch_writer
    await batch_writer.stop()


async def _queue_rows(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int(await connection.scalar(text("SELECT count(*) FROM tlog_queue")) or 0)


async def test_queued_leaves_get_indices_in_queue_order_at_integration(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    log = await open_test_log(log_engine)
    entries = [f"call {n}".encode() for n in range(5)]
    for entry in entries:
        await writer.write(log.queued(entry).write)
    # Queued is not sequenced: no index yet, nothing under a checkpoint.
    assert (await log.state()).sequenced_size == 0
    assert await stored_leaves(log_engine, log) == []

    result = await log.integrate()

    assert result.outcome is IntegrationOutcome.INTEGRATED
    assert result.checkpoint is not None and result.checkpoint.size == 5
    assert await stored_leaves(log_engine, log) == list(enumerate(entries))
    assert await _queue_rows(log_engine) == 0
    verified = await verify_as_a_reader(log_engine, log)
    assert verified.checkpoint_sizes == [0, 5]


async def test_a_queued_leaf_commits_or_rolls_back_with_the_row_it_logs(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    log = await open_test_log(log_engine)
    now = utc_now()
    # The row beside the leaf breaks a unique constraint: neither is written.
    clashing = Insert(
        tlog_logs,
        {
            "name": log.name,
            "origin": "x",
            "sequenced_size": 0,
            "integrated_size": 0,
            "root_hash": b"",
            "integrated_at": now,
            "created_at": now,
        },
    )
    with pytest.raises(IntegrityError):
        await writer.write(log.queued(b"lost with its row").write, clashing)
    await writer.write(log.queued(b"kept").write)

    await log.integrate()

    assert await stored_leaves(log_engine, log) == [(0, b"kept")]


async def test_direct_and_queued_appends_share_one_gapless_sequence(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    log = await open_test_log(log_engine)
    await log.append([b"direct 0", b"direct 1"])
    await writer.write(log.queued(b"queued 0").write)
    await writer.write(log.queued(b"queued 1").write)
    await log.integrate()
    await log.append([b"direct 2"])
    await writer.write(log.queued(b"queued 2").write)
    await log.integrate()

    leaves = await stored_leaves(log_engine, log)

    # Sequenced before queued in a pass: the queue is taken after the leaves already sequenced.
    assert leaves == list(
        enumerate([b"direct 0", b"direct 1", b"queued 0", b"queued 1", b"direct 2", b"queued 2"])
    )
    assert (await verify_as_a_reader(log_engine, log)).checkpoint_sizes == [0, 4, 6]
    assert (await audit_log(log_engine, log.name, VerifierSet(log.keys.verifiers))).ok


async def test_a_queue_longer_than_a_pass_is_taken_in_order_over_several_checkpoints(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    log = await open_test_log(log_engine, max_leaves_per_checkpoint=4)
    await log.append([b"sequenced 0", b"sequenced 1"])
    entries = [f"queued {n}".encode() for n in range(7)]
    await asyncio.gather(*(writer.write(log.queued(entry).write) for entry in entries))

    first = await log.integrate()
    second = await log.integrate()
    third = await log.integrate()

    assert [r.checkpoint.size for r in (first, second, third) if r.checkpoint] == [4, 8, 9]
    # Queued leaves are counted up to one pass's worth: "more waits", not how many.
    assert (first.pending > 0, second.pending > 0, third.pending) == (True, True, 0)
    assert (await log.integrate()).outcome is IntegrationOutcome.UP_TO_DATE
    stored = [data for _, data in await stored_leaves(log_engine, log)]
    assert stored[:2] == [b"sequenced 0", b"sequenced 1"]
    assert sorted(stored[2:]) == sorted(entries)  # concurrent writers: the queue's order
    assert (await verify_as_a_reader(log_engine, log)).checkpoint_sizes == [0, 4, 8, 9]


async def test_a_pass_takes_no_more_queued_bytes_than_a_batch_holds(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    """Leaves of up to the leaf limit each, 65,536 to a pass, would be gigabytes in memory: a pass
    takes what fits the batch byte limit (at least one leaf) and leaves the rest for the next."""
    log = await open_test_log(log_engine, max_leaf_bytes=100, max_batch_bytes=250)
    entries = [bytes([n]) * 100 for n in range(5)]
    for entry in entries:
        await writer.write(log.queued(entry).write)

    sizes = []
    while (result := await log.integrate()).outcome is IntegrationOutcome.INTEGRATED:
        assert result.checkpoint is not None
        sizes.append(result.checkpoint.size)

    assert sizes == [2, 4, 5]
    assert [data for _, data in await stored_leaves(log_engine, log)] == entries


async def test_a_queued_row_that_holds_no_leaf_does_not_stop_the_log(
    log_engine: AsyncEngine, writer: BatchWriter, caplog: pytest.LogCaptureFixture
) -> None:
    """A hand-written row (SQLite keeps a number in a BLOB column; a blob past the leaf limit on
    either store) is dropped, and said so, instead of failing every later pass for everyone."""
    log = await open_test_log(log_engine, max_leaf_bytes=64)
    await writer.write(log.queued(b"before").write)
    hand_written: list[object] = [b"x" * 65]
    if log_engine.dialect.name == "sqlite":
        hand_written += [1.5, 50_000_000, -1]
    async with log_engine.begin() as connection:
        for data in hand_written:
            await connection.execute(
                text(
                    "INSERT INTO tlog_queue (log_id, leaf_hash, data, queued_at) "
                    "SELECT log_id, :hash, :data, :at FROM tlog_logs WHERE name = 'calls'"
                ),
                {"hash": b"\x00", "data": data, "at": utc_now()},
            )
    await writer.write(log.queued(b"after").write)

    result = await log.integrate()

    assert result.outcome is IntegrationOutcome.INTEGRATED
    assert [data for _, data in await stored_leaves(log_engine, log)] == [b"before", b"after"]
    assert await _queue_rows(log_engine) == 0
    assert "hold no leaf were dropped" in caplog.text
    await writer.write(log.queued(b"later").write)
    assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED


async def test_a_queued_row_kept_from_its_move_by_hand_leaves_no_gap(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    """On PostgreSQL the pass moves the queued rows it chose in one statement that gives exactly
    as many indices as rows moved: a row a trigger written by hand keeps from being deleted stays
    queued, the others are logged without a gap, and the log goes on."""
    if log_engine.dialect.name == "sqlite":
        pytest.skip("the one-statement move is PostgreSQL's")
    log = await open_test_log(log_engine)
    for entry in (b"first", b"kept", b"third"):
        await writer.write(log.queued(entry).write)
    async with log_engine.begin() as connection:
        await connection.execute(
            text(
                "CREATE FUNCTION keep_one() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF OLD.data = 'kept'::bytea THEN RETURN NULL; END IF; RETURN OLD; END $$"
            )
        )
        await connection.execute(
            text(
                "CREATE TRIGGER keep_one BEFORE DELETE ON tlog_queue "
                "FOR EACH ROW EXECUTE FUNCTION keep_one()"
            )
        )

    assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED

    state = await log.state()
    assert (state.sequenced_size, state.integrated_size) == (2, 2)
    assert await stored_leaves(log_engine, log) == [(0, b"first"), (1, b"third")]
    assert await _queue_rows(log_engine) == 1
    async with log_engine.begin() as connection:
        await connection.execute(text("DROP TRIGGER keep_one ON tlog_queue"))
    await writer.write(log.queued(b"fourth").write)
    assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED
    assert [data for _, data in await stored_leaves(log_engine, log)] == [
        b"first",
        b"third",
        b"kept",
        b"fourth",
    ]
    assert (await verify_as_a_reader(log_engine, log)).checkpoint_sizes == [0, 2, 4]


async def test_a_leaf_is_located_by_its_hash(log_engine: AsyncEngine, writer: BatchWriter) -> None:
    log = await open_test_log(log_engine)
    entry = b"a call"
    queued = log.queued(entry)
    assert queued.leaf_hash == leaf_hash(entry)
    assert await log.locate(queued.leaf_hash) == LeafLocation()

    await writer.write(queued.write)
    assert await log.locate(queued.leaf_hash) == LeafLocation()  # queued: no index yet

    await log.append([b"another", entry])  # the same entry again, sequenced directly
    assert await log.locate(queued.leaf_hash) == LeafLocation(index=1, integrated=False)

    await log.integrate()
    # Two leaves hold the entry (indices 1 and 2): the first proves it.
    assert await log.locate(queued.leaf_hash) == LeafLocation(index=1, integrated=True)
    assert await log.locate(leaf_hash(b"never logged")) == LeafLocation()


async def test_the_tree_commits_to_the_queued_data_not_its_stored_hash(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    """A queued row whose data was changed in the store before integration is logged as changed:
    the writer's leaf hash then finds nothing, which is how the writer notices."""
    log = await open_test_log(log_engine)
    queued = log.queued(b"original")
    await writer.write(queued.write)
    async with log_engine.begin() as connection:
        await connection.execute(text("UPDATE tlog_queue SET data = :d"), {"d": b"altered"})

    await log.integrate()

    assert await stored_leaves(log_engine, log) == [(0, b"altered")]
    assert await log.locate(queued.leaf_hash) == LeafLocation()
    assert (await log.leaf(0)).leaf_hash == leaf_hash(b"altered")


async def test_queued_entries_are_checked_like_appended_ones(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine, max_leaf_bytes=8)
    with pytest.raises(LeafTooLarge):
        log.queued(b"123456789")
    with pytest.raises(MalformedInput):
        log.queued("text")  # type: ignore[arg-type]


async def test_an_integrator_killed_mid_pass_keeps_the_queue(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    log = await open_test_log(log_engine)
    for n in range(3):
        await writer.write(log.queued(f"queued {n}".encode()).write)

    async with paused_process(log_engine, log, "integrate"):
        pass  # killed with its leaves moved and the queue emptied, not committed

    assert await _queue_rows(log_engine) == 3
    assert (await log.state()).sequenced_size == 0
    assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED
    assert [d for _, d in await stored_leaves(log_engine, log)] == [
        b"queued 0",
        b"queued 1",
        b"queued 2",
    ]


async def test_two_replicas_queueing_at_once_make_one_log(log_engine: AsyncEngine) -> None:
    keys = test_keys()
    other_engine = await second_replica(log_engine)
    writers = [BatchWriter(engine, committers=2) for engine in (log_engine, other_engine)]
    try:
        replicas = [
            await open_test_log(engine, keys, checkpoint_interval=0.1)
            for engine in (log_engine, other_engine)
        ]
        integrators = [LogIntegrator([log], poll_seconds=0.3) for log in replicas]
        for item in (*writers, *integrators):
            await item.start()
        entries = [[f"replica {r} call {n}".encode() for n in range(60)] for r in range(2)]

        async def queue(replica: int) -> None:
            log = replicas[replica]
            for entry in entries[replica]:
                await writers[replica].write(log.queued(entry).write)
                log.notify_queued()

        await asyncio.gather(queue(0), queue(1))

        async def all_integrated() -> bool:
            return (await replicas[0].integrated_size()) == 120

        await eventually(all_integrated, timeout=60)
        for integrator in integrators:
            await integrator.stop()
        stored = [data for _, data in await stored_leaves(log_engine, replicas[0])]
        assert sorted(stored) == sorted(entries[0] + entries[1])
        for replica in (0, 1):  # each replica's own writes keep their order
            mine = [data for data in stored if data.startswith(f"replica {replica}".encode())]
            assert mine == entries[replica]
        await verify_as_a_reader(log_engine, replicas[0])
        assert (await audit_log(log_engine, "calls", VerifierSet(keys.verifiers))).ok
    finally:
        for batch_writer in writers:
            await batch_writer.stop()
        await other_engine.dispose()


async def _hand_queue(engine: AsyncEngine, data: object, name: str = "calls") -> None:
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO tlog_queue (log_id, leaf_hash, data, queued_at) "
                "SELECT log_id, :hash, :data, :at FROM tlog_logs WHERE name = :name"
            ),
            {"hash": b"\x00", "data": data, "at": utc_now(), "name": name},
        )


async def test_an_oversized_hand_written_row_at_the_head_does_not_stop_the_queue(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    """A row bigger than a pass's bytes is taken alone and dropped: the pass has nothing to sign,
    and its drop commits (it once signed the same size again, failed, and rolled the drop back:
    every later pass met the row, and no leaf of anyone was integrated again)."""
    log = await open_test_log(log_engine, max_leaf_bytes=64, max_batch_bytes=128)
    await _hand_queue(log_engine, b"x" * 200)
    await writer.write(log.queued(b"a user's call").write)

    dropping = await log.integrate()
    assert (dropping.outcome, dropping.pending) == (IntegrationOutcome.UP_TO_DATE, 1)
    assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED
    assert [data for _, data in await stored_leaves(log_engine, log)] == [b"a user's call"]
    assert await _queue_rows(log_engine) == 0


async def test_the_move_takes_no_row_past_the_leaf_limit_whatever_its_size_was(
    postgres_engine: AsyncEngine,
) -> None:
    """PostgreSQL moves the rows a pass chose by id after reading their sizes; a row grown past the
    leaf limit in between (an UPDATE by hand) is not moved: it stays queued, and the next pass
    drops it."""
    log = await open_test_log(postgres_engine, max_leaf_bytes=64)
    await _hand_queue(postgres_engine, b"x" * 10_000)
    async with postgres_engine.begin() as connection:
        queue_id = await connection.scalar(text("SELECT queue_id FROM tlog_queue"))
        moved = await connection.execute(
            queue._MOVE_QUEUED,
            {"log_id": log._log_id, "ids": [queue_id], "leaf_bytes": 64},
        )
        assert moved.all() == []
    assert await _queue_rows(postgres_engine) == 1
    assert (await log.integrate()).outcome is IntegrationOutcome.UP_TO_DATE
    assert await _queue_rows(postgres_engine) == 0
    assert await stored_leaves(postgres_engine, log) == []


async def test_a_direct_append_committing_during_a_pass_is_folded_in_index_order(
    postgres_engine: AsyncEngine,
) -> None:
    """A direct append that holds the log's row while a pass moves queued leaves: the pass waits
    for it, its queued leaves take the indices after the append's, and the pass folds what the
    store holds in index order (no gap, no duplicate)."""
    log = await open_test_log(postgres_engine, max_leaves_per_checkpoint=4)
    for n in range(4):
        await _hand_queue(postgres_engine, f"queued {n}".encode())
    direct = [b"direct 0", b"direct 1"]
    async with postgres_engine.begin() as connection:
        first = await tlog_store.allocate(connection, log._log_id, 2)
        await tlog_store.insert_leaves(
            connection, log._log_id, first, [leaf_hash(d) for d in direct], direct
        )
        passing = asyncio.create_task(log.integrate())
        await asyncio.sleep(0.5)  # the pass has read the log's row, and waits for its lock
        assert not passing.done()
    assert (await passing).outcome is IntegrationOutcome.INTEGRATED
    while (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED:
        pass
    leaves = [data for _, data in await stored_leaves(postgres_engine, log)]
    assert leaves == [*direct, *(f"queued {n}".encode() for n in range(4))]
    assert (await verify_as_a_reader(postgres_engine, log)).checkpoint_sizes == [0, 4, 6]
    assert (await audit_log(postgres_engine, log.name, VerifierSet(log.keys.verifiers))).ok


async def test_hand_written_rows_of_other_logs_duplicates_and_low_ids_keep_the_log_whole(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    """Rows of another log are not taken, duplicate data makes two leaves, a row given a queue id
    below those already taken is taken next, and the log verifies throughout."""
    log = await open_test_log(log_engine)
    other = await open_test_log(log_engine, name="other")
    await _hand_queue(log_engine, b"y" * 5000, name="other")
    await writer.write(log.queued(b"same").write)
    await writer.write(log.queued(b"same").write)
    assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED
    async with log_engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO tlog_queue (queue_id, log_id, leaf_hash, data, queued_at) "
                "SELECT -5, log_id, :hash, :data, :at FROM tlog_logs WHERE name = 'calls'"
            ),
            {"hash": b"\x00", "data": b"low id", "at": utc_now()},
        )
    await writer.write(log.queued(b"later").write)
    assert (await log.integrate()).outcome is IntegrationOutcome.INTEGRATED

    leaves = [data for _, data in await stored_leaves(log_engine, log)]
    assert leaves == [b"same", b"same", b"low id", b"later"]
    assert (await verify_as_a_reader(log_engine, log)).checkpoint_sizes == [0, 2, 4]
    assert (await audit_log(log_engine, log.name, VerifierSet(log.keys.verifiers))).ok
    assert await stored_leaves(log_engine, other) == []
    assert (await other.integrate()).outcome is IntegrationOutcome.INTEGRATED


async def test_appends_wake_the_loop_whatever_its_schedule_without_the_poll(
    log_engine: AsyncEngine,
) -> None:
    """The loop is woken only by news (a log not yet marked waiting): appends just after a pass,
    within the interval, after idling, and to a second log are each integrated long before the
    poll would have looked."""
    log = await open_test_log(log_engine, checkpoint_interval=0.2)
    other = await open_test_log(log_engine, name="other", checkpoint_interval=0.2)
    integrator = LogIntegrator([log, other], poll_seconds=600, retry_seconds=0.2)
    await integrator.start()
    try:
        for round_ in range(4):
            await log.append([f"a {round_}".encode()])
            await log.append([f"b {round_}".encode()])  # inside the interval: too soon

            async def integrated(expected: int = 2 * (round_ + 1)) -> bool:
                return await log.integrated_size() == expected

            await eventually(integrated, timeout=60)
            await asyncio.sleep(0.3 * round_)  # idle a while: the schedule is not waiting
        await other.append([b"x"])

        async def other_integrated() -> bool:
            return await other.integrated_size() == 1

        await eventually(other_integrated, timeout=60)
    finally:
        await integrator.stop()


async def test_a_queued_row_that_never_moves_does_not_make_the_loop_busy(
    log_engine: AsyncEngine, writer: BatchWriter
) -> None:
    """A row kept from its move by a trigger written by hand is tried once per checkpoint
    interval, not in a busy loop (each try is counted by the trigger itself)."""
    if log_engine.dialect.name == "sqlite":
        pytest.skip("the one-statement move is PostgreSQL's")
    log = await open_test_log(log_engine, checkpoint_interval=0.2)
    await writer.write(log.queued(b"kept").write)
    async with log_engine.begin() as connection:
        await connection.execute(text("CREATE TABLE tries (n integer)"))
        await connection.execute(
            text(
                "CREATE FUNCTION keep_all() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "INSERT INTO tries VALUES (1); RETURN NULL; END $$"
            )
        )
        await connection.execute(
            text(
                "CREATE TRIGGER keep_all BEFORE DELETE ON tlog_queue "
                "FOR EACH ROW EXECUTE FUNCTION keep_all()"
            )
        )
    integrator = LogIntegrator([log], poll_seconds=600, retry_seconds=0.2)
    await integrator.start()
    try:
        await asyncio.sleep(1.5)
    finally:
        await integrator.stop()
    async with log_engine.connect() as connection:
        tries = int(await connection.scalar(text("SELECT count(*) FROM tries")) or 0)
    assert 1 <= tries <= 10, tries  # about one a 0.2 s interval; a busy loop makes hundreds
    assert await _queue_rows(log_engine) == 1
    assert (await log.state()).sequenced_size == 0
