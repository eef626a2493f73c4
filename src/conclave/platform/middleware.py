"""ASGI middleware shared by every service: request context, metrics and the body-size cap."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conclave.platform.ids import new_id
from conclave.platform.logs import correlation_id_var, request_id_var
from conclave.platform.metrics import ServiceMetrics
from conclave.platform.problem_types import ProblemCode, title_of, type_uri
from conclave.platform.problems import PROBLEM_MEDIA_TYPE, internal_error

_SAFE_ID = re.compile(r"[A-Za-z0-9._:/@+=-]{1,128}")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _clean_id(value: str | None) -> str | None:
    # Ids come from clients and end up in logs and events: accept only short, plain tokens.
    return value if value is not None and _SAFE_ID.fullmatch(value) else None


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands out ``body`` (already read) once, then defers to ``receive``."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class RequestContextMiddleware:
    """Assign request and correlation ids, echo them as headers, and record HTTP metrics."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _clean_id(_header(scope, b"x-request-id")) or new_id()
        correlation_id = _clean_id(_header(scope, b"x-correlation-id")) or request_id
        request_token = request_id_var.set(request_id)
        correlation_token = correlation_id_var.set(correlation_id)
        scope.setdefault("state", {})["correlation_id"] = correlation_id
        status = 500
        response_started = False
        started = time.perf_counter()

        async def send_with_ids(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                headers.append((b"x-correlation-id", correlation_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_ids)
        except Exception as exc:
            # Starlette renders unhandled errors in its outermost middleware, after this one has
            # reset the ids: render them here so a 500 carries the request id callers report.
            if response_started:
                raise
            await internal_error(scope.get("path", ""), exc)(scope, receive, send_with_ids)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "GET")
            metrics = self.metrics
            metrics.child(metrics.http_requests, method, template, str(status)).inc()
            metrics.child(metrics.http_duration, method, template).observe(
                time.perf_counter() - started
            )
            request_id_var.reset(request_token)
            correlation_id_var.reset(correlation_token)


_LONGEST_LENGTH = 2**63
"""What a ``Content-Length`` of more than 19 significant digits counts as: beyond every limit."""


def declared_length(value: str | None) -> int | None:
    """The number a ``Content-Length`` header declares, or ``None`` when it is absent or not
    ASCII digits (``"²".isdigit()`` is true, and ``int`` refuses it). Leading zeros are dropped
    before the number is read: a server may pass ``000…0`` of any length on, and ``int`` refuses
    more than 4,300 digits; one of more than 19 digits counts as :data:`_LONGEST_LENGTH`."""
    if value is None or not value.isascii() or not value.isdigit():
        return None
    digits = value.lstrip("0") or "0"
    return int(digits) if len(digits) <= 19 else _LONGEST_LENGTH


DRAIN_BYTES = 8 << 20
"""How much more than the limit a refused body may still send before its 413 (8 MiB)."""
DRAIN_SECONDS = 2.0
"""How long a refused body is read at most before its 413 (however slowly it comes)."""


async def _drain(scope: Scope, receive: Receive, budget: int) -> None:
    """Read and drop what the client still sends of its body, up to ``budget`` bytes and
    :data:`DRAIN_SECONDS`. A client that is still sending when the server answers and closes
    meets a connection reset, often before it has read the answer: an MCP SDK reported a 413 as
    a read error about half of the time. A client that asked ``Expect: 100-continue`` has sent
    nothing yet and waits for the answer: reading would invite the body (the server's first read
    answers ``100 Continue``), so it gets its 413 at once."""
    expect = _header(scope, b"expect")
    if expect is not None and expect.strip().lower() == "100-continue":
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            while budget > 0:
                message = await receive()
                if message["type"] != "http.request":
                    return
                budget -= len(message.get("body", b""))
                if not message.get("more_body", False):
                    return


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_bytes`` with 413 while reading, before anything parses them.
    The rest of a refused body is read and dropped first (:func:`_drain`: up to :data:`DRAIN_BYTES`
    beyond the limit, for :data:`DRAIN_SECONDS`), so that the client reads the 413; a larger one
    is answered at once.

    Multipart uploads are exempt: the services that take them stream them with their own per-type
    limits.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        content_type = _header(scope, b"content-type") or ""
        if content_type.startswith("multipart/"):
            await self.app(scope, receive, send)
            return
        declared = declared_length(_header(scope, b"content-length"))
        if declared is not None:
            if declared > self.max_bytes:
                if declared <= self.max_bytes + DRAIN_BYTES:
                    await _drain(scope, receive, declared)
                await self._refuse(scope, send)
                return
            # The server reads exactly Content-Length bytes: the body cannot outgrow the limit,
            # so it is left to the application to read (no copy, no replay).
            await self.app(scope, receive, send)
            return
        # Read the whole (bounded) body first, so an over-long chunked body is refused before the
        # application has seen any of it.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                if message.get("more_body", False):
                    await _drain(scope, receive, self.max_bytes + DRAIN_BYTES - size)
                await self._refuse(scope, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, replay_body(b"".join(chunks), receive), send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        body: dict[str, Any] = {
            "type": type_uri(ProblemCode.PAYLOAD_TOO_LARGE),
            "title": title_of(ProblemCode.PAYLOAD_TOO_LARGE),
            "status": 413,
            "detail": f"The request body exceeds {self.max_bytes} bytes.",
            "code": ProblemCode.PAYLOAD_TOO_LARGE,
            "instance": scope.get("path"),
            "request_id": request_id_var.get(),
        }
        payload = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
