"""What an upstream's HTTP 404 to a request on its session means: the session is gone (the
upstream restarted or expired it, and ran nothing), or it is the upstream's own answer to that
request (a tool's "no such item"); and whether an error with the SDK's code for a broken
connection is one. One rule for the direct path, the SDK's path and users' own sessions."""

from __future__ import annotations

from typing import Any

import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic_core import from_json


def session_refused(answer: httpx2.Response) -> bool:
    """A request on a session answered 404."""
    request = answer.request
    return (
        answer.status_code == 404
        and request.method == "POST"
        and "mcp-session-id" in request.headers
    )


def json_typed(answer: httpx2.Response) -> bool:
    """The answer says its body is JSON."""
    return answer.headers.get("content-type", "").lower().startswith("application/json")


def session_gone(answer: httpx2.Response) -> bool:
    """A request on a session answered 404, and not with a JSON-RPC error naming that request's
    own id (a tool's "no such item": the upstream's answer to it, an outside attack opened the
    circuit for everyone with five of them): the upstream no longer knows the session (the MCP
    SDK's server answers an unknown session with id null, "Session not found")."""
    return session_refused(answer) and not _answers_its_request(answer)


def _answers_its_request(answer: httpx2.Response) -> bool:
    try:
        sent = from_json(answer.request.content)
        given = from_json(answer.content) if json_typed(answer) else None
    except (httpx2.RequestNotRead, httpx2.ResponseNotRead, ValueError):
        return False
    request_id = sent.get("id") if isinstance(sent, dict) else None
    return isinstance(given, dict) and answers_request(given, request_id)


SESSION_NOT_FOUND = -32001
"""The code the TypeScript MCP SDK's server answers an unknown session with (HTTP 404)."""


def answers_request(message: dict[str, Any], request_id: object) -> bool:
    """Whether a 404's JSON-RPC ``message`` is the upstream's own error for the request
    ``request_id`` (a tool's "no such item") rather than its word that the session is gone.
    An unknown session is answered with id null by the MCP SDKs' servers, but a server that
    reads the request first may name its id: an error with the TypeScript SDK's code for it
    (-32001), or that speaks of a session, is the session's loss whatever its id (an outside
    attack: such a 404 was taken for the tool's answer, and the lost session was never
    replaced)."""
    error = message.get("error")
    if not isinstance(error, dict) or error.get("code") == SESSION_NOT_FOUND:
        return False
    text = error.get("message")
    if isinstance(text, str) and "session" in text.lower():
        return False
    given = message.get("id")
    return (
        isinstance(request_id, str | int)
        and not isinstance(request_id, bool)
        and type(given) is type(request_id)
        and given == request_id
    )


class UpstreamRpcError(MCPError):
    """A JSON-RPC error the upstream itself sent (the direct path's): its code is the
    upstream's, even one the SDK also uses for its own failures (-32000, connection closed)."""


SSE_EVENT_TOO_LARGE = "byte limit"
"""httpx2's words for an event of an answer's stream past ``max_sse_event_size``, which the SDK
passes on in its error: the answer's size (a caller's arguments can make it), not the
connection."""

_SDK_ENDED = frozenset(
    {
        "Connection closed",
        "SSE stream ended without a response",
        "SSE stream ended and reconnection attempts were exhausted",
    }
)
"""How the MCP SDK (2.3) words the errors it makes itself, with -32000, for a call whose
connection or answer stream ended; its streamable HTTP client also says ``SSE stream failed:``."""


def connection_lost(exc: MCPError) -> bool:
    """Whether ``exc`` says the connection broke (not an error the upstream answered).

    JSON-RPC leaves -32000 to servers, and upstreams answer it for their own failures; the MCP
    SDK gives the same code to the errors it makes when a call's connection or stream ends. The
    direct path knows which is which (:class:`UpstreamRpcError`, :class:`TransportEnded`). On
    the SDK's path only the SDK's own words, without data, are a broken connection: taking every
    -32000 for one let five calls of one user, whose arguments made a tool answer -32000, pause
    the upstream for everyone (docs/gateway.md). An event past the size cap is the answer's
    size. An upstream answering with exactly the SDK's words is still taken for a broken
    connection."""
    error = exc.error
    if error.code != types.CONNECTION_CLOSED or isinstance(exc, UpstreamRpcError):
        return False
    if isinstance(exc, TransportEnded):
        return True
    message = error.message
    if error.data is not None or SSE_EVENT_TOO_LARGE in message:
        return False
    return message in _SDK_ENDED or message.startswith("SSE stream failed:")


class TransportEnded(MCPError):
    """The direct path's own error for a call whose connection or answer stream ended."""
