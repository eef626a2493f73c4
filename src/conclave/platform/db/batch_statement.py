"""A whole group commit as one PostgreSQL statement: one round trip, one implicit transaction.

Each group of inserts becomes ``INSERT INTO t (...) SELECT ... FROM jsonb_array_elements($1)``
(the group's rows as one JSON array of arrays), each "set these values on these keys" write
``UPDATE t SET ... WHERE key = ANY($n)``; they are joined as data-modifying ``WITH`` clauses.
Sent on a connection with no transaction open, PostgreSQL runs the statement as a transaction of
its own and answers once it is committed (durably, under the server's ``synchronous_commit``).
The transaction path it replaces sent ``BEGIN``, a ``COPY`` per table (two round trips each), the
updates and ``COMMIT``: six or seven round trips per commit, each one waiting for the service's
busy event loop to read the answer.

All parts of one statement see the same snapshot and none sees another's rows, so a batch goes this
way only when no part depends on another (see :func:`batch_statement`); otherwise, and for tables
with Python-computed defaults or column types not read here, the writer keeps the transaction path.

Rows are stored as SQLAlchemy stores them: values go through each column's bind processor first
(a JSON column's value travels as SQLAlchemy's own text of it, so the stored text is the same and a
``None`` is JSON ``null``), text is not cast to the column's length (storing checks it), scalar
defaults apply. Why one JSON parameter per table: an array parameter per column cost the driver a
type check and a conversion per value (a share of the gateway's CPU per call worth saving); as
``jsonb`` the server parses each row once (as ``json``, every ``->>`` re-read the row's text, and
PostgreSQL's CPU per call grew: docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Enum,
    Float,
    Integer,
    LargeBinary,
    String,
    Table,
)

from conclave.platform.db.driver_writes import InsertPlan, Numbering, RowWrite, UpdateAllPlan

Reader = Callable[[Any], Any]
Reading = tuple[str, Reader | None, "Exact | None"]
"""A column's expression in the statement, its maker, and the types its value may have."""

# The rows' document is read by PostgreSQL only, so any spelling of the same JSON will do: orjson
# writes it five to twenty times faster than the standard library (a batch's JSON columns travel as
# escaped text, its binary columns as hexadecimal: docs/benchmarks.md, round 10). It writes some
# values json.dumps refused (a NaN as null, an enum or a UUID as its value), so a value reaches it
# only as exactly what its column holds (:func:`_reader`'s third member: text for text, an int for
# an integer, a finite float for a float; a subclass as its plain value, as the driver stores
# it); anything else, and what orjson still refuses (an integer beyond 64 bits, text that is no
# UTF-8: a lone surrogate), sends the batch down the transaction path, where SQLAlchemy stores or
# refuses it as it always did.
_PASS_THROUGH = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _document(rows: list[list[Any]]) -> str:
    return orjson.dumps(rows, option=_PASS_THROUGH).decode()


def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("NaN and infinities are not JSON")
    return value


def _as_text(value: Any) -> str:
    # A str subclass (a StrEnum member: a failed call's error code) is stored as its characters,
    # as the driver stores it; its own __str__ is not asked.
    if isinstance(value, str):
        return str.__str__(value)
    raise TypeError("not text")


def _as_whole(value: Any) -> int:
    # An IntEnum member (an HTTP status), a bool: as the driver takes them, through int(), which
    # asks a subclass's own __int__ (and fails where it fails).
    if isinstance(value, int):
        try:
            whole = int(value)
        except Exception as error:
            raise TypeError("not an integer") from error
        if type(whole) is int:
            return whole
    raise TypeError("not an integer")


def _as_truth(value: Any) -> bool:
    raise TypeError("not a bool")  # bool has no subclass; the driver refuses anything else


def _as_real(value: Any) -> float:
    # As the driver reads a number for a float column: a float subclass's own double (its
    # __float__ is not asked), an int through its __float__.
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, int):
        return float(value)
    raise TypeError("not a number")


Exact = tuple[frozenset[type], Callable[[Any], Any]]
"""The types a column's value travels as, and what makes any other value one of them (or raises
``TypeError``: the batch then takes the transaction path)."""

_NONE = type(None)
_TEXT: Exact = (frozenset({str, _NONE}), _as_text)
_WHOLE: Exact = (frozenset({int, _NONE}), _as_whole)
_TRUTH: Exact = (frozenset({bool, _NONE}), _as_truth)
_REAL: Exact = (frozenset({float, _NONE}), _as_real)


Group = tuple[str, Table, tuple[str, ...], Sequence[Any]]
"""A kind of write (``"Insert"``, ``"Update"``, ``"UpdateAll"``), its table, the sorted names of
its values and the writes: see :func:`conclave.platform.db.batch.group_writes`."""


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


def _microseconds(value: datetime) -> int:
    """Microseconds since 1970 UTC, exactly (a naive value is UTC, as asyncpg takes it): far
    cheaper than ``isoformat``, and a governed call writes four timestamps."""
    return (value - (_EPOCH if value.tzinfo is not None else _NAIVE_EPOCH)) // _MICROSECOND


def _timestamptz_from(number: str) -> str:
    # Whole seconds and the remaining microseconds, each below 2**53, so the interval products
    # are exact (one product of a microsecond count would not be, after the year 2255).
    return (
        f"(timestamptz 'epoch' + ({number})::bigint / 1000000 * interval '1 second'"
        f" + ({number})::bigint % 1000000 * interval '1 microsecond')"
    )


def _reader(column: Column[Any], dialect: Any, index: int) -> Reading | None:
    """How the statement reads ``column`` from element ``index`` of a row's JSON array, what
    turns the (bind-processed) Python value into JSON first, and the types a value must have to
    travel this way (None: any the maker takes); ``None`` for a column type this path does not
    handle (the batch then takes the transaction path)."""
    kind = column.type
    if isinstance(kind, JSON):  # SQLAlchemy's own text of the value, carried as a JSON string
        return f"(r->>{index})::{kind.compile(dialect=dialect)}", None, None
    if isinstance(kind, LargeBinary):
        # As hexadecimal text, after the column's bind processor (the driver's bytes type).
        return f"decode(r->>{index}, 'hex')", _hex, None
    if kind.dialect_impl(dialect).bind_processor(dialect) is not None or isinstance(kind, Enum):
        return None
    if isinstance(kind, DateTime):
        return (_timestamptz_from(f"r->>{index}"), _microseconds, None) if kind.timezone else None
    if isinstance(kind, String):  # no cast: storing into the column checks its length
        return f"r->>{index}", None, _TEXT
    cast = f"(r->>{index})::{kind.compile(dialect=dialect)}"
    if isinstance(kind, Float):
        return cast, _finite, _REAL
    if isinstance(kind, Boolean):
        return cast, None, _TRUTH
    if isinstance(kind, Integer):
        return cast, None, _WHOLE
    return None


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


class _InsertPart:
    """``INSERT INTO t (...) SELECT ... FROM jsonb_array_elements($n::jsonb) AS rows(r)``: the
    group's rows as one JSON array of arrays."""

    def __init__(self, table: Table, dialect: Any, given: tuple[str, ...], n: Numbering) -> None:
        self._rows = InsertPlan(table, dialect, given)  # columns, scalar defaults, bind processors
        readers = [_reader(table.c[name], dialect, i) for i, name in enumerate(self._rows.columns)]
        self.usable = self._rows.usable and all(readers)
        self._make = [(i, r[1]) for i, r in enumerate(readers) if r is not None and r[1]]
        self._types = [(i, r[2]) for i, r in enumerate(readers) if r is not None and r[2]]
        quote = dialect.identifier_preparer.quote
        columns = ", ".join(quote(column) for column in self._rows.columns)
        values = ", ".join(r[0] for r in readers if r is not None)
        target = dialect.identifier_preparer.format_table(table)
        source = f"jsonb_array_elements({n.next('jsonb')}) AS rows(r)"
        self.sql = f"INSERT INTO {target} ({columns}) SELECT {values} FROM {source}"

    def arguments(self, writes: Sequence[RowWrite]) -> list[Any]:
        rows = [list(record) for record in self._rows.records(writes)]
        for index, (types, exact) in self._types:
            for row in rows:
                if type(row[index]) not in types:
                    row[index] = exact(row[index])
        for index, make in self._make:
            for row in rows:
                row[index] = make(row[index])
        return [_document(rows)]


Shape = tuple[tuple[str, Table, tuple[str, ...], str], ...]
"""Per group: kind, table, value names and the key column of an ``UpdateAll``."""


class _StatementPlan:
    def __init__(self, dialect: Any, shape: Shape) -> None:
        numbering = Numbering()
        self.parts: list[_InsertPart | UpdateAllPlan] = []
        for kind, table, columns, key in shape:
            if kind == "Insert":
                self.parts.append(_InsertPart(table, dialect, columns, numbering))
            else:
                self.parts.append(UpdateAllPlan(table, dialect, key, columns, numbering))
        self.usable = all(part.usable for part in self.parts if isinstance(part, _InsertPart))
        *clauses, main = [part.sql for part in self.parts]
        with_clauses = ", ".join(f"w{index} AS ({sql})" for index, sql in enumerate(clauses))
        self.sql = f"WITH {with_clauses} {main}" if clauses else main


_plans: dict[Shape, _StatementPlan] = {}


def batch_statement(dialect: Any, groups: Sequence[Group]) -> tuple[str, list[Any]] | None:
    """The SQL and arguments applying ``groups`` in one statement, or ``None`` when they cannot
    be: see :func:`_independent`, and a table with a Python-computed default."""
    if not _independent(groups):
        return None
    shape: Shape = tuple(
        (kind, table, columns, writes[0].key if kind == "UpdateAll" else "")
        for kind, table, columns, writes in groups
    )
    plan = _plans.get(shape)
    if plan is None:
        plan = _plans[shape] = _StatementPlan(dialect, shape)
    if not plan.usable:
        return None
    arguments: list[Any] = []
    try:
        for part, (_, _, _, writes) in zip(plan.parts, groups, strict=True):
            if isinstance(part, UpdateAllPlan):
                (write,) = writes  # one per table (see _independent)
                arguments.extend(part.arguments(write.keys, write.values))
            else:
                arguments.extend(part.arguments(writes))
    except (TypeError, ValueError, ArithmeticError, AttributeError, RecursionError):
        return None  # not writable this way: the transaction path stores or refuses it
    return plan.sql, arguments


def _independent(groups: Sequence[Group]) -> bool:
    """True when no part of the statement would need to see another's rows: only inserts and at
    most one ``UpdateAll`` per table, none of whose keys is a row inserted in the same batch."""
    updated: set[Table] = set()
    for kind, table, _, writes in groups:
        if kind == "Insert":
            continue
        if kind != "UpdateAll" or table in updated or len(writes) != 1:
            return False
        updated.add(table)
        (write,) = writes
        inserted = {
            member.values.get(write.key)
            for other_kind, other_table, _, members in groups
            if other_kind == "Insert" and other_table is table
            for member in members
        }
        if not inserted.isdisjoint(write.keys):
            return False
    return True
