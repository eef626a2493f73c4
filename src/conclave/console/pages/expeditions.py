"""Expeditions: the collector's history (``GET /expedition/history``), one expedition followed
live (``GET /expedition/status/{id}``), cancelled (``POST /expedition/{id}/cancel``) and
triggered (``POST /expedition/run``).

The collector decides what the user sees and may do: their own expeditions, or everyone's for
an operator; another user's answers 404, which the page shows as it came.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from conclave.console.session import Session
from conclave.console.strict_json import JsonRefused, parse_strict_json
from conclave.console.upstream import ServiceProblem, Services, path_segment
from conclave.console.web import ServicesDep, SignedIn, checked_form, page
from conclave.platform.problem_types import ProblemCode

router = APIRouter(include_in_schema=False)

STATUSES = ("queued", "running", "completed", "failed", "cancelled")
UNFINISHED = ("queued", "running")
PRIORITIES = ("critical", "high", "medium", "low")
PAGE_SIZE = 50
POLL_SECONDS = 2
LIST_POLL_SECONDS = 5
_COLLECTION_SPLIT = re.compile(r"[\s,]+")


@router.get("/expeditions")
async def expeditions(
    request: Request,
    session: SignedIn,
    services: ServicesDep,
    status: Annotated[str | None, Query(max_length=32)] = None,
    expedition_type: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    """A page of the history, newest first; the collector validates the filters."""
    filters = _filters(status, expedition_type)
    history, types = await asyncio.gather(
        _history(services, session, filters, cursor), _type_names(services, session)
    )
    return page(request, "expeditions.html", session, **history, statuses=STATUSES, types=types)


@router.get("/expeditions/table")
async def expeditions_table(
    request: Request,
    session: SignedIn,
    services: ServicesDep,
    status: Annotated[str | None, Query(max_length=32)] = None,
    expedition_type: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    """The history's first page alone, polled by the page while any of it is unfinished."""
    history = await _history(services, session, _filters(status, expedition_type), None)
    return page(request, "_expedition_table.html", session, **history)


def _filters(status: str | None, expedition_type: str | None) -> dict[str, str]:
    chosen = (("status", status), ("expedition_type", expedition_type))
    return {key: value for key, value in chosen if value}


async def _history(
    services: Services, session: Session, filters: dict[str, str], cursor: str | None
) -> dict[str, Any]:
    """A page of history and the counts of what the user may see (``GET /stats``: an
    operator's are the deployment's; shown without them when the collector cannot count)."""
    params = {**filters, "cursor": cursor, "limit": PAGE_SIZE}
    found, stats = await asyncio.gather(
        services.get("collector", "/expedition/history", session, params=params),
        _stats(services, session),
    )
    listed = found.get("expeditions", [])
    return {
        "expeditions": listed,
        "next_cursor": found.get("next_cursor"),
        "filters": filters,
        "paged": bool(cursor),
        # Only the first page is live: a later one is a look at the past, and its cursor a
        # position that new expeditions do not move.
        "live": not cursor and any(item.get("status") in UNFINISHED for item in listed),
        "stats": stats,
        "poll_seconds": LIST_POLL_SECONDS,
    }


async def _stats(services: Services, session: Session) -> dict[str, Any] | None:
    try:
        stats: dict[str, Any] = await services.get("collector", "/stats", session)
    except ServiceProblem:
        return None
    return stats


@router.get("/expeditions/new")
async def new_expedition(request: Request, session: SignedIn, services: ServicesDep) -> Response:
    """The trigger form."""
    return await _trigger_form(request, session, services, {"priority": "medium"})


@router.post("/expeditions/new")
async def trigger_expedition(
    request: Request, session: SignedIn, services: ServicesDep
) -> Response:
    """Queue an expedition as the user; its page on success, the form and the problem otherwise."""
    form = await checked_form(request, session)
    body, refused = expedition_body(form)
    problem: ServiceProblem | dict[str, Any] | None = refused
    if problem is None:
        try:
            accepted = await services.post("collector", "/expedition/run", session, body)
        except ServiceProblem as exc:
            if exc.status >= 500:
                raise
            problem = exc
        else:
            target = f"/expeditions/{path_segment(str(accepted['expedition_id']), 'The id')}"
            return RedirectResponse(target, status_code=303)
    return await _trigger_form(request, session, services, form, problem, refusal_status(problem))


@router.get("/expeditions/{expedition_id}")
async def expedition_detail(
    request: Request, expedition_id: str, session: SignedIn, services: ServicesDep
) -> HTMLResponse:
    """One expedition: status, live progress, agents, results, errors."""
    expedition = await _status(services, expedition_id, session)
    return page(
        request,
        "expedition.html",
        session,
        expedition=expedition,
        poll_seconds=POLL_SECONDS,
        unfinished=UNFINISHED,
    )


@router.get("/expeditions/{expedition_id}/live")
async def expedition_live(
    request: Request, expedition_id: str, session: SignedIn, services: ServicesDep
) -> HTMLResponse:
    """The detail page's live part, polled while the expedition is queued or running."""
    expedition = await _status(services, expedition_id, session)
    return page(
        request,
        "_expedition_live.html",
        session,
        expedition=expedition,
        poll_seconds=POLL_SECONDS,
        unfinished=UNFINISHED,
    )


@router.post("/expeditions/{expedition_id}/cancel")
async def cancel_expedition(
    request: Request, expedition_id: str, session: SignedIn, services: ServicesDep
) -> Response:
    """Cancel; back to the expedition's page (a finished one is the collector's 409, shown)."""
    await checked_form(request, session)
    segment = path_segment(expedition_id, "The expedition id")
    await services.post("collector", f"/expedition/{segment}/cancel", session, {})
    return RedirectResponse(f"/expeditions/{segment}", status_code=303)


async def _status(services: Services, expedition_id: str, session: Session) -> dict[str, Any]:
    segment = path_segment(expedition_id, "The expedition id")
    found: dict[str, Any] = await services.get(
        "collector", f"/expedition/status/{segment}", session
    )
    return found


async def _type_names(services: Services, session: Session) -> list[str]:
    answer = await services.get("collector", "/expedition/types", session)
    return [str(item.get("name")) for item in answer.get("types", []) if isinstance(item, dict)]


async def _trigger_form(
    request: Request,
    session: Session,
    services: Services,
    values: dict[str, str],
    problem: ServiceProblem | dict[str, Any] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    return page(
        request,
        "expedition_new.html",
        session,
        status_code=status_code,
        types=await _type_names(services, session),
        priorities=PRIORITIES,
        values=values,
        problem=problem,
    )


def expedition_body(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The ``POST /expedition/run`` body a trigger (or schedule) form describes, or the problem
    to show next to the form. The collector validates the rest (type, names, parameters)."""
    parameters: dict[str, Any] = {}
    for field, label in (("parameters", "Parameters"), ("sources", "Sources")):
        text = form.get(field, "").strip()
        if not text:
            continue
        try:
            value = parse_strict_json(text)
        except JsonRefused as exc:
            return {}, _form_problem(field, f"{label}: {exc}")
        if field == "parameters":
            if not isinstance(value, dict):
                return {}, _form_problem(field, "Parameters: a JSON object, {…}.")
            parameters.update(value)
        else:
            if not isinstance(value, list):
                return {}, _form_problem(field, "Sources: a JSON list, […], of source specs.")
            parameters["sources"] = value
    collections = [name for name in _COLLECTION_SPLIT.split(form.get("collections", "")) if name]
    body: dict[str, Any] = {
        "expedition_type": form.get("expedition_type", ""),
        "target_collections": collections,
        "priority": form.get("priority") or "medium",
        "parameters": parameters,
    }
    return body, None


def refusal_status(problem: ServiceProblem | dict[str, Any] | None) -> int:
    """A refused form's status: the service's own, or 422 for one the console refused."""
    return problem.status if isinstance(problem, ServiceProblem) else 422


def _form_problem(field: str, message: str) -> dict[str, Any]:
    return {
        "title": "Form not accepted",
        "detail": message,
        "code": ProblemCode.VALIDATION_FAILED,
        "errors": [{"field": field, "message": message}],
        "status": 422,
    }
