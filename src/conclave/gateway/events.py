"""The gateway's bus channels, and the event every tool call publishes, whoever records its
outcome."""

from __future__ import annotations

from conclave.gateway.records import AuditRow
from conclave.platform.bus.base import Event
from conclave.platform.clock import rfc3339

CHANNEL = "conclave.mcp.actions"
"""Every tool call, once it has an outcome."""
SOURCE = "gateway"


def call_event(row: AuditRow) -> Event:
    """The spec's payload (``conclave_id``, ``tool``, ``args``, ``user_id``, ``timestamp``) plus
    the requested name and the call's outcome (its error code, ``None`` for a success)."""
    payload = {
        "conclave_id": row.conclave_id,
        "tool": row.tool_name,
        "args": row.args,
        "user_id": row.user_id,
        "timestamp": rfc3339(row.created_at),
        "requested_tool": row.requested_tool,
        "status": row.status,
        "orthodoxy_status": row.orthodoxy_status,
        # Subscribers tell a refusal (TOOL_FORBIDDEN, UNKNOWN_TOOL, ...) from a failure by it.
        "error_code": row.error_code,
    }
    if row.upstream_credential is not None:  # the kind only, never the credential
        payload["upstream_credential"] = row.upstream_credential
    if row.on_behalf_of is not None:  # a service acting for the user
        payload["on_behalf_of"] = row.on_behalf_of
    return Event(channel=CHANNEL, payload=payload, source=SOURCE, correlation_id=row.correlation_id)
