"""``tools/call`` sent straight over HTTP to an upstream that answers with JSON.

The MCP SDK's client (``ClientSession`` over its streamable HTTP transport on ``httpx2``) costs
the gateway about 2.6 ms of CPU per call, more than the rest of the governed chain together:
each request crosses anyio memory streams and a task of its own, and httpx2's connection pool.
For a governed upstream call that asks no progress, nothing of that machinery is needed: one
JSON-RPC request goes out and one JSON-RPC answer comes back on the POST. This module sends it
with ``aiohttp`` (0.4 ms per call measured on the same machine) on the MCP session the SDK opened:
the same session id, protocol version and headers the SDK would send, a request id of its own
(``direct-<n>``: strings, never one of the SDK's integers on that session).

Only for sessions whose ``initialize`` was answered with JSON (a server answering JSON does so
for every request; an event stream is still read if one comes, :mod:`.event_stream`, up to the
answer). Everything else — the
handshake, listings, calls with a progress token, stdio upstreams — stays with the SDK.

The answer is read as the SDK reads it, and its failures raised as the SDK raises them
(:class:`~mcp.shared.exceptions.MCPError` with the SDK's codes and texts), so the gateway maps
both paths to the same problems: an error status with a JSON-RPC error body is that error; a 404
on a session ends it (the upstream ran nothing: the call is made again on the new session the
supervisor opens); a JSON-RPC error the upstream sent keeps its code as the upstream's own
(:class:`~.connection.UpstreamRpcError`: a -32000 it sends is not a lost connection); a redirect
is not followed; a body over the cap is cut while it arrives. A call the
caller abandons (its time-out, a disconnect) or that passes the upstream's time-out sends
``notifications/cancelled`` for it, as the SDK does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic_core import from_json

from conclave.gateway.upstreams.event_stream import EventTooLarge, message_events
from conclave.gateway.upstreams.session_answers import (
    TransportEnded,
    UpstreamRpcError,
    answers_request,
)
from conclave.gateway.upstreams.upstream_errors import SessionGone
from conclave.platform.egress import EgressPolicy
from conclave.platform.egress_aiohttp import guarded_aiohttp_session
from conclave.platform.egress_mcp import ANSWER_TOO_LARGE

log = logging.getLogger(__name__)

_MAX_PENDING_CANCELLATIONS = 64
"""Cancellation notices in flight at once; past it a notice is skipped (the upstream's call then
runs to its end, as it would have had the notice been lost)."""


class DirectCalls:
    """``tools/call`` on one MCP session of an HTTP upstream, without the SDK's transport."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        policy: EgressPolicy,
        *,
        timeout_seconds: float,
        connect_timeout_seconds: float,
        max_answer_bytes: int,
        max_connections: int,
        on_session_lost: Callable[[], None],
    ) -> None:
        self._url = url
        self._timeout = timeout_seconds
        self._cap = max_answer_bytes
        self._on_session_lost = on_session_lost
        self._has_session = "mcp-session-id" in headers
        self._http = guarded_aiohttp_session(
            policy,
            connect_timeout=connect_timeout_seconds,
            max_connections=max_connections,
            headers={
                **headers,
                "accept": "application/json, text/event-stream",
                "content-type": "application/json",
            },
        )
        self._ids = itertools.count(1)
        self._cancellations: set[asyncio.Task[None]] = set()

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """One ``tools/call``; raises :class:`MCPError` as the SDK's session would, or
        :class:`ConnectionError` when the upstream could not be reached or went away."""
        request_id = f"direct-{next(self._ids)}"
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            },
            separators=(",", ":"),
        ).encode()
        try:
            async with asyncio.timeout(self._timeout):
                message = await self._exchange(body, request_id)
        except TimeoutError:
            self._cancel(request_id, "the request timed out")
            raise MCPError(types.REQUEST_TIMEOUT, "Request timed out") from None
        except asyncio.CancelledError:
            self._cancel(request_id, "the caller abandoned the request")
            raise
        error = message.get("error")
        if error is not None:
            # A shape that is not an error raises ValidationError: "not a tool result" (502).
            data = types.ErrorData.model_validate(error)
            raise UpstreamRpcError(data.code, data.message, data.data)
        return types.CallToolResult.model_validate(message.get("result"))

    async def aclose(self) -> None:
        for task in list(self._cancellations):
            task.cancel()
        await self._http.close()

    async def _exchange(self, body: bytes, request_id: str) -> dict[str, Any]:
        try:
            async with self._http.post(self._url, data=body, allow_redirects=False) as response:
                return await self._answer(response, request_id)
        except aiohttp.ClientError as exc:
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc

    async def _answer(self, response: aiohttp.ClientResponse, request_id: str) -> dict[str, Any]:
        status = response.status
        given_type = response.headers.get("content-type", "")
        content_type = given_type.lower()
        if status == 202:
            raise MCPError(types.INVALID_REQUEST, "server answered a request with 202 Accepted")
        if 300 <= status < 400:
            raise MCPError(types.INVALID_REQUEST, f"redirect ({status}) not followed")
        if status >= 400:
            if status == 404 and self._has_session:
                if content_type.startswith("application/json"):
                    own = await self._own_error(response, request_id)
                    if own is not None:  # the upstream's answer to this call (a tool's 404)
                        return own
                # The call is lost with the session (the upstream ran nothing).
                if not self._http.closed:  # a newer session may be open already
                    self._on_session_lost()
                raise SessionGone(types.CONNECTION_CLOSED, "the upstream ended the session")
            if content_type.startswith("application/json"):
                parsed = _json(await self._read(response))
                if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
                    return {"error": parsed["error"]}
            if status == 404:
                raise MCPError(types.METHOD_NOT_FOUND, "Not Found")
            raise MCPError(types.INTERNAL_ERROR, "Server returned an error response")
        if content_type.startswith("application/json"):
            message = _json(await self._read(response))
        elif content_type.startswith("text/event-stream"):
            message = await self._from_event_stream(response, request_id)
        else:
            # As given (cut), not lower-cased: the scrubber finds a credential quoted there.
            unexpected = given_type[:100]
            raise MCPError(types.INVALID_REQUEST, f"Unexpected content type: {unexpected}")
        if not isinstance(message, dict) or not ("result" in message or "error" in message):
            raise MCPError(types.PARSE_ERROR, "Failed to parse JSON response: not an answer")
        if message.get("id") != request_id and "result" in message:
            # The SDK's session would leave the call waiting for its time-out.
            raise MCPError(types.INVALID_REQUEST, "the upstream answered another request's id")
        return message

    async def _own_error(
        self, response: aiohttp.ClientResponse, request_id: str
    ) -> dict[str, Any] | None:
        """A 404's body when it is a JSON-RPC error naming this request's id: the upstream
        answered the call (a tool's "no such item"), it did not lose the session (the MCP SDK's
        server answers an unknown session with id null). Read within the cap and the call's
        time-out, as any answer."""
        try:
            parsed = _json(await self._read(response))
        except MCPError:
            return None
        if isinstance(parsed, dict) and answers_request(parsed, request_id):
            return {"error": parsed["error"]}
        return None

    async def _from_event_stream(
        self, response: aiohttp.ClientResponse, request_id: str
    ) -> dict[str, Any]:
        """The answer among the stream's events, as soon as it comes (notifications before it
        are passed over, the rest of the stream is not waited for)."""
        events = message_events(response.content.iter_any(), self._cap)
        try:
            async with contextlib.aclosing(events):
                async for data in events:
                    message = _json(data)
                    if isinstance(message, dict) and message.get("id") == request_id:
                        return message
        except EventTooLarge:
            raise MCPError(types.PARSE_ERROR, f"{ANSWER_TOO_LARGE} ({self._cap} bytes)") from None
        raise TransportEnded(types.CONNECTION_CLOSED, "the event stream ended without an answer")

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """The whole body, cut off at the cap while it arrives (after decompression)."""
        too_large = MCPError(types.PARSE_ERROR, f"{ANSWER_TOO_LARGE} ({self._cap} bytes)")
        if response.content_length is not None and response.content_length > self._cap:
            raise too_large
        chunks: list[bytes] = []
        total = 0
        async for chunk in response.content.iter_any():
            total += len(chunk)
            if total > self._cap:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    def _cancel(self, request_id: str, reason: str) -> None:
        if len(self._cancellations) >= _MAX_PENDING_CANCELLATIONS or self._http.closed:
            return
        task = asyncio.get_running_loop().create_task(self._send_cancellation(request_id, reason))
        self._cancellations.add(task)
        task.add_done_callback(self._cancellations.discard)

    async def _send_cancellation(self, request_id: str, reason: str) -> None:
        notice = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": reason},
        }
        try:
            async with asyncio.timeout(self._timeout):
                async with self._http.post(self._url, json=notice, allow_redirects=False):
                    pass
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.debug("cancellation notice not delivered: %s", type(exc).__name__)


def _json(body: bytes) -> Any:
    """``body`` parsed as the SDK parses answers (pydantic's parser: about 200 levels of nesting
    at most, no lone surrogate escapes), failures as its ``PARSE_ERROR``."""
    try:
        return from_json(body)
    except ValueError as exc:
        raise MCPError(types.PARSE_ERROR, f"Failed to parse JSON response: {exc}") from None
