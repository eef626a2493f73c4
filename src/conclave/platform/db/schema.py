"""Table metadata shared by every service, and the platform's own tables.

Services declare their tables on :data:`metadata` in their ``store.py``; the Alembic migrations in
``platform/db/migrations`` create them (written by hand, identical on SQLite and PostgreSQL), and a
test compares the two so they cannot drift.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
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
