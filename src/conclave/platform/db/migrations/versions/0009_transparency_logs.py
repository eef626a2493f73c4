"""Transparency logs: per named log its sizes and root, its leaves, the hashes of its complete
subtrees and its signed checkpoints; the last three append-only (triggers refuse UPDATE, DELETE and,
on PostgreSQL, TRUNCATE).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_APPEND_ONLY = ("tlog_leaves", "tlog_subtrees", "tlog_checkpoints")

_POSTGRES_FUNCTION = """CREATE FUNCTION tlog_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END
$$"""


def _postgres_triggers(table: str) -> tuple[str, ...]:
    return (
        f"""CREATE TRIGGER {table}_no_change BEFORE UPDATE OR DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION tlog_refuse_change()""",
        f"""CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION tlog_refuse_change()""",
    )


def _sqlite_triggers(table: str) -> tuple[str, ...]:
    return tuple(
        f"""CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table}
        BEGIN SELECT RAISE(ABORT, '{table} is append-only: {operation} refused'); END"""
        for operation in ("UPDATE", "DELETE")
    )


def upgrade() -> None:
    op.create_table(
        "tlog_logs",
        sa.Column("log_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("origin", sa.String(255), nullable=False),
        sa.Column("sequenced_size", sa.BigInteger(), nullable=False),
        sa.Column("integrated_size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(), nullable=False),
        sa.Column("integrated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("log_id", name="pk_tlog_logs"),
        sa.UniqueConstraint("name", name="uq_tlog_logs_name"),
    )
    op.create_table(
        "tlog_leaves",
        sa.Column("log_id", sa.Integer(), nullable=False),
        sa.Column("leaf_index", sa.BigInteger(), nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("log_id", "leaf_index", name="pk_tlog_leaves"),
    )
    op.create_table(
        "tlog_subtrees",
        sa.Column("log_id", sa.Integer(), nullable=False),
        sa.Column("level", sa.SmallInteger(), nullable=False),
        sa.Column("subtree_index", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("log_id", "level", "subtree_index", name="pk_tlog_subtrees"),
    )
    op.create_table(
        "tlog_checkpoints",
        sa.Column("log_id", sa.Integer(), nullable=False),
        sa.Column("tree_size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("log_id", "tree_size", name="pk_tlog_checkpoints"),
    )
    if op.get_bind().dialect.name == "sqlite":
        statements = [s for table in _APPEND_ONLY for s in _sqlite_triggers(table)]
    else:
        statements = [_POSTGRES_FUNCTION]
        statements += [s for table in _APPEND_ONLY for s in _postgres_triggers(table)]
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in _APPEND_ONLY:
        if sqlite:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_change ON {table}")
    if not sqlite:
        op.execute("DROP FUNCTION IF EXISTS tlog_refuse_change()")
    op.drop_table("tlog_checkpoints")
    op.drop_table("tlog_subtrees")
    op.drop_table("tlog_leaves")
    op.drop_table("tlog_logs")
