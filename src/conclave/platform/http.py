"""App factory shared by every service: problem+json, auth, request ids, /metrics, body limits."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from conclave import __version__
from conclave.platform.auth import (
    ACTING_USER_HEADER,
    AuthConfig,
    Authenticator,
    Principal,
    parse_token_table,
)
from conclave.platform.bodies import require_json_body
from conclave.platform.clock import rfc3339, utc_now
from conclave.platform.egress import EgressPolicy
from conclave.platform.event_loop_probe import EventLoopProbe
from conclave.platform.fast_lane import ServiceApp
from conclave.platform.jsontext import CompactJSONResponse
from conclave.platform.jwks import JwksKeys, JwksSettings
from conclave.platform.metrics import Reading, ServiceMetrics
from conclave.platform.middleware import BodyLimitMiddleware, RequestContextMiddleware
from conclave.platform.openapi import install_problem_documentation, problem_responses
from conclave.platform.outbox import OutboxRelay
from conclave.platform.problems import install_problem_handlers
from conclave.platform.request_origin import (
    RequestGuardMiddleware,
    RequestSources,
    cors_middleware,
)
from conclave.platform.request_values import refuse_unsafe_values
from conclave.platform.runtime import Platform
from conclave.platform.tracing import Tracing
from conclave.settings import CommonSettings

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]
_bearer = HTTPBearer(auto_error=False, description="Bearer token or JWT (sub = user id).")


def authenticator_from(settings: CommonSettings) -> Authenticator:
    """Build the authenticator the settings describe (with the issuer's JWKS when
    ``CONCLAVE_JWT_JWKS_URL`` is set: fetched on first need, through the egress policy)."""
    jwks = None
    if settings.jwt_jwks_url:
        jwks = JwksKeys(
            JwksSettings(
                settings.jwt_jwks_url,
                cache_seconds=settings.jwt_jwks_cache_seconds,
                min_refresh_seconds=settings.jwt_jwks_min_refresh_seconds,
            ),
            EgressPolicy.from_settings(settings),
        )
    return Authenticator(
        AuthConfig(
            enabled=settings.auth_active(),
            tokens=parse_token_table(settings.api_tokens.get_secret_value()),
            jwt_secret=settings.jwt_secret.get_secret_value(),
            jwt_public_key=settings.jwt_public_key.get_secret_value(),
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            operators=frozenset(settings.operators),
            services=frozenset(settings.service_users),
            roles_claim=settings.jwt_roles_claim,
            max_token_lifetime_seconds=settings.jwt_max_lifetime_seconds,
            declared_roles={role: frozenset(members) for role, members in settings.roles.items()},
        ),
        jwks,
    )


# Dependencies are ``async def``: FastAPI runs plain ``def`` dependencies in a thread pool, a
# thread hop per request that costs more than the check itself.
async def _principal(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    authenticator: Authenticator = request.app.state.authenticator
    return await authenticator.authenticate_async(
        request.headers.get("authorization"), request.headers.get(ACTING_USER_HEADER)
    )


CurrentPrincipal = Annotated[Principal, Depends(_principal)]
"""Route parameter type: the authenticated caller (401 problem when credentials are wrong), or
the user a service principal acts for (``X-Conclave-Acting-User``)."""


class Identity(BaseModel):
    """The caller as a service authenticated them (``GET /whoami``)."""

    user_id: str
    roles: list[str] = Field(
        description="`operator` sees every user's resources; `service` may act for a user; any "
        "other is one of the deployment's own roles (CONCLAVE_ROLES), which only the gateway's "
        "tool policy gives a meaning."
    )
    method: str = Field(description="`token`, `jwt`, or `none` when authentication is off.")
    on_behalf_of: str | None = Field(
        None, description="The service identity acting for this user, if any."
    )


def correlation_id(request: Request) -> str:
    """The request's correlation id (from ``X-Correlation-ID`` or the request id)."""
    return str(request.scope.get("state", {}).get("correlation_id", ""))


def create_service_app(
    *,
    service: str,
    title: str,
    version: str,
    description: str,
    settings: CommonSettings,
    metrics: ServiceMetrics,
    lifespan: Lifespan,
    tracing: Tracing | None = None,
    identity_route: bool = True,
    **fastapi_kwargs: Any,
) -> ServiceApp:
    """A FastAPI app with Conclave's cross-cutting behaviour installed; routes are added after.
    ``tracing`` defaults to what the settings configure (off unless OpenTelemetry is set up).

    Every route refuses a request for a host or from an origin the settings do not allow (421,
    403: :mod:`conclave.platform.request_origin`), a non-JSON body where it takes JSON (415),
    and unsafe values in its path, query, headers and body (422
    ``UNSAFE_INPUT``, :mod:`conclave.platform.request_values`) and answers JSON with
    :class:`CompactJSONResponse`, which escapes a stored value JSON text cannot carry instead of
    failing. A class set explicitly, not left to the default, is what makes FastAPI render through
    it (its own default encodes response models in pydantic's core, where such a value fails)."""
    tracing = tracing or Tracing.from_settings(settings, service)

    sources = RequestSources.from_settings(settings)
    cors = cors_middleware(sources)

    def edge(inner: ASGIApp) -> ASGIApp:
        # The same request middleware as below, in the same order, for fast lanes (fast_lane.py).
        limited = BodyLimitMiddleware(inner, max_bytes=settings.max_body_bytes)
        guarded = RequestGuardMiddleware(limited, sources=sources)
        return RequestContextMiddleware(guarded, metrics=metrics)

    app = ServiceApp(
        title=title,
        version=version,
        description=description,
        lifespan=_served(lifespan, metrics, tracing),
        telemetry=tracing.fastapi_telemetry(),
        edge=None if tracing.enabled else edge,
        dependencies=[
            Depends(require_json_body),
            Depends(refuse_unsafe_values),
            *fastapi_kwargs.pop("dependencies", ()),
        ],
        default_response_class=fastapi_kwargs.pop("default_response_class", CompactJSONResponse),
        **fastapi_kwargs,
    )
    app.state.service = service
    app.state.metrics = metrics
    app.state.authenticator = authenticator_from(settings)
    install_problem_handlers(app)
    install_problem_documentation(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if cors is not None:
        app.add_middleware(CORSMiddleware, **cors)
    tracing.install(app)
    # Outside everything but the request ids: a refused Host or Origin reaches no other code.
    app.add_middleware(RequestGuardMiddleware, sources=sources)
    app.add_middleware(RequestContextMiddleware, metrics=metrics)

    if identity_route:
        _add_identity_route(app)

    @app.get(
        "/metrics",
        include_in_schema=True,
        tags=["operations"],
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def prometheus_metrics() -> Response:
        """Prometheus metrics in the text exposition format."""
        return Response(metrics.render(), media_type=metrics.content_type)

    return app


def _add_identity_route(app: FastAPI) -> None:
    """``GET /whoami``: who the service takes the caller to be (``identity_route=False`` for an
    app that authenticates nobody itself, the console)."""

    @app.get("/whoami", tags=["operations"], responses=problem_responses(401))
    async def who_am_i(principal: CurrentPrincipal) -> Identity:
        """Who this service takes the caller to be: user id, roles and how they authenticated
        (the console's sign-in asks this; with auth off, everyone is `anonymous`, an operator)."""
        return Identity(
            user_id=principal.user_id,
            roles=sorted(principal.roles),
            method=principal.method,
            on_behalf_of=principal.on_behalf_of,
        )


def _served(lifespan: Lifespan, metrics: ServiceMetrics, tracing: Tracing) -> Lifespan:
    """``lifespan`` with the event-loop probe running while the app serves, then the spans still
    buffered exported."""

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with lifespan(app):
                # Started once the service is up and stopped before it shuts down: the probe
                # measures what requests meet, not start-up work nobody is waiting on.
                probe = EventLoopProbe(metrics.event_loop_lateness, metrics.event_loop_lateness_max)
                probe.start()
                try:
                    yield
                finally:
                    await probe.stop()
        finally:
            await app.state.authenticator.aclose()
            await tracing.flush()

    return run


def platform_lifespan(
    settings: CommonSettings,
    platform: Platform | None,
    setup: Callable[[FastAPI, Platform], AbstractAsyncContextManager[None] | None],
    *,
    max_batch: int = 256,
) -> Lifespan:
    """A lifespan that opens the platform (unless one is shared in) and lets ``setup`` wire the
    service onto ``app.state``; ``setup`` may return a context to hold open while the app runs.
    The platform is at ``app.state.platform``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            runtime = platform
            if runtime is None:
                runtime = await stack.enter_async_context(
                    Platform.open(settings, max_batch=max_batch)
                )
            app.state.platform = runtime
            metrics: ServiceMetrics | None = getattr(app.state, "metrics", None)
            if metrics is not None:
                stack.callback(metrics.read_at_scrape(relay_readings(runtime.relay)))
            held = setup(app, runtime)
            if held is not None:
                await stack.enter_async_context(held)
            yield

    return lifespan


def relay_readings(relay: OutboxRelay) -> list[Reading]:
    """The outbox relay's dead-letter metrics, read from the relay when scraped."""
    return [
        Reading(
            "counter",
            "outbox_quarantined_total",
            "Outbox events this process's relay quarantined (the bus refused them).",
            lambda: relay.quarantined_total,
        ),
        Reading(
            "gauge",
            "outbox_quarantined_events",
            "Outbox events in quarantine now (in the store, all processes), as last counted.",
            lambda: relay.quarantined,
        ),
    ]


async def health_response(platform: Platform, service: str, **extra: Any) -> JSONResponse:
    """The standard health body: each dependency's status; 503 when one is down. ``warnings``
    (present when there are some) lists what an operator should look at; they leave the status
    ``healthy`` and 200, since the service itself serves."""
    checks = await platform.check()
    healthy = all(check["status"] in ("up", "warning") for check in checks.values())
    body = {
        "status": "healthy" if healthy else "unhealthy",
        "service": service,
        "version": __version__,
        "timestamp": rfc3339(utc_now()),
        "checks": checks,
        **extra,
    }
    warnings = platform.warnings()
    if warnings:
        body["warnings"] = warnings
    return CompactJSONResponse(body, status_code=200 if healthy else 503)


async def platform_of(request: Request) -> Platform:
    """The platform of the app serving ``request``."""
    return request.app.state.platform  # type: ignore[no-any-return]


CurrentPlatform = Annotated[Platform, Depends(platform_of)]
"""Route parameter type: the service's platform (store, bus, writer, relay)."""
