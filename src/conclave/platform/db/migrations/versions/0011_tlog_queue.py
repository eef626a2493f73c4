"""Queued appends to the transparency logs: a queue the integrator sequences, receipts found by
leaf hash, and the gateway's audit rows holding their call's leaf hash instead of an index (the
index is given later, by the integrator).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tlog_queue",
        sa.Column(
            "queue_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("log_id", sa.Integer(), nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("queue_id", name="pk_tlog_queue"),
    )
    op.create_index("ix_tlog_queue_log", "tlog_queue", ["log_id", "queue_id"])
    op.create_index("ix_tlog_leaves_hash", "tlog_leaves", ["log_id", "leaf_hash", "leaf_index"])
    with op.batch_alter_table("mcp_tool_calls") as table:
        table.drop_column("log_index")
        table.add_column(sa.Column("log_leaf_hash", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mcp_tool_calls") as table:
        table.drop_column("log_leaf_hash")
        table.add_column(sa.Column("log_index", sa.BigInteger(), nullable=True))
    op.drop_index("ix_tlog_leaves_hash", table_name="tlog_leaves")
    op.drop_index("ix_tlog_queue_log", table_name="tlog_queue")
    op.drop_table("tlog_queue")
