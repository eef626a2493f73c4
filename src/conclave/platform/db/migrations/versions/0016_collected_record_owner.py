"""Who may read one collected record: ``collected_records.owner``.

A collection's readers are its owner, operators and, for a shared collection (``evidence`` by
default), every user. A record copied from an Evidence Pack must stay as private as the pack: the
Evidence bridge now stores the pack's uploader as the record's ``owner``, and a user reads a record
only when its owner is NULL (everyone who may read the collection) or themselves; ``""`` is a record
only operators read (docs/security.md, "Collections").

Records already copied from packs (their source is the bridge's ``inline:`` or the ``evidence:``
source) get their uploader: the pack's ``uploaded_by`` when the edge's table is in the same store
(``conclave up``, or one database for all services), else the one their data names (events made
before this release carry none), else ``""``: nobody's but operators', never everyone's. An
operator gives such records back to their uploaders by running ``evidence_ingest`` with their
``evidence_ids`` (the source reads each pack, uploader included).

Every record is flagged for its vector again: each point now carries ``access`` (who may find it),
and a point without it is found by operators only, so until the indexer has rewritten a
collection's points a user's search of it finds fewer records, never another user's.

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
    if op.get_bind().dialect.name == "sqlite":
        named = "json_extract(data, '$.uploaded_by')"
        is_text = "json_type(data, '$.uploaded_by') = 'text'"
    else:
        named = "(data::json ->> 'uploaded_by')"
        is_text = "json_typeof(data::json -> 'uploaded_by') = 'string'"
    uploader = (
        "(SELECT packs.uploaded_by FROM edge_evidence_packs packs "
        f"WHERE packs.evidence_id = {_TABLE}.record_key)"
    )
    # A value no user id can be (empty, or wider than the column) is nobody's.
    from_data = f"CASE WHEN {is_text} AND length({named}) BETWEEN 1 AND 256 THEN {named} END"
    op.execute(
        f"UPDATE {_TABLE} SET owner = COALESCE({uploader}, {from_data}, '') "
        f"WHERE {_COPIED_FROM_PACKS}"
    )
    op.execute(f"UPDATE {_TABLE} SET vector_pending = true WHERE NOT vector_pending")


def downgrade() -> None:
    with op.batch_alter_table(_TABLE) as batch:
        batch.drop_column("owner")
