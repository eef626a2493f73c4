"""The event every tool call publishes on ``conclave.mcp.actions``, whoever records its outcome."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from conclave.platform.bus.base import Event
from conclave.platform.clock import rfc3339

CHANNEL = "conclave.mcp.actions"
SOURCE = "gateway"


def call_event(
    *,
    conclave_id: str,
    tool: str,
    requested_tool: str,
    args: Any,
    user_id: str,
    created_at: datetime,
    status: str,
    orthodoxy_status: str,
    correlation_id: str | None,
) -> Event:
    """The spec's payload (``conclave_id``, ``tool``, ``args``, ``user_id``, ``timestamp``) plus
    the requested name and the call's outcome."""
    payload = {
        "conclave_id": conclave_id,
        "tool": tool,
        "args": args,
        "user_id": user_id,
        "timestamp": rfc3339(created_at),
        "requested_tool": requested_tool,
        "status": status,
        "orthodoxy_status": orthodoxy_status,
    }
    return Event(channel=CHANNEL, payload=payload, source=SOURCE, correlation_id=correlation_id)
