"""HTTP routes of the tool gateway (thin: the chain lives in :mod:`service`)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from conclave import __version__
from conclave.gateway import store
from conclave.gateway.call_log import CALLS_LOG, receipt_path
from conclave.gateway.call_search import CallFilter, search_calls
from conclave.gateway.call_verify import verify_call
from conclave.gateway.formats import render
from conclave.gateway.models import (
    CORRELATION_ID_PATTERN,
    CallPage,
    CallSummary,
    CallVerificationRead,
    ExecuteRequest,
    ExecuteResponse,
    ToolCall,
    ToolCatalogue,
)
from conclave.gateway.policy import listable, public_tool_count, subject_of
from conclave.gateway.records import AuditRow
from conclave.gateway.service import ExecuteCommand, GatewayService
from conclave.platform.auth import ACTING_USER_HEADER, Principal
from conclave.platform.bodies import read_model, request_model_schema
from conclave.platform.clock import rfc3339
from conclave.platform.db.engine import store_errors
from conclave.platform.errors import Forbidden, NotFound
from conclave.platform.http import (
    CurrentPlatform,
    CurrentPrincipal,
    correlation_id,
    health_response,
)
from conclave.platform.inputs import (
    UnsafeInput,
    check_safe,
    escape_unsafe,
)
from conclave.platform.jsontext import CompactJSONResponse
from conclave.platform.keyset import CURSOR_MAX_LENGTH, UtcMoment, decode_cursor, page_of
from conclave.platform.openapi import BEARER_SECURITY, HEALTH_RESPONSES, problem_responses
from conclave.platform.problem_types import ProblemCode
from conclave.platform.runtime import Platform
from conclave.platform.tlog.published import PublishedLogs

router = APIRouter()


async def _service(request: Request) -> GatewayService:
    return request.app.state.gateway  # type: ignore[no-any-return]


Service = Annotated[GatewayService, Depends(_service)]


@router.get("/", tags=["operations"])
async def describe(request: Request, service: Service) -> dict[str, Any]:
    """Describe the service and link to its endpoints."""
    return {
        "service": "conclave-gateway",
        "description": "Governed tool execution: catalogue, validation, audit, events, metrics.",
        "version": __version__,
        "mode": request.app.state.settings.mcp_domain,
        "tools": public_tool_count(service.policy, service.registry),
        "auth": "enabled" if request.app.state.authenticator.enabled else "disabled",
        "links": {
            "self": "/",
            "health": "/health",
            "tools": "/tools",
            "execute": "/execute",
            "calls": "/calls/{conclave_id}",
            "metrics": "/metrics",
            "openapi": "/openapi.json",
            "docs": "/docs",
        },
    }


@router.get("/health", tags=["operations"], responses=HEALTH_RESPONSES)
async def health(platform: CurrentPlatform, service: Service) -> JSONResponse:
    """Store and bus status; 503 when either is down."""
    tools = public_tool_count(service.policy, service.registry)
    return await health_response(platform, "gateway", tools=tools)


@router.get("/tools", tags=["tools"])
async def list_tools(
    service: Service,
    principal: CurrentPrincipal,
    format: Literal["openai", "anthropic", "mcp"] = "openai",
    tags: Annotated[str | None, Query(max_length=1000, description="Comma-separated tags.")] = None,
    names: Annotated[
        str | None, Query(max_length=4000, description="Comma-separated names.")
    ] = None,
    include_unavailable: Annotated[
        bool, Query(description="Also list tools whose backend is not configured.")
    ] = False,
) -> ToolCatalogue:
    """The tool catalogue in function-calling format (OpenAI by default): the tools you may list."""
    wanted_tags = {t.strip() for t in tags.split(",") if t.strip()} if tags else None
    wanted_names = {n.strip() for n in names.split(",") if n.strip()} if names else None
    listed = service.registry.tools(include_unavailable=include_unavailable)
    tools = [
        tool
        for tool in listable(service.policy, service.registry, subject_of(principal), listed)
        if (wanted_tags is None or wanted_tags & set(tool.tags))
        and (wanted_names is None or tool.name in wanted_names)
    ]
    entries = [render(tool, format) for tool in tools]
    return ToolCatalogue(tools=entries, count=len(entries), format=format)


_IDEMPOTENCY_KEY_MAX = 256
_CORRELATION = re.compile(CORRELATION_ID_PATTERN)
_EXECUTE_OPENAPI = {
    "requestBody": request_model_schema(ExecuteRequest),
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "Replays the first outcome of a call made with the same key.",
            "schema": {"type": "string", "minLength": 1, "maxLength": _IDEMPOTENCY_KEY_MAX},
        }
    ],
    "security": BEARER_SECURITY,
}


@router.post(
    "/execute",
    tags=["tools"],
    response_model=ExecuteResponse,
    openapi_extra=_EXECUTE_OPENAPI,
    responses=problem_responses(
        404,
        409,
        413,
        422,
        429,
        502,
        503,
        504,
        s404="Unknown tool (UNKNOWN_TOOL, audited, heretical)",
        s409="Idempotency-Key conflict (IDEMPOTENCY_KEY_REUSED, IDEMPOTENCY_IN_PROGRESS)",
        s413="Body or arguments too large (PAYLOAD_TOO_LARGE, ARGS_TOO_LARGE)",
        s422="Invalid arguments (VALIDATION_FAILED), an unsafe value (UNSAFE_INPUT), a rule "
        "violation (RULE_VIOLATION, audited, heretical), a result over the cap "
        "(RESULT_TOO_LARGE) or an error the tool raised (TOOL_ERROR or the tool's own code)",
        s429="Your rate, the tool's rate or its concurrency is used up (RATE_LIMITED, TOOL_BUSY)",
        s502="The tool failed, broke its output schema, or its backend failed (TOOL_FAILED, "
        "OUTPUT_INVALID, BACKEND_FAILED)",
        s503="The store, or an HTTP tool's backend, is unavailable (STORE_UNAVAILABLE, "
        "BACKEND_UNAVAILABLE)",
        s504="The tool or its backend timed out (TOOL_TIMEOUT, BACKEND_TIMEOUT; audited)",
    ),
)
async def execute(request: Request) -> Response:
    """Execute one tool through validation, audit, event and metrics."""
    # The hottest route: it reads its own body and headers instead of declaring them as FastAPI
    # dependencies (solving those cost more CPU than the governance chain); `openapi_extra`
    # documents what it reads.
    state = request.app.state
    principal = await state.authenticator.authenticate_async(
        request.headers.get("authorization"), request.headers.get(ACTING_USER_HEADER)
    )
    try:
        body = await read_model(request, ExecuteRequest)
    except UnsafeInput as refusal:
        command = _refused_call(request, principal, refusal)
        if command is None:  # not a tool call at all: refused like any malformed request
            raise
        raise (await state.gateway.refuse_unsafe(command, refusal)).problem() from None
    idempotency_key = _idempotency_key(request)
    outcome = await state.gateway.execute(
        ExecuteCommand(
            tool=body.tool,
            args=body.args,
            user_id=state.authenticator.acting_user(principal, body.user_id),
            correlation_id=body.correlation_id or correlation_id(request),
            idempotency_key=idempotency_key,
            roles=principal.roles,
            on_behalf_of=principal.on_behalf_of,
        )
    )
    outcome.raise_if_failed()
    content = {
        "conclave_id": outcome.conclave_id,
        "tool": outcome.tool,
        "status": outcome.status,
        "orthodoxy_status": outcome.orthodoxy_status,
        "result": outcome.result,
        "warnings": outcome.warnings,
        "duration_ms": outcome.duration_ms,
    }
    if outcome.log_leaf_hash is not None:
        content["log_leaf_hash"] = outcome.log_leaf_hash.hex()
        content["receipt"] = receipt_path(outcome.log_leaf_hash)
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else None
    return CompactJSONResponse(content, headers=headers)


EXECUTE_ROUTE = next(r for r in router.routes if isinstance(r, APIRoute) and r.path == "/execute")


def _refused_call(
    request: Request, principal: Principal, refusal: UnsafeInput
) -> ExecuteCommand | None:
    """The call a body refused for an unsafe value asked for, with those values escaped, so that
    it can be audited; ``None`` when the body names no tool. It is never replayed by an
    ``Idempotency-Key``: nothing ran, and a retry is refused (and audited) again."""
    document = escape_unsafe(refusal.document)
    if not isinstance(document, dict):
        return None
    tool, args, user_id = document.get("tool"), document.get("args", {}), document.get("user_id")
    if not isinstance(tool, str) or not tool:
        return None
    claimed = document.get("correlation_id")
    if not (isinstance(claimed, str) and len(claimed) <= 128 and _CORRELATION.match(claimed)):
        claimed = correlation_id(request)
    if refusal.finding.location[:2] == ("body", "user_id"):
        # The claimed user is the unsafe value: the call is the principal's, refused for it.
        acting = principal.user_id
    else:
        claimed_user = user_id[:256] if isinstance(user_id, str) else None
        acting = request.app.state.authenticator.acting_user(principal, claimed_user)
    return ExecuteCommand(
        tool=tool[:256],
        args=args,
        user_id=acting,
        correlation_id=claimed,
        roles=principal.roles,
        on_behalf_of=principal.on_behalf_of,
    )


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is not None:
        # Servers refuse NUL in headers, but an app served in-process (or behind a proxy that
        # passes it) receives it: the store would refuse the key after the tool ran.
        check_safe(key, ("header", "Idempotency-Key"))
    if key is not None and not 1 <= len(key) <= _IDEMPOTENCY_KEY_MAX:
        error = {
            "loc": ("header", "Idempotency-Key"),
            "msg": f"must be 1 to {_IDEMPOTENCY_KEY_MAX} characters long",
            "type": "string_length",
        }
        raise RequestValidationError([error])
    return key


CallStatus = Literal["running", "succeeded", "rejected", "failed", "timeout"]
Orthodoxy = Literal["blessed", "purified", "heretical"]


@router.get(
    "/calls",
    tags=["tools"],
    responses=problem_responses(
        400,
        403,
        503,
        s400="A cursor not from `next_cursor` (INVALID_CURSOR)",
        s403="`user_id` names another user, and you are no operator (FORBIDDEN)",
    ),
)
async def search_calls_route(
    platform: CurrentPlatform,
    principal: CurrentPrincipal,
    request: Request,
    tool: Annotated[str | None, Query(max_length=128, description="Canonical tool name.")] = None,
    status: CallStatus | None = None,
    orthodoxy_status: Orthodoxy | None = None,
    user_id: Annotated[
        str | None, Query(max_length=256, description="Whose calls (operators: anyone's).")
    ] = None,
    correlation_id: Annotated[str | None, Query(max_length=128)] = None,
    since: Annotated[UtcMoment | None, Query(description="Created at or after (RFC 3339).")] = None,
    until: Annotated[UtcMoment | None, Query(description="Created before (RFC 3339).")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=CURSOR_MAX_LENGTH, description="From `next_cursor`.")
    ] = None,
) -> CallPage:
    """The audit trail: your calls (anyone's for an operator, or by `user_id`), newest first,
    filtered by tool, status, orthodoxy, correlation id and creation time; summaries without
    arguments and results (`GET /calls/{id}` has those)."""
    everyone = principal.is_operator or not request.app.state.authenticator.enabled
    if user_id is not None and user_id != principal.user_id and not everyone:
        raise Forbidden("Only operators may list another user's calls.")
    after = decode_cursor(cursor) if cursor else None
    kept = CallFilter(
        user_id=user_id if everyone else principal.user_id,
        tool=tool,
        status=status,
        orthodoxy_status=orthodoxy_status,
        correlation_id=correlation_id,
        since=since,
        until=until,
    )
    with store_errors():
        # One row more than the page: whether a next page exists is known, not guessed.
        rows = await search_calls(platform.engine, kept, after, limit + 1)
    found, next_cursor = page_of(rows, limit, lambda row: (row.created_at, row.conclave_id))
    calls = [_call_summary(row) for row in found]
    return CallPage(calls=calls, count=len(calls), next_cursor=next_cursor)


def _call_summary(row: Any) -> CallSummary:
    return CallSummary(**_shown_columns(row), http_status=row.http_status)


def _shown_columns(row: Any) -> dict[str, Any]:
    """The audit row's columns every view of a call shows (a summary, the whole call)."""
    return {
        "conclave_id": row.conclave_id,
        "tool_name": row.tool_name,
        "requested_tool": row.requested_tool,
        "user_id": row.user_id,
        "on_behalf_of": row.on_behalf_of,
        "status": row.status,
        "orthodoxy_status": row.orthodoxy_status,
        "error_code": row.error_code,
        "correlation_id": row.correlation_id,
        "duration_ms": row.duration_ms,
        "created_at": rfc3339(row.created_at),
        "completed_at": rfc3339(row.completed_at) if row.completed_at else None,
        "log_leaf_hash": row.log_leaf_hash.hex() if row.log_leaf_hash else None,
    }


@router.get("/calls/{conclave_id}", tags=["tools"], responses=problem_responses(503))
async def get_call(
    conclave_id: str, platform: CurrentPlatform, principal: CurrentPrincipal, request: Request
) -> ToolCall:
    """One audit row of your own calls (anyone's, for an operator)."""
    return _tool_call(await _call_or_404(conclave_id, platform, principal, request, operators=True))


async def _call_or_404(
    conclave_id: str,
    platform: Platform,
    principal: Principal,
    request: Request,
    *,
    operators: bool = False,
) -> AuditRow:
    """The audit row ``conclave_id`` if it is the caller's (or anyone's, for an operator where
    ``operators``; everyone's with auth off), else 404 ``CALL_NOT_FOUND``."""
    # An id holding NUL never gets here: the platform's boundary refuses it (422 UNSAFE_INPUT).
    row = await store.get_call(platform.engine, conclave_id)
    visible = row is not None and (
        row.user_id == principal.user_id
        or (operators and principal.is_operator)
        or not request.app.state.authenticator.enabled
    )
    if row is None or not visible:
        raise NotFound(f"No call {conclave_id!r}.", code=ProblemCode.CALL_NOT_FOUND)
    return row


@router.get("/calls/{conclave_id}/verify", tags=["tools"], responses=problem_responses(503))
async def verify_call_route(
    conclave_id: str, platform: CurrentPlatform, principal: CurrentPrincipal, request: Request
) -> CallVerificationRead:
    """Check one of your calls (any call, for operators) against the transparency log ``calls``:
    the audit row as stored still rebuilds the entry it recorded, and that entry is a leaf under
    the log's latest signed checkpoint (its inclusion proof checked with the log's keys)."""
    row = await _call_or_404(conclave_id, platform, principal, request, operators=True)
    logs: PublishedLogs = request.app.state.tlogs
    found = await verify_call(row, logs.get_log_or_404(CALLS_LOG))
    return CallVerificationRead(
        conclave_id=row.conclave_id,
        ok=found.ok,
        problem=found.problem,
        log_index=found.log_index,
        checkpoint_size=found.checkpoint_size,
        receipt=receipt_path(row.log_leaf_hash) if row.log_leaf_hash else None,
    )


def _tool_call(row: AuditRow) -> ToolCall:
    return ToolCall(
        **_shown_columns(row),
        args=row.args,
        canonical_args=row.canonical_args,
        upstream_credential=row.upstream_credential,
        result=row.result,
        error_message=row.error_message,
        warnings=list(row.warnings or []),
        receipt=receipt_path(row.log_leaf_hash) if row.log_leaf_hash else None,
    )
