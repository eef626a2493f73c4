"""The records of the collector's tables as its layers pass them: one dataclass per table.

The store builds them from what the database returns and takes them back to write; the fields are
the columns of :mod:`conclave.collector.store.tables` by name. ``Any`` stays only where a column
holds a JSON document (parameters, results, record data).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Self

from sqlalchemy.engine import Row

from conclave.collector.models import Priority, Status

_COLUMN_NAMES: dict[type, tuple[str, ...]] = {}


def _column_names(kind: type) -> tuple[str, ...]:
    names = _COLUMN_NAMES.get(kind)
    if names is None:
        names = _COLUMN_NAMES[kind] = tuple(field.name for field in fields(kind))
    return names


class _Columns:
    """What every row type does: read a row of its table, give its values back to write.

    The fields are the table's columns in the table's order (``tests/collector/test_schema.py``
    holds them to it), so a row converts by position, far cheaper than by name on the pages of a
    thousand records that the indexer and the inspector read."""

    __slots__ = ()

    @classmethod
    def from_row(cls, row: Row[Any]) -> Self:
        """The dataclass of a row selected with every column of its table, in table order."""
        columns: tuple[Any, ...] = tuple(row)
        return cls(*columns)

    def values(self) -> dict[str, Any]:
        """Column values, to write (JSON documents are not copied: a write only reads them)."""
        return {name: getattr(self, name) for name in _column_names(type(self))}


@dataclass(slots=True)
class ExpeditionRecord(_Columns):
    """One expedition: the record of its run and its place in the work queue."""

    expedition_id: str
    expedition_type: str
    status: Status
    priority: Priority
    priority_rank: int
    target_collections: list[str]
    parameters: dict[str, Any]
    correlation_id: str | None
    requested_by: str | None
    timeout_seconds: float
    progress: dict[str, Any]
    agents_deployed: list[str]
    results: dict[str, Any] | None
    errors: list[dict[str, Any]]
    attempts: int
    worker_id: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    updated_at: datetime


@dataclass(slots=True)
class CollectedRecord(_Columns):
    """One record of the structured store, keyed by (collection, record key)."""

    collection: str
    record_key: str
    content_hash: str
    data: Any
    source: str
    expedition_id: str | None
    correlation_id: str | None
    vector_pending: bool
    created_at: datetime
    updated_at: datetime
    owner: str | None = None

    def visible_to(self, reader: str | None) -> bool:
        """Whether ``reader`` (a user id; ``None`` for an operator or internal caller) may read
        this record, given that they may read its collection."""
        return reader is None or self.owner is None or self.owner == reader


OPERATORS_ONLY = ""
"""The ``owner`` of a record only operators read (no user id is empty): a copy of an Evidence
Pack stored before uploaders were recorded."""


@dataclass(slots=True)
class PendingVector:
    """A record whose vector is owed, as the indexer reads it: its data still as the JSON text
    the structured store keeps, decoded off the event loop with the rest of its text's work."""

    collection: str
    record_key: str
    content_hash: str
    updated_at: datetime
    document: str
    owner: str | None = None


@dataclass(slots=True)
class RecordBatch:
    """Records to bind into one collection from one source of one run: what they share, and
    each record's key, content hash, data and the data's JSON text as stored, in step (no key
    twice)."""

    collection: str
    source: str
    expedition_id: str | None
    correlation_id: str | None
    at: datetime
    keys: list[str]
    hashes: list[str]
    data: list[Any]
    documents: list[str]
    owner: str | None = None


@dataclass(slots=True)
class BindStats:
    """What binding did to records: new ones inserted, changed ones updated, identical ones
    left alone."""

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0

    def add(self, other: BindStats) -> None:
        """Accumulate ``other``."""
        self.inserted += other.inserted
        self.updated += other.updated
        self.unchanged += other.unchanged


@dataclass(slots=True)
class CollectionSize:
    """A collection as the structured store counts it."""

    collection: str
    records: int
    pending: int
    updated_at: datetime | None


@dataclass(slots=True)
class ScheduleRecord(_Columns):
    """One cron schedule and where its ticks stand."""

    schedule_id: str
    name: str
    cron: str
    expedition_type: str
    priority: Priority
    target_collections: list[str]
    parameters: dict[str, Any]
    enabled: bool
    next_fire_at: datetime
    last_fired_at: datetime | None
    last_expedition_id: str | None
    created_by: str | None
    created_at: datetime
