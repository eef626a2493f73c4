"""Schedules: the collector's cron schedules listed (``GET /schedules``), added
(``POST /schedules``), paused and resumed (``PATCH /schedules/{name}``) and removed
(``DELETE /schedules/{name}``), as the signed-in user. The page's buttons name a schedule by its
id: a name may be ``..``, which no URL path can carry as one segment.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from conclave.console.pages.expeditions import PRIORITIES, expedition_body, refusal_status
from conclave.console.session import Session
from conclave.console.upstream import ServiceProblem, Services, path_segment, problem_of
from conclave.console.web import ServicesDep, SignedIn, checked_form, page

router = APIRouter(include_in_schema=False)


@router.get("/schedules")
async def schedules(request: Request, session: SignedIn, services: ServicesDep) -> HTMLResponse:
    """The user's schedules (everyone's for an operator) and the form to add one."""
    return await _schedules_page(request, session, services, {"priority": "medium"})


@router.post("/schedules")
async def add_schedule(request: Request, session: SignedIn, services: ServicesDep) -> Response:
    """Store a schedule as the user; the list again, with the problem when it was refused."""
    form = await checked_form(request, session)
    body, refused = expedition_body(form)
    problem: ServiceProblem | dict[str, Any] | None = refused
    if problem is None:
        body.update(
            name=form.get("name", ""),
            cron=form.get("cron", ""),
            enabled=form.get("enabled") != "paused",
        )
        try:
            await services.post("collector", "/schedules", session, body)
        except ServiceProblem as exc:
            if exc.status >= 500:
                raise
            problem = exc
        else:
            return RedirectResponse("/schedules", status_code=303)
    return await _schedules_page(request, session, services, form, problem, refusal_status(problem))


@router.post("/schedules/{name}/remove")
async def remove_schedule(
    request: Request, name: str, session: SignedIn, services: ServicesDep
) -> Response:
    """Remove a schedule (another user's is the collector's 404, shown)."""
    await checked_form(request, session)
    segment = path_segment(name, "The schedule name")
    answer = await services.request("DELETE", "collector", f"/schedules/{segment}", session)
    if not answer.is_success:
        raise problem_of("collector", answer)
    return RedirectResponse("/schedules", status_code=303)


@router.post("/schedules/{name}/pause")
async def pause_schedule(
    request: Request, name: str, session: SignedIn, services: ServicesDep
) -> Response:
    """Pause a schedule: no tick fires until it is resumed."""
    return await _set_enabled(request, name, session, services, enabled=False)


@router.post("/schedules/{name}/resume")
async def resume_schedule(
    request: Request, name: str, session: SignedIn, services: ServicesDep
) -> Response:
    """Resume a schedule at its next tick after now (missed ticks are not made up)."""
    return await _set_enabled(request, name, session, services, enabled=True)


async def _set_enabled(
    request: Request, name: str, session: Session, services: Services, *, enabled: bool
) -> Response:
    await checked_form(request, session)
    segment = path_segment(name, "The schedule name")
    answer = await services.request(
        "PATCH",
        "collector",
        f"/schedules/{segment}",
        session,
        content=json.dumps({"enabled": enabled}).encode(),
        headers={"Content-Type": "application/json"},
    )
    if not answer.is_success:
        raise problem_of("collector", answer)
    return RedirectResponse("/schedules", status_code=303)


async def _schedules_page(
    request: Request,
    session: Session,
    services: Services,
    values: dict[str, str],
    problem: ServiceProblem | dict[str, Any] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    found = await services.get("collector", "/schedules", session)
    types = await services.get("collector", "/expedition/types", session)
    return page(
        request,
        "schedules.html",
        session,
        status_code=status_code,
        schedules=found.get("schedules", []),
        types=[str(item.get("name")) for item in types.get("types", []) if isinstance(item, dict)],
        priorities=PRIORITIES,
        values=values,
        problem=problem,
    )
