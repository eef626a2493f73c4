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


def upgrade() -> None:
    with op.batch_alter_table("outbox_events") as batch:
        batch.add_column(sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox_events") as batch:
        batch.drop_column("quarantined_at")
