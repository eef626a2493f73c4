"""Who uploaded each Evidence Pack, and the indexes of the evidence search.

``edge_evidence_packs.uploaded_by`` records the authenticated user id of the upload (the acting
user, when a service uploads for one). Packs stored before this migration keep NULL: nobody
recorded who uploaded them, so only operators read them. The evidence search
(``GET /api/edge-intake/evidence``, newest first by ``(created_at, evidence_id)``) walks one
index per selective filter, each ending in ``created_at``: ``(uploaded_by, created_at)`` for a
user's own packs, ``(device_id, created_at)``, ``(media_type, created_at)`` and ``(correlation_id,
created_at)`` where a correlation id is set; an operator's unfiltered page walks the existing
``created_at`` index. Adding a nullable column rewrites no row (the append-only triggers are not
involved); building the indexes takes the table's write lock for the time of the build.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_TABLE = "edge_evidence_packs"
# As migration 0012 created them: SQLite drops a table's triggers when a batch rebuilds it.
_SQLITE_TRIGGERS = (
    """CREATE TRIGGER edge_evidence_packs_no_update BEFORE UPDATE ON edge_evidence_packs
    BEGIN SELECT RAISE(ABORT, 'edge_evidence_packs is append-only: UPDATE refused'); END""",
    """CREATE TRIGGER edge_evidence_packs_no_delete BEFORE DELETE ON edge_evidence_packs
    BEGIN SELECT RAISE(ABORT, 'edge_evidence_packs is append-only: DELETE refused'); END""",
)


def upgrade() -> None:
    op.add_column(_TABLE, sa.Column("uploaded_by", sa.String(256), nullable=True))
    op.create_index(
        "ix_edge_evidence_packs_uploaded_by_created_at", _TABLE, ["uploaded_by", "created_at"]
    )
    op.create_index(
        "ix_edge_evidence_packs_device_id_created_at", _TABLE, ["device_id", "created_at"]
    )
    op.create_index(
        "ix_edge_evidence_packs_media_type_created_at", _TABLE, ["media_type", "created_at"]
    )
    op.create_index(
        "ix_edge_evidence_packs_correlation_id_created_at",
        _TABLE,
        ["correlation_id", "created_at"],
        sqlite_where=sa.text("correlation_id IS NOT NULL"),
        postgresql_where=sa.text("correlation_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_edge_evidence_packs_correlation_id_created_at", table_name=_TABLE)
    op.drop_index("ix_edge_evidence_packs_media_type_created_at", table_name=_TABLE)
    op.drop_index("ix_edge_evidence_packs_device_id_created_at", table_name=_TABLE)
    op.drop_index("ix_edge_evidence_packs_uploaded_by_created_at", table_name=_TABLE)
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute("DROP TRIGGER IF EXISTS edge_evidence_packs_no_update")
        op.execute("DROP TRIGGER IF EXISTS edge_evidence_packs_no_delete")
    with op.batch_alter_table(_TABLE) as batch:
        batch.drop_column("uploaded_by")
    if sqlite:
        for statement in _SQLITE_TRIGGERS:
            op.execute(statement)
