"""Index of the gateway's calls still marked `running` (the sweeper that settles interrupted calls
looks them up every second; the partial index holds only those rows).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_mcp_tool_calls_running",
        "mcp_tool_calls",
        ["created_at"],
        postgresql_where=sa.text("(status)::text = 'running'::text"),
        sqlite_where=sa.text("status = 'running'"),
    )


def downgrade() -> None:
    op.drop_index("ix_mcp_tool_calls_running", table_name="mcp_tool_calls")
