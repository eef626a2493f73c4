"""The gateway's `signals` table (answers `query_signals` without a backend); alias arguments.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signals",
        sa.Column("signal_id", sa.String(36), nullable=False),
        sa.Column("entity_id", sa.String(128), nullable=False),
        sa.Column("signal_type", sa.String(64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(128), nullable=True),
        sa.Column("attributes", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("signal_id", name="pk_signals"),
    )
    op.create_index("ix_signals_entity_id_observed_at", "signals", ["entity_id", "observed_at"])
    # Alias calls (finance mode) keep the caller's arguments in `args` and what the canonical tool
    # received here.
    with op.batch_alter_table("mcp_tool_calls") as batch:
        batch.add_column(sa.Column("canonical_args", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mcp_tool_calls") as batch:
        batch.drop_column("canonical_args")
    op.drop_index("ix_signals_entity_id_observed_at", table_name="signals")
    op.drop_table("signals")
