"""Users' own credentials for upstream MCP servers, and the kind each upstream call presented.

``upstream_credentials`` holds one AES-GCM ciphertext per (server, user): never the plaintext
(docs/security.md, "Upstream credentials"). ``mcp_tool_calls.upstream_credential`` records which
kind of credential an upstream tool's call carried: ``user``, ``service`` or ``none`` (NULL for
the gateway's own tools and for rows written before this release).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mcp_tool_calls", sa.Column("upstream_credential", sa.String(16), nullable=True))
    op.create_table(
        "upstream_credentials",
        sa.Column("server", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("key_id", sa.String(16), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("server", "user_id", name="pk_upstream_credentials"),
    )


def downgrade() -> None:
    op.drop_table("upstream_credentials")
    with op.batch_alter_table("mcp_tool_calls") as batch:
        batch.drop_column("upstream_credential")
