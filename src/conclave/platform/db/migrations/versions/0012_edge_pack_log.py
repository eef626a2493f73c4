"""Evidence Packs go into the transparency log ``packs`` instead of the hash chain: new packs carry
the leaf hash of their entry and no chain link, take their position from a sequence rather than
from the locked chain head, and the packs chained before keep their links untouched.

- ``prev_chain_hash`` and ``chain_hash`` become nullable (NULL for a pack logged instead of
  chained). The unique index on ``prev_chain_hash`` still forbids a fork among the chained packs:
  unique indexes let any number of NULLs through on both stores.
- ``log_leaf_hash`` (nullable): the RFC 9162 leaf hash of the pack's ``conclave.pack/v1`` entry.
- ``chain_seq`` keeps ordering every pack (listing pages by it). On PostgreSQL new values come
  from the sequence ``edge_evidence_packs_order``, started after the last chained pack, so no
  upload waits for another's commit; SQLite has one writer at a time, and an upload's insert takes
  the next value itself.
- ``edge_chain_head`` stays as the chain's last link: the chain verify endpoint checks it.

SQLite cannot make a column nullable in place: the table is rebuilt (its rows copied as they are,
so every chain hash still holds) and its append-only triggers are created again.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_SQLITE_TRIGGERS = (
    """CREATE TRIGGER edge_evidence_packs_no_update BEFORE UPDATE ON edge_evidence_packs
    BEGIN SELECT RAISE(ABORT, 'edge_evidence_packs is append-only: UPDATE refused'); END""",
    """CREATE TRIGGER edge_evidence_packs_no_delete BEFORE DELETE ON edge_evidence_packs
    BEGIN SELECT RAISE(ABORT, 'edge_evidence_packs is append-only: DELETE refused'); END""",
)


def _drop_sqlite_triggers() -> None:
    op.execute("DROP TRIGGER IF EXISTS edge_evidence_packs_no_update")
    op.execute("DROP TRIGGER IF EXISTS edge_evidence_packs_no_delete")


def _chain_columns(nullable: bool) -> None:
    with op.batch_alter_table("edge_evidence_packs") as table:
        if nullable:
            table.add_column(sa.Column("log_leaf_hash", sa.LargeBinary(), nullable=True))
        else:
            table.drop_column("log_leaf_hash")
        for name in ("prev_chain_hash", "chain_hash"):
            table.alter_column(name, existing_type=sa.String(64), nullable=nullable)


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        _drop_sqlite_triggers()
    _chain_columns(nullable=True)
    if sqlite:
        for statement in _SQLITE_TRIGGERS:
            op.execute(statement)
        return
    last = op.get_bind().scalar(
        sa.text("SELECT coalesce(max(chain_seq), 0) FROM edge_evidence_packs")
    )
    op.execute(f"CREATE SEQUENCE edge_evidence_packs_order AS BIGINT START WITH {int(last) + 1}")


def downgrade() -> None:
    # Only a store without logged packs can go back: the chain has no place for them.
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        _drop_sqlite_triggers()
    else:
        op.execute("DROP SEQUENCE IF EXISTS edge_evidence_packs_order")
    _chain_columns(nullable=False)
    if sqlite:
        for statement in _SQLITE_TRIGGERS:
            op.execute(statement)
