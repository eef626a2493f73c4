"""Audit trail: the gateway's calls, searched and paged (``GET /calls``), and one call's detail
with its transparency-log verification (``GET /calls/{id}``, ``/calls/{id}/verify``).

The gateway decides what the user sees: its own calls, or everyone's for an operator. The filter
form is a ``GET`` form, so a search is a link that can be bookmarked and shared; paging follows
the gateway's keyset cursor (``next_cursor``), so page 10,000 costs what page 1 costs.
"""

from __future__ import annotations

import asyncio
import math
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from conclave.console.session import Session
from conclave.console.upstream import ServiceProblem, Services, path_segment, unusable_answer
from conclave.console.web import ServicesDep, SignedIn, page

router = APIRouter(include_in_schema=False)

STATUSES = ("running", "succeeded", "rejected", "failed", "timeout")
ORTHODOXY = ("blessed", "purified", "heretical")
FILTERS = ("tool", "status", "orthodoxy_status", "user_id", "correlation_id", "since", "until")
PAGE_SIZE = 50


@router.get("/calls")
async def calls(
    request: Request,
    session: SignedIn,
    services: ServicesDep,
    tool: Annotated[str | None, Query(max_length=128)] = None,
    status: Annotated[str | None, Query(max_length=32)] = None,
    orthodoxy_status: Annotated[str | None, Query(max_length=32)] = None,
    user_id: Annotated[str | None, Query(max_length=256)] = None,
    correlation_id: Annotated[str | None, Query(max_length=128)] = None,
    since: Annotated[str | None, Query(max_length=64)] = None,
    until: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
) -> HTMLResponse:
    """A page of the audit trail; the gateway validates every filter (its problem is shown)."""
    chosen = {
        "tool": tool,
        "status": status,
        "orthodoxy_status": orthodoxy_status,
        "user_id": user_id if session.is_operator else None,
        "correlation_id": correlation_id,
        "since": since,
        "until": until,
    }
    shown = {key: value for key, value in chosen.items() if value}
    found = await services.get(
        "gateway", "/calls", session, params={**shown, "cursor": cursor, "limit": PAGE_SIZE}
    )
    listed = found.get("calls") if isinstance(found, dict) else None
    next_cursor = found.get("next_cursor") if isinstance(found, dict) else None
    if not isinstance(listed, list) or not isinstance(next_cursor, str | None):
        raise unusable_answer("gateway", "a page of calls that is not one")
    return page(
        request,
        "calls.html",
        session,
        calls=[_shown_call(call) for call in listed if isinstance(call, dict)],
        next_cursor=next_cursor,
        filters=shown,
        paged=bool(cursor),
        statuses=STATUSES,
        orthodoxy=ORTHODOXY,
    )


@router.get("/calls/{conclave_id}")
async def call_detail(
    request: Request, conclave_id: str, session: SignedIn, services: ServicesDep
) -> HTMLResponse:
    """One call: arguments (as audited, secrets redacted), result, and its verification."""
    path = f"/calls/{path_segment(conclave_id, 'The call id')}"
    call, verification = await asyncio.gather(
        services.get("gateway", path, session),
        _verification(services, path, session),
    )
    if not isinstance(call, dict) or not isinstance(call.get("conclave_id"), str):
        raise unusable_answer("gateway", "a call that is not one")
    return page(request, "call.html", session, call=_shown_call(call), verification=verification)


def _shown_call(call: dict[str, Any]) -> dict[str, Any]:
    """A call as the pages show it: its numbers only when they are numbers (the templates
    format them), its texts as texts."""
    duration = call.get("duration_ms")
    shown = {key: value for key, value in call.items() if isinstance(key, str)}
    shown["duration_ms"] = duration if _finite(duration) else None
    warnings = call.get("warnings")
    shown["warnings"] = [str(item) for item in warnings] if isinstance(warnings, list) else []
    return shown


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


async def _verification(services: Services, path: str, session: Session) -> dict[str, Any]:
    """The call checked against the transparency log; a log that is off or unreachable is a
    status to show, not a failed page."""
    try:
        result = await services.get("gateway", path + "/verify", session)
    except ServiceProblem as exc:
        return {"ok": False, "problem": exc.code.lower(), "detail": exc.detail}
    if not isinstance(result, dict):
        return {"ok": False, "problem": "unreadable", "detail": "The answer was not a check."}
    return {**result, "ok": result.get("ok") is True}
