"""``create_app``: the tool gateway as an ASGI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.routing import Route

from conclave import __version__
from conclave.gateway.api import EXECUTE_ROUTE, router
from conclave.gateway.backends.breaker import CircuitBreaker
from conclave.gateway.backends.catalogue import (
    ENTITY_TOOLS,
    PLATFORM_TOOLS,
    Catalogue,
    build_tools,
    load_catalogue,
)
from conclave.gateway.builtin import BUILTIN_TOOLS
from conclave.gateway.call_log import CALLS_LOG, may_read_call
from conclave.gateway.finance import FINANCE_ALIASES
from conclave.gateway.finance_api import finance_router
from conclave.gateway.interrupted_calls import InterruptedCalls, sweeping
from conclave.gateway.limits import CallLimits
from conclave.gateway.mcp import MCP_PATH, McpEndpoint, McpHandlers
from conclave.gateway.mcp_cancel_relay import CancelRelay
from conclave.gateway.mcp_refusals import json_rpc_problems
from conclave.gateway.metrics import GatewayMetrics
from conclave.gateway.plugins import load_entry_point_tools, load_module_tools
from conclave.gateway.policy import ToolPolicy
from conclave.gateway.policy_api import policy_router
from conclave.gateway.policy_reload import PolicyReloader, reloading_policy
from conclave.gateway.protected_resource import ProtectedResource, install_protected_resource
from conclave.gateway.registry import ToolRegistry
from conclave.gateway.service import GatewayService
from conclave.gateway.signals import signals_table_fallback
from conclave.gateway.tools import Tool
from conclave.gateway.upstreams.access import CredentialSettings
from conclave.gateway.upstreams.api import upstreams_router
from conclave.gateway.upstreams.config import UpstreamLimits
from conclave.gateway.upstreams.credentials import (
    CredentialCipher,
    CredentialVault,
    embedded_key,
    parse_keys,
)
from conclave.gateway.upstreams.manager import Upstreams
from conclave.gateway.workers import WorkerPool
from conclave.platform.db.engine import is_sqlite
from conclave.platform.dead_letter_routes import router as dead_letters_router
from conclave.platform.egress import EgressPolicy
from conclave.platform.http import create_service_app, platform_lifespan
from conclave.platform.ratelimit import MemoryRateLimiter, Rate, RateLimiter, RedisRateLimiter
from conclave.platform.runtime import Platform
from conclave.platform.tlog.api import tlog_router
from conclave.platform.tlog.published import PublishedLogs
from conclave.platform.tlog.serving import serve_log
from conclave.settings import GatewaySettings


def build_registry(
    settings: GatewaySettings, extra: tuple[Tool, ...] = (), backend_tools: tuple[Tool, ...] = ()
) -> ToolRegistry:
    """Built-ins, HTTP backend tools, entry-point plug-ins, module plug-ins from settings, then
    ``extra``; finance aliases on top in finance mode."""
    registry = ToolRegistry()
    tools = [*BUILTIN_TOOLS, *backend_tools]
    if settings.load_entry_points:
        tools.extend(load_entry_point_tools())
    for path in settings.tool_modules:
        tools.extend(load_module_tools(path))
    tools.extend(extra)
    for tool in tools:
        registry.register(tool)
    if settings.mcp_domain == "finance":
        for alias in FINANCE_ALIASES:
            registry.add_alias(alias)
    return registry


BUILT_IN_CATALOGUES = 2
"""The first catalogues :func:`load_catalogues` reads are the shipped ones."""


def load_catalogues(settings: GatewaySettings) -> list[Catalogue]:
    """The catalogue files: the built-in ones, then those of settings (whose policies may name
    the roles settings declare)."""
    paths = (ENTITY_TOOLS, PLATFORM_TOOLS, *settings.tool_catalogues)
    return [load_catalogue(path, settings.known_roles()) for path in paths]


def backend_tools(
    settings: GatewaySettings,
    catalogues: list[Catalogue],
    http: httpx.AsyncClient,
    platform: Platform,
) -> tuple[Tool, ...]:
    """The HTTP tools of the catalogues."""
    breakers: dict[str, CircuitBreaker] = {}
    fallbacks = {"signals_table": signals_table_fallback(platform)}
    token = settings.service_token.get_secret_value() or None
    tools: list[Tool] = []
    for catalogue in catalogues:
        tools += build_tools(catalogue, settings.backend_urls(), http, breakers, fallbacks, token)
    return tuple(tools)


async def upstream_credentials(
    settings: GatewaySettings, catalogues: list[Catalogue], engine: AsyncEngine
) -> CredentialSettings:
    """The vault of users' upstream credentials (keys from settings; embedded mode generates one
    the first time an upstream accepts users' credentials) and the named service credentials.
    :class:`CredentialKeyError` for a malformed key or a stored credential whose key is not
    given: the gateway does not start."""
    keys = parse_keys(settings.upstream_credential_keys.get_secret_value())
    wanted = any(
        spec.credential is not None and spec.credential.accepts_user
        for catalogue in catalogues
        for spec in catalogue.mcp_servers
    )
    if not keys and wanted and is_sqlite(engine):
        keys = [embedded_key(settings.upstream_credential_key_file())]
    vault = None
    if keys:
        vault = CredentialVault(engine, CredentialCipher(keys))
        await vault.check_keys()
    return CredentialSettings(
        vault=vault,
        secrets={
            name: value.get_secret_value() for name, value in settings.upstream_secrets.items()
        },
        max_user_sessions=settings.upstream_max_user_sessions,
        user_session_idle_seconds=settings.upstream_user_session_idle_seconds,
    )


def upstreams_for(
    settings: GatewaySettings,
    catalogues: list[Catalogue],
    registry: ToolRegistry,
    credentials: CredentialSettings | None = None,
) -> Upstreams:
    """The upstream MCP servers of the catalogues, their tools to go into ``registry``."""
    limits = UpstreamLimits(
        max_message_bytes=settings.upstream_max_message_bytes,
        max_tools=settings.upstream_max_tools,
        max_pages=settings.upstream_max_pages,
        debounce_seconds=settings.upstream_debounce_seconds,
        max_connections=settings.upstream_max_connections,
    )
    specs = [spec for catalogue in catalogues for spec in catalogue.mcp_servers]
    policy = EgressPolicy.from_settings(settings)
    return Upstreams(specs, registry, policy, limits, credentials)


def rate_limiter_for(settings: GatewaySettings) -> RateLimiter:
    """Buckets in Redis when the bus is Redis (shared by replicas), else in this process."""
    url = settings.resolved_bus_url()
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisRateLimiter(url, prefix=settings.bus_stream_prefix)
    return MemoryRateLimiter()


def create_app(
    settings: GatewaySettings,
    *,
    platform: Platform | None = None,
    extra_tools: tuple[Tool, ...] = (),
) -> FastAPI:
    """The gateway app. With ``platform`` given (``conclave up``, tests) it is shared, not owned."""
    metrics = GatewayMetrics(name_every_tool=settings.metrics_name_every_tool)
    protected_resource = ProtectedResource(settings)
    mcp_endpoint = McpEndpoint(
        fast_path=settings.mcp_fast_path, challenge=protected_resource.challenged
    )

    @asynccontextmanager
    async def serve(app: FastAPI, runtime: Platform) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            # One client for every backend: pooled connections; time-outs are set per tool.
            http = await stack.enter_async_context(httpx.AsyncClient(follow_redirects=False))
            catalogues = load_catalogues(settings)
            tools = backend_tools(settings, catalogues, http, runtime)
            registry = build_registry(settings, extra_tools, tools)
            credentials = await upstream_credentials(settings, catalogues, runtime.engine)
            upstreams = upstreams_for(settings, catalogues, registry, credentials)
            limiter = rate_limiter_for(settings)
            if isinstance(limiter, RedisRateLimiter):
                stack.push_async_callback(limiter.close)
            user_rate = Rate.parse(settings.user_rate_limit)
            limits = CallLimits(
                limiter, user_rate=user_rate, max_args_bytes=settings.max_args_bytes
            )
            # Pickled replies a little over the result cap are refused before they are read.
            workers = WorkerPool(
                settings.tool_workers, max_reply_bytes=2 * settings.max_result_bytes + 65_536
            )
            stack.push_async_callback(workers.close)
            app.state.tlogs = PublishedLogs()
            call_log = None
            if settings.call_log:
                engine = runtime.engine
                call_log = await serve_log(app, stack, engine, settings, CALLS_LOG, may_read_call)
            service = GatewayService(
                registry,
                runtime,
                metrics,
                limits,
                workers,
                default_timeout=settings.tool_timeout_seconds,
                max_depth=settings.max_json_depth,
                max_result_bytes=settings.max_result_bytes,
                call_log=call_log,
                policy=ToolPolicy.from_sections(catalogue.policy for catalogue in catalogues),
            )
            app.state.gateway = service
            reloader = None
            if settings.tool_catalogues:
                reloader = PolicyReloader(
                    settings.tool_catalogues,
                    settings.known_roles(),
                    [catalogue.policy for catalogue in catalogues[:BUILT_IN_CATALOGUES]],
                    service.use_policy,
                    interval=settings.policy_reload_seconds,
                    configured=service.policy.configured,
                )
            await stack.enter_async_context(reloading_policy(reloader))
            # After the service exists: an upstream's first listing may arrive at once.
            app.state.upstreams = await stack.enter_async_context(
                upstreams.serving(start_wait_seconds=settings.upstream_start_wait_seconds)
            )
            authenticator = app.state.authenticator
            handlers = McpHandlers(service)
            relay = CancelRelay(runtime.bus, handlers.in_flight, metrics.consumed)
            await relay.start()
            stack.push_async_callback(relay.stop)
            handlers.relay = relay
            await stack.enter_async_context(mcp_endpoint.serving(authenticator, handlers))
            interrupted = InterruptedCalls(
                registry, runtime, default_timeout=settings.tool_timeout_seconds
            )
            await stack.enter_async_context(sweeping(interrupted))
            yield

    app = create_service_app(
        service="gateway",
        title="Conclave tool gateway",
        version=__version__,
        description="Discover tools; execute them through validation, audit, events and metrics.",
        settings=settings,
        metrics=metrics,
        lifespan=platform_lifespan(settings, platform, serve, max_batch=settings.max_batch),
    )
    app.state.settings = settings
    app.include_router(router)
    app.include_router(dead_letters_router)
    app.include_router(tlog_router)
    app.include_router(upstreams_router)
    app.include_router(policy_router)
    install_protected_resource(app, protected_resource)
    # Ids, metrics and the body cap still apply to it (see platform/fast_lane.py).
    app.add_fast_lane(EXECUTE_ROUTE, "POST")
    if settings.mcp_domain == "finance":
        app.include_router(finance_router)
    mcp_route = Route(MCP_PATH, mcp_endpoint, methods=["GET", "POST", "DELETE"])
    app.router.routes.append(mcp_route)
    app.add_asgi_lane(mcp_route)
    # Every problem the app answers at /mcp, whichever layer gives it, is also a JSON-RPC error
    # an MCP client can read (gateway/mcp_refusals.py); the HTTP server's own refusals (408 read
    # deadlines, 431) are written before the app sees the request and stay plain problems.
    app.adapt_answers(MCP_PATH, json_rpc_problems)
    return app
