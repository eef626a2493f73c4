"""Dead letters: what each service's pipeline set aside, replayed or discarded by an operator.

Every service answers ``GET /dead-letters`` for its own store's quarantined outbox events and the
bus's dead-lettered entries (operators only, docs/architecture.md). Services that share a store or
a bus list the same rows: they are shown once, with the first service that listed them, which is
also the one a replay or discard is sent to.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from conclave.console.session import Session
from conclave.console.upstream import ServiceProblem, Services, path_segment
from conclave.console.web import ServicesDep, SignedIn, checked_form, page

router = APIRouter(include_in_schema=False)

Action = Literal["replay", "discard"]
SERVICES = ("gateway", "collector", "graph", "edge")
DONE = {"replay": "Replayed.", "discard": "Discarded."}


@router.get("/dead-letters")
async def dead_letters(
    request: Request,
    session: SignedIn,
    services: ServicesDep,
    done: Annotated[str | None, Query(max_length=16)] = None,
) -> HTMLResponse:
    """Every service's dead letters, each shown once."""
    answers = await asyncio.gather(*(_listing(services, name, session) for name in SERVICES))
    refusals = [answer for answer in answers if isinstance(answer, ServiceProblem)]
    if refusals and all(problem.status == 403 for problem in refusals) and len(refusals) == 4:
        raise refusals[0]  # a user, not an operator: the services' own refusal, as a page
    outbox: dict[str, dict[str, Any]] = {}
    bus: dict[tuple[str, str], dict[str, Any]] = {}
    for name, answer in zip(SERVICES, answers, strict=True):
        if isinstance(answer, ServiceProblem):
            continue
        for row in answer.get("outbox", []):
            outbox.setdefault(row["event_id"], {**row, "service": name})
        for group in answer.get("bus", []):
            for entry in group.get("entries", []):
                key = (entry["channel"], entry["entry_id"])
                bus.setdefault(key, {**entry, "service": name})
    unavailable = {
        name: answer.detail
        for name, answer in zip(SERVICES, answers, strict=True)
        if isinstance(answer, ServiceProblem)
    }
    return page(
        request,
        "dead_letters.html",
        session,
        outbox=list(outbox.values()),
        bus=list(bus.values()),
        unavailable=unavailable,
        done=DONE.get(done or ""),
    )


async def _listing(services: Services, name: str, session: Session) -> Any:
    try:
        return await services.get(name, "/dead-letters", session, params={"limit": 100})
    except ServiceProblem as exc:
        return exc


@router.post("/dead-letters/{service}/outbox/{event_id}/{action}")
async def resolve_outbox_event(
    request: Request,
    session: SignedIn,
    services: ServicesDep,
    service: Literal["gateway", "collector", "graph", "edge"],
    event_id: str,
    action: Action,
) -> RedirectResponse:
    """Replay or discard a quarantined outbox event, through the service that listed it."""
    await checked_form(request, session)
    path = f"/dead-letters/outbox/{path_segment(event_id, 'The event id')}/{action}"
    await services.post(service, path, session, {})
    return RedirectResponse(f"/dead-letters?done={action}", status_code=303)


@router.post("/dead-letters/{service}/bus/{channel}/{entry_id}/{action}")
async def resolve_bus_entry(
    request: Request,
    session: SignedIn,
    services: ServicesDep,
    service: Literal["gateway", "collector", "graph", "edge"],
    channel: str,
    entry_id: str,
    action: Action,
) -> RedirectResponse:
    """Replay or discard a dead-lettered bus entry, through the service that listed it."""
    await checked_form(request, session)
    where = f"{path_segment(channel, 'The channel')}/{path_segment(entry_id, 'The entry id')}"
    await services.post(service, f"/dead-letters/bus/{where}/{action}", session, {})
    return RedirectResponse(f"/dead-letters?done={action}", status_code=303)
