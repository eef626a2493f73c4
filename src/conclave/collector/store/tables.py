"""The expedition service's tables (their SQL is in the sibling modules, one per table group).

``collector_expeditions`` is both the record of every expedition and the work queue: workers claim
the best queued row (priority, then age) in one statement, holding it with a lease they renew; a
worker that dies stops renewing, and :func:`requeue_expired` hands its expedition to another.
``collected_records`` is the structured store of collected data, the source of truth; its
``vector_pending`` flag is the per-record outbox of the semantic memory (set in the same
transaction as the record, cleared once the vector is written); its ``owner`` narrows who reads
one record of a collection. ``collector_collection_owners`` says whose each collection is.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    text,
)

from conclave.platform.db.schema import metadata

expeditions = Table(
    "collector_expeditions",
    metadata,
    Column("expedition_id", String(36), primary_key=True),
    Column("expedition_type", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("priority", String(16), nullable=False),
    # 0 = critical .. 3 = low, so the claim orders both columns ascending on one index.
    Column("priority_rank", Integer, nullable=False),
    Column("target_collections", JSON, nullable=False),
    Column("parameters", JSON, nullable=False),
    Column("correlation_id", String(128), nullable=True),
    Column("requested_by", String(256), nullable=True),
    Column("timeout_seconds", Float, nullable=False),
    Column("progress", JSON, nullable=False),
    Column("agents_deployed", JSON, nullable=False),
    Column("results", JSON, nullable=True),
    Column("errors", JSON, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("worker_id", String(128), nullable=True),
    Column("lease_expires_at", DateTime(timezone=True), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=True),
    Column("completed_at", DateTime(timezone=True), nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Index(
        "ix_collector_expeditions_status_priority_rank_created_at",
        "status",
        "priority_rank",
        "created_at",
    ),
    Index("ix_collector_expeditions_created_at", "created_at"),
    Index("ix_collector_expeditions_expedition_type", "expedition_type"),
    # A user's history: their expeditions, newest first.
    Index("ix_collector_expeditions_requested_by_created_at", "requested_by", "created_at"),
)

records = Table(
    "collected_records",
    metadata,
    Column("collection", String(128), nullable=False),
    Column("record_key", String(256), nullable=False),
    Column("content_hash", String(64), nullable=False),
    Column("data", JSON, nullable=False),
    Column("source", String(256), nullable=False),
    Column("expedition_id", String(36), nullable=True),
    Column("correlation_id", String(128), nullable=True),
    Column("vector_pending", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # Whose record it is when that is not the collection's business: NULL, everyone who may
    # read the collection; a user id, that user and operators; "" (OPERATORS_ONLY), operators.
    # Records copied from Evidence Packs carry the pack's uploader (docs/security.md).
    Column("owner", String(256), nullable=True),
    PrimaryKeyConstraint("collection", "record_key"),
    # Pending records only, oldest first: the indexer pages through them in this order, and a
    # record whose vector is written leaves the index (no entry is added when the flag clears).
    Index(
        "ix_collected_records_pending",
        "updated_at",
        "collection",
        "record_key",
        postgresql_where=text("vector_pending"),
        sqlite_where=text("vector_pending = 1"),  # as SQLAlchemy writes the condition there
    ),
    Index("ix_collected_records_expedition_id", "expedition_id"),
)

schedules = Table(
    "collector_schedules",
    metadata,
    Column("schedule_id", String(36), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("cron", String(128), nullable=False),
    Column("expedition_type", String(64), nullable=False),
    Column("priority", String(16), nullable=False),
    Column("target_collections", JSON, nullable=False),
    Column("parameters", JSON, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("next_fire_at", DateTime(timezone=True), nullable=False),
    Column("last_fired_at", DateTime(timezone=True), nullable=True),
    Column("last_expedition_id", String(36), nullable=True),
    Column("created_by", String(256), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("uq_collector_schedules_name", "name", unique=True),
    Index("ix_collector_schedules_next_fire_at", "next_fire_at"),
)

# Who owns each collection: the first requester whose expedition or schedule targeted it. Owners
# (and operators) read, search and write it; other users do not see it (docs/security.md).
collection_owners = Table(
    "collector_collection_owners",
    metadata,
    Column("collection", String(128), primary_key=True),
    Column("owner", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_collector_collection_owners_owner", "owner"),
)

TERMINAL = ("completed", "failed", "cancelled")
