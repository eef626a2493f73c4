"""Hot routes without the framework's per-request machinery.

A hot route (the gateway's ``POST /execute``, the graph service's ``POST /dispatch``) is what its
service is for; routing, the exception middleware, the exit-stack middleware and request/response
wrapping around it cost as much CPU as the route's own work. :class:`FastLane`, an innermost
middleware, answers such a route by calling its function directly and renders its errors with the
app's own exception handlers. Everything outside it still applies (request and correlation ids,
HTTP metrics, the body-size cap); every other request goes on to the router, and the documented
route is the same function. The route function takes the ``Request`` and reads its body and
headers itself (:func:`conclave.platform.bodies.read_model`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]


class FastLane:
    """Innermost middleware: requests for ``route`` (one method) go straight to its endpoint."""

    def __init__(self, app: ASGIApp, *, owner: FastAPI, route: APIRoute, method: str) -> None:
        self.app = app
        self._owner = owner
        self._route = route
        self._method = method
        self._endpoint: Endpoint = route.endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = scope["type"] == "http" and scope["path"] == self._route.path
        if not hot or scope["method"] != self._method:
            await self.app(scope, receive, send)
            return
        scope["route"] = self._route  # what the HTTP metrics label the request with
        request = Request(scope, receive)
        try:
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
