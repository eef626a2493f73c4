"""Graph: a dispatch playground (``POST /dispatch`` as the signed-in user: the route taken, the
intent and its confidence, the entities and results) and the graph's heartbeat (``GET /health``),
polled.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from conclave.console.session import Session
from conclave.console.upstream import ServiceProblem, Services
from conclave.console.web import ServicesDep, SignedIn, checked_form, page
from conclave.platform.problem_types import ProblemCode

router = APIRouter(include_in_schema=False)

POLL_SECONDS = 5
MAX_ENTITY_LINES = 1000
"""Lines of the entities field read; the graph refuses more entities than it takes anyway
(``TOO_MANY_ENTITIES``), this only bounds the console's own work on a pasted novel."""


@router.get("/graph")
async def graph(request: Request, session: SignedIn, services: ServicesDep) -> HTMLResponse:
    """The playground's form and the heartbeat."""
    return await _graph_page(request, session, services, {}, None, None)


@router.post("/graph")
async def dispatch(request: Request, session: SignedIn, services: ServicesDep) -> HTMLResponse:
    """Dispatch the form's query as the user; the answer (or the graph's problem) on the page."""
    form = await checked_form(request, session)
    entities = [line.strip() for line in form.get("entities", "").splitlines()[:MAX_ENTITY_LINES]]
    body: dict[str, Any] = {
        "query": form.get("query", ""),
        "validated_entities": [entity for entity in entities if entity],
    }
    if form.get("language"):
        body["language"] = form["language"]
    try:
        answer = await services.post("graph", "/dispatch", session, body)
    except ServiceProblem as exc:
        if exc.code == ProblemCode.SERVICE_UNREACHABLE:
            raise
        # The graph's refusal (too many entities, unsafe text) is shown next to the form.
        return await _graph_page(request, session, services, form, None, exc, exc.status)
    return await _graph_page(request, session, services, form, answer, None)


@router.get("/graph/heartbeat")
async def heartbeat(request: Request, session: SignedIn, services: ServicesDep) -> HTMLResponse:
    """The heartbeat, polled by the page."""
    return page(
        request,
        "_heartbeat.html",
        session,
        health=await _health(services, session),
        poll_seconds=POLL_SECONDS,
    )


async def _graph_page(
    request: Request,
    session: Session,
    services: Services,
    values: dict[str, str],
    answer: dict[str, Any] | None,
    problem: ServiceProblem | None,
    status_code: int = 200,
) -> HTMLResponse:
    return page(
        request,
        "graph.html",
        session,
        status_code=status_code,
        values=values,
        answer=answer,
        problem=problem,
        health=await _health(services, session),
        poll_seconds=POLL_SECONDS,
    )


async def _health(services: Services, session: Session) -> dict[str, Any]:
    """The graph's health body (its 503 carries the same fields), or why there is none."""
    try:
        answer = await services.request("GET", "graph", "/health", session)
    except ServiceProblem as exc:
        return {"status": "unreachable", "problem": exc.detail}
    try:
        body = answer.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return {"status": "unreachable", "problem": f"The graph answered {answer.status_code}."}
    return body
