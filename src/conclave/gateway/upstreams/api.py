"""``GET /upstreams``: the upstream MCP servers and how they are doing (read-only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel

from conclave.platform.http import CurrentPrincipal

upstreams_router = APIRouter()


class UpstreamRead(BaseModel):
    """One upstream MCP server. Never its headers, environment, command line or URL: they may
    hold credentials."""

    name: str
    transport: str
    state: str
    """``starting``, ``ready`` or ``restarting``."""
    circuit: str
    """The circuit breaker of its calls: ``closed``, ``open`` or ``half-open``."""
    tools: int
    last_refresh: str | None
    """When its tools were last listed (RFC 3339, UTC)."""
    last_error: str | None
    """Why its last connection ended or failed."""
    notes: list[str]
    """What its last listing left out: tools skipped (and why), a listing cut at a bound."""
    restarts: int
    """Connections lost and made again since the gateway started."""
    refreshes: int
    """Complete tools/list listings read since the gateway started."""


class UpstreamList(BaseModel):
    """Every upstream MCP server of the catalogues."""

    upstreams: list[UpstreamRead]
    count: int


@upstreams_router.get("/upstreams", tags=["tools"])
async def list_upstreams(request: Request, _principal: CurrentPrincipal) -> UpstreamList:
    """The upstream MCP servers whose tools the gateway serves, with their state."""
    upstreams = getattr(request.app.state, "upstreams", None)
    entries: list[dict[str, Any]] = upstreams.status() if upstreams is not None else []
    return UpstreamList(
        upstreams=[UpstreamRead.model_validate(entry) for entry in entries], count=len(entries)
    )
