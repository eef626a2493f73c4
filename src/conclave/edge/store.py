"""The edge service's tables and all of its SQL.

``edge_evidence_packs`` is append-only: triggers created by the migration refuse UPDATE and DELETE.
A pack is stored with its outbox event and its queued leaf of the log ``packs`` in one
transaction that waits for no other upload: its position (``chain_seq``, which listings page by)
comes from a sequence on PostgreSQL, and an upload's device and idempotency key are made unique
by an index rather than checked under a lock. Packs stored before the log (migration 0012) are
links of a hash chain, whose last link ``edge_chain_head`` still records for the chain's
verification; nothing extends the chain any more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    and_,
    func,
    select,
)
from sqlalchemy import Sequence as SqlSequence
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.edge.events import CHANNEL
from conclave.edge.records import (
    ChainHead,
    ChainLink,
    EvidencePack,
    IntakeError,
    NewEvidencePack,
    OutboxState,
    PackEvent,
    PackLeaf,
    PipelineFigures,
)
from conclave.platform.bus.base import Event
from conclave.platform.clock import utc_now
from conclave.platform.db.batch import BatchWriter, Insert
from conclave.platform.db.engine import is_sqlite
from conclave.platform.db.schema import metadata, outbox_events
from conclave.platform.outbox import add_event, outbox_write
from conclave.platform.tlog.records import QueuedLeaf

evidence_packs = Table(
    "edge_evidence_packs",
    metadata,
    Column("evidence_id", String(36), primary_key=True),
    Column("chain_seq", BigInteger, nullable=False),
    Column("media_type", String(16), nullable=False),
    Column("format", String(32), nullable=False),
    Column("mime_type", String(128), nullable=False),
    Column("filename", String(255), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("client_metadata", JSON, nullable=False),
    Column("extracted", JSON, nullable=False),
    Column("device_id", String(256), nullable=False),
    Column("correlation_id", String(128), nullable=True),
    Column("idempotency_key", String(256), nullable=True),
    Column("part_index", Integer, nullable=False),
    Column("sampling_policy_ref", String(256), nullable=True),
    Column("event_id", String(36), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # NULL for the packs stored since the log ``packs`` (migration 0012): unique indexes let
    # any number of NULLs through, so the index below still forbids a fork of the old chain.
    Column("prev_chain_hash", String(64), nullable=True),
    Column("chain_hash", String(64), nullable=True),
    Column("log_leaf_hash", LargeBinary, nullable=True),
    # The authenticated user who uploaded the pack (migration 0015); NULL for the packs stored
    # before anyone recorded it, which only operators read.
    Column("uploaded_by", String(256), nullable=True),
    Index("uq_edge_evidence_packs_chain_seq", "chain_seq", unique=True),
    Index("uq_edge_evidence_packs_prev_chain_hash", "prev_chain_hash", unique=True),
    Index("ix_edge_evidence_packs_media_type_chain_seq", "media_type", "chain_seq"),
    Index("ix_edge_evidence_packs_created_at", "created_at"),
    # The evidence search's walks (evidence_search.py): one per selective filter, newest first.
    Index("ix_edge_evidence_packs_uploaded_by_created_at", "uploaded_by", "created_at"),
    Index("ix_edge_evidence_packs_device_id_created_at", "device_id", "created_at"),
    Index("ix_edge_evidence_packs_media_type_created_at", "media_type", "created_at"),
    Index(
        "ix_edge_evidence_packs_correlation_id_created_at",
        "correlation_id",
        "created_at",
        sqlite_where=Column("correlation_id").is_not(None),
        postgresql_where=Column("correlation_id").is_not(None),
    ),
    Index("ix_edge_evidence_packs_sha256", "sha256"),
    Index(
        "uq_edge_evidence_packs_device_id_idempotency_key_part_index",
        "device_id",
        "idempotency_key",
        "part_index",
        unique=True,
        sqlite_where=Column("idempotency_key").is_not(None),
        postgresql_where=Column("idempotency_key").is_not(None),
    ),
)

PACK_ORDER = SqlSequence("edge_evidence_packs_order")
"""Where a new pack's ``chain_seq`` comes from on PostgreSQL (created by migration 0012 after the
last chained pack). Drawn without waiting for other uploads, so positions follow the order in
which inserts ran, not exactly the order in which they committed."""

# One row (id 1): the last chained pack's position and chain hash, as the chain left it.
chain_head = Table(
    "edge_chain_head",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("chain_seq", BigInteger, nullable=False),
    Column("chain_hash", String(64), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Rejected uploads, for the pipeline's error figures (shared by every replica).
intake_errors = Table(
    "edge_intake_errors",
    metadata,
    Column("error_id", String(36), primary_key=True),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("media_type", String(16), nullable=True),
    Column("status", Integer, nullable=False),
    Column("code", String(64), nullable=False),
    Column("detail", Text, nullable=True),
    Column("device_id", String(256), nullable=True),
    Index("ix_edge_intake_errors_occurred_at", "occurred_at"),
)

# Canonical signatures already accepted (column ``nonce`` for history: it once held the nonce),
# so a signed request cannot be replayed.
request_nonces = Table(
    "edge_request_nonces",
    metadata,
    Column("device_id", String(256), nullable=False),
    Column("nonce", String(128), nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("device_id", "nonce"),
    Index("ix_edge_request_nonces_seen_at", "seen_at"),
)


async def idempotent_packs(
    connection: AsyncConnection | AsyncEngine, device_id: str, key: str
) -> list[PackLeaf]:
    """The packs an earlier upload with this device's idempotency key created, in part order."""
    query = (
        select(evidence_packs.c.evidence_id, evidence_packs.c.log_leaf_hash)
        .where(evidence_packs.c.device_id == device_id, evidence_packs.c.idempotency_key == key)
        .order_by(evidence_packs.c.part_index)
    )
    if isinstance(connection, AsyncEngine):
        async with connection.connect() as own:
            rows = (await own.execute(query)).all()
    else:
        rows = (await connection.execute(query)).all()
    return [PackLeaf(row.evidence_id, row.log_leaf_hash) for row in rows]


async def _insert_packs(connection: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    """Insert new packs, each taking the next position."""
    if not is_sqlite(connection.engine):
        await connection.execute(
            evidence_packs.insert().values(chain_seq=PACK_ORDER.next_value()), rows
        )
        return
    # SQLite has one writer at a time: the insert that reads the largest position holds the
    # write lock until it commits. One statement per pack, each reading the one before.
    following = select(func.coalesce(func.max(evidence_packs.c.chain_seq), 0) + 1)
    statement = evidence_packs.insert().values(chain_seq=following.scalar_subquery())
    for row in rows:
        await connection.execute(statement, row)


def group_commits(engine: AsyncEngine) -> bool:
    """Whether :func:`append_packs` joins the platform writer's group commit on this store (then
    the writer hands the committed events to the relay; otherwise the relay must be woken)."""
    return not is_sqlite(engine)


async def append_packs(
    engine: AsyncEngine,
    packs: Sequence[NewEvidencePack],
    events: Sequence[Event],
    leaves: Sequence[QueuedLeaf],
    *,
    device_id: str,
    idempotency_key: str | None,
    writer: BatchWriter | None = None,
) -> list[PackLeaf] | None:
    """Insert ``packs`` with their outbox ``events`` and their queued ``leaves`` of the log
    ``packs`` (one per pack, in order; none with the log off), all committed together.

    On PostgreSQL, with the platform's ``writer``, they join its group commit: the packs of every
    upload arriving meanwhile are written by one statement and one commit (a pack's position
    comes from the column's default, the sequence), and the events are handed to the relay once
    committed. Otherwise (SQLite, which has one writer at a time) in a transaction of their own.

    Returns ``None`` when created, or the packs of the earlier upload when ``idempotency_key``
    turned out to be taken: the unique index on device, key and part refused this upload's
    first part because a concurrent upload of the same key committed first (PostgreSQL makes the
    second insert wait for the first's commit); then nothing is written.
    """
    hashes: list[bytes | None] = [leaf.leaf_hash for leaf in leaves] or [None] * len(packs)
    rows = [
        {**pack.columns(), "prev_chain_hash": None, "chain_hash": None, "log_leaf_hash": hashed}
        for pack, hashed in zip(packs, hashes, strict=True)
    ]
    try:
        if writer is not None and group_commits(engine):
            await writer.write(
                *(Insert(evidence_packs, row) for row in rows),
                *(outbox_write(event) for event in events),
                *(leaf.write for leaf in leaves),
            )
            return None
        async with engine.begin() as connection:
            await _insert_packs(connection, rows)
            for event in events:
                await add_event(connection, event)
            if leaves:
                queue = leaves[0].write.table
                await connection.execute(queue.insert(), [leaf.write.values for leaf in leaves])
    except IntegrityError:
        if await _stored_already(engine, packs[0].evidence_id):
            # An earlier try (the writer retries alone what a failed batch held) committed;
            # only its answer was lost. The pack's id is this upload's own.
            return None
        if idempotency_key is None:
            raise
        earlier = await idempotent_packs(engine, device_id, idempotency_key)
        if not earlier:
            raise
        return earlier
    return None


async def _stored_already(engine: AsyncEngine, evidence_id: str) -> bool:
    async with engine.connect() as connection:
        found = await connection.scalar(
            select(evidence_packs.c.evidence_id).where(evidence_packs.c.evidence_id == evidence_id)
        )
    return found is not None


_PACK_COLUMNS = tuple(column.name for column in evidence_packs.columns)


def _pack(row: Row[Any]) -> EvidencePack:
    return EvidencePack(**{name: row._mapping[name] for name in _PACK_COLUMNS})


async def get_pack(engine: AsyncEngine, evidence_id: str) -> EvidencePack | None:
    """One Evidence Pack."""
    async with engine.connect() as connection:
        query = select(evidence_packs).where(evidence_packs.c.evidence_id == evidence_id)
        row = (await connection.execute(query)).first()
    return None if row is None else _pack(row)


async def chained_packs(engine: AsyncEngine, after_seq: int, limit: int) -> list[EvidencePack]:
    """Chained packs (stored before the log ``packs``) in chain order after position
    ``after_seq``."""
    async with engine.connect() as connection:
        query = (
            select(evidence_packs)
            .where(evidence_packs.c.chain_seq > after_seq, evidence_packs.c.chain_hash.is_not(None))
            .order_by(evidence_packs.c.chain_seq)
            .limit(limit)
        )
        return [_pack(row) for row in await connection.execute(query)]


async def neighbours(engine: AsyncEngine, seq: int) -> dict[int, ChainLink]:
    """The chained packs just before and after chain position ``seq``, by position (the pack
    after the last link, logged instead of chained, is none)."""
    async with engine.connect() as connection:
        query = select(
            evidence_packs.c.chain_seq,
            evidence_packs.c.chain_hash,
            evidence_packs.c.prev_chain_hash,
        ).where(
            evidence_packs.c.chain_seq.in_([seq - 1, seq + 1]),
            evidence_packs.c.chain_hash.is_not(None),
        )
        return {
            row.chain_seq: ChainLink(row.chain_seq, row.chain_hash, row.prev_chain_hash)
            for row in await connection.execute(query)
        }


async def get_head(engine: AsyncEngine) -> ChainHead:
    """The chain head."""
    async with engine.connect() as connection:
        row = (await connection.execute(select(chain_head).where(chain_head.c.id == 1))).one()
    return ChainHead(row.chain_seq, row.chain_hash)


async def list_events(
    engine: AsyncEngine,
    *,
    media_type: str | None,
    before_seq: int | None,
    limit: int,
    uploaded_by: str | None = None,
) -> list[PackEvent]:
    """Created-evidence events newest first, with their outbox delivery state (with
    ``uploaded_by``, of that user's uploads only)."""
    query = (
        select(
            evidence_packs,
            outbox_events.c.attempts,
            outbox_events.c.last_error,
            outbox_events.c.published_at,
            outbox_events.c.quarantined_at,
            outbox_events.c.event_id.label("outbox_event_id"),
        )
        .select_from(
            evidence_packs.outerjoin(
                outbox_events, outbox_events.c.event_id == evidence_packs.c.event_id
            )
        )
        .order_by(evidence_packs.c.chain_seq.desc())
        .limit(limit)
    )
    if media_type is not None:
        query = query.where(evidence_packs.c.media_type == media_type)
    if uploaded_by is not None:
        query = query.where(evidence_packs.c.uploaded_by == uploaded_by)
    if before_seq is not None:
        query = query.where(evidence_packs.c.chain_seq < before_seq)
    async with engine.connect() as connection:
        rows = (await connection.execute(query)).all()
    return [PackEvent(_pack(row), _outbox_state(row)) for row in rows]


def _outbox_state(row: Row[Any]) -> OutboxState | None:
    if row.outbox_event_id is None:
        return None
    return OutboxState(row.attempts, row.last_error, row.published_at, row.quarantined_at)


async def pipeline_figures(
    engine: AsyncEngine, *, rate_since: datetime, errors_since: datetime
) -> PipelineFigures:
    """Counts behind the pipeline endpoint."""
    packs = evidence_packs.c
    async with engine.connect() as connection:
        by_type = {
            row.media_type: row.packs
            for row in await connection.execute(
                select(packs.media_type, func.count().label("packs")).group_by(packs.media_type)
            )
        }
        recent = await connection.scalar(
            select(func.count()).select_from(evidence_packs).where(packs.created_at >= rate_since)
        )
        last = await connection.scalar(select(func.max(packs.created_at)))
        errors = await connection.scalar(
            select(func.count())
            .select_from(intake_errors)
            .where(intake_errors.c.occurred_at >= errors_since)
        )
        last_errors = [
            IntakeError(**row._mapping)
            for row in await connection.execute(
                select(intake_errors).order_by(intake_errors.c.occurred_at.desc()).limit(10)
            )
        ]
        unpublished = and_(
            outbox_events.c.channel == CHANNEL, outbox_events.c.published_at.is_(None)
        )
        quarantined = outbox_events.c.quarantined_at.is_not(None)
        pending = await connection.scalar(
            select(func.count()).select_from(outbox_events).where(unpublished, ~quarantined)
        )
        failing = await connection.scalar(
            select(func.count())
            .select_from(outbox_events)
            .where(unpublished, ~quarantined, outbox_events.c.attempts > 0)
        )
        set_aside = await connection.scalar(
            select(func.count()).select_from(outbox_events).where(unpublished, quarantined)
        )
    return PipelineFigures(
        by_type=by_type,
        recent=int(recent or 0),
        last_created_at=last,
        errors=int(errors or 0),
        last_errors=last_errors,
        pending=int(pending or 0),
        failing=int(failing or 0),
        quarantined=int(set_aside or 0),
    )


async def record_error(engine: AsyncEngine, error: IntakeError) -> None:
    """Remember a rejected upload."""
    async with engine.begin() as connection:
        await connection.execute(intake_errors.insert().values(**asdict(error)))


async def prune(engine: AsyncEngine, *, errors_before: datetime, nonces_before: datetime) -> None:
    """Drop error rows past their retention and nonces past the signature window."""
    async with engine.begin() as connection:
        await connection.execute(
            intake_errors.delete().where(intake_errors.c.occurred_at < errors_before)
        )
        await connection.execute(
            request_nonces.delete().where(request_nonces.c.seen_at < nonces_before)
        )


async def use_signature(engine: AsyncEngine, device_id: str, signature: str) -> bool:
    """Record a canonical ``signature`` for ``device_id``; ``False`` when it was used before
    (a replay)."""
    try:
        async with engine.begin() as connection:
            await connection.execute(
                request_nonces.insert().values(
                    device_id=device_id, nonce=signature, seen_at=utc_now()
                )
            )
    except IntegrityError:
        return False
    return True
