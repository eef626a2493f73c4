"""Quarantined outbox rows: an event the bus refused for a reason of its own (not an outage) is
set aside with the time it was quarantined, so it no longer blocks the rows behind it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


_PENDING = "published_at IS NULL"
_DUE = "published_at IS NULL AND quarantined_at IS NULL"
_QUARANTINED = "quarantined_at IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("outbox_events") as batch:
        batch.add_column(sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=True))
    # The relay's due set leaves quarantined rows out, and so does its index; a second, small
    # partial index counts the quarantined rows for health and metrics.
    op.drop_index("ix_outbox_events_pending", table_name="outbox_events")
    _partial_index("ix_outbox_events_pending", "next_attempt_at", _DUE)
    _partial_index("ix_outbox_events_quarantined", "quarantined_at", _QUARANTINED)


def downgrade() -> None:
    op.drop_index("ix_outbox_events_quarantined", table_name="outbox_events")
    op.drop_index("ix_outbox_events_pending", table_name="outbox_events")
    _partial_index("ix_outbox_events_pending", "next_attempt_at", _PENDING)
    with op.batch_alter_table("outbox_events") as batch:
        batch.drop_column("quarantined_at")


def _partial_index(name: str, column: str, where: str) -> None:
    op.create_index(
        name,
        "outbox_events",
        [column],
        sqlite_where=sa.text(where),
        postgresql_where=sa.text(where),
    )
