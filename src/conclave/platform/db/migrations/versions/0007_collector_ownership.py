"""Per-user ownership in the expedition service: who owns each collection, and an index for a
user's own expedition history.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "collector_collection_owners",
        sa.Column("collection", sa.String(128), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("collection", name="pk_collector_collection_owners"),
    )
    op.create_index(
        "ix_collector_collection_owners_owner", "collector_collection_owners", ["owner"]
    )
    op.create_index(
        "ix_collector_expeditions_requested_by_created_at",
        "collector_expeditions",
        ["requested_by", "created_at"],
    )


def downgrade() -> None:
    op.drop_index(
        "ix_collector_expeditions_requested_by_created_at", table_name="collector_expeditions"
    )
    op.drop_index("ix_collector_collection_owners_owner", table_name="collector_collection_owners")
    op.drop_table("collector_collection_owners")
