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
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpcore2
import httpx2

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

    def __init__(self, policy: EgressPolicy, cap: int) -> None:
        super().__init__(trust_env=False)
        self._cap = cap
        # As in conclave.platform.egress.GuardedTransport: the pool the parent built is replaced by
        # the same one with the guarded backend.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(trust_env=False),
            network_backend=_GuardedBackend(policy),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
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


def guarded_mcp_client(
    policy: EgressPolicy,
    *,
    headers: dict[str, str],
    connect_timeout: float,
    read_timeout: float,
    max_answer_bytes: int,
) -> httpx2.AsyncClient:
    """An ``httpx2`` client for the MCP SDK's streamable HTTP transport: egress-checked
    connections, answers capped at ``max_answer_bytes``, proxies and ``.netrc`` of the environment
    ignored, no redirects followed by the client (the SDK follows same-origin ones itself)."""
    return httpx2.AsyncClient(
        transport=_CappedTransport(policy, max_answer_bytes),
        headers=headers,
        timeout=httpx2.Timeout(read_timeout, connect=connect_timeout),
        follow_redirects=False,
        trust_env=False,
    )
