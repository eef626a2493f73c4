"""Audit trail: the gateway's calls, searched and paged (``GET /calls``), and one call's detail
with its transparency-log verification (``GET /calls/{id}``, ``/calls/{id}/verify``).

The gateway decides what the user sees: its own calls, or everyone's for an operator. The filter
form is a ``GET`` form, so a search is a link that can be bookmarked and shared; paging follows
the gateway's keyset cursor (``next_cursor``), so page 10,000 costs what page 1 costs.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from conclave.console.upstream import ServiceProblem, path_segment
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
    return page(
        request,
        "calls.html",
        session,
        calls=found.get("calls", []),
        next_cursor=found.get("next_cursor"),
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
    return page(request, "call.html", session, call=call, verification=verification)


async def _verification(services: Any, path: str, session: Any) -> dict[str, Any]:
    """The call checked against the transparency log; a log that is off or unreachable is a
    status to show, not a failed page."""
    try:
        result: dict[str, Any] = await services.get("gateway", path + "/verify", session)
    except ServiceProblem as exc:
        return {"ok": False, "problem": exc.code.lower(), "detail": exc.detail}
    return result
