"""Who acted for the user: ``mcp_tool_calls.on_behalf_of``.

A service principal may name the user it acts for (``X-Conclave-Acting-User``); the audit row
recorded only that user, so "ann called the tool" and "the service called it for ann" could not be
told apart. The column names the service (NULL when the user authenticated as themselves, and for
rows written before this release).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mcp_tool_calls", sa.Column("on_behalf_of", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mcp_tool_calls") as batch:
        batch.drop_column("on_behalf_of")
