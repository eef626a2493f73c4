"""Who may read one collected record: ``collected_records.owner``.

A collection's readers are its owner, operators and, for a shared collection (``evidence`` by
default), every user. A record copied from an Evidence Pack must stay as private as the pack: the
Evidence bridge now stores the pack's uploader as the record's ``owner``, and a user reads a record
only when its owner is NULL (everyone who may read the collection) or themselves; ``""`` is a record
only operators read (docs/security.md, "Collections").

Records already copied from packs (their source is the bridge's ``inline:`` or the ``evidence:``
source) get the uploader their data names, or ``""`` when it names none (packs stored before
uploaders were recorded, which the edge shows to operators only), and are flagged for their vector
again: the points of semantic memory carry the owner too, and the indexer rewrites them.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_TABLE = "collected_records"
_COPIED_FROM_PACKS = "(source = 'inline:' OR source LIKE 'evidence:%')"


def upgrade() -> None:
    op.add_column(_TABLE, sa.Column("owner", sa.String(256), nullable=True))
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        uploader = "json_extract(data, '$.uploaded_by')"
        is_text = "json_type(data, '$.uploaded_by') = 'text'"
    else:
        uploader = "(data::json ->> 'uploaded_by')"
        is_text = "json_typeof(data::json -> 'uploaded_by') = 'string'"
    op.execute(
        f"UPDATE {_TABLE} SET owner = CASE WHEN {is_text} AND {uploader} <> '' "
        f"THEN {uploader} ELSE '' END, vector_pending = true WHERE {_COPIED_FROM_PACKS}"
    )


def downgrade() -> None:
    with op.batch_alter_table(_TABLE) as batch:
        batch.drop_column("owner")
