"""SQL of binding: a batch of records written into the structured store, in bulk."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    DateTime,
    String,
    bindparam,
    cast,
    func,
    select,
    true,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.selectable import CTE

from conclave.collector.records import BindStats, CollectedRecord, RecordBatch
from conclave.collector.store.collected import (
    changed_record_values,
    is_changed,
    stored_versions,
    text_arrays,
    upsert_records,
)
from conclave.collector.store.executor import alone, is_sqlite
from conclave.collector.store.tables import records
from conclave.platform.jsontext import json_encoder

_stored_json = json_encoder()


def document_text(data: Any) -> str:
    """The JSON text the structured store keeps of ``data``: what SQLAlchemy's JSON type
    writes (``json.dumps`` with its defaults), for the statements that take it as text."""
    return _stored_json(data)


_COLUMNS = [
    records.c.collection,
    records.c.record_key,
    records.c.content_hash,
    records.c.data,
    records.c.source,
    records.c.expedition_id,
    records.c.correlation_id,
    records.c.vector_pending,
    records.c.created_at,
    records.c.updated_at,
    records.c.owner,
]


def _bind_statement(*, new_keys_plainly: bool) -> Select[Any]:
    """Bind a batch in one PostgreSQL statement, and count, against what was stored before it,
    the keys that existed and those whose content was the same.

    The records travel as three arrays (keys, hashes, JSON texts) and what they share once, so
    the statement costs about what one row would to send. Every part of a statement sees the
    same snapshot, so the lookup (``seen``) sees the table as it was before the writes. It
    probes the primary key once per key (a lateral ``LIMIT 1``, as ``_by_keys`` and for the
    same reason: a plan made from the statistics of a table in the middle of a bulk load reads
    the whole collection).

    With ``new_keys_plainly`` the keys the lookup did not find are inserted by a plain
    ``INSERT``, and only the changed ones by an upsert: an upsert inserts speculatively and
    logs a confirmation per row, which made up a fifth of the time PostgreSQL spent on a bulk
    load. A key another writer inserts meanwhile then fails the statement (unique violation),
    and the batch is bound again by the statement without it, which upserts every record.
    """
    given = text_arrays("given", keys="record_key", hashes="content_hash", documents="data")
    incoming = select(given).cte("incoming")
    collection = bindparam("collection", type_=String)
    owner = bindparam("owner", type_=String)
    probe = (
        select(records.c.content_hash, records.c.owner)
        .where(records.c.collection == collection, records.c.record_key == incoming.c.record_key)
        .limit(1)
        .lateral("probe")
    )
    seen = (
        select(
            incoming,
            probe.c.content_hash.label("stored_hash"),
            probe.c.owner.label("stored_owner"),
        )
        .select_from(incoming.outerjoin(probe, true()))
        .cte("seen")
    )
    same = (seen.c.stored_hash == seen.c.content_hash) & seen.c.stored_owner.is_not_distinct_from(
        owner
    )
    if new_keys_plainly:
        writes = [
            _insert(seen, seen.c.stored_hash.is_(None), upsert=False).cte("inserted"),
            # Stored before, and not the same (``same`` alone is not false for a new key).
            _insert(seen, seen.c.stored_hash.is_not(None) & ~same, upsert=True).cte("changed"),
        ]
    else:
        writes = [_insert(seen, true(), upsert=True).cte("written")]
    return select(
        func.count(seen.c.stored_hash).label("existing"),
        func.count().filter(same).label("unchanged"),
        # Referenced, so that the writes are part of the statement at all.
        *(select(func.count()).select_from(write).scalar_subquery() for write in writes),
    ).select_from(seen)


def _insert(seen: CTE, which: ColumnElement[bool], *, upsert: bool) -> ReturningInsert[Any]:
    """Insert the records of ``seen`` that ``which`` selects; with ``upsert``, a stored record
    whose content hash differs is rewritten and one whose hash is the same left alone."""
    at = bindparam("at", type_=DateTime(timezone=True))
    rows = select(
        bindparam("collection", type_=String),
        seen.c.record_key,
        seen.c.content_hash,
        cast(seen.c.data, JSON),
        bindparam("source", type_=String),
        bindparam("expedition_id", type_=String),
        bindparam("correlation_id", type_=String),
        true(),
        at,
        at,
        bindparam("owner", type_=String),
    ).where(which)
    insert = postgresql.insert(records).from_select(_COLUMNS, rows)
    if upsert:
        insert = insert.on_conflict_do_update(
            index_elements=[records.c.collection, records.c.record_key],
            set_=changed_record_values(insert),
            where=is_changed(records.c, insert.excluded),
        )
    return insert.returning(records.c.record_key)


_BIND_NEW_PLAINLY = _bind_statement(new_keys_plainly=True)
_BIND_UPSERTING = _bind_statement(new_keys_plainly=False)


def statement_values(batch: RecordBatch) -> dict[str, Any]:
    """The parameters of the PostgreSQL binding statements for ``batch``."""
    return {
        "keys": batch.keys,
        "hashes": batch.hashes,
        "documents": batch.documents,
        "collection": batch.collection,
        "source": batch.source,
        "expedition_id": batch.expedition_id,
        "correlation_id": batch.correlation_id,
        "at": batch.at,
        "owner": batch.owner,
    }


async def bind_batch(engine: AsyncEngine, batch: RecordBatch) -> BindStats:
    """Store a batch: new records are inserted, records whose content hash changed are
    rewritten, identical ones are left alone (so binding is idempotent); written records are
    flagged for their vector. Committed when it returns.

    On PostgreSQL this is one statement, a transaction of its own (:func:`alone`): one round
    trip, which the caller can leave in flight while it prepares the next batch (a lookup, then
    ``BEGIN``, upsert and ``COMMIT``, were four). SQLite looks the keys up and upserts in one
    transaction."""
    if not batch.keys:
        return BindStats()
    if is_sqlite(engine):
        return await _bind_in_transaction(engine, batch)
    params = statement_values(batch)
    async with alone(engine) as connection:
        try:
            counts = (await connection.execute(_BIND_NEW_PLAINLY, params)).one()
        except IntegrityError:  # another writer inserted one of the keys meanwhile
            counts = (await connection.execute(_BIND_UPSERTING, params)).one()
    existing, unchanged = int(counts.existing), int(counts.unchanged)
    return BindStats(len(batch.keys) - existing, existing - unchanged, unchanged)


async def _bind_in_transaction(engine: AsyncEngine, batch: RecordBatch) -> BindStats:
    stats = BindStats()
    async with engine.begin() as connection:
        existing = await stored_versions(connection, batch.collection, batch.keys)
        rows = []
        for key, content_hash, data in zip(batch.keys, batch.hashes, batch.data, strict=True):
            before = existing.get(key)
            if before == (content_hash, batch.owner):
                stats.unchanged += 1
                continue
            if before is None:
                stats.inserted += 1
            else:
                stats.updated += 1
            rows.append(
                CollectedRecord(
                    collection=batch.collection,
                    record_key=key,
                    content_hash=content_hash,
                    data=data,
                    source=batch.source,
                    expedition_id=batch.expedition_id,
                    correlation_id=batch.correlation_id,
                    vector_pending=True,
                    created_at=batch.at,
                    updated_at=batch.at,
                    owner=batch.owner,
                )
            )
        await upsert_records(connection, rows)
    return stats
