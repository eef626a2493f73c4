"""``/upstreams``: the upstream MCP servers and how they are doing; users' own credentials."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from conclave.gateway.policy import hidden_from, subject_of
from conclave.gateway.service import GatewayService
from conclave.gateway.upstreams.manager import Upstreams
from conclave.platform.auth import Principal
from conclave.platform.errors import Conflict, Forbidden, NotFound
from conclave.platform.http import CurrentPrincipal
from conclave.platform.openapi import problem_responses
from conclave.platform.problem_types import ProblemCode

upstreams_router = APIRouter()


class UpstreamCredentialRead(BaseModel):
    """How calls of an upstream authenticate, and whether the caller registered a credential.
    Never a credential, its length or a digest of it."""

    header: str
    """The header a credential is presented in."""
    accepts: Literal["user", "service", "user_or_service"]
    service: bool
    """Whether a service credential is configured (it lists the tools, and calls with it when
    ``accepts`` allows)."""
    yours: bool
    """Whether the caller has registered their own credential for this upstream."""


class UpstreamRead(BaseModel):
    """One upstream MCP server. Never its headers, environment, command line or URL: they may
    hold credentials."""

    name: str
    transport: str
    state: str
    """``starting``, ``ready`` or ``restarting``."""
    circuit: str
    """The circuit breaker of its calls: ``closed``, ``open`` or ``half-open``."""
    tools: int
    last_refresh: str | None
    """When its tools were last listed (RFC 3339, UTC)."""
    last_error: str | None
    """Why its last connection ended or failed."""
    notes: list[str]
    """What its last listing left out: tools skipped (and why), a listing cut at a bound."""
    restarts: int
    """Connections lost and made again since the gateway started."""
    refreshes: int
    """Complete tools/list listings read since the gateway started."""
    credential: UpstreamCredentialRead | None = None
    """Its credential rules (null: calls carry its configured headers only)."""


class UpstreamList(BaseModel):
    """Every upstream MCP server of the catalogues."""

    upstreams: list[UpstreamRead]
    count: int


class CredentialWrite(BaseModel):
    """The caller's own credential for an upstream (as the header carries it after the
    scheme, e.g. the token of ``Authorization: Bearer <token>``)."""

    model_config = {"extra": "forbid"}

    credential: str = Field(
        description="8 to 4096 characters of visible ASCII (inner spaces allowed); stored "
        "encrypted and never answered."
    )


def _upstreams(request: Request) -> Upstreams | None:
    upstreams: Upstreams | None = getattr(request.app.state, "upstreams", None)
    return upstreams


def _tools_shown(request: Request, principal: Principal) -> dict[str, int] | None:
    """How many tools of each upstream ``principal`` may list or call, by server name, when the
    tool policy hides some servers' tools from them; ``None`` when they see every server as it
    is (an operator, or no policy). A server all of whose tools are hidden from a user is
    hidden too: its name, state and errors would tell them what the policy hides."""
    service: GatewayService = request.app.state.gateway
    if principal.is_operator or not service.policy.configured:
        return None
    subject = subject_of(principal)
    shown: dict[str, int] = {}
    for tool in service.registry.tools(include_unavailable=True):
        if tool.upstream_origin is not None and not hidden_from(service.policy, subject, tool):
            server = tool.upstream_origin[0]
            shown[server] = shown.get(server, 0) + 1
    return shown


def _accepting_users(request: Request, name: str, principal: Principal) -> Upstreams:
    upstreams = _upstreams(request)
    shown = _tools_shown(request, principal)
    if (
        upstreams is None
        or name not in upstreams.upstreams
        or (shown is not None and name not in shown)
    ):
        raise NotFound(
            f"No upstream MCP server {name[:64]!r}.", code=ProblemCode.UPSTREAM_NOT_FOUND
        )
    access = upstreams.accesses.get(name)
    if access is None or not access.spec.accepts_user or upstreams.vault is None:
        raise Conflict(
            f"Upstream {name!r} takes no user credentials.",
            code=ProblemCode.UPSTREAM_CREDENTIALS_NOT_ACCEPTED,
        )
    return upstreams


@upstreams_router.get("/upstreams", tags=["tools"])
async def list_upstreams(request: Request, principal: CurrentPrincipal) -> UpstreamList:
    """The upstream MCP servers whose tools the gateway serves (to you), with their state."""
    upstreams = _upstreams(request)
    entries: list[dict[str, Any]] = upstreams.status() if upstreams is not None else []
    shown = _tools_shown(request, principal)
    if shown is not None:
        entries = [
            {**entry, "tools": shown[entry["name"]]} for entry in entries if entry["name"] in shown
        ]
    yours: set[str] = set()
    if upstreams is not None and upstreams.vault is not None and upstreams.accesses:
        yours = await upstreams.vault.servers_of(principal.user_id)
    listed = []
    for entry in entries:
        access = upstreams.accesses.get(entry["name"]) if upstreams is not None else None
        if access is not None:
            entry["credential"] = UpstreamCredentialRead(
                header=access.spec.header,
                accepts=access.spec.accept,
                service=access.service_credential is not None,
                yours=entry["name"] in yours,
            )
        listed.append(UpstreamRead.model_validate(entry))
    return UpstreamList(upstreams=listed, count=len(listed))


@upstreams_router.put(
    "/upstreams/{name}/credential",
    tags=["tools"],
    status_code=204,
    responses=problem_responses(404, 409, 422, 503),
)
async def put_credential(
    name: str, body: CredentialWrite, request: Request, principal: CurrentPrincipal
) -> Response:
    """Register or replace your own credential for an upstream MCP server."""
    upstreams = _accepting_users(request, name, principal)
    assert upstreams.vault is not None
    await upstreams.vault.put(name, principal.user_id, body.credential)
    upstreams.forget_user_session(name, principal.user_id)
    return Response(status_code=204)


@upstreams_router.delete(
    "/upstreams/{name}/credential",
    tags=["tools"],
    status_code=204,
    responses=problem_responses(404, 409, 503),
)
async def delete_credential(name: str, request: Request, principal: CurrentPrincipal) -> Response:
    """Delete your own credential for an upstream MCP server (done if there was none)."""
    upstreams = _accepting_users(request, name, principal)
    assert upstreams.vault is not None
    await upstreams.vault.delete(name, principal.user_id)
    upstreams.forget_user_session(name, principal.user_id)
    return Response(status_code=204)


@upstreams_router.delete(
    "/upstreams/{name}/credentials/{user_id}",
    tags=["tools"],
    status_code=204,
    responses=problem_responses(403, 404, 409, 503),
)
async def delete_users_credential(
    name: str, user_id: str, request: Request, principal: CurrentPrincipal
) -> Response:
    """Operators: delete a user's credential for an upstream (it is never shown to anyone)."""
    if not principal.is_operator:
        raise Forbidden("Only operators delete another user's credential.")
    upstreams = _accepting_users(request, name, principal)
    assert upstreams.vault is not None
    await upstreams.vault.delete(name, user_id)
    upstreams.forget_user_session(name, user_id)
    return Response(status_code=204)
