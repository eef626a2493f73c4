"""Table metadata shared by every service, and the platform's own tables.

Services declare their tables on :data:`metadata` in their ``store.py``; the Alembic migrations in
``platform/db/migrations`` create them (written by hand, identical on SQLite and PostgreSQL), and a
test compares the two so they cannot drift.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# The transactional outbox: an event is inserted in the same transaction as the business row it
# describes; the relay publishes it after commit. Published rows stay as the emitter audit log.
outbox_events = Table(
    "outbox_events",
    metadata,
    Column("event_id", String(36), primary_key=True),
    Column("channel", String(200), nullable=False),
    Column("source", String(64), nullable=False),
    Column("correlation_id", String(128), nullable=True),
    Column("payload", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("last_error", Text, nullable=True),
    Column("published_at", DateTime(timezone=True), nullable=True),
    Column("quarantined_at", DateTime(timezone=True), nullable=True),
    # The relay's due set: neither published nor quarantined.
    Index(
        "ix_outbox_events_pending",
        "next_attempt_at",
        sqlite_where=and_(Column("published_at").is_(None), Column("quarantined_at").is_(None)),
        postgresql_where=and_(Column("published_at").is_(None), Column("quarantined_at").is_(None)),
    ),
    Index("ix_outbox_events_published_at", "published_at"),
    Index(
        "ix_outbox_events_quarantined",
        "quarantined_at",
        sqlite_where=Column("quarantined_at").is_not(None),
        postgresql_where=Column("quarantined_at").is_not(None),
    ),
)

# Consumers record the events they handled in the same transaction as their work, so a
# redelivered event (at-least-once bus) is recognised and skipped.
consumed_events = Table(
    "consumed_events",
    metadata,
    Column("consumer_group", String(200), nullable=False),
    Column("event_id", String(36), nullable=False),
    Column("consumed_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("consumer_group", "event_id"),
)

# Transparency logs (conclave.platform.tlog, docs/transparency.md): one row per named log, its
# leaves, the hashes of its complete subtrees and its signed checkpoints. Sizes and indices are
# BIGINT on both stores (signed 64-bit: a log holds at most 2^63 - 1 leaves, not RFC 9162's
# 2^64 - 1); hashes and leaf data are BLOB / BYTEA. The three tables after `tlog_logs` are
# append-only (triggers of migration 0009 refuse UPDATE and DELETE). No foreign key: a check per
# inserted leaf and subtree row would cost more than it protects, as only `conclave.platform.tlog`
# writes them.
tlog_logs = Table(
    "tlog_logs",
    metadata,
    Column("log_id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False),
    Column("origin", String(255), nullable=False),
    # Leaves given an index (committed); the sequencer's one allocation per batch adds to it.
    Column("sequenced_size", BigInteger, nullable=False),
    # Leaves folded into the tree: always the size of the latest checkpoint.
    Column("integrated_size", BigInteger, nullable=False),
    Column("root_hash", LargeBinary, nullable=False),
    Column("integrated_at", DateTime(timezone=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("name"),
)

tlog_leaves = Table(
    "tlog_leaves",
    metadata,
    Column("log_id", Integer, nullable=False),
    Column("leaf_index", BigInteger, nullable=False),
    Column("leaf_hash", LargeBinary, nullable=False),
    Column("data", LargeBinary, nullable=False),
    PrimaryKeyConstraint("log_id", "leaf_index"),
    # A receipt asked for by leaf hash (the answer of a queued append knows no index yet).
    Index("ix_tlog_leaves_hash", "log_id", "leaf_hash", "leaf_index"),
)

# Leaves queued in their writer's own transaction (an audit row's, a pack's), without a lock:
# the integrator gives them indices in queue order, moves them to `tlog_leaves` and deletes them
# here, in the transaction that signs the checkpoint covering them (migration 0011). One index,
# by log in queue order: without it a log's pass scans past every row of the other logs in the
# database (a stopped service's backlog, a million rows) on every pass.
tlog_queue = Table(
    "tlog_queue",
    metadata,
    Column(
        "queue_id",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("log_id", Integer, nullable=False),
    Column("leaf_hash", LargeBinary, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("queued_at", DateTime(timezone=True), nullable=False),
    Index("ix_tlog_queue_log", "log_id", "queue_id"),
)

# Every complete subtree of the integrated tree: 2^level leaves from subtree_index * 2^level.
# Level 0 repeats the leaf hashes as the tree was built from them, apart from the leaf rows.
tlog_subtrees = Table(
    "tlog_subtrees",
    metadata,
    Column("log_id", Integer, nullable=False),
    Column("level", SmallInteger, nullable=False),
    Column("subtree_index", BigInteger, nullable=False),
    Column("hash", LargeBinary, nullable=False),
    PrimaryKeyConstraint("log_id", "level", "subtree_index"),
)

tlog_checkpoints = Table(
    "tlog_checkpoints",
    metadata,
    Column("log_id", Integer, nullable=False),
    Column("tree_size", BigInteger, nullable=False),
    Column("root_hash", LargeBinary, nullable=False),
    # The signed note exactly as published (C2SP tlog-checkpoint).
    Column("note", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("log_id", "tree_size"),
)
