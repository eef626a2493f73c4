"""The group commit's one statement takes a value only when its type is exactly what its column
holds: anything else (a NaN where text belongs, an enum, a UUID, text where a number belongs) is
stored or refused exactly as SQLAlchemy's own insert stores or refuses it. A subclass of the
column's type travels as the driver reads it: the cases of an outside attack (an int subclass's
own ``__int__``, a float subclass's own double rather than its ``__float__``, Decimal, Fraction,
numpy scalars, enums and flags), and a refused row does not fail its neighbour in the batch."""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    select,
)
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
    Column("real", Float, nullable=True),
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


class IntOwnInt(int):
    def __int__(self) -> int:  # asyncpg's int4/int8 encoders call int(obj) for non-exact ints
        return 7


class IntRaisingInt(int):
    def __int__(self) -> int:
        raise ValueError("no")


class IntOwnIndex(int):
    def __index__(self) -> int:
        return 9


class IntOwnFloat(int):
    def __float__(self) -> float:
        return 2.5


class FloatOwnFloat(float):
    def __float__(self) -> float:  # asyncpg's PyFloat_AsDouble reads the stored double
        return 2.5


class NanShownAsOne(float):
    def __float__(self) -> float:
        return 1.0


class OneShownAsNan(float):
    def __float__(self) -> float:
        return float("nan")


class FloatOwnRepr(float):
    def __repr__(self) -> str:
        return "999.0"


class StrOwnAll(str):
    def __str__(self) -> str:
        return "other"

    def __len__(self) -> int:
        return 0

    def encode(self, *a, **k):  # type: ignore[override]
        return b"other"

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 1


class Color(enum.Flag):
    RED = 1


class Perm(enum.IntFlag):
    R = 4


class Name(enum.StrEnum):
    A = "a"


CASES = {
    "intsub-__int__-int": {"count": IntOwnInt(3)},
    "intsub-__int__-bigint": {"big": IntOwnInt(3)},
    "intsub-__int__raises-int": {"count": IntRaisingInt(3)},
    "intsub-__index__-int": {"count": IntOwnIndex(3)},
    "intsub-__float__-float": {"real": IntOwnFloat(3)},
    "floatsub-__float__-float": {"real": FloatOwnFloat(1.5)},
    "floatsub-nan-shown-as-one": {"real": NanShownAsOne("nan")},
    "floatsub-one-shown-as-nan": {"real": OneShownAsNan(1.0)},
    "floatsub-repr": {"real": FloatOwnRepr(1.5)},
    "floatsub-inf": {"real": FloatOwnRepr("inf")},
    "strsub-all": {"note": StrOwnAll("abc")},
    "strsub-surrogate": {"note": StrOwnAll("a\ud800")},
    "strsub-nul": {"note": StrOwnAll("a\x00b")},
    "str-nul": {"note": "a\x00b"},
    "strenum": {"note": Name.A},
    "intflag-int": {"count": Perm.R},
    "flag-int": {"count": Color.RED},
    "bool-int": {"count": True},
    "bool-float": {"real": True},
    "bool-bool": {"flag": True},
    "huge-float": {"real": 2**1100},
    "huge-bigint": {"big": 2**70},
    "int-overflow-int": {"count": 2**40},
    "intsub-overflow-int": {"count": IntOwnIndex(2**40)},
    "decimal-float": {"real": Decimal("1.1")},
    "decimal-int": {"count": Decimal("5.7")},
    "fraction-float": {"real": Fraction(1, 3)},
    "fraction-int": {"count": Fraction(7, 2)},
    "np-int64-int": {"count": np.int64(5)},
    "np-float32-float": {"real": np.float32(0.1)},
    "np-float64-float": {"real": np.float64(0.1)},
    "np-float64-nan": {"real": np.float64("nan")},
    "np-bool-bool": {"flag": np.bool_(True)},
    "np-bool-int": {"count": np.bool_(True)},
    "np-str-text": {"note": np.str_("x")},
    "np-float64-int": {"count": np.float64(5.5)},
}


@pytest.mark.parametrize("values", list(CASES.values()), ids=list(CASES))
async def test_each_value_is_stored_as_sqlalchemys_insert_stores_it(
    engine: AsyncEngine, writer: BatchWriter, table: None, values: dict
) -> None:
    statement = batch_statement(
        engine.dialect, group_writes([Insert(_rows, {"row_id": "x", **values})])
    )
    expected = await _sqlalchemy_outcome(engine, values)
    got = await _writer_outcome(engine, writer, values)
    assert got == expected, f"one-statement={'yes' if statement else 'no'}"


@pytest.mark.parametrize(
    "bad",
    [{"note": "a\x00b"}, {"count": 2**40}, {"real": OneShownAsNan(1.0)}],
    ids=["nul", "overflow", "nan-sub"],
)
async def test_a_refused_row_does_not_fail_its_neighbour(
    engine: AsyncEngine, writer: BatchWriter, table: None, bad: dict
) -> None:
    results = await asyncio.gather(
        writer.write(Insert(_rows, {"row_id": "good", "note": "ok"})),
        writer.write(Insert(_rows, {"row_id": "bad", **bad})),
        return_exceptions=True,
    )
    assert not isinstance(results[0], BaseException), results
    async with engine.begin() as connection:
        ids = sorted((await connection.execute(select(_rows.c.row_id))).scalars())
    assert "good" in ids
