"""A new Evidence Pack takes its position from the column's default on PostgreSQL.

The edge writes packs through the platform's group commit (one statement for the packs of every
upload arriving meanwhile), which sends only the values it is given: ``chain_seq`` now defaults
to the next value of ``edge_evidence_packs_order`` (migration 0012) instead of each insert naming
the sequence. SQLite is unchanged: an upload's insert there still takes the next position itself.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    op.execute(
        "ALTER TABLE edge_evidence_packs "
        "ALTER COLUMN chain_seq SET DEFAULT nextval('edge_evidence_packs_order')"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    op.execute("ALTER TABLE edge_evidence_packs ALTER COLUMN chain_seq DROP DEFAULT")
