"""An upstream's ``tools/list``, every page of it within the gateway's bounds."""

from __future__ import annotations

import mcp_types as types
from mcp.client.session import ClientSession

from conclave.gateway.upstreams.config import UpstreamLimits

LISTING_TIMEOUTS_IN_A_ROW = 3
"""Periodic listings that may time out in a row before the connection is ended. A listing that
times out is skipped, and the tools listed before stay: like a call's, its time-out says only
that it was slow, and under load it may have waited for a connection of the session's pool,
which says nothing of the upstream (an outside attack: one user's slow calls kept the pool busy,
the gateway's own listing timed out waiting there and ended the connection for everyone). A
session that answers no listing at all is reopened after this many."""


async def list_tools(
    session: ClientSession, limits: UpstreamLimits, timeout_seconds: float
) -> tuple[list[types.Tool], list[str]]:
    """Every page of the session's ``tools/list``, within ``limits``: the tools, and notes on
    where the listing was cut."""
    tools: list[types.Tool] = []
    notes: list[str] = []
    cursor: str | None = None
    seen: set[str] = set()
    for page in range(limits.max_pages):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        result = await session.send_request(
            types.ListToolsRequest(params=params),
            types.ListToolsResult,
            request_read_timeout_seconds=timeout_seconds,
        )
        room = limits.max_tools - len(tools)
        if len(result.tools) > room:
            notes.append(f"listing cut at {limits.max_tools} tools")
            tools += result.tools[:room]
            break
        tools += result.tools
        cursor = result.next_cursor
        if cursor is None:
            break
        if cursor in seen:
            notes.append("the server repeated a cursor: listing stopped")
            break
        seen.add(cursor)
        if page == limits.max_pages - 1:
            notes.append(f"listing stopped after {limits.max_pages} pages")
    return tools, notes
