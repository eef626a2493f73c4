"""The gateway's audit rows record each call's leaf index in the transparency log ``calls``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mcp_tool_calls", sa.Column("log_index", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("mcp_tool_calls", "log_index")
