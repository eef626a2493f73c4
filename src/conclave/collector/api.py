"""HTTP routes of the expedition service (thin: use cases live in :mod:`service`)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from conclave import __version__
from conclave.collector import scheduler
from conclave.collector.models import (
    COLLECTION_PATTERN,
    CollectionInfo,
    ExpeditionAccepted,
    ExpeditionCreate,
    ExpeditionRead,
    ExpeditionTypeInfo,
    HistoryPage,
    OrchestratorTrigger,
    RecordRead,
    ScheduleCreate,
    ScheduleRead,
    ScheduleUpdate,
    SearchResult,
    Status,
)
from conclave.collector.service import ExpeditionService
from conclave.collector.store import ExpeditionRecord
from conclave.collector.views import expedition_read
from conclave.platform.clock import rfc3339, utc_now
from conclave.platform.http import CurrentPrincipal, correlation_id
from conclave.platform.keyset import UtcMoment
from conclave.platform.openapi import HEALTH_RESPONSES, problem_responses

router = APIRouter()
Collection = Annotated[str, Path(pattern=COLLECTION_PATTERN)]


# ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop
# per request (conclave.platform.http).
async def _service(request: Request) -> ExpeditionService:
    return request.app.state.collector.service  # type: ignore[no-any-return]


Service = Annotated[ExpeditionService, Depends(_service)]


def _accepted(request: Request, row: ExpeditionRecord) -> JSONResponse:
    status_url = str(request.url_for("expedition_status", expedition_id=row.expedition_id))
    base = request.app.state.settings.api_base
    if base:
        status_url = base.rstrip("/") + f"/expedition/status/{row.expedition_id}"
    body = ExpeditionAccepted(
        expedition_id=row.expedition_id,
        status=row.status,
        status_url=status_url,
        expedition_type=row.expedition_type,
        priority=row.priority,
        created_at=rfc3339(row.created_at),
    )
    return JSONResponse(body.model_dump(), status_code=202, headers={"Location": status_url})


_ACCEPTED = {
    "description": "Queued; `Location` (and `status_url`) is where to follow it",
    "headers": {"Location": {"required": True, "schema": {"type": "string", "format": "uri"}}},
}


_PING_SECONDS = 2.0


@router.get("/health", tags=["operations"], responses=HEALTH_RESPONSES)
async def health(request: Request, service: Service) -> JSONResponse:
    """Store, bus and semantic memory status; 503 when the store or the bus is down."""
    checks = await service.platform.check()
    runtime = request.app.state.collector
    try:
        async with asyncio.timeout(_PING_SECONDS):  # a busy semantic memory is "down" here
            await runtime.memory.ping()
        checks["semantic_memory"] = {"status": "up", "indexer": runtime.indexer.healthy}
        if runtime.indexer.reindex is not None:  # refilling from the structured store
            checks["semantic_memory"]["reindex"] = runtime.indexer.reindex.view()
    except Exception as exc:
        checks["semantic_memory"] = {"status": "down", "error": type(exc).__name__}
    essential = checks["store"]["status"] == "up" and checks["bus"]["status"] == "up"
    degraded = checks["semantic_memory"]["status"] != "up"
    body = {
        "status": "unhealthy" if not essential else ("degraded" if degraded else "healthy"),
        "service": "collector",
        "version": __version__,
        "timestamp": rfc3339(utc_now()),
        "worker_id": runtime.worker.worker_id,
        "checks": checks,
    }
    warnings = service.platform.warnings()
    if warnings:  # the service serves: still 200
        body["warnings"] = warnings
    return JSONResponse(body, status_code=200 if essential else 503)


@router.post(
    "/expedition/run",
    tags=["expeditions"],
    status_code=202,
    response_model=ExpeditionAccepted,
    responses={
        202: _ACCEPTED,
        **problem_responses(
            409,
            422,
            503,
            s409="A target collection belongs to another user (COLLECTION_OWNED)",
            s422="Unknown type (UNKNOWN_EXPEDITION_TYPE, known ones listed), invalid parameters "
            "(INVALID_PARAMETERS, a source's own code, SECRET_IN_PARAMETERS), no collection "
            "(NO_COLLECTIONS), an unsafe value (UNSAFE_INPUT) or a body that breaks the schema",
        ),
    },
)
async def run_expedition(
    request: Request, body: ExpeditionCreate, service: Service, principal: CurrentPrincipal
) -> JSONResponse:
    """Queue an expedition; it runs in the background (follow `status_url`)."""
    row = await service.submit(
        body,
        requested_by=principal.user_id,
        correlation_id=correlation_id(request),
        principal=principal,
    )
    return _accepted(request, row)


@router.post(
    "/expedition/trigger/orchestrator",
    tags=["expeditions"],
    responses={
        200: {"model": ExpeditionRead},
        202: {"model": ExpeditionAccepted, **_ACCEPTED},
        **problem_responses(409, 503, s409="A target collection belongs to another user"),
    },
)
async def trigger_from_orchestrator(
    request: Request, body: OrchestratorTrigger, service: Service, principal: CurrentPrincipal
) -> JSONResponse:
    """Queue an expedition and optionally wait for it (200 with the record once finished)."""
    create = ExpeditionCreate(**body.model_dump(exclude={"wait_seconds"}))
    row = await service.submit(
        create,
        requested_by=principal.user_id,
        correlation_id=correlation_id(request),
        principal=principal,
    )
    if body.wait_seconds > 0:
        row = await service.wait(row.expedition_id, body.wait_seconds, principal)
        if row.status in ("completed", "failed", "cancelled"):
            return JSONResponse(expedition_read(row).model_dump())
    return _accepted(request, row)


@router.get(
    "/expedition/status/{expedition_id}",
    tags=["expeditions"],
    name="expedition_status",
    responses=problem_responses(503),
)
async def expedition_status(
    expedition_id: str, service: Service, principal: CurrentPrincipal
) -> ExpeditionRead:
    """Status, progress, agents, results and errors of one of your expeditions."""
    return expedition_read(await service.get(expedition_id, principal))


@router.post(
    "/expedition/{expedition_id}/cancel",
    tags=["expeditions"],
    responses=problem_responses(409, 503, s409="The expedition has finished"),
)
async def cancel_expedition(
    expedition_id: str, service: Service, principal: CurrentPrincipal
) -> ExpeditionRead:
    """Cancel one of your queued or running expeditions (409 once it has finished)."""
    return expedition_read(await service.cancel(expedition_id, principal))


@router.get(
    "/expedition/history",
    tags=["expeditions"],
    responses=problem_responses(400, 503, s400="A cursor not from `next_cursor`"),
)
async def expedition_history(
    service: Service,
    principal: CurrentPrincipal,
    status: Status | None = None,
    expedition_type: Annotated[str | None, Query(max_length=64)] = None,
    since: Annotated[UtcMoment | None, Query(description="Created at or after (RFC 3339).")] = None,
    until: Annotated[UtcMoment | None, Query(description="Created before (RFC 3339).")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=200, description="From `next_cursor`.")] = None,
) -> HistoryPage:
    """Your expeditions (every user's for an operator), newest first, filtered by status, type
    and creation time."""
    rows, next_cursor = await service.history(
        status=status,
        expedition_type=expedition_type,
        since=since,
        until=until,
        cursor=cursor,
        limit=limit,
        principal=principal,
    )
    items = [expedition_read(row) for row in rows]
    return HistoryPage(expeditions=items, count=len(items), next_cursor=next_cursor)


@router.get("/expedition/types", tags=["expeditions"])
async def expedition_types(service: Service, _principal: CurrentPrincipal) -> dict[str, Any]:
    """Registered expedition types and sources."""
    types = [
        ExpeditionTypeInfo(name=t.name, description=t.description)
        for t in service.registry.types.values()
    ]
    return {"types": types, "sources": sorted(service.registry.sources)}


@router.get("/stats", tags=["operations"], responses=problem_responses(503))
async def stats(service: Service, principal: CurrentPrincipal) -> dict[str, Any]:
    """Counts by status and type, success rate, durations, queue depth, records, uptime: a
    user's figures count their own expeditions and the records they may read."""
    return await service.stats(principal)


@router.get("/collections", tags=["collections"], responses=problem_responses(503))
async def collections(service: Service, principal: CurrentPrincipal) -> dict[str, Any]:
    """Collections you may read, with record counts (structured store) and point counts
    (semantic memory)."""
    items: list[CollectionInfo] = await service.collections(principal)
    return {"collections": items, "count": len(items)}


@router.get(
    "/collections/{name}/records/{key}", tags=["collections"], responses=problem_responses(503)
)
async def collection_record(
    name: Collection, key: str, service: Service, principal: CurrentPrincipal
) -> RecordRead:
    """One record by its key."""
    return await service.record(name, key, principal)


@router.get(
    "/collections/{name}/search",
    tags=["collections"],
    responses=problem_responses(503, s503="Semantic memory or the store is unavailable"),
)
async def collection_search(
    name: Collection,
    service: Service,
    principal: CurrentPrincipal,
    q: Annotated[str, Query(min_length=1, max_length=2000)],
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> SearchResult:
    """Semantic search in a collection, best match first."""
    return await service.search(name, q, limit, principal)


@router.post(
    "/schedules",
    tags=["schedules"],
    status_code=201,
    responses=problem_responses(409, 503, s409="A schedule with this name exists"),
)
async def create_schedule(
    body: ScheduleCreate, service: Service, principal: CurrentPrincipal
) -> ScheduleRead:
    """Store a cron schedule that queues an expedition at every tick (UTC)."""
    return await scheduler.add_schedule(service, body, principal)


@router.get("/schedules", tags=["schedules"], responses=problem_responses(503))
async def list_schedules(service: Service, principal: CurrentPrincipal) -> dict[str, Any]:
    """Your schedules (every user's for an operator) with their next tick."""
    items = await scheduler.list_schedules(service, principal)
    return {"schedules": items, "count": len(items)}


@router.delete(
    "/schedules/{name}", tags=["schedules"], status_code=204, responses=problem_responses(503)
)
async def delete_schedule(name: str, service: Service, principal: CurrentPrincipal) -> Response:
    """Remove one of your schedules by name or id."""
    await scheduler.remove_schedule(service, name, principal)
    return Response(status_code=204)


@router.patch("/schedules/{name}", tags=["schedules"], responses=problem_responses(503))
async def update_schedule(
    name: str, body: ScheduleUpdate, service: Service, principal: CurrentPrincipal
) -> ScheduleRead:
    """Pause (`enabled: false`) or resume one of your schedules by name or id; resumed, it fires
    at its next tick after now."""
    return await scheduler.set_schedule_enabled(service, name, body.enabled, principal)
