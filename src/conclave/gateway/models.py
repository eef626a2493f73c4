"""Request and response models of the gateway's HTTP API."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

CORRELATION_ID_PATTERN = r"^[A-Za-z0-9._:/@+=-]+$"


class ExecuteRequest(BaseModel):
    """One tool execution."""

    tool: str = Field(..., min_length=1, max_length=256, description="Tool name or wire alias.")
    args: Any = Field(
        default_factory=dict,
        description="Arguments, a JSON object matching the tool's parameters schema.",
        json_schema_extra={"type": "object"},
    )
    correlation_id: str | None = Field(
        None,
        max_length=128,
        pattern=CORRELATION_ID_PATTERN,
        description="Carried into the audit row and the event (defaults to X-Correlation-ID).",
    )
    user_id: str | None = Field(
        None,
        max_length=256,
        description="Caller identity, only honoured when authentication is disabled.",
    )


class ExecuteResponse(BaseModel):
    """The outcome of a successful execution."""

    conclave_id: str
    tool: str
    status: str = Field(description="succeeded")
    orthodoxy_status: str = Field(description="blessed or purified")
    result: Any
    warnings: list[str]
    duration_ms: float
    log_leaf_hash: str | None = Field(
        None,
        description="SHA-256 leaf hash (hex) of the call's entry in the transparency log 'calls' "
        "(if kept); its receipt is found by it.",
    )
    receipt: str | None = Field(
        None,
        description="Path of the call's receipt (GET; 404 BEYOND_LOG until the checkpoint "
        "covering the call is signed, about a second after the call).",
    )


class ToolCatalogue(BaseModel):
    """The tool catalogue in one function-calling format."""

    tools: list[dict[str, Any]]
    count: int
    format: str


class CallVerificationRead(BaseModel):
    """A call's audit row checked against the transparency log ``calls``."""

    conclave_id: str
    ok: bool = Field(description="The row is unchanged and its entry is under a signed checkpoint.")
    problem: str | None = Field(
        None,
        description="not_logged, row_modified, not_yet_logged, missing_from_log or leaf_modified "
        "(docs/gateway.md, 'Verifying a call').",
    )
    log_index: int | None = Field(None, description="The call's leaf index, once logged.")
    checkpoint_size: int | None = Field(None, description="The checkpoint it was proven under.")
    receipt: str | None = Field(None, description="Path of the call's receipt.")


_ON_BEHALF_OF = (
    "The service that authenticated and acted for user_id (X-Conclave-Acting-User); null when "
    "the user authenticated as themselves."
)


class ToolCall(BaseModel):
    """One audit row of ``mcp_tool_calls``."""

    conclave_id: str
    tool_name: str
    requested_tool: str
    args: Any
    canonical_args: Any = Field(None, description="What the canonical tool received (aliases).")
    result: Any
    orthodoxy_status: str
    status: str
    error_code: str | None
    error_message: str | None
    warnings: list[str]
    user_id: str
    on_behalf_of: str | None = Field(None, description=_ON_BEHALF_OF)
    correlation_id: str | None
    duration_ms: float | None
    created_at: str
    completed_at: str | None
    upstream_credential: str | None = Field(
        None,
        description="Credential an upstream MCP server's tool was called with: 'user', "
        "'service' or 'none' (the kind, never the value); null for the gateway's own tools.",
    )
    log_leaf_hash: str | None = Field(
        None,
        description="SHA-256 leaf hash (hex) of the call's entry in the transparency log 'calls' "
        "(if kept); its receipt is found by it.",
    )
    receipt: str | None = Field(
        None, description="Path of the call's receipt (GET; 404 BEYOND_LOG until it is signed)."
    )


class CallSummary(BaseModel):
    """One call in the audit trail's search: its audit row without arguments and result."""

    conclave_id: str
    tool_name: str
    requested_tool: str
    user_id: str
    on_behalf_of: str | None = Field(None, description=_ON_BEHALF_OF)
    status: str
    orthodoxy_status: str
    http_status: int | None
    error_code: str | None
    correlation_id: str | None
    duration_ms: float | None
    created_at: str
    completed_at: str | None
    log_leaf_hash: str | None = Field(None, description="As in GET /calls/{id}.")


class CallPage(BaseModel):
    """A page of the audit trail, newest first."""

    calls: list[CallSummary]
    count: int
    next_cursor: str | None = Field(
        None, description="Pass as `cursor` for the next page; null on the last page."
    )
