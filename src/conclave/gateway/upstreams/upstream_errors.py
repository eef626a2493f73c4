"""How a call or a connection to an upstream MCP server failed, and the safe text of a failure
(what ``/upstreams`` shows as ``last_error``)."""

from __future__ import annotations

import re

from conclave.gateway.upstreams.redaction import NO_SECRETS, Scrubber
from conclave.gateway.upstreams.session_answers import TransportEnded
from conclave.platform.inputs import escape_text


class ConnectionEnded(Exception):
    """The connection to the upstream is gone (its process exited)."""


class SessionLost(ConnectionEnded):
    """The upstream ended the session (a 404 on it): the next one is opened at once, this one
    is closed when its calls in flight have ended."""


_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


def describe(exc: BaseException, scrubber: Scrubber = NO_SECRETS) -> str:
    """A short, safe text of a failure: what ``/upstreams`` (any signed-in user) shows as
    ``last_error``, and what logs say. URLs are cut out: httpx words an HTTP error with the
    whole URL, and an upstream's URL may carry a credential in its query. The credentials the
    connection presented are scrubbed (an upstream's error may quote the token it refused),
    before the text is cut: a cut credential would no longer match."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return describe(exc.exceptions[0], scrubber)
    text = _URL.sub("<url>", scrubber.text(str(exc) or type(exc).__name__))
    return escape_text(f"{type(exc).__name__}: {text}"[:300])


class SessionGone(TransportEnded):
    """The upstream answered 404 to the call's session: it ran nothing (the direct path's)."""


class UpstreamDown(Exception):
    """Nothing was sent: the upstream is not connected or its circuit is open."""
