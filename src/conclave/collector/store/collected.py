"""SQL of collected records: the structured store and its vector-pending flags."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Integer,
    String,
    Text,
    any_,
    bindparam,
    cast,
    column,
    func,
    literal_column,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Select, Update

from conclave.collector.records import CollectedRecord, CollectionSize, PendingVector
from conclave.collector.store.executor import Executor, all_rows, alone, first_row, is_sqlite
from conclave.collector.store.tables import records


def text_arrays(alias: str, **columns: str) -> Any:
    """A derived table of text arrays bound side by side (``unnest``): parameter name -> column
    name, in order. PostgreSQL only."""
    unnest = func.unnest(*(bindparam(name, type_=postgresql.ARRAY(Text)) for name in columns))
    named = unnest.table_valued(*(column(name, Text) for name in columns.values()))
    return named.render_derived(alias)


def _by_keys(
    executor: Executor, collection: str, keys: Sequence[str], *columns: Any
) -> Select[Any]:
    """``columns`` of the records of ``collection`` whose key is among ``keys``.

    On PostgreSQL each key is one primary-key probe (a lateral join over the key array). A plain
    ``record_key IN (...)`` is planned from the table's statistics, and while a bulk load runs
    they still describe the table as nearly empty (autovacuum analyses it a minute later at the
    earliest): the plan then reads every record of the collection and filters, for each batch of
    keys, which made a bulk discovery quadratic, nearly all of its time spent in this lookup.
    SQLite has no lateral joins and always probes its primary key for ``IN``.
    """
    if is_sqlite(executor):
        return select(*columns).where(
            records.c.collection == collection, records.c.record_key.in_(list(keys))
        )
    wanted = (
        func.unnest(bindparam("keys", list(keys), type_=postgresql.ARRAY(String)))
        .table_valued("key")
        .render_derived("wanted")
    )
    probe = (
        select(*columns)
        .where(records.c.collection == collection, records.c.record_key == wanted.c.key)
        .limit(1)
        .lateral("probe")
    )
    return select(probe).select_from(wanted).join(probe, true())


async def stored_versions(
    executor: Executor, collection: str, keys: Sequence[str]
) -> dict[str, tuple[str, str | None]]:
    """``record_key -> (content_hash, owner)`` of the given keys that are already stored."""
    if not keys:
        return {}
    statement = _by_keys(
        executor, collection, keys, records.c.record_key, records.c.content_hash, records.c.owner
    )
    return {
        row.record_key: (row.content_hash, row.owner) for row in await all_rows(executor, statement)
    }


def is_changed(stored: Any, incoming: Any) -> Any:
    """Whether an upsert rewrites the stored record: new content, or another owner (a record
    bound before owners existed, or a pack whose record changed hands)."""
    return (stored.content_hash != incoming.content_hash) | stored.owner.is_distinct_from(
        incoming.owner
    )


def changed_record_values(insert: postgresql.Insert | sqlite.Insert) -> dict[str, Any]:
    """What an upsert of records sets on a stored record whose content changed: its new
    content, where it came from, when, and its vector flagged pending."""
    return {
        "content_hash": insert.excluded.content_hash,
        "data": insert.excluded.data,
        "source": insert.excluded.source,
        "expedition_id": insert.excluded.expedition_id,
        "correlation_id": insert.excluded.correlation_id,
        "owner": insert.excluded.owner,
        "vector_pending": True,
        "updated_at": insert.excluded.updated_at,
    }


async def upsert_records(connection: AsyncConnection, rows: Sequence[CollectedRecord]) -> None:
    """Insert or update records by (collection, key); a row whose content is unchanged is left
    alone, so binding the same data twice changes nothing (re-runs are idempotent)."""
    if not rows:
        return
    dialect = postgresql if not is_sqlite(connection) else sqlite
    statement = dialect.insert(records)
    statement = statement.on_conflict_do_update(
        index_elements=[records.c.collection, records.c.record_key],
        set_=changed_record_values(statement),
        where=is_changed(records.c, statement.excluded),
    )
    await connection.execute(statement, [row.values() for row in rows])


async def get_record(
    executor: Executor, collection: str, key: str, reader: str | None = None
) -> CollectedRecord | None:
    """One record, or ``None`` (also when ``reader``, a user id, may not read it)."""
    row = await first_row(
        executor,
        select(records).where(records.c.collection == collection, records.c.record_key == key),
    )
    record = CollectedRecord.from_row(row) if row is not None else None
    return record if record is not None and record.visible_to(reader) else None


async def get_records(
    executor: Executor, collection: str, keys: Sequence[str], reader: str | None = None
) -> list[CollectedRecord]:
    """The stored records among ``keys`` (those ``reader``, a user id, may read)."""
    if not keys:
        return []
    rows = await all_rows(executor, _by_keys(executor, collection, keys, *records.c))
    found = (CollectedRecord.from_row(row) for row in rows)
    return [record for record in found if record.visible_to(reader)]


async def stored_documents(
    executor: Executor, collection: str, keys: Sequence[str]
) -> Sequence[Row[Any]]:
    """Rows ``(record_key, content_hash, document)`` of the stored records among ``keys``, the
    document being the JSON text of the data: what an inspection needs, without the other
    columns or decoding the data."""
    if not keys:
        return []
    statement = _by_keys(
        executor,
        collection,
        keys,
        records.c.record_key,
        records.c.content_hash,
        cast(records.c.data, Text).label("document"),
    )
    return await all_rows(executor, statement)


def _readable_by(reader: str) -> Any:
    """The records user ``reader`` may read in a collection they may read: SQL of
    :meth:`CollectedRecord.visible_to`."""
    return records.c.owner.is_(None) | (records.c.owner == reader)


async def collection_counts(engine: AsyncEngine, reader: str | None = None) -> list[CollectionSize]:
    """Records, pending vectors and newest update of each collection, by name; with
    ``reader`` (a user id), of the records that user may read."""
    pending = func.sum(cast(records.c.vector_pending, Integer))
    statement = select(
        records.c.collection,
        func.count().label("records"),
        pending.label("pending"),
        func.max(records.c.updated_at).label("updated_at"),
    )
    if reader is not None:
        statement = statement.where(_readable_by(reader))
    rows = await all_rows(
        engine, statement.group_by(records.c.collection).order_by(records.c.collection)
    )
    return [
        CollectionSize(row.collection, int(row.records), int(row.pending or 0), row.updated_at)
        for row in rows
    ]


async def total_records(
    engine: AsyncEngine, reader: str | None = None, collections: Sequence[str] = ()
) -> int:
    """Records in the structured store, all collections; with ``reader`` (a user id), those of
    ``collections`` that user may read."""
    statement = select(func.count()).select_from(records)
    if reader is not None:
        statement = statement.where(
            records.c.collection.in_(list(collections)), _readable_by(reader)
        )
    row = await first_row(engine, statement)
    return int(row[0]) if row else 0


INDEX_SCAN_ONLY = text(
    "SELECT set_config('enable_seqscan', 'off', true), "
    "set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)"
)
"""Run before :func:`pending_statement` on PostgreSQL, in the same transaction (``SET LOCAL``
of the three, in one statement)."""


def pending_statement(limit: int, after: PendingVector | None = None) -> Select[Any]:
    """The page of pending records :func:`pending_vectors` reads."""
    statement = select(
        records.c.collection,
        records.c.record_key,
        records.c.content_hash,
        records.c.updated_at,
        cast(records.c.data, Text).label("document"),
        records.c.owner,
    ).where(records.c.vector_pending)  # the partial index's own predicate (not ``IS true``)
    order = (records.c.updated_at, records.c.collection, records.c.record_key)
    if after is not None:
        statement = statement.where(
            tuple_(*order) > tuple_(after.updated_at, after.collection, after.record_key)
        )
    return statement.order_by(*order).limit(limit)


async def pending_vectors(
    engine: AsyncEngine, limit: int, after: PendingVector | None = None
) -> list[PendingVector]:
    """Up to ``limit`` records whose vector has not been written (or is out of date), oldest
    write first (``updated_at``, then collection and key), starting after the record ``after``;
    their data as JSON text.

    The partial index of pending records answers this as a range scan in its own order: no
    pending row is sorted, one sweep pages through the backlog with no page read twice (an
    indexer can read the next page while the previous one is written), and a record written
    during a bulk load of another collection waits only for what was written before it. The
    data is not decoded here, on the event loop: the indexer decodes it on a worker thread while
    it builds the texts."""
    statement = pending_statement(limit, after)
    if is_sqlite(engine):
        rows = await all_rows(engine, statement)
    else:
        async with engine.begin() as connection:
            # Only the ordered scan of the partial index is right here. During a bulk load the
            # table's statistics still describe it nearly empty, and with a page's starting
            # point PostgreSQL then chose to read the whole table, or every pending row after
            # that point, and sort them, for every page.
            await connection.execute(INDEX_SCAN_ONLY)
            rows = (await connection.execute(statement)).all()
    return [
        PendingVector(
            row.collection,
            row.record_key,
            row.content_hash,
            row.updated_at,
            row.document,
            row.owner,
        )
        for row in rows
    ]


def _set_pending(pending: bool, *, of_hash: bool) -> Update:
    """The flag update of one record by primary key (and content hash when ``of_hash``), to
    run as one executemany over ``b_collection``/``b_key``(/``b_hash``) parameters.

    One primary-key lookup per record: a row-value ``IN`` list of (collection, key, hash) triples
    is not matched against the primary key, and PostgreSQL scanned the whole table for every
    batch, which made indexing quadratic in the collection size."""
    conditions = [
        records.c.collection == bindparam("b_collection"),
        records.c.record_key == bindparam("b_key"),
    ]
    if of_hash:
        conditions.append(records.c.content_hash == bindparam("b_hash"))
    return update(records).where(*conditions).values(vector_pending=pending)


def _clear_pending_statement() -> Update:
    """Clear the flags of the records ``(collections[i], keys[i], hashes[i])`` in one statement.

    Each record is found by one primary-key probe (a lateral ``LIMIT 1``: a join from the
    arrays would be planned from the table's statistics, which a bulk load leaves describing a
    nearly empty table, and then read the whole table), and updated by its row address. A
    record changed after the probe's snapshot is a new row version at another address, so it
    is left pending, as a record whose hash differs is."""
    written = text_arrays(
        "written", collections="collection", keys="record_key", hashes="content_hash"
    )
    stored = records.alias("stored")
    probe = (
        select(literal_column("stored.ctid").label("address"))
        .select_from(stored)
        .where(
            stored.c.collection == written.c.collection,
            stored.c.record_key == written.c.record_key,
            stored.c.content_hash == written.c.content_hash,
        )
        .limit(1)
        .lateral("probe")
    )
    addresses = select(probe.c.address).select_from(written.join(probe, true())).scalar_subquery()
    # "ctid = ANY (ARRAY(SELECT ...))": compared with an array of addresses, PostgreSQL fetches
    # the rows by address (a join on ctid could be planned as a scan of the whole table).
    # The row's own (collection, key, hash) is checked again as a filter: when a writer changes a
    # record while this statement waits for its lock, PostgreSQL re-evaluates the filters on the
    # new row version, and releases before the 2025 fix of TID-scan rechecks did not re-check the
    # address, so without this the new content's flag was cleared with the old vector written.
    return (
        update(records)
        .where(literal_column("ctid") == any_(func.array(addresses)))
        .where(_identity(records) == any_(bindparam("identities", type_=postgresql.ARRAY(Text))))
        .values(vector_pending=False)
    )


def _identity(table: Any) -> Any:
    """One text per (collection, key, hash), unambiguous: lengths before the free-form parts."""
    return func.concat(
        func.length(table.c.collection), ":", table.c.collection,
        func.length(table.c.record_key), ":", table.c.record_key, table.c.content_hash,
    )  # fmt: skip


def _identity_of(collection: str, key: str, content_hash: str) -> str:
    """:func:`_identity` in Python (PostgreSQL's ``length`` counts characters, as ``len``)."""
    return f"{len(collection)}:{collection}{len(key)}:{key}{content_hash}"


_CLEAR_PENDING = _clear_pending_statement()


async def mark_indexed(engine: AsyncEngine, written: Sequence[tuple[str, str, str]]) -> None:
    """Clear the pending flag of ``(collection, key, content_hash)`` whose vector was written;
    a record changed meanwhile (other hash) stays pending for its new content.

    On PostgreSQL one statement (:func:`_clear_pending_statement`): an ``executemany`` of a
    thousand single-row updates was planned a thousand times (every execution of a prepared
    statement is planned with its values, see ``platform/db/engine.py``)."""
    if not written:
        return
    if is_sqlite(engine):
        params = [{"b_collection": c, "b_key": k, "b_hash": h} for c, k, h in written]
        async with engine.begin() as connection:
            await connection.execute(_set_pending(False, of_hash=True), params)
        return
    collections, keys, hashes = (list(values) for values in zip(*written, strict=True))
    async with alone(engine) as connection:
        identities = [_identity_of(c, k, h) for c, k, h in written]
        await connection.execute(
            _CLEAR_PENDING,
            {"collections": collections, "keys": keys, "hashes": hashes, "identities": identities},
        )


async def mark_pending(connection: AsyncConnection, collection: str, keys: Sequence[str]) -> None:
    """Flag records for (re)writing their vector, one primary-key update per key."""
    if not keys:
        return
    params = [{"b_collection": collection, "b_key": k} for k in keys]
    await connection.execute(_set_pending(True, of_hash=False), params)


async def mark_all_pending(engine: AsyncEngine) -> int:
    """Flag every record for rewriting its vector (semantic memory was created empty); return
    how many records there are."""
    async with engine.begin() as connection:
        await connection.execute(
            update(records).where(records.c.vector_pending.is_(False)).values(vector_pending=True)
        )
    return await total_records(engine)


async def repair_hash(
    connection: AsyncConnection, collection: str, key: str, content_hash: str, now: datetime
) -> None:
    """Store the recomputed hash of a record whose stored hash no longer matches its data."""
    await connection.execute(
        update(records)
        .where(records.c.collection == collection, records.c.record_key == key)
        .values(content_hash=content_hash, vector_pending=True, updated_at=now)
    )


async def iter_collection(
    engine: AsyncEngine, collection: str, *, after: str | None, limit: int
) -> list[CollectedRecord]:
    """One page of a collection's records in key order (audits walk collections this way)."""
    statement = select(records).where(records.c.collection == collection)
    if after is not None:
        statement = statement.where(records.c.record_key > after)
    rows = await all_rows(engine, statement.order_by(records.c.record_key).limit(limit))
    return [CollectedRecord.from_row(row) for row in rows]
