"""The group commit's writes sent straight to asyncpg (PostgreSQL), inside the batch's transaction.

SQLAlchemy's ``executemany`` costs Python work per row and statement: preparing the two rows of a
governed call was a large share of the gateway's CPU per call (docs/benchmarks.md). Here inserts
go through ``COPY`` (one per table) and updates through asyncpg's own prepared ``executemany`` of
the SQL SQLAlchemy compiles. Each value is converted by its column's SQLAlchemy bind processor, so
rows are stored exactly as SQLAlchemy stores them (JSON as JSON text, ``None`` in a JSON column
as JSON ``null``, scalar column defaults filled in). A table with a column default computed in
Python keeps SQLAlchemy's path. Errors are the driver's own: the batch writer retries a failed
batch through SQLAlchemy, which raises its usual exceptions (for example ``IntegrityError``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import String, Table, bindparam
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import TypeEngine


class RowWrite(Protocol):
    """A write carrying one row's values by column name (an ``Insert`` or an ``Update``)."""

    @property
    def values(self) -> Mapping[str, Any]: ...


Processor = Callable[[Any], Any] | None


def _processors(table: Table, dialect: Any, names: Sequence[str]) -> list[Processor]:
    return [table.c[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names]


class _Converter:
    """The values of ``names`` from a row's mapping, each through its column's bind processor.

    The values are picked in one ``itemgetter`` call and only the columns that have a processor
    (JSON ones, mostly) are converted: a Python step per column was a measurable share of a
    governed gateway call.
    """

    def __init__(self, names: Sequence[str], processors: list[Processor]) -> None:
        self._pick = operator.itemgetter(*names)
        self._single = len(names) == 1
        self._convert = [(i, process) for i, process in enumerate(processors) if process]

    def __call__(self, values: Mapping[str, Any]) -> list[Any]:
        picked = self._pick(values)
        row = [picked] if self._single else list(picked)
        for index, process in self._convert:
            row[index] = process(row[index])
        return row


class InsertPlan:
    """The columns an insert of rows with the keys ``given`` fills (the given ones, then those
    with a scalar default), and how values convert: shared by ``COPY`` here and by the group
    commit's single statement (:mod:`conclave.platform.db.batch_statement`)."""

    def __init__(self, table: Table, dialect: Any, given: tuple[str, ...]) -> None:
        defaults = {
            column.name: column.default.arg  # type: ignore[attr-defined]
            for column in table.columns
            if column.name not in given and column.default is not None and column.default.is_scalar
        }
        self.usable = all(
            column.name in given or column.name in defaults or column.default is None
            for column in table.columns
        )
        self.columns = [*given, *defaults]
        self.defaults = tuple(defaults.values())
        self._convert = _Converter(given, _processors(table, dialect, given))

    def records(self, writes: Sequence[RowWrite]) -> list[tuple[Any, ...]]:
        convert, defaults = self._convert, self.defaults
        return [(*convert(w.values), *defaults) for w in writes]


class _UpdatePlan:
    """``UPDATE table SET columns WHERE key = ?`` as SQLAlchemy compiles it for asyncpg."""

    def __init__(self, table: Table, dialect: Any, key: str, columns: tuple[str, ...]) -> None:
        statement = (
            table.update()
            .where(table.c[key] == bindparam("k_" + key))
            .values({column: bindparam("v_" + column) for column in columns if column != key})
        )
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        # Parameter names in the order of $1, $2, ... and the column each belongs to.
        self.names = [name[2:] for name in compiled.positiontup or ()]
        self._convert = _Converter(self.names, _processors(table, dialect, self.names))

    def records(self, writes: Sequence[RowWrite]) -> list[list[Any]]:
        return [self._convert(w.values) for w in writes]


def unbounded(kind: TypeEngine[Any]) -> TypeEngine[Any]:
    """``kind`` without a length for parameter casts: an explicit cast to ``VARCHAR(36)`` cuts a
    longer value to 36 characters without a word (and a key cut so could match another row);
    uncast, the column's own length check refuses it."""
    return String() if isinstance(kind, String) else kind


_copy_plans: dict[tuple[str, tuple[str, ...]], InsertPlan] = {}
_update_plans: dict[tuple[str, str, tuple[str, ...]], _UpdatePlan] = {}


async def in_driver_transaction(connection: AsyncConnection) -> Any | None:
    """The asyncpg connection under ``connection``, inside the transaction SQLAlchemy will commit
    or roll back; ``None`` where that cannot be had (then SQLAlchemy's path is used).

    SQLAlchemy's asyncpg adapter sends ``BEGIN`` lazily, before the first statement *it* runs: a
    statement sent first straight to the driver would commit on its own. So the transaction is
    begun through the adapter (a test fails if a second table's failure left the first table's
    rows committed).
    """
    if connection.dialect.name != "postgresql":
        return None
    raw = await connection.get_raw_connection()
    adapter = raw.dbapi_connection
    start = getattr(adapter, "_start_transaction", None)
    if start is None or not hasattr(adapter, "_transaction"):
        return None
    if adapter._transaction is None:  # type: ignore[union-attr]
        await start()
    return raw.driver_connection


async def copy_inserts(driver: Any, dialect: Any, table: Table, writes: Sequence[RowWrite]) -> bool:
    """Insert ``writes`` (all with the same keys) with one ``COPY``; ``False`` (nothing done)
    when the table has a column default computed in Python."""
    given = tuple(sorted(writes[0].values))
    plan = _copy_plans.get((table.name, given))
    if plan is None:
        plan = _copy_plans[(table.name, given)] = InsertPlan(table, dialect, given)
    if not plan.usable:
        return False
    await driver.copy_records_to_table(
        table.name, records=plan.records(writes), columns=plan.columns
    )
    return True


async def execute_updates(
    driver: Any,
    dialect: Any,
    table: Table,
    key: str,
    columns: tuple[str, ...],
    writes: Sequence[RowWrite],
) -> None:
    """Update the row keyed by ``values[key]`` of each of ``writes`` (all with ``columns``)."""
    plan = _update_plans.get((table.name, key, columns))
    if plan is None:
        plan = _update_plans[(table.name, key, columns)] = _UpdatePlan(table, dialect, key, columns)
    await driver.executemany(plan.sql, plan.records(writes))


class Numbering:
    """Hands out ``$1``, ``$2``, ... with their SQL type casts, for a statement made of parts."""

    def __init__(self) -> None:
        self.count = 0

    def next(self, sql_type: str) -> str:
        self.count += 1
        return f"${self.count}::{sql_type}"


def sql_type(table: Table, column: str, dialect: Any) -> str:
    """The parameter cast for ``column``: its type, without a length (:func:`unbounded`)."""
    return str(unbounded(table.c[column].type).compile(dialect=dialect))


class UpdateAllPlan:
    """``UPDATE table SET columns WHERE key = ANY(keys)``, its parameters numbered by ``n`` (on
    its own, or as one part of a group commit's single statement)."""

    def __init__(
        self, table: Table, dialect: Any, key: str, columns: tuple[str, ...], n: Numbering
    ) -> None:
        quote = dialect.identifier_preparer.quote
        assignments = ", ".join(
            f"{quote(column)} = {n.next(sql_type(table, column, dialect))}" for column in columns
        )
        keys = n.next(sql_type(table, key, dialect) + "[]")
        target = dialect.identifier_preparer.format_table(table)
        self.sql = f"UPDATE {target} SET {assignments} WHERE {quote(key)} = ANY({keys})"
        self._convert = _Converter(columns, _processors(table, dialect, columns))

    def arguments(self, keys: Sequence[Any], values: Mapping[str, Any]) -> list[Any]:
        return [*self._convert(values), list(keys)]


_update_all_plans: dict[tuple[str, str, tuple[str, ...]], UpdateAllPlan] = {}


async def execute_update_all(
    driver: Any,
    dialect: Any,
    table: Table,
    key: str,
    keys: Sequence[Any],
    values: Mapping[str, Any],
) -> None:
    """Set ``values`` on the rows whose ``key`` is one of ``keys``, in one statement."""
    columns = tuple(sorted(values))
    plan = _update_all_plans.get((table.name, key, columns))
    if plan is None:
        plan = UpdateAllPlan(table, dialect, key, columns, Numbering())
        _update_all_plans[(table.name, key, columns)] = plan
    await driver.execute(plan.sql, *plan.arguments(keys, values))
