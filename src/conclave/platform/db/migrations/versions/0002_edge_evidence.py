"""Edge intake tables: append-only Evidence Packs (with immutability triggers), the chain head,
intake errors and signature nonces.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_GENESIS = "0" * 64

_SQLITE_TRIGGERS = (
    """CREATE TRIGGER edge_evidence_packs_no_update BEFORE UPDATE ON edge_evidence_packs
    BEGIN SELECT RAISE(ABORT, 'edge_evidence_packs is append-only: UPDATE refused'); END""",
    """CREATE TRIGGER edge_evidence_packs_no_delete BEFORE DELETE ON edge_evidence_packs
    BEGIN SELECT RAISE(ABORT, 'edge_evidence_packs is append-only: DELETE refused'); END""",
)

_POSTGRES_TRIGGERS = (
    """CREATE FUNCTION edge_evidence_packs_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'edge_evidence_packs is append-only: % refused', TG_OP
            USING ERRCODE = 'integrity_constraint_violation';
    END
    $$""",
    """CREATE TRIGGER edge_evidence_packs_no_change BEFORE UPDATE OR DELETE ON edge_evidence_packs
    FOR EACH ROW EXECUTE FUNCTION edge_evidence_packs_refuse_change()""",
    """CREATE TRIGGER edge_evidence_packs_no_truncate BEFORE TRUNCATE ON edge_evidence_packs
    FOR EACH STATEMENT EXECUTE FUNCTION edge_evidence_packs_refuse_change()""",
)


def upgrade() -> None:
    op.create_table(
        "edge_evidence_packs",
        sa.Column("evidence_id", sa.String(36), nullable=False),
        sa.Column("chain_seq", sa.BigInteger(), nullable=False),
        sa.Column("media_type", sa.String(16), nullable=False),
        sa.Column("format", sa.String(32), nullable=False),
        sa.Column("mime_type", sa.String(128), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("client_metadata", sa.JSON(), nullable=False),
        sa.Column("extracted", sa.JSON(), nullable=False),
        sa.Column("device_id", sa.String(256), nullable=False),
        sa.Column("correlation_id", sa.String(128), nullable=True),
        sa.Column("idempotency_key", sa.String(256), nullable=True),
        sa.Column("part_index", sa.Integer(), nullable=False),
        sa.Column("sampling_policy_ref", sa.String(256), nullable=True),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("prev_chain_hash", sa.String(64), nullable=False),
        sa.Column("chain_hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("evidence_id", name="pk_edge_evidence_packs"),
    )
    op.create_index(
        "uq_edge_evidence_packs_chain_seq", "edge_evidence_packs", ["chain_seq"], unique=True
    )
    op.create_index(
        "uq_edge_evidence_packs_prev_chain_hash",
        "edge_evidence_packs",
        ["prev_chain_hash"],
        unique=True,
    )
    op.create_index(
        "ix_edge_evidence_packs_media_type_chain_seq",
        "edge_evidence_packs",
        ["media_type", "chain_seq"],
    )
    op.create_index("ix_edge_evidence_packs_created_at", "edge_evidence_packs", ["created_at"])
    op.create_index("ix_edge_evidence_packs_sha256", "edge_evidence_packs", ["sha256"])
    op.create_index(
        "uq_edge_evidence_packs_device_id_idempotency_key_part_index",
        "edge_evidence_packs",
        ["device_id", "idempotency_key", "part_index"],
        unique=True,
        sqlite_where=sa.text("idempotency_key IS NOT NULL"),
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )

    head = op.create_table(
        "edge_chain_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("chain_seq", sa.BigInteger(), nullable=False),
        sa.Column("chain_hash", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_edge_chain_head"),
    )
    op.bulk_insert(
        head, [{"id": 1, "chain_seq": 0, "chain_hash": _GENESIS, "updated_at": datetime.now(UTC)}]
    )

    op.create_table(
        "edge_intake_errors",
        sa.Column("error_id", sa.String(36), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("media_type", sa.String(16), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("code", sa.String(64), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("device_id", sa.String(256), nullable=True),
        sa.PrimaryKeyConstraint("error_id", name="pk_edge_intake_errors"),
    )
    op.create_index("ix_edge_intake_errors_occurred_at", "edge_intake_errors", ["occurred_at"])

    op.create_table(
        "edge_request_nonces",
        sa.Column("device_id", sa.String(256), nullable=False),
        sa.Column("nonce", sa.String(128), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("device_id", "nonce", name="pk_edge_request_nonces"),
    )
    op.create_index("ix_edge_request_nonces_seen_at", "edge_request_nonces", ["seen_at"])

    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_TRIGGERS if dialect == "sqlite" else _POSTGRES_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS edge_evidence_packs_no_update")
        op.execute("DROP TRIGGER IF EXISTS edge_evidence_packs_no_delete")
    else:
        op.execute("DROP TRIGGER IF EXISTS edge_evidence_packs_no_truncate ON edge_evidence_packs")
        op.execute("DROP TRIGGER IF EXISTS edge_evidence_packs_no_change ON edge_evidence_packs")
        op.execute("DROP FUNCTION IF EXISTS edge_evidence_packs_refuse_change()")
    op.drop_table("edge_request_nonces")
    op.drop_table("edge_intake_errors")
    op.drop_table("edge_chain_head")
    op.drop_table("edge_evidence_packs")
