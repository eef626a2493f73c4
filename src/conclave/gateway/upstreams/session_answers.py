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


_SDK_CLOSED = "Connection closed"
"""How the MCP SDK words the error it makes for a call whose connection ended (its session and
dispatcher); its streamable HTTP client words a broken event stream ``SSE stream failed: ...``."""


def connection_lost(exc: MCPError) -> bool:
    """Whether ``exc`` says the connection broke (not an error the upstream answered).

    The SDK makes such errors with code -32000, which JSON-RPC leaves to servers and upstreams
    use for their own failures. The direct path raises what the upstream sent as
    :class:`UpstreamRpcError`; on the SDK's path only the SDK's own wording, without data, is a
    broken connection: an upstream's "-32000 Server error: bad argument", which one user's
    arguments can cause, had each call counted as a breaker failure, and five of them paused
    the upstream for everyone (docs/gateway.md). An upstream answering exactly the SDK's words
    is still taken for a broken connection."""
    error = exc.error
    if error.code != types.CONNECTION_CLOSED or isinstance(exc, UpstreamRpcError):
        return False
    sdk_words = error.message == _SDK_CLOSED or error.message.startswith("SSE stream failed:")
    return sdk_words and error.data is None
