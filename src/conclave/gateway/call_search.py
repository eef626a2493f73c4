"""The audit trail's search: ``GET /calls``, a page of calls newest first, filtered, continued
after a keyset cursor (:mod:`conclave.platform.keyset`).

A page holds the rows' summaries, never their arguments or results (those are read one call at
a time, ``GET /calls/{id}``): a page of 100 costs the same whatever the calls carried. Each filter
that can pick few rows among millions has an index that ends in ``created_at``
(``ix_mcp_tool_calls_user_created``, ``…_tool_created``, ``…_correlation``, migration 0014), so a
page is a short index range walked backwards, not a scan and a sort.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.gateway.store import mcp_tool_calls
from conclave.platform import keyset

_SUMMARY = [
    mcp_tool_calls.c[name]
    for name in (
        "conclave_id",
        "tool_name",
        "requested_tool",
        "user_id",
        "on_behalf_of",
        "status",
        "orthodoxy_status",
        "http_status",
        "error_code",
        "correlation_id",
        "duration_ms",
        "created_at",
        "completed_at",
        "log_leaf_hash",
    )
]


@dataclass(frozen=True)
class CallFilter:
    """What a search keeps; a field left None keeps every row."""

    user_id: str | None = None
    """Only this user's calls (a user's search always has their own id here)."""
    tool: str | None = None
    status: str | None = None
    orthodoxy_status: str | None = None
    correlation_id: str | None = None
    since: datetime | None = None
    """Created at or after."""
    until: datetime | None = None
    """Created before."""


async def search_calls(
    engine: AsyncEngine,
    kept: CallFilter,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[Any]:
    """Up to ``limit`` summaries of the calls ``kept`` keeps, newest first, after ``after``."""
    calls = mcp_tool_calls.c
    statement = keyset.newest_first(
        select(*_SUMMARY),
        calls.created_at,
        calls.conclave_id,
        equal=(
            (calls.user_id, kept.user_id),
            (calls.tool_name, kept.tool),
            (calls.status, kept.status),
            (calls.orthodoxy_status, kept.orthodoxy_status),
            (calls.correlation_id, kept.correlation_id),
        ),
        since=kept.since,
        until=kept.until,
        position=after,
        limit=limit,
    )
    async with engine.connect() as connection:
        return list((await connection.execute(statement)).all())
