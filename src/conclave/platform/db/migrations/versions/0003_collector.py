"""Expedition service tables: expeditions (record and work queue), collected records, schedules.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "collector_expeditions",
        sa.Column("expedition_id", sa.String(36), nullable=False),
        sa.Column("expedition_type", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("priority_rank", sa.Integer(), nullable=False),
        sa.Column("target_collections", sa.JSON(), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("correlation_id", sa.String(128), nullable=True),
        sa.Column("requested_by", sa.String(256), nullable=True),
        sa.Column("timeout_seconds", sa.Float(), nullable=False),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("agents_deployed", sa.JSON(), nullable=False),
        sa.Column("results", sa.JSON(), nullable=True),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(128), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("expedition_id", name="pk_collector_expeditions"),
    )
    op.create_index(
        "ix_collector_expeditions_status_priority_rank_created_at",
        "collector_expeditions",
        ["status", "priority_rank", "created_at"],
    )
    op.create_index("ix_collector_expeditions_created_at", "collector_expeditions", ["created_at"])
    op.create_index(
        "ix_collector_expeditions_expedition_type", "collector_expeditions", ["expedition_type"]
    )

    op.create_table(
        "collected_records",
        sa.Column("collection", sa.String(128), nullable=False),
        sa.Column("record_key", sa.String(256), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(256), nullable=False),
        sa.Column("expedition_id", sa.String(36), nullable=True),
        sa.Column("correlation_id", sa.String(128), nullable=True),
        sa.Column("vector_pending", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("collection", "record_key", name="pk_collected_records"),
    )
    op.create_index("ix_collected_records_vector_pending", "collected_records", ["vector_pending"])
    op.create_index("ix_collected_records_expedition_id", "collected_records", ["expedition_id"])

    op.create_table(
        "collector_schedules",
        sa.Column("schedule_id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("cron", sa.String(128), nullable=False),
        sa.Column("expedition_type", sa.String(64), nullable=False),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("target_collections", sa.JSON(), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_expedition_id", sa.String(36), nullable=True),
        sa.Column("created_by", sa.String(256), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("schedule_id", name="pk_collector_schedules"),
    )
    op.create_index("uq_collector_schedules_name", "collector_schedules", ["name"], unique=True)
    op.create_index("ix_collector_schedules_next_fire_at", "collector_schedules", ["next_fire_at"])


def downgrade() -> None:
    op.drop_table("collector_schedules")
    op.drop_table("collected_records")
    op.drop_table("collector_expeditions")
