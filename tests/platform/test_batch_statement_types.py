"""The group commit's one statement takes a value only when its type is exactly what its column
holds: anything else (a NaN where text belongs, an enum, a UUID, text where a number belongs) is
stored or refused exactly as SQLAlchemy's own insert stores or refuses it."""

from __future__ import annotations

import enum
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import BigInteger, Boolean, Column, Integer, MetaData, String, Table, Text, select
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.db.batch import BatchWriter, Insert, group_writes
from conclave.platform.db.batch_statement import batch_statement


@pytest.fixture
def engine(postgres_engine: AsyncEngine) -> AsyncEngine:
    return postgres_engine


@pytest.fixture
async def writer(engine: AsyncEngine) -> AsyncIterator[BatchWriter]:
    writer = BatchWriter(engine, max_batch=16)
    await writer.start()
    yield writer
    await writer.stop()


_meta = MetaData()
_rows = Table(
    "batch_orjson_attack",
    _meta,
    Column("row_id", String(36), primary_key=True),
    Column("note", Text, nullable=True),
    Column("count", Integer, nullable=True),
    Column("big", BigInteger, nullable=True),
    Column("flag", Boolean, nullable=True),
)


@pytest.fixture
async def table(engine: AsyncEngine) -> AsyncIterator[None]:
    async with engine.begin() as connection:
        await connection.run_sync(_meta.create_all)
    yield
    async with engine.begin() as connection:
        await connection.run_sync(_meta.drop_all)


class _Plain(enum.Enum):
    A = "plain"


async def _sqlalchemy_outcome(engine: AsyncEngine, values: dict) -> str:
    try:
        async with engine.begin() as connection:
            await connection.execute(_rows.insert(), {"row_id": "s", **values})
    except Exception:
        return "refused"
    async with engine.begin() as connection:
        row = (await connection.execute(select(_rows).where(_rows.c.row_id == "s"))).one()
        await connection.execute(_rows.delete())
    return repr(tuple(row[1:]))


async def _writer_outcome(engine: AsyncEngine, writer: BatchWriter, values: dict) -> str:
    try:
        await writer.write(Insert(_rows, {"row_id": "w", **values}))
    except Exception:
        return "refused"
    async with engine.begin() as connection:
        row = (await connection.execute(select(_rows).where(_rows.c.row_id == "w"))).one()
        await connection.execute(_rows.delete())
    return repr(tuple(row[1:]))


@pytest.mark.parametrize(
    "values",
    [
        {"note": float("nan")},  # orjson writes a NaN as null
        {"count": float("inf")},
        {"big": float("-inf")},
        {"flag": float("nan")},
        {"note": _Plain.A},  # orjson writes an Enum's value; asyncpg refuses it for text
        {"note": uuid.UUID(int=1)},  # orjson writes a UUID; asyncpg refuses it for text
        {"note": {"a": float("nan")}},  # a dict in text: orjson writes {"a":null}
    ],
    ids=["nan-text", "inf-int", "ninf-bigint", "nan-bool", "enum-text", "uuid-text", "dict-nan"],
)
async def test_values_orjson_writes_otherwise_are_stored_or_refused_as_sqlalchemy_does(
    engine: AsyncEngine, writer: BatchWriter, table: None, values: dict
) -> None:
    expected = await _sqlalchemy_outcome(engine, values)
    assert await _writer_outcome(engine, writer, values) == expected


@pytest.mark.parametrize(
    "values",
    [{"count": "5"}, {"note": ["a", 1]}, {"note": 5}, {"count": 5.0}],
    ids=["str-int", "list-text", "int-text", "float-int"],
)
async def test_values_of_another_type_than_the_column_are_not_stored_through_their_json_text(
    engine: AsyncEngine, writer: BatchWriter, table: None, values: dict
) -> None:
    # Through their JSON text, the one statement used to store these where SQLAlchemy refuses
    # them (the text "5" as the number 5, a list as its JSON in a text column).
    expected = await _sqlalchemy_outcome(engine, values)
    assert await _writer_outcome(engine, writer, values) == expected


class _Code(enum.StrEnum):
    TOOL_FAILED = "TOOL_FAILED"

    def __str__(self) -> str:  # the driver stores the characters, not what str() says
        return "shown otherwise"


class _Kind(enum.IntEnum):
    TEAPOT = 418


@pytest.mark.parametrize(
    "values",
    [{"note": _Code.TOOL_FAILED}, {"count": _Kind.TEAPOT}, {"big": True}],
    ids=["str-enum-text", "int-enum-int", "bool-bigint"],
)
async def test_subclasses_of_a_columns_type_stay_in_the_one_statement(
    engine: AsyncEngine, writer: BatchWriter, table: None, values: dict
) -> None:
    # A failed call's error code is a StrEnum member, its status may be an IntEnum: refused by
    # the type check, every batch holding one took the transaction path (six or seven round
    # trips instead of one). They travel as their plain values, stored as the driver stores them.
    statement = batch_statement(
        engine.dialect, group_writes([Insert(_rows, {"row_id": "x", **values})])
    )
    assert statement is not None
    expected = await _sqlalchemy_outcome(engine, values)
    assert await _writer_outcome(engine, writer, values) == expected != "refused"
