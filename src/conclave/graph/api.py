"""HTTP routes of the graph dispatch service (thin: the use cases live in :mod:`service`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic_core import PydanticSerializationError

from conclave.graph.models import DispatchRequest, DispatchResponse, GraphHealth
from conclave.graph.service import DispatchCommand, DispatchService
from conclave.platform.auth import ACTING_USER_HEADER
from conclave.platform.bodies import read_model, request_model_schema
from conclave.platform.http import correlation_id
from conclave.platform.jsontext import CompactJSONResponse
from conclave.platform.openapi import BEARER_SECURITY, problem_responses

router = APIRouter()


async def _service(request: Request) -> DispatchService:
    return request.app.state.graph  # type: ignore[no-any-return]


Service = Annotated[DispatchService, Depends(_service)]


@router.get(
    "/health",
    tags=["operations"],
    response_model=GraphHealth,
    responses={503: {"model": GraphHealth, "description": "Heartbeat stalled or stopped"}},
)
async def health(service: Service) -> JSONResponse:
    """Liveness from the heartbeat; 503 when the heartbeat stalls."""
    body = service.health()
    status = 200 if body.status == "healthy" else 503
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status)


@router.post(
    "/dispatch",
    tags=["dispatch"],
    response_model=DispatchResponse,
    openapi_extra={
        "requestBody": request_model_schema(DispatchRequest),
        "security": BEARER_SECURITY,
    },
    responses=problem_responses(
        403,
        422,
        503,
        s403="`user_id` differs from the authenticated caller (USER_MISMATCH), or an origin "
        "not allowed (ORIGIN_NOT_ALLOWED)",
        s422="Invalid body (VALIDATION_FAILED, UNSAFE_INPUT), query too long (QUERY_TOO_LONG), "
        "too many entities (TOO_MANY_ENTITIES)",
        s503="Audit monitoring on and the store is down: not answered (STORE_UNAVAILABLE)",
    ),
)
async def dispatch(request: Request) -> Response:
    """Route a query and its validated entities through the dispatch graph."""
    # The service's hot route: answered through the fast lane (conclave.platform.fast_lane), so it
    # reads its credentials and body itself; `openapi_extra` documents what it reads.
    state = request.app.state
    headers = request.headers
    principal = await state.authenticator.authenticate_async(
        headers.get("authorization"), headers.get(ACTING_USER_HEADER)
    )
    body = await read_model(request, DispatchRequest)
    command = DispatchCommand(
        request=body,
        user_id=state.authenticator.acting_user(principal, body.user_id),
        correlation_id=body.correlation_id or correlation_id(request) or None,
    )
    response = await state.graph.dispatch(command)
    try:
        text = response.model_dump_json()
    except PydanticSerializationError:
        # A collector answer held text JSON cannot carry (a lone surrogate): answered escaped.
        return CompactJSONResponse(response.model_dump(mode="json"))
    return Response(text, media_type="application/json")


DISPATCH_ROUTE = next(r for r in router.routes if isinstance(r, APIRoute) and r.path == "/dispatch")
