"""Hot routes without the framework's per-request machinery.

A hot route (the gateway's ``POST /execute``, the graph service's ``POST /dispatch``) is what its
service is for; routing, the exception middleware, the exit-stack middleware and request/response
wrapping around it cost as much CPU as the route's own work. :class:`FastLane`, an innermost
middleware, answers such a route by calling its function directly and renders its errors with the
app's own exception handlers. Everything outside it still applies (request and correlation ids,
HTTP metrics, the Host and Origin guard, the body-size cap); every other request goes on to the
router, and the documented route is the same function. The route function takes the ``Request`` and
reads its body and headers itself (:func:`conclave.platform.bodies.read_model`).

:class:`ServiceApp` goes one step further when it can: a hot request enters the platform's own
request middleware (ids, metrics, Host and Origin guard, body cap) and the lane straight from the
app's entry, without passing Starlette's and FastAPI's outer middleware (error page, exception
telemetry, body limit), whose work the platform's middleware and the lane already do. It does so
only while the app has no middleware but the platform's own and no root path; tracing adds a
middleware, so traced apps keep the whole stack (their spans are made there).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from starlette.middleware import Middleware
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from conclave.platform.middleware import BodyLimitMiddleware, RequestContextMiddleware
from conclave.platform.request_origin import RequestGuardMiddleware
from conclave.platform.request_values import refuse_unsafe_request_line

Endpoint = Callable[[Request], Awaitable[Response]]
Edge = Callable[[ASGIApp], ASGIApp]
"""Wraps an ASGI app in the platform's request middleware (ids, metrics, guard, body cap)."""
AnswerAdapter = Callable[[Scope, Send], Send]
"""Given a request's scope and ``send``, the ``send`` its answers go through instead."""


PathParams = Mapping[str, Mapping[str, str]]
"""The concrete paths of a route with path parameters that a lane answers, each with its
parameters (the edge's ``/api/edge-intake/{media_type}`` for each known media type)."""


class FastLane:
    """Innermost middleware: requests for ``route`` (one method) go straight to its endpoint;
    for a route with path parameters, requests for the concrete ``paths`` given."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        owner: FastAPI,
        route: APIRoute,
        method: str,
        paths: PathParams | None = None,
    ) -> None:
        self.app = app
        self._owner = owner
        self._route = route
        self._method = method
        self._paths: PathParams = {route.path: {}} if paths is None else paths
        self._endpoint: Endpoint = route.endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        params = self._paths.get(scope["path"]) if scope["type"] == "http" else None
        if params is None or scope["method"] != self._method:
            await self.app(scope, receive, send)
            return
        scope["route"] = self._route  # what the HTTP metrics label the request with
        scope["path_params"] = dict(params)
        request = Request(scope, receive)
        try:
            refuse_unsafe_request_line(scope)  # what the app-wide dependency checks elsewhere
            response = await self._endpoint(request)
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise  # the request-context middleware renders the 500
            response = await handler(request, exc)
        await response(scope, receive, send)

    def _handler_for(self, exc: Exception) -> Any:
        handlers = self._owner.exception_handlers
        for kind in type(exc).__mro__:
            if kind in handlers and kind is not Exception:
                return handlers[kind]
        return None


class AsgiLane:
    """Innermost middleware: every request for ``route``'s path goes straight to its ASGI app
    (an endpoint that checks its own methods and renders its own errors, like ``/mcp``)."""

    def __init__(self, app: ASGIApp, *, route: Route) -> None:
        self.app = app
        self._route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self._route.path:
            await self.app(scope, receive, send)
            return
        scope["route"] = self._route
        await self._route.app(scope, receive, send)


class ServiceApp(FastAPI):
    """A FastAPI app whose fast lanes start at the app's entry when nothing else needs to run
    first (see the module docstring)."""

    def __init__(self, *args: Any, edge: Edge | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._edge = edge
        self._lanes: dict[tuple[str, str], ASGIApp] = {}
        self._lanes_usable: bool | None = None
        self._adapters: dict[str, AnswerAdapter] = {}

    def adapt_answers(self, path: str, adapter: AnswerAdapter) -> None:
        """Send every answer to a request for ``path`` through ``adapter``, whichever layer
        gives it: the platform's guard and body cap, an authenticator, the route, or the 500 of
        an unhandled error (the gateway's ``/mcp`` words problems as JSON-RPC errors too)."""
        self._adapters[path] = adapter

    def add_fast_lane(self, route: APIRoute, method: str, paths: PathParams | None = None) -> None:
        """Answer ``method`` requests for ``route`` (for a route with path parameters: for the
        concrete ``paths``) through a :class:`FastLane`."""
        self.user_middleware.append(
            Middleware(FastLane, owner=self, route=route, method=method, paths=paths)
        )
        if self._edge is not None:
            lane = self._edge(
                FastLane(_not_a_lane, owner=self, route=route, method=method, paths=paths)
            )
            for path in paths or (route.path,):
                self._lanes[(path, method)] = lane

    def add_asgi_lane(self, route: Route) -> None:
        """Answer every request for ``route``'s path with its ASGI app (:class:`AsgiLane`)."""
        self.user_middleware.append(Middleware(AsgiLane, route=route))
        if self._edge is not None:
            lane = self._edge(AsgiLane(_not_a_lane, route=route))
            for method in route.methods or ():
                self._lanes[(route.path, method)] = lane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._adapters and scope["type"] == "http":
            adapter = self._adapters.get(scope["path"])
            if adapter is not None:
                send = adapter(scope, send)
        if self._lanes and scope["type"] == "http":
            lane = self._lanes.get((scope["path"], scope["method"]))
            if lane is not None and self._can_skip_the_stack():
                scope["app"] = self
                await lane(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    @property
    def lanes_skip_the_stack(self) -> bool:
        """Whether fast lanes start at the app's entry (known once requests came in)."""
        return bool(self._lanes) and self._can_skip_the_stack()

    def _can_skip_the_stack(self) -> bool:
        if self._lanes_usable is None:  # middleware cannot change once requests come in
            own: set[Any] = {
                RequestContextMiddleware,
                RequestGuardMiddleware,
                BodyLimitMiddleware,
                FastLane,
                AsgiLane,
            }
            only_own = all(middleware.cls in own for middleware in self.user_middleware)
            self._lanes_usable = only_own and not self.root_path
        return self._lanes_usable


async def _not_a_lane(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError(f"{scope.get('method')} {scope.get('path')} reached a fast lane's exit")
