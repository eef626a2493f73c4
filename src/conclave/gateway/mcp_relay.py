"""What ``/mcp`` relays while a ``tools/call`` runs: progress out, cancellation in.

**Progress.** A ``tools/call`` whose ``_meta`` carries a ``progressToken`` from a client that
accepts ``text/event-stream`` is answered as an event stream by a second, still stateless, SDK
session manager (:func:`wants_event_stream`): the tool's progress reports (an upstream's
``notifications/progress``, :mod:`conclave.gateway.progress`) are sent on it as
``notifications/progress`` with the client's own token, then the result. Every other request
keeps its JSON answer (and the fast path).

**Cancellation.** On the handshake-era protocol (up to 2025-11-25) a client gives up on a
request by POSTing ``notifications/cancelled`` naming its JSON-RPC id (the Python and TypeScript
SDKs both do, and keep the request's own HTTP response open); a closed connection is explicitly
*not* a cancellation on that wire (a JSON answer's call runs on; an event stream's ends with it,
as the SDK's stateless transport ends the request). On a stateless server that notification
arrives as a request of its own, which the SDK's per-request transport cannot match to anything, so
:class:`InFlightCalls` keeps this process's running calls by (user, JSON-RPC id) and cancels the
one it names. From 2026-07-28 a client cancels by closing the request's response instead:
:func:`cancel_on_disconnect` watches such a request and cancels the calls it runs
(:class:`RequestCalls`) when its client goes away, on whichever replica serves it.

A notification that lands on another replica than its call finds nothing there: that replica
relays it to the others over the bus (:mod:`conclave.gateway.mcp_cancel_relay`). JSON-RPC ids are
chosen by clients and repeat across sessions, so a notification naming an id that two running calls
of the same user share (on one replica) cancels neither.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.jsonrpc_dispatcher import (
    cancelled_request_id_from_params,
    progress_token_from_params,
)
from starlette.requests import Request
from starlette.types import Receive, Scope

Actor = tuple[str, str | None]
"""Who runs a call: the user, and the service acting for them (None: the user themselves). A
cancellation reaches only the calls of the same actor: a user's own client does not cancel the
call a service makes for them, nor the other way round (JSON-RPC ids repeat across clients)."""
RequestKey = tuple[Actor, type, str | int]
REQUEST_CALLS = "conclave.mcp_request_calls"
"""Key of a request's :class:`RequestCalls` in its ASGI scope's ``state``."""


def _key(actor: Actor, request_id: str | int) -> RequestKey:
    # "1" and 1 are different JSON-RPC ids.
    return actor, type(request_id), request_id


class RequestCalls:
    """The calls one HTTP request runs: cancelled together when its client goes away."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()
        self.closed = False

    def add(self, scope: anyio.CancelScope) -> None:
        if self.closed:
            scope.cancel()
        self._scopes.add(scope)

    def discard(self, scope: anyio.CancelScope) -> None:
        self._scopes.discard(scope)

    def cancel(self) -> None:
        self.closed = True
        for scope in self._scopes:
            scope.cancel()


async def cancel_on_disconnect(
    scope: Scope, receive: Receive, answer: Callable[[Receive], Awaitable[None]]
) -> None:
    """Run ``answer`` (the request's body already read) and cancel the calls it runs if the
    client goes away first: on the 2026-07-28 protocol, closing a request is its cancellation."""
    calls = RequestCalls()
    scope.setdefault("state", {})[REQUEST_CALLS] = calls

    async def watch() -> None:
        # The body has been read: the server's next message is the client's disconnect (or,
        # once the answer is complete, its formal end, when nothing is left to cancel).
        while (await receive())["type"] != "http.disconnect":
            pass
        calls.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        await answer(receive)
        group.cancel_scope.cancel()


class Found(Enum):
    """What a cancellation found in this process."""

    CANCELLED = "cancelled"
    """One call of that user and id ran here: it is cancelled."""
    AMBIGUOUS = "ambiguous"
    """Several calls of that user share the id here: none is cancelled (nor elsewhere)."""
    NOT_HERE = "not here"
    """No such call runs here (it may run on another replica)."""


def cancelled_id(message: dict[str, Any] | None) -> str | int | None:
    """The JSON-RPC id a ``notifications/cancelled`` ``message`` names (None: the message is
    no such notification, or names no usable id)."""
    if message is None or message.get("method") != "notifications/cancelled":
        return None
    params = message.get("params")
    return cancelled_request_id_from_params(params if isinstance(params, dict) else None)


class InFlightCalls:
    """The MCP ``tools/call`` requests this process is running, by user and JSON-RPC id."""

    def __init__(self) -> None:
        self._running: dict[RequestKey, list[anyio.CancelScope]] = {}
        # When each call started (wall-clock seconds): a cancellation relayed from another
        # replica applies only to a call that was running when it was sent.
        self._started: dict[anyio.CancelScope, float] = {}

    @contextmanager
    def running(
        self, actor: Actor, request_id: str | int, request: RequestCalls | None = None
    ) -> Iterator[anyio.CancelScope]:
        """A cancel scope for the call, cancelled by :meth:`cancel` or by ``request``'s
        client going away (check its ``cancelled_caught`` after the block)."""
        key = _key(actor, request_id)
        scope = anyio.CancelScope()
        self._running.setdefault(key, []).append(scope)
        self._started[scope] = time.time()
        if request is not None:
            request.add(scope)
        try:
            with scope:
                yield scope
        finally:
            if request is not None:
                request.discard(scope)
            scopes = self._running[key]
            scopes.remove(scope)
            del self._started[scope]
            if not scopes:
                del self._running[key]

    def cancel(self, actor: Actor, message: dict[str, Any] | None) -> bool:
        """Cancel the call a ``notifications/cancelled`` ``message`` of ``actor`` names, if it
        runs here and is the only one of that actor with that id."""
        request_id = cancelled_id(message)
        found = None if request_id is None else self.cancel_id(actor, request_id)
        return found is Found.CANCELLED

    def cancel_id(
        self, actor: Actor, request_id: str | int, *, sent_at: float | None = None
    ) -> Found:
        """Cancel ``actor``'s call of JSON-RPC id ``request_id``, if it runs here and is the
        only one of that actor with that id; with ``sent_at`` (wall-clock seconds, a relayed
        cancellation's), only a call that started before then: a call that started later
        reuses the id and is not the one its client gave up on."""
        scopes = self._running.get(_key(actor, request_id), [])
        if not scopes:
            return Found.NOT_HERE
        if len(scopes) > 1:
            return Found.AMBIGUOUS
        if sent_at is not None and self._started[scopes[0]] >= sent_at:
            return Found.NOT_HERE
        scopes[0].cancel()
        return Found.CANCELLED

    def __len__(self) -> int:
        return sum(len(scopes) for scopes in self._running.values())


MAX_PROGRESS_TOKEN_CHARS = 256
"""Longest string ``progressToken`` a call may carry and have progress relayed for."""
_LARGEST_TOKEN = 2**53


def progress_token(params: Any) -> str | int | None:
    """The ``progressToken`` of a request's ``params`` if progress is relayed for it: a string
    of at most :data:`MAX_PROGRESS_TOKEN_CHARS` characters or an integer within ±2**53. Every
    notification repeats the token, so an unbounded one would turn one request into many times
    its size out; a call with any other token runs as well, answered as JSON, without progress."""
    token = progress_token_from_params(params if isinstance(params, Mapping) else None)
    return token if token is None or bounded_id(token) else None


def bounded_id(value: str | int) -> bool:
    """Whether a client's id (a progress token, a JSON-RPC id) is one the gateway carries on: a
    string of at most :data:`MAX_PROGRESS_TOKEN_CHARS` characters, or an integer (not a bool)
    within ±2**53, which every JSON client keeps exactly."""
    if isinstance(value, str):
        return len(value) <= MAX_PROGRESS_TOKEN_CHARS
    return not isinstance(value, bool) and abs(value) <= _LARGEST_TOKEN


def wants_event_stream(request: Request, message: dict[str, Any] | None) -> bool:
    """Whether a POSTed message is a ``tools/call`` with a usable progress token
    (:func:`progress_token`) from a client that accepts an event stream: the only requests
    answered with one."""
    if message is None or message.get("method") != "tools/call" or "id" not in message:
        return False
    if progress_token(message.get("params")) is None:
        return False
    _accepts_json, accepts_sse = check_accept_headers(request)
    return accepts_sse


def create_streaming_manager(
    server: Server[Any], security: TransportSecuritySettings | None
) -> StreamableHTTPSessionManager:
    """The stateless session manager answering with event streams (:func:`wants_event_stream`)."""
    return StreamableHTTPSessionManager(
        app=server, json_response=False, stateless=True, security_settings=security
    )
