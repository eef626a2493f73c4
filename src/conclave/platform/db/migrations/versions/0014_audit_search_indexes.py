"""The audit trail's search (``GET /calls``) walks an index per selective filter.

``tool_name`` alone becomes ``(tool_name, created_at)`` (it still serves lookups by tool), and
indexes are added: ``(user_id, created_at)`` for a user's own calls, ``(correlation_id,
created_at)`` where a correlation id is set, and ``(status, created_at)`` / ``(orthodoxy_status,
created_at)`` over the rows that did not succeed / are not blessed only (a rare outcome is found
without walking the successes, and successes do not pay for them). A page of a filtered search is
then a short backward walk of one index among millions of rows, not a scan and a sort. Building
them takes the table's write lock for the time of the build (seconds per million rows).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_mcp_tool_calls_tool_name", table_name="mcp_tool_calls")
    op.create_index("ix_mcp_tool_calls_tool_created", "mcp_tool_calls", ["tool_name", "created_at"])
    op.create_index("ix_mcp_tool_calls_user_created", "mcp_tool_calls", ["user_id", "created_at"])
    op.create_index(
        "ix_mcp_tool_calls_unsuccessful",
        "mcp_tool_calls",
        ["status", "created_at"],
        sqlite_where=sa.text("status <> 'succeeded'"),
        postgresql_where=sa.text("status <> 'succeeded'"),
    )
    op.create_index(
        "ix_mcp_tool_calls_unblessed",
        "mcp_tool_calls",
        ["orthodoxy_status", "created_at"],
        sqlite_where=sa.text("orthodoxy_status <> 'blessed'"),
        postgresql_where=sa.text("orthodoxy_status <> 'blessed'"),
    )
    op.create_index(
        "ix_mcp_tool_calls_correlation",
        "mcp_tool_calls",
        ["correlation_id", "created_at"],
        sqlite_where=sa.text("correlation_id IS NOT NULL"),
        postgresql_where=sa.text("correlation_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_mcp_tool_calls_unblessed", table_name="mcp_tool_calls")
    op.drop_index("ix_mcp_tool_calls_unsuccessful", table_name="mcp_tool_calls")
    op.drop_index("ix_mcp_tool_calls_correlation", table_name="mcp_tool_calls")
    op.drop_index("ix_mcp_tool_calls_user_created", table_name="mcp_tool_calls")
    op.drop_index("ix_mcp_tool_calls_tool_created", table_name="mcp_tool_calls")
    op.create_index("ix_mcp_tool_calls_tool_name", "mcp_tool_calls", ["tool_name"])
