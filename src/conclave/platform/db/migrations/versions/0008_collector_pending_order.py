"""The pending-vector index holds pending records only, in the order they were written.

The index on the flag held every record, gained an entry each time a flag cleared, and gave the
pending rows in no order the indexer could page by; the partial index on ``(updated_at,
collection, record_key)`` lets it page through the backlog oldest first and shrinks as vectors
are written.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_collected_records_vector_pending", table_name="collected_records")
    op.create_index(
        "ix_collected_records_pending",
        "collected_records",
        ["updated_at", "collection", "record_key"],
        postgresql_where=sa.text("vector_pending"),
        sqlite_where=sa.text("vector_pending = 1"),
    )


def downgrade() -> None:
    op.drop_index("ix_collected_records_pending", table_name="collected_records")
    op.create_index("ix_collected_records_vector_pending", "collected_records", ["vector_pending"])
