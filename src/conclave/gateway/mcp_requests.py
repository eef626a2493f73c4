"""What ``/mcp`` reads of a POST before it decides who answers it: the body as one JSON object,
and whether it is a plain stateless ``tools/call``/``tools/list`` the gateway answers itself
(:class:`conclave.gateway.mcp.McpEndpoint`)."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.streamable_http import check_accept_headers
from mcp_types import DEFAULT_NEGOTIATED_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request

from conclave.platform.inputs import text_problem


def json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, once for every check that reads it; ``None`` for anything else
    (a batch, a parse error: the SDK answers those)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def plain_request(
    request: Request, message: dict[str, Any] | None
) -> tuple[Any, str, Any, str] | None:
    """(id, method, params, protocol version) of a single stateless JSON ``tools/call`` or
    ``tools/list`` request of a handshake-era protocol version (its body already read as
    ``application/json``)."""
    version = request.headers.get("mcp-protocol-version", DEFAULT_NEGOTIATED_VERSION)
    if version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None
    accepts_json, _accepts_sse = check_accept_headers(request)
    if message is None or not accepts_json or message.get("jsonrpc") != "2.0":
        return None
    request_id, method, params = message.get("id"), message.get("method"), message.get("params")
    if set(message) - {"jsonrpc", "id", "method", "params"}:
        return None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    if isinstance(request_id, str) and text_problem(request_id) == "lone_surrogate":
        return None  # the answer repeats the id and could not be encoded: the SDK refuses it
    if method == "tools/call" and isinstance(params, dict):
        return request_id, method, params, version
    if method == "tools/list" and params in (None, {}):
        return request_id, method, params, version
    return None
