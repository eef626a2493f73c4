"""The egress policy for the MCP SDK's HTTP client, and a cap on what one answer may hold.

The MCP SDK talks HTTP through ``httpx2``/``httpcore2`` (forks of httpx and httpcore with the same
interfaces), not the ``httpx`` the rest of the platform uses, so :class:`GuardedTransport` cannot
be handed to it. This module gives the same guarantee there: every connection of the client —
the first and every later one — is opened by a network backend that resolves the host once,
checks every address with :class:`~conclave.platform.egress.EgressPolicy` and connects to a
checked address (no second resolution a rebinding DNS could answer differently). A refusal is a
connection error, as in :mod:`conclave.platform.egress`.

It also caps the body of every answer that is not an event stream: an upstream that answers
50 MB is cut off at the cap while the bytes arrive, before anything is parsed, and the SDK turns
the read error into a JSON-RPC error for that request (:data:`ANSWER_TOO_LARGE` in its text).
Event streams are capped per event by the SDK itself (``max_sse_event_size``).

A request that finds no free connection in the client's pool within the pool's time-out is
never sent: it is answered by the client itself, as a JSON-RPC "Request timed out" for its id
(:func:`_unsent_answer`). The MCP SDK's transport does not catch an error raised by the client
for a request: the pool's ``PoolTimeout`` ended the whole connection, every call in flight on it
failed as a lost connection and the upstream was reconnected — because one caller kept the pool
busy with slow calls, which says nothing of the upstream.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpcore2
import httpx2
import mcp_types

from conclave.platform.egress import EgressDenied, EgressPolicy

log = logging.getLogger(__name__)

ANSWER_TOO_LARGE = "answer larger than the gateway accepts"
"""Text of the read error raised when an answer passes its cap (callers recognise it)."""


class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Connects only to addresses the policy allows (httpcore2's interface)."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            addresses = await self._policy.addresses(host, port)
        except EgressDenied as exc:
            log.warning("outbound connection refused: %s", exc, extra={"host": host, "port": port})
            raise httpcore2.ConnectError(str(exc)) from exc
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # addresses() never returns an empty list
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("egress: unix sockets are not outbound destinations")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class AnswerTooLarge(httpx2.StreamError):
    """An answer passed its cap. A ``StreamError``: the SDK answers the request it belongs to
    with a JSON-RPC parse error carrying this text, instead of leaving the request waiting."""


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, cap: int) -> None:
        self._inner = inner
        self._cap = cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        total = 0
        async for chunk in self._inner:
            total += len(chunk)
            if total > self._cap:
                raise AnswerTooLarge(f"{ANSWER_TOO_LARGE} ({self._cap} bytes)")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport with the guarded backend and the answer cap."""

    def __init__(self, policy: EgressPolicy, cap: int, max_connections: int) -> None:
        super().__init__(trust_env=False)
        self._cap = cap
        # As in conclave.platform.egress.GuardedTransport: the pool the parent built is replaced by
        # the same one with the guarded backend.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(trust_env=False),
            max_connections=max_connections,
            network_backend=_GuardedBackend(policy),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await super().handle_async_request(request)
        except httpx2.PoolTimeout:
            return _unsent_answer(request)
        # Media types are case-insensitive (RFC 9110), and the SDK reads `Text/Event-Stream` as
        # an event stream: capped here as a whole body, such an answer was cut short, which the
        # SDK reports as a stream that ended (an outside attack: one user's too-large answers
        # so opened the upstream's circuit for everyone).
        content_type = response.headers.get("content-type", "").lower()
        if content_type.startswith("text/event-stream"):
            return response  # capped per event by the SDK (max_sse_event_size)
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _CappedStream(stream, self._cap)
        return response


def _unsent_answer(request: httpx2.Request) -> httpx2.Response:
    """The answer to a request that got no connection in time: for a JSON-RPC request, the
    SDK's "Request timed out" for its id, which the SDK hands to whoever still waits for it (its
    caller's own time-out, as long, has mostly fired first); else a bare 503."""
    try:
        message = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        message = None
    request_id = message.get("id") if isinstance(message, dict) and "method" in message else None
    if request_id is None:  # a notification (a cancellation notice, ...): dropped
        return httpx2.Response(503, request=request)
    error = {"code": mcp_types.REQUEST_TIMEOUT, "message": "Request timed out"}
    body = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return httpx2.Response(503, json=body, request=request)


def guarded_mcp_client(
    policy: EgressPolicy,
    *,
    headers: dict[str, str],
    connect_timeout: float,
    read_timeout: float,
    max_answer_bytes: int,
    max_connections: int,
) -> httpx2.AsyncClient:
    """An ``httpx2`` client for the MCP SDK's streamable HTTP transport: egress-checked
    connections, answers capped at ``max_answer_bytes``, proxies and ``.netrc`` of the environment
    ignored, no redirects followed by the client (the SDK follows same-origin ones itself).

    At most ``max_connections`` at once; a request waits ``read_timeout`` (its caller's time-out)
    for one to come free, then is answered as timed out without being sent."""
    return httpx2.AsyncClient(
        transport=_CappedTransport(policy, max_answer_bytes, max_connections),
        headers=headers,
        timeout=httpx2.Timeout(read_timeout, connect=connect_timeout, pool=read_timeout),
        follow_redirects=False,
        trust_env=False,
    )
