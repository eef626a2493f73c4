"""Group commit: concurrent writes share commits, yet each caller learns the fate of its own."""

from __future__ import annotations

import asyncio
import enum
import functools
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    func,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.clock import utc_now
from conclave.platform.db.batch import BatchWriter, Insert, Update, UpdateAll, group_writes
from conclave.platform.db.batch_statement import batch_statement
from conclave.platform.db.engine import create_engine
from conclave.platform.db.schema import consumed_events, outbox_events, tlog_queue
from conclave.platform.errors import StoreUnavailable


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> AsyncEngine:
    engine: AsyncEngine = request.getfixturevalue(f"{request.param}_engine")
    return engine


@pytest.fixture
async def writer(engine: AsyncEngine) -> AsyncIterator[BatchWriter]:
    writer = BatchWriter(engine, max_batch=16)
    await writer.start()
    yield writer
    await writer.stop()


def consumed(event_id: str) -> Insert:
    row = {"consumer_group": "g", "event_id": event_id, "consumed_at": utc_now()}
    return Insert(consumed_events, row)


def outbox_row(event_id: str) -> Insert:
    now = utc_now()
    return Insert(
        outbox_events,
        {
            "event_id": event_id, "channel": "c", "source": "test", "payload": {},
            "created_at": now, "next_attempt_at": now, "attempts": 0,
        },
    )  # fmt: skip


def consumed_rows(event_id: str) -> list[Insert]:
    return [consumed(event_id)]


async def stored_ids(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as connection:
        return set((await connection.scalars(select(consumed_events.c.event_id))).all())


async def test_concurrent_writes_are_committed_in_fewer_commits(
    engine: AsyncEngine, writer: BatchWriter
) -> None:
    commits: list[int] = []
    writer.after_commit(lambda committed: commits.append(1))
    ids = [str(uuid.uuid4()) for _ in range(100)]

    await asyncio.gather(*(writer.write(consumed(event_id)) for event_id in ids))

    assert await stored_ids(engine) == set(ids)
    assert len(ids) // 16 <= len(commits) < len(ids)  # grouped, at most max_batch per commit


async def test_a_bad_write_fails_only_its_caller(engine: AsyncEngine, writer: BatchWriter) -> None:
    await writer.write(consumed("taken"))
    good = [str(uuid.uuid4()) for _ in range(10)]
    calls = [writer.write(consumed(event_id)) for event_id in good[:5]]
    calls.append(writer.write(consumed("taken")))  # breaks the primary key
    calls.extend(writer.write(consumed(event_id)) for event_id in good[5:])

    results = await asyncio.gather(*calls, return_exceptions=True)

    assert isinstance(results[5], IntegrityError)
    assert [r for i, r in enumerate(results) if i != 5] == [None] * 10
    assert await stored_ids(engine) == {"taken", *good}


async def test_built_writes_are_made_by_the_committer_and_commit_together(
    engine: AsyncEngine, writer: BatchWriter
) -> None:
    made: list[str] = []
    commits: list[int] = []
    writer.after_commit(lambda committed: commits.append(1))

    def build(event_id: str) -> Callable[[], list[Insert]]:
        def writes() -> list[Insert]:
            made.append(event_id)
            return [consumed(event_id)]

        return writes

    ids = [str(uuid.uuid4()) for _ in range(40)]
    calls = [writer.write_built(build(event_id)) for event_id in ids]
    assert made == []  # nothing is made before the committer takes the batch

    await asyncio.gather(*calls)

    assert sorted(made) == sorted(ids)  # each build ran once
    assert await stored_ids(engine) == set(ids)
    assert len(commits) < len(ids)


async def test_a_build_that_raises_fails_only_its_caller(
    engine: AsyncEngine, writer: BatchWriter
) -> None:
    def broken() -> list[Insert]:
        raise ValueError("no rows for this one")

    good = [str(uuid.uuid4()) for _ in range(6)]
    calls = [writer.write_built(functools.partial(consumed_rows, event_id)) for event_id in good]
    calls.insert(3, writer.write_built(broken))

    results = await asyncio.gather(*calls, return_exceptions=True)

    assert isinstance(results[3], ValueError) and str(results[3]) == "no rows for this one"
    assert [r for i, r in enumerate(results) if i != 3] == [None] * 6
    assert await stored_ids(engine) == set(good)


async def test_a_built_write_in_a_batch_committed_again_in_halves_is_made_once(
    engine: AsyncEngine, writer: BatchWriter
) -> None:
    await writer.write(consumed("taken"))
    made: list[str] = []

    def build(event_id: str) -> Callable[[], list[Insert]]:
        def writes() -> list[Insert]:
            made.append(event_id)
            return [consumed(event_id)]

        return writes

    good = [str(uuid.uuid4()) for _ in range(8)]
    calls = [writer.write_built(build(event_id)) for event_id in good]
    calls.insert(4, writer.write_built(build("taken")))  # breaks the primary key: halves

    results = await asyncio.gather(*calls, return_exceptions=True)

    assert isinstance(results[4], IntegrityError)
    assert sorted(made) == sorted([*good, "taken"])
    assert await stored_ids(engine) == {"taken", *good}


async def test_writes_of_one_call_commit_atomically(
    engine: AsyncEngine, writer: BatchWriter
) -> None:
    await writer.write(consumed("taken"))
    with pytest.raises(IntegrityError):
        await writer.write(consumed("innocent"), consumed("taken"))
    assert await stored_ids(engine) == {"taken"}


async def test_update_changes_only_the_keyed_rows(engine: AsyncEngine, writer: BatchWriter) -> None:
    await writer.write(outbox_row("a"), outbox_row("b"), outbox_row("c"))
    await asyncio.gather(
        writer.write(Update(outbox_events, "event_id", {"event_id": "a", "attempts": 3})),
        writer.write(
            Update(outbox_events, "event_id", {"event_id": "c", "attempts": 7, "last_error": "x"})
        ),
    )
    columns = (outbox_events.c.event_id, outbox_events.c.attempts, outbox_events.c.last_error)
    async with engine.connect() as connection:
        rows = (await connection.execute(select(*columns).order_by(columns[0]))).all()
    assert [tuple(row) for row in rows] == [("a", 3, None), ("b", 0, None), ("c", 7, "x")]


async def test_timestamps_are_stored_to_the_microsecond(
    engine: AsyncEngine, writer: BatchWriter, sample_tables: None
) -> None:
    moments = [
        datetime(2026, 11, 22, 3, 4, 5, 123456, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 58, 500001, tzinfo=UTC),  # before 1970
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # past what a float keeps exact
    ]
    if engine.dialect.name == "postgresql":  # SQLite keeps the wall time and drops the offset
        moments.append(datetime(2026, 1, 1, 12, 0, 0, 7, tzinfo=timezone(timedelta(hours=5.5))))
    for index, moment in enumerate(moments):
        await writer.write(
            Insert(_documents, {"sample_id": f"t{index}", "doc": None, "at": moment})
        )
    async with engine.connect() as connection:
        stored = dict(
            (await connection.execute(select(_documents.c.sample_id, _documents.c.at))).all()
        )
    for index, moment in enumerate(moments):
        at = stored[f"t{index}"]
        assert (at if at.tzinfo else at.replace(tzinfo=UTC)) == moment


async def outbox_marks(engine: AsyncEngine) -> list[tuple[str, int, bool]]:
    columns = (outbox_events.c.event_id, outbox_events.c.attempts, outbox_events.c.published_at)
    async with engine.connect() as connection:
        rows = (await connection.execute(select(*columns).order_by(columns[0]))).all()
    return [(row[0], row[1], row[2] is not None) for row in rows]


async def test_marks_and_inserts_commit_together(engine: AsyncEngine, writer: BatchWriter) -> None:
    # The relay's "published" marks ride along with the next batch of new rows (on PostgreSQL
    # the whole batch is one statement).
    await writer.write(outbox_row("a"), outbox_row("b"))
    marks = UpdateAll(
        outbox_events, "event_id", ["a", "b"], {"attempts": 1, "published_at": utc_now()}
    )
    await writer.write(marks, outbox_row("c"), consumed("c"))
    assert await outbox_marks(engine) == [("a", 1, True), ("b", 1, True), ("c", 0, False)]
    assert await stored_ids(engine) == {"c"}


async def test_a_mark_sees_a_row_inserted_in_the_same_batch(
    engine: AsyncEngine, writer: BatchWriter
) -> None:
    # One statement's parts do not see each other's rows, so such a batch takes the
    # transaction path, where the update follows the insert.
    mark = UpdateAll(outbox_events, "event_id", ["new"], {"attempts": 2, "published_at": utc_now()})
    assert batch_statement(engine.dialect, group_writes([outbox_row("new"), mark])) is None
    await writer.write(outbox_row("new"), mark)
    assert await outbox_marks(engine) == [("new", 2, True)]


async def test_inserts_and_marks_are_one_statement_on_postgres(
    postgres_engine: AsyncEngine,
) -> None:
    mark = UpdateAll(outbox_events, "event_id", ["old"], {"attempts": 1, "published_at": utc_now()})
    writes = [outbox_row("x"), consumed("x"), outbox_row("y"), mark]
    statement = batch_statement(postgres_engine.dialect, group_writes(writes))
    assert statement is not None
    sql, arguments = statement
    assert sql.startswith("WITH ") and sql.count("INSERT INTO") == 2 and "UPDATE" in sql
    assert arguments[-1] == ["old"]
    # A transparency log's queued leaf (bytes) joins the statement too.
    leaf = {"log_id": 1, "leaf_hash": bytes(32), "data": b"\x00\xff", "queued_at": utc_now()}
    queued = batch_statement(
        postgres_engine.dialect, group_writes([*writes, Insert(tlog_queue, leaf)])
    )
    assert queued is not None and queued[0].count("INSERT INTO") == 3
    # A plain Update (executemany semantics, one row after another) keeps the transaction path.
    update = Update(outbox_events, "event_id", {"event_id": "x", "attempts": 3})
    assert batch_statement(postgres_engine.dialect, group_writes([*writes, update])) is None


async def test_an_over_long_value_is_refused_not_cut(postgres_engine: AsyncEngine) -> None:
    writer = BatchWriter(postgres_engine)
    await writer.start()
    try:
        with pytest.raises(DBAPIError, match="too long"):
            await writer.write(consumed("x" * 37))  # event_id is VARCHAR(36)
        await writer.write(consumed("y" * 36))
    finally:
        await writer.stop()
    assert await stored_ids(postgres_engine) == {"y" * 36}


async def test_a_mark_with_an_over_long_key_matches_nothing(
    engine: AsyncEngine, writer: BatchWriter
) -> None:
    await writer.write(outbox_row("k" * 36))
    mark = UpdateAll(outbox_events, "event_id", ["k" * 37], {"attempts": 9})
    await writer.write(mark)  # one statement on PostgreSQL
    await writer.write(mark, outbox_row("other"))  # with an insert: still one statement
    assert await outbox_marks(engine) == [("k" * 36, 0, False), ("other", 0, False)]


async def test_prepared_statements_are_planned_with_their_values(
    postgres_engine: AsyncEngine,
) -> None:
    # A generic plan made while the outbox was nearly empty scanned the whole table for every
    # later "published" mark (10 ms to 1 s per commit under load) until autovacuum analyzed it.
    async with postgres_engine.connect() as connection:
        mode = await connection.scalar(text("SHOW plan_cache_mode"))
    assert mode == "force_custom_plan"


async def test_stop_commits_what_is_queued(engine: AsyncEngine) -> None:
    writer = BatchWriter(engine)
    await writer.start()
    ids = [str(uuid.uuid4()) for _ in range(20)]
    tasks = [asyncio.create_task(writer.write(consumed(event_id))) for event_id in ids]
    await asyncio.sleep(0)  # the writes are queued, not yet committed
    await writer.stop()
    await asyncio.gather(*tasks)
    assert await stored_ids(engine) == set(ids)


async def test_unreachable_store_raises_store_unavailable() -> None:
    engine = create_engine("postgresql+asyncpg://postgres@127.0.0.1:1/test")
    writer = BatchWriter(engine)
    await writer.start()
    try:
        results = await asyncio.gather(
            writer.write(consumed("a")), writer.write(consumed("b")), return_exceptions=True
        )
        assert all(isinstance(result, StoreUnavailable) for result in results)
    finally:
        await writer.stop()
        await engine.dispose()


async def test_write_before_start_is_refused(engine: AsyncEngine) -> None:
    with pytest.raises(RuntimeError, match="start"):
        await BatchWriter(engine).write(consumed("a"))
    async with engine.connect() as connection:
        assert await connection.scalar(select(func.count()).select_from(consumed_events)) == 0


async def test_writes_to_several_tables_commit_atomically(
    engine: AsyncEngine, writer: BatchWriter
) -> None:
    # On PostgreSQL each table's rows go through a COPY of their own: the first must not commit
    # when the second fails.
    await writer.write(consumed("taken"))
    with pytest.raises(IntegrityError):
        await writer.write(outbox_row("lost"), consumed("taken"))
    async with engine.connect() as connection:
        assert await connection.scalar(select(func.count()).select_from(outbox_events)) == 0
    assert await stored_ids(engine) == {"taken"}


_samples = MetaData()
_documents = Table(
    "batch_writer_samples",
    _samples,
    Column("sample_id", String(36), primary_key=True),
    Column("doc", JSON, nullable=True),
    Column("count", Integer, nullable=False, default=5),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("note", Text, nullable=True),
    Column("blob", LargeBinary, nullable=True),
    Column("ratio", Float, nullable=True),
    Column("big", BigInteger, nullable=True),
)
_stamped = Table(
    "batch_writer_stamped",
    _samples,
    Column("sample_id", String(36), primary_key=True),
    Column("stamp", String(36), nullable=False, default=lambda: "made-in-python"),
)


@pytest.fixture
async def sample_tables(engine: AsyncEngine) -> AsyncIterator[None]:
    async with engine.begin() as connection:
        await connection.run_sync(_samples.create_all)
    yield
    async with engine.begin() as connection:
        await connection.run_sync(_samples.drop_all)


async def test_rows_are_stored_as_sqlalchemy_stores_them(
    engine: AsyncEngine, writer: BatchWriter, sample_tables: None
) -> None:
    moment = utc_now()
    samples = [
        {"doc": None, "at": moment, "note": None, "blob": None},
        {
            "doc": {"a": [1, "é", None], "b": {"c": 1.5}},
            "at": moment,
            "note": "x\ty\nz\\",
            "blob": bytes(range(256)),
        },
        {"doc": [], "at": moment, "note": "", "blob": b""},
    ]
    for index, values in enumerate(samples):
        await writer.write(Insert(_documents, {"sample_id": f"w{index}", **values}))
    async with engine.begin() as connection:
        for index, values in enumerate(samples):
            await connection.execute(_documents.insert(), {"sample_id": f"s{index}", **values})
    await writer.write(Insert(_stamped, {"sample_id": "w"}))

    columns = (
        _documents.c.doc.cast(Text), _documents.c.doc.is_(None), _documents.c.count,
        _documents.c.at, _documents.c.note, _documents.c.blob,
    )  # fmt: skip
    async with engine.connect() as connection:
        rows = {
            row[0]: tuple(row[1:])
            for row in await connection.execute(select(_documents.c.sample_id, *columns))
        }
        stamp = await connection.scalar(select(_stamped.c.stamp))
    for index in range(len(samples)):
        assert rows[f"w{index}"] == rows[f"s{index}"]
    assert rows["w0"][1] is False  # a None in a JSON column is JSON null, as SQLAlchemy stores it
    stored_at = rows["w1"][3]  # SQLite hands timestamps back without their zone
    assert rows["w1"][2] == 5
    assert (stored_at if stored_at.tzinfo else stored_at.replace(tzinfo=UTC)) == moment
    assert stamp == "made-in-python"  # a Python-computed default still applies
    assert [rows[f"w{index}"][5] for index in range(3)] == [None, bytes(range(256)), b""]


class _Mood(enum.StrEnum):
    CALM = "calm"


async def test_values_json_encoders_spell_differently_are_stored_as_sqlalchemy_stores_them(
    engine: AsyncEngine, writer: BatchWriter, sample_tables: None
) -> None:
    # The one-statement path writes its rows with orjson, which spells some values otherwise
    # than json.dumps (a NaN as null, no integers past 64 bits, a str subclass as text): each
    # such row must be stored exactly as SQLAlchemy's own insert stores it, or refused alike.
    moment = utc_now()
    samples = [
        {"ratio": float("nan"), "big": 2**63 - 1},
        {"ratio": float("inf"), "big": -(2**63)},
        {"ratio": float("-inf"), "note": _Mood.CALM},
        {"ratio": 1e16, "doc": {"k": 1e16, "big": 2**70, "tiny": 5e-324, "neg": -0.0}},
        {"ratio": -0.0, "note": "line\u2028separator, \U0001f600, \x7f"},
        {"ratio": 5e-324, "blob": b"\x00text"},
    ]
    writes = [
        Insert(_documents, {"sample_id": f"w{i}", "at": moment, **v}) for i, v in enumerate(samples)
    ]
    await asyncio.gather(*(writer.write(write) for write in writes))
    async with engine.begin() as connection:
        for index, values in enumerate(samples):
            await connection.execute(
                _documents.insert(), {"sample_id": f"s{index}", "at": moment, **values}
            )
    columns = (
        _documents.c.doc.cast(Text), _documents.c.note, _documents.c.blob, _documents.c.ratio,
        _documents.c.big,
    )  # fmt: skip
    async with engine.connect() as connection:
        rows = {
            row[0]: repr(tuple(row[1:]))  # repr: a NaN equals no other NaN
            for row in await connection.execute(select(_documents.c.sample_id, *columns))
        }
    for index in range(len(samples)):
        assert rows[f"w{index}"] == rows[f"s{index}"]
    assert "'calm'" in rows["w2"]
    if engine.dialect.name == "postgresql":  # SQLite stores a NaN as NULL
        assert "nan" in rows["w0"] and "inf" in rows["w1"]
