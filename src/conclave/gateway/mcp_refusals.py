"""Transport refusals at ``/mcp`` as JSON-RPC errors a client can parse.

The SDK's transport answers some refusals (a wrong ``Content-Type``, a Host or Origin its
DNS-rebinding guard refuses, the 2026-07-28 entry's 405/406) as plain text or an empty body with no
content type. A client reads a JSON-RPC error out of any non-2xx answer it can parse, so every such
refusal is rewritten to ``{"jsonrpc": "2.0", "id": null, "error": {...}}`` (``application/json``)
with the same HTTP status and the SDK's words as the message.

The platform's own refusals (401, 403, 413, 421, 503 ... as RFC 9457 problems) are given the same
members beside the problem's (:func:`json_rpc_problems`): the MCP SDK for Python reads a non-2xx
body only as ``application/json`` holding a JSON-RPC error, and showed every such refusal as "Server
returned an error response" (-32603), the problem's code lost.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from mcp import types
from mcp_types.jsonrpc import UNSUPPORTED_PROTOCOL_VERSION
from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import Message, Scope, Send

from conclave.gateway.mcp_versions import SUPPORTED_VERSIONS
from conclave.platform.bodies import media_type_of
from conclave.platform.jsontext import COMPACT
from conclave.platform.problems import PROBLEM_MEDIA_TYPE

_MAX_MESSAGE_BYTES = 1024  # the SDK's refusals are one line; never buffer more than that
_MAX_PROBLEM_BYTES = 64 << 10
"""The largest problem body given JSON-RPC members; a larger one (none of the platform's is) goes
out as it is."""


def unsupported_version(requested: str) -> Response:
    """400 for an ``MCP-Protocol-Version`` this server does not speak, naming the ones it does
    (the 2026-07-28 ``UnsupportedProtocolVersionError`` shape, for every revision)."""
    shown = requested[:64]
    message = (
        f"Unsupported MCP-Protocol-Version {shown!r}: this server supports "
        f"{', '.join(SUPPORTED_VERSIONS)}."
    )
    error = {
        "code": UNSUPPORTED_PROTOCOL_VERSION,
        "message": message,
        "data": {"supported": list(SUPPORTED_VERSIONS), "requested": shown},
    }
    return Response(_error_body(error), status_code=400, media_type="application/json")


def unsupported_media_type(content_type: str | None) -> Response | None:
    """415 for a POST whose body is not declared ``application/json`` (the streamable HTTP
    transport's only body type), as every JSON route of the platform answers; the SDK's own
    checks would answer 400 for some such types and 415 for others."""
    media_type = media_type_of(content_type)
    if media_type == "application/json":
        return None
    shown = media_type[:64] or "none"
    message = f"Unsupported Content-Type {shown!r}: /mcp reads application/json."
    body = _error_body({"code": types.INVALID_REQUEST, "message": message})
    return Response(body, status_code=415, media_type="application/json")


def invalid_request_id(message: dict[str, Any] | None) -> Response | None:
    """400 for a single JSON-RPC message whose ``id`` is neither a string nor an integer (a
    fraction, ``null``, a list, ``true``). The SDK would take it for a notification and answer
    ``202 Accepted`` with nothing run, leaving the client waiting for an answer that never comes.
    ``None`` (a body that is no JSON object) is left to the SDK, which words the parse error."""
    if message is None or "id" not in message:
        return None
    request_id = message["id"]
    if isinstance(request_id, str) or (
        isinstance(request_id, int) and not isinstance(request_id, bool)
    ):
        return None
    error = {
        "code": types.INVALID_REQUEST,
        "message": "Invalid request: a JSON-RPC id is a string or an integer",
    }
    return Response(_error_body(error), status_code=400, media_type="application/json")


def json_rpc_refusals(send: Send) -> Send:
    """``send`` with every non-JSON error answer (status >= 400) rewritten as a JSON-RPC error."""
    held: Message | None = None
    text = b""

    async def sending(message: Message) -> None:
        nonlocal held, text
        if message["type"] == "http.response.start" and message["status"] >= 400:
            headers = MutableHeaders(raw=list(message.get("headers", [])))
            if "json" not in headers.get("content-type", ""):
                held = message
                return
        if held is None or message["type"] != "http.response.body":
            await send(message)
            return
        text = (text + message.get("body", b""))[:_MAX_MESSAGE_BYTES]
        if message.get("more_body", False):
            return
        status = held["status"]
        reason = text.decode("utf-8", "replace").strip() or _phrase(status)
        body = _error_body({"code": types.INVALID_REQUEST, "message": reason})
        headers = MutableHeaders(raw=list(held.get("headers", [])))
        headers["content-type"] = "application/json"
        headers["content-length"] = str(len(body))
        await send({**held, "headers": headers.raw})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        held = None

    return sending


def json_rpc_problems(scope: Scope, send: Send) -> Send:
    """``send`` with every problem answer (status >= 400, ``application/problem+json``) also made
    a JSON-RPC error: ``jsonrpc``, ``id`` (null) and ``error`` beside the problem's own members,
    ``error.data`` the problem (its stable ``code`` included). Served as ``application/json``
    unless the request's ``Accept`` admits ``application/problem+json`` (``*/*`` does: curl, a
    browser); an MCP client accepts only ``application/json`` and ``text/event-stream``. Either
    way the body is a valid problem document, with the same status and headers."""
    held: Message | None = None
    chunks: list[bytes] = []
    size = 0

    async def sending(message: Message) -> None:
        nonlocal held, size
        if message["type"] == "http.response.start" and message["status"] >= 400:
            headers = MutableHeaders(raw=list(message.get("headers", [])))
            if media_type_of(headers.get("content-type")) == PROBLEM_MEDIA_TYPE:
                held = message
                return
        if held is None or message["type"] != "http.response.body":
            await send(message)
            return
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        more = message.get("more_body", False)
        if size > _MAX_PROBLEM_BYTES:  # not one of ours: as it came
            start, held = held, None
            await send(start)
            await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": more})
            return
        if more:
            return
        start, held = held, None
        body = b"".join(chunks)
        answer = _with_json_rpc(body, start["status"])
        headers = MutableHeaders(raw=list(start.get("headers", [])))
        if answer is not None:
            body = answer
            headers["content-length"] = str(len(body))
            if not _accepts_problem(scope):  # read only for a problem: most answers are not
                headers["content-type"] = "application/json"
        await send({**start, "headers": headers.raw})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return sending


def _with_json_rpc(body: bytes, status: int) -> bytes | None:
    """The problem ``body`` with the JSON-RPC error members added; ``None`` for a body that is
    not a problem object."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or "jsonrpc" in document:
        return None
    detail, title = document.get("detail"), document.get("title")
    message = detail if isinstance(detail, str) and detail else title
    error = {
        "code": types.INTERNAL_ERROR if status >= 500 else types.INVALID_REQUEST,
        "message": message if isinstance(message, str) and message else _phrase(status),
        "data": dict(document),
    }
    document.update({"jsonrpc": "2.0", "id": None, "error": error})
    # ASCII escapes: a member holding a lone surrogate must not turn the refusal into a 500.
    return json.dumps(document, separators=(",", ":")).encode("ascii")


def _accepts_problem(scope: Scope) -> bool:
    """Whether the request's ``Accept`` admits ``application/problem+json``: the weight of the
    most specific range that matches it (the type itself, then ``application/*``, then ``*/*``,
    RFC 9110 section 12.5.1) is not zero. No header at all admits anything."""
    values = [value for key, value in scope.get("headers", ()) if key == b"accept"]
    if not values:
        return True
    weights: dict[str, bool] = {}  # media range -> admitted (weight above zero)
    for value in values:
        for member in value.decode("latin-1").split(","):
            media_range, *parameters = (part.strip() for part in member.split(";"))
            media_range = media_range.lower()
            if media_range in _SPECIFICITY and media_range not in weights:
                weights[media_range] = not any(_refused(parameter) for parameter in parameters)
    for media_range in _SPECIFICITY:
        if media_range in weights:
            return weights[media_range]
    return False


_SPECIFICITY = ("application/problem+json", "application/*", "*/*")
"""The ranges that match ``application/problem+json``, most specific first."""


def _refused(parameter: str) -> bool:
    """Whether an Accept member's parameter is a weight of zero (``q=0``, ``q=0.000``)."""
    name, _, weight = parameter.partition("=")
    if name.strip().lower() != "q":
        return False
    weight = weight.strip()
    return weight[:1] == "0" and set(weight[2:]) <= {"0"}


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def _error_body(error: dict[str, object]) -> bytes:
    return COMPACT.encode({"jsonrpc": "2.0", "id": None, "error": error}).encode()
