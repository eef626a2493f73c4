"""``AuditRow``: a call's row of ``mcp_tool_calls``, passed between the chain, the store, the
settling of interrupted calls and the event.

Its fields are the table's columns, one for one (``tests/gateway/test_audit_row.py`` holds them in
step with the table, the store's writes, the event and ``GET /calls/{conclave_id}``). Only the
arguments and the result are JSON documents (``Any``); how the row is being written (``running``
first, or once) is the chain's business and never a field.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from conclave.gateway.outcome import BLESSED, RUNNING, Outcome
from conclave.platform.clock import utc_now


@dataclass(slots=True)
class AuditRow:
    """What a call asked for, then how it ended."""

    conclave_id: str
    tool_name: str
    requested_tool: str
    args: Any
    user_id: str
    correlation_id: str | None
    idempotency_key: str | None
    request_hash: str | None
    created_at: datetime
    canonical_args: Any = None
    """What the canonical tool received, for a call of an alias tool."""
    on_behalf_of: str | None = None
    """The service principal that authenticated and named ``user_id`` as the user it acts for
    (``X-Conclave-Acting-User``); None when the user authenticated as themselves."""
    status: str = RUNNING
    orthodoxy_status: str = BLESSED
    http_status: int | None = None
    result: Any = None
    warnings: list[str] | None = None
    error_code: str | None = None
    error_message: str | None = None
    duration_ms: float | None = None
    completed_at: datetime | None = None
    upstream_credential: str | None = None
    """For a call of an upstream MCP server's tool, the kind of credential it presented:
    ``user``, ``service`` or ``none`` (never the credential); None for the gateway's own tools."""
    log_leaf_hash: bytes | None = None
    """The leaf hash of the call's entry in the transparency log ``calls`` (None: not logged);
    its index is given by the log's integrator, and its receipt found by this hash."""

    def finish(self, outcome: Outcome) -> None:
        """Record how the call ended (its result already checked storable by the chain)."""
        self.status = outcome.status
        self.orthodoxy_status = outcome.orthodoxy_status
        self.http_status = outcome.http_status
        self.result = outcome.result
        self.warnings = outcome.warnings
        self.error_code = outcome.error_code
        self.error_message = outcome.error_message
        self.duration_ms = outcome.duration_ms
        self.upstream_credential = outcome.upstream_credential
        self.completed_at = utc_now()

    def outcome(self, *, replayed: bool = False) -> Outcome:
        """The caller's view of the finished call (an ``Idempotency-Key`` replay)."""
        return Outcome(
            conclave_id=self.conclave_id,
            tool=self.tool_name,
            status=self.status,
            orthodoxy_status=self.orthodoxy_status,
            result=self.result,
            warnings=list(self.warnings or []),
            duration_ms=self.duration_ms or 0.0,
            http_status=self.http_status or 200,
            error_code=self.error_code,
            error_message=self.error_message,
            replayed=replayed,
            upstream_credential=self.upstream_credential,
            log_leaf_hash=self.log_leaf_hash,
        )
