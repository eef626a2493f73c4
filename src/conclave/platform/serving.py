"""How every service is served: uvicorn, with read deadlines and a header size cap.

uvicorn bounds only the idle time between two requests (keep-alive). A client may take as long as
it likes over a request's headers, or send its body one byte a second, and hold a connection (for
the edge, a temporary upload file too) for ever: the "slowloris" attack. Nor does it bound the
size of the headers (ten megabytes of them are read and kept). :class:`DeadlineProtocol`,
uvicorn's httptools protocol with a per-connection timer, bounds both halves of a request:

* headers: the request line and headers must be complete ``header_seconds`` after the connection
  opened (for the first request) or after the request's first byte (on a kept-alive connection),
  and within ``max_header_bytes`` (431 ``HEADERS_TOO_LARGE``);
* body: no pause between two pieces longer than ``body_idle_seconds``, and the whole body within
  ``body_seconds`` plus one second per ``body_min_bytes_per_second`` bytes received. A large
  upload on a decent link is never cut; a dripped body is, at whatever size.

A request past its deadline is answered 408 problem+json (``HEADER_TIMEOUT`` or ``BODY_TIMEOUT``)
when no response has started, and its connection is closed. The application sees the client go
away (``http.disconnect``), so it stops reading and drops what it received (the edge deletes the
temporary file); :func:`read_timeout_of` tells it why. Time during which the server itself is not
reading (the application has not taken the bytes already buffered) never counts against the
client. Requests that arrive at once (headers and body in one read, the usual case) arm no timer.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from conclave.platform.problem_types import ProblemCode, title_of, type_uri
from conclave.settings import CommonSettings

_HEADERS, _BODY, _DONE, _CLOSING = "headers", "body", "done", "closing"
# After a refusal the connection reads (and drops) what the client still sends for this long before
# closing: closing with unread bytes makes the kernel send a reset, which can destroy the answer
# before the client reads it ("lingering close", as nginx does).
LINGER_SECONDS = 2.0
_READ_TIMEOUT_KEY = "conclave.read_timeout"


@dataclass(frozen=True)
class ReadLimits:
    """How long a client may take to send a request, and how large its headers may be (see the
    module's docstring)."""

    header_seconds: float
    body_idle_seconds: float
    body_seconds: float
    body_min_bytes_per_second: float
    max_header_bytes: int

    @classmethod
    def from_settings(cls, settings: CommonSettings) -> ReadLimits:
        """The limits the settings configure."""
        return cls(
            header_seconds=settings.header_timeout_seconds,
            body_idle_seconds=settings.body_idle_timeout_seconds,
            body_seconds=settings.body_timeout_seconds,
            body_min_bytes_per_second=settings.body_min_bytes_per_second,
            max_header_bytes=settings.max_header_bytes,
        )


def read_timeout_of(scope: dict[str, Any] | Any) -> str | None:
    """``HEADER_TIMEOUT``/``BODY_TIMEOUT`` when the server gave up reading this request (the
    application then sees a disconnect), else ``None``."""
    extension = (scope.get("extensions") or {}).get(_READ_TIMEOUT_KEY) or {}
    code = extension.get("code")
    return code if isinstance(code, str) else None


_REFUSALS: dict[str, tuple[int, str, str]] = {
    ProblemCode.HEADER_TIMEOUT: (
        408,
        "Request Timeout",
        "The request headers did not arrive in time.",
    ),
    ProblemCode.BODY_TIMEOUT: (408, "Request Timeout", "The request body did not arrive in time."),
    ProblemCode.HEADERS_TOO_LARGE: (
        431,
        "Request Header Fields Too Large",
        "The request headers exceed the size limit.",
    ),
}


def _refusal(code: str) -> bytes:
    status, reason, detail = _REFUSALS[code]
    body = json.dumps(
        {
            "type": type_uri(code),
            "title": title_of(code),
            "status": status,
            "detail": detail + " The connection is closed.",
            "code": code,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body read deadlines and a header size cap;
    build one for a set of limits with :func:`deadline_protocol`."""

    limits: ClassVar[ReadLimits]

    # One timer per connection, armed lazily: it is set only when a read leaves a request
    # incomplete, and when it fires it either expires the request or re-arms itself for the
    # deadline as it stands then (progress moves the deadline without touching the timer).
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._timer: asyncio.TimerHandle | None = None
        self._phase = _HEADERS
        self._phase_started = self.loop.time()
        self._last_read = self._phase_started
        self._header_bytes = 0
        self._body_received = 0
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    # The parser callbacks below run for every request: they call the base class directly (no
    # ``super()`` lookup) and do no more than note the time.
    def data_received(self, data: bytes) -> None:
        phase = self._phase
        if phase == _CLOSING:
            return
        if phase == _BODY:
            self._body_received += len(data)
            self._last_read = self.loop.time()
        elif phase == _HEADERS:
            self._header_bytes += len(data)
        HttpToolsProtocol.data_received(self, data)
        if self._phase == _DONE or self.transport.is_closing():
            return
        # Still in the headers: every byte counted is a header byte (the parser keeps them all
        # until the headers end). Checked after the read, so at most one read beyond the cap.
        if self._phase == _HEADERS and self._header_bytes > self.limits.max_header_bytes:
            self._refuse(ProblemCode.HEADERS_TOO_LARGE)
            return
        due = self._due()
        timer = self._timer
        if timer is not None and due is not None and timer.when() > due:
            # Armed for a later deadline of an earlier request: this one's comes first.
            timer.cancel()
            timer = self._timer = None
        if timer is None:
            self._arm()

    def on_message_begin(self) -> None:
        HttpToolsProtocol.on_message_begin(self)
        if self._phase == _DONE:  # a new request on a kept-alive connection
            self._phase = _HEADERS
            self._phase_started = self.loop.time()
            self._header_bytes = 0

    def on_headers_complete(self) -> None:
        HttpToolsProtocol.on_headers_complete(self)
        if self.parser.should_upgrade():
            self._phase = _DONE  # a WebSocket: no longer an HTTP request
            return
        self._phase = _BODY
        self._phase_started = self._last_read = self.loop.time()
        self._body_received = 0

    def on_message_complete(self) -> None:
        HttpToolsProtocol.on_message_complete(self)
        self._phase = _DONE

    def _due(self) -> float | None:
        limits = self.limits
        if self._phase == _HEADERS:
            return self._phase_started + limits.header_seconds
        if self._phase == _BODY:
            earned = self._body_received / limits.body_min_bytes_per_second
            whole = self._phase_started + limits.body_seconds + earned
            return min(self._last_read + limits.body_idle_seconds, whole)
        return None

    def _arm(self) -> None:
        due = self._due()
        if due is not None:
            self._timer = self.loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        due = self._due()
        if due is None:
            return
        now = self.loop.time()
        if self.flow.read_paused:
            # The server stopped reading (the application has not taken what is buffered, or a
            # pipelined request waits): the client is not the one stalling. Start afresh.
            self._phase_started = self._last_read = now
            self._body_received = 0
            self._arm()
        elif now < due:
            self._timer = self.loop.call_at(due, self._on_timer)
        else:
            self._refuse(
                ProblemCode.BODY_TIMEOUT if self._phase == _BODY else ProblemCode.HEADER_TIMEOUT
            )

    def _refuse(self, code: ProblemCode) -> None:
        """Answer ``code`` (unless a response is under way) and close the connection."""
        cycle = self.cycle
        if self._phase == _BODY:
            # A queued pipelined request must not answer in the middle of the one before it.
            answer = cycle is not None and not cycle.response_started and not self.pipeline
            if cycle is not None:
                cycle.scope.setdefault("extensions", {})[_READ_TIMEOUT_KEY] = {"code": code}
                # The application sees the client gone: it stops reading and drops what it got,
                # and nothing it might still send can mix with the answer written here.
                cycle.disconnected = True
                cycle.message_event.set()
        else:
            answer = cycle is None or cycle.response_complete
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not answer or not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write(_refusal(code))
        self.transport.write_eof()
        self._phase = _CLOSING
        self._timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)


def deadline_protocol(limits: ReadLimits) -> type[DeadlineProtocol]:
    """A :class:`DeadlineProtocol` class enforcing ``limits`` (uvicorn builds one instance per
    connection from the class it is given)."""
    return type("DeadlineProtocol", (DeadlineProtocol,), {"limits": limits})


def server_config(
    app: Any, settings: CommonSettings, *, host: str, port: int, **options: Any
) -> uvicorn.Config:
    """The uvicorn configuration every service runs with: read deadlines and keep-alive from the
    settings, no access log (the services log and measure requests themselves), no server
    header. ``options`` are further ``uvicorn.Config`` arguments."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=deadline_protocol(ReadLimits.from_settings(settings)),
        timeout_keep_alive=settings.keep_alive_seconds,
        log_config=None,
        access_log=False,
        server_header=False,
        **options,
    )
