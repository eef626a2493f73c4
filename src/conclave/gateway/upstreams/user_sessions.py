"""Sessions with an HTTP upstream opened with one user's own credential.

A credential is a property of an HTTP session (its headers on every request, and upstreams bind
their ``Mcp-Session-Id`` to the principal that opened it), so a user's calls go through a session
of that user's: opened at their first call, kept for the next ones, closed after
``GATEWAY_UPSTREAM_USER_SESSION_IDLE_SECONDS`` without a call, or when more than
``GATEWAY_UPSTREAM_MAX_USER_SESSIONS`` are open (the least recently used idle one first), or when
the user's credential changes. A session the upstream no longer knows (HTTP 404 to its
``Mcp-Session-Id``: the upstream restarted) is replaced by the user's next call; the call that met
the 404 fails and is not sent again (the SDK words that 404 as it words the upstream's own -32600:
the gateway cannot know the upstream did not run it); the old one is closed once the calls still
in flight on it have ended (the upstream answers those it accepted), or after the upstream's
time-out.

Sessions being closed (the SDK's teardown, a ``DELETE`` to the upstream) count towards the bound
until their task ends, and their teardown is cut after a few seconds (at once when room is needed),
so one user replacing their credential in a loop cannot hold more connections than the bound.
A call that read a credential replaced or deleted before its session opens does not open one
with it (a generation per user): it reads the credential again.

What happens on such a session stays the user's: an upstream refusing the credential (HTTP 401 or
403) fails that user's call with ``UPSTREAM_CREDENTIAL_REJECTED`` and closes that session, and no
failure of a user's session counts towards the upstream's circuit breaker or its state in
``GET /upstreams`` — one user's revoked token must not pause the upstream for everyone.

Each session lives in a task of its own: the SDK's transport holds a task group, whose scope must
be left by the task that entered it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from typing import Any

import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from conclave.gateway.progress import ProgressReporter
from conclave.gateway.upstreams.connection import Upstream
from conclave.gateway.upstreams.redaction import Scrubber
from conclave.gateway.upstreams.session_answers import connection_lost, session_gone
from conclave.gateway.upstreams.session_opening import progress_callback
from conclave.gateway.upstreams.upstream_errors import UpstreamDown, describe

log = logging.getLogger(__name__)

_STOP_SECONDS = 3.0
_REFUSED = frozenset({401, 403})


class CredentialRefused(Exception):
    """The upstream answered 401 or 403 to a request carrying the user's credential."""


class CredentialChanged(Exception):
    """The user's credential was replaced or deleted after it was read: read it again."""


class _UserSession:
    """One user's session and the task that holds it open."""

    def __init__(self, header_value: str, scrubber: Scrubber) -> None:
        self.header_value = header_value
        self.scrubber = scrubber
        self.session: ClientSession | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.refused = False
        self.forgotten = False
        self.in_flight = 0
        self.draining = False
        """Closed once its last call in flight ends (it was forgotten)."""
        self.last_used = time.monotonic()
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def saw(self, response: httpx2.Response) -> None:
        if response.status_code in _REFUSED:
            self.refused = True
        elif session_gone(response):
            # What the SDK words "Session terminated": the upstream does not know the session.
            self.forgotten = True


class UserSessions:
    """The user sessions of one HTTP upstream, by user id."""

    def __init__(
        self, upstream: Upstream, header: str, *, max_sessions: int, idle_seconds: float
    ) -> None:
        self._upstream = upstream
        self._header = header
        self._max = max_sessions
        self._idle = idle_seconds
        self._sessions: OrderedDict[str, _UserSession] = OrderedDict()
        self._closing: dict[asyncio.Task[None], _UserSession] = {}
        """Tasks of sessions closed but not ended yet, oldest first, and their sessions."""
        self._generations: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def generation(self, user_id: str) -> int:
        """How many times ``user_id``'s credential changed here (read it before the store)."""
        return self._generations.get(user_id, 0)

    async def call(
        self,
        user_id: str,
        credential: str,
        header_value: str,
        generation: int,
        name: str,
        arguments: dict[str, Any],
        progress: ProgressReporter | None = None,
    ) -> types.CallToolResult:
        """``tools/call`` on ``user_id``'s session (opened with ``header_value`` if need be);
        ``progress`` as in :meth:`Upstream.call`. :class:`CredentialChanged` when
        ``generation`` is no longer the user's."""
        # A call that fails on a session the upstream forgot is not made again: the SDK words a
        # 404 to it as it words the upstream's own -32600, and the 404 may have answered another
        # call while the upstream ran this one (it would run twice). The next call opens a new
        # session.
        entry = self._entry(user_id, credential, header_value, generation)
        return await self._call_on(user_id, entry, name, arguments, progress)

    async def _call_on(
        self,
        user_id: str,
        entry: _UserSession,
        name: str,
        arguments: dict[str, Any],
        progress: ProgressReporter | None,
    ) -> types.CallToolResult:
        spec = self._upstream.spec
        entry.in_flight += 1
        try:
            try:
                async with asyncio.timeout(spec.connect_timeout_seconds + 1):
                    await asyncio.shield(entry.ready)
            except Exception as exc:  # a session that did not open is not kept
                self._close(user_id, entry)
                if isinstance(exc, TimeoutError):
                    raise UpstreamDown(f"Upstream {spec.name!r} did not answer in time.") from exc
                raise
            assert entry.session is not None
            try:
                return await entry.session.send_request(
                    types.CallToolRequest(
                        params=types.CallToolRequestParams(name=name, arguments=arguments)
                    ),
                    types.CallToolResult,
                    request_read_timeout_seconds=spec.timeout_seconds,
                    progress_callback=progress_callback(progress) if progress else None,
                )
            except MCPError as exc:
                if entry.refused:
                    self._close(user_id, entry)
                    raise CredentialRefused() from exc
                if entry.forgotten:
                    self._close(user_id, entry, after_calls=True)
                elif connection_lost(exc):
                    self._close(user_id, entry)
                raise
            except asyncio.CancelledError:
                raise
            except Exception:
                self._close(user_id, entry)
                raise
        finally:
            entry.in_flight -= 1
            entry.last_used = time.monotonic()
            if entry.draining and entry.in_flight == 0:
                entry.stop.set()

    def forget(self, user_id: str) -> None:
        """Close ``user_id``'s session (their credential was replaced or deleted), and make
        calls that read the credential before this read it again."""
        self._generations[user_id] = self.generation(user_id) + 1
        entry = self._sessions.get(user_id)
        if entry is not None:
            self._close(user_id, entry)

    def close_idle(self) -> None:
        """Close the sessions unused for longer than the idle time."""
        cutoff = time.monotonic() - self._idle
        for user_id, entry in list(self._sessions.items()):
            if entry.in_flight == 0 and entry.last_used < cutoff:
                self._close(user_id, entry)

    async def close_all(self) -> None:
        """Close every session, and wait a bounded time for every task, closing ones too."""
        for user_id, entry in list(self._sessions.items()):
            self._close(user_id, entry)
        tasks = list(self._closing)
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=_STOP_SECONDS)
            for task in stuck:
                task.cancel()
            if stuck:
                await asyncio.wait(stuck, timeout=_STOP_SECONDS)

    def _entry(
        self, user_id: str, credential: str, header_value: str, generation: int
    ) -> _UserSession:
        if generation != self.generation(user_id):
            raise CredentialChanged()
        self.close_idle()
        entry = self._sessions.get(user_id)
        # A session that ended by itself (the upstream closed or forgot it) or holds an older
        # credential is replaced.
        if entry is not None and (
            entry.header_value != header_value or entry.stop.is_set() or entry.forgotten
        ):
            self._close(user_id, entry, after_calls=entry.forgotten)
            entry = None
        if entry is None:
            self._make_room()
            scrubber = self._upstream.scrubber.extended(credential)  # within header_value
            entry = _UserSession(header_value, scrubber)
            self._sessions[user_id] = entry
            entry.task = asyncio.create_task(
                self._hold(entry), name=f"upstream {self._upstream.spec.name} user session"
            )
        self._sessions.move_to_end(user_id)
        return entry

    def _make_room(self) -> None:
        """Room for one more session: open and closing ones count. The oldest teardown is cut
        short first, then the least recently used idle session is closed (and cut short). A
        closed session still draining calls in flight (one the upstream forgot) is busy, as an
        open one with a call in flight: it is never cut for room (an outside attack: another
        user's first call cut the calls running on it, 502, with an idle session to close)."""
        while len(self._sessions) + len(self._closing) >= self._max:
            ending = [task for task, held in self._closing.items() if not _draining(held)]
            if ending:
                del self._closing[ending[0]]
                ending[0].cancel()
                continue
            idle = [uid for uid, held in self._sessions.items() if held.in_flight == 0]
            if not idle:
                spec = self._upstream.spec
                raise UpstreamDown(
                    f"Upstream {spec.name!r}: every session for users' credentials is busy."
                )
            self._close(idle[0], self._sessions[idle[0]])

    def _close(self, user_id: str, entry: _UserSession, *, after_calls: bool = False) -> None:
        """Close ``entry``; ``after_calls``: once the calls in flight on it have ended (a session
        the upstream forgot: it answers the calls it accepted; an outside attack: one call's
        404 cut the same user's other calls), within the upstream's time-out."""
        if self._sessions.get(user_id) is entry:
            del self._sessions[user_id]
        loop = asyncio.get_running_loop()
        stop_in = 0.0
        if after_calls and entry.in_flight and not entry.stop.is_set():
            entry.draining = True
            stop_in = self._upstream.spec.timeout_seconds + 1  # its calls time out by then
            loop.call_later(stop_in, entry.stop.set)
        else:
            entry.stop.set()
        task = entry.task
        if task is not None and not task.done() and task not in self._closing:
            self._closing[task] = entry  # it counts towards the bound until it ends
            task.add_done_callback(self._ended)
            # The teardown (the SDK's DELETE) may hang on a slow upstream: it is cut short.
            loop.call_later(stop_in + _STOP_SECONDS, task.cancel)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._closing.pop(task, None)

    async def _hold(self, entry: _UserSession) -> None:
        headers = {**self._upstream.spec.headers, self._header: entry.header_value}
        try:
            async with self._upstream.http_session(headers, on_response=entry.saw) as session:
                entry.session = session
                entry.ready.set_result(None)
                await entry.stop.wait()
        except Exception as exc:
            # Scrubbed of what the session presented: an upstream's error may quote the token.
            failure = describe(exc, entry.scrubber)
            log.info("upstream user session ended: %s", failure, extra=self._extra())
            if not entry.ready.done():
                # The call was not sent: 503 like an upstream that is not connected, in words
                # without the request's headers.
                opened = UpstreamDown(
                    f"Upstream {self._upstream.spec.name!r} did not open a session for your "
                    f"credential ({failure})."
                )
                entry.ready.set_exception(CredentialRefused() if entry.refused else opened)
        finally:
            entry.stop.set()
            if not entry.ready.done():
                entry.ready.set_exception(UpstreamDown("the session was closed"))
            with contextlib.suppress(BaseException):
                entry.ready.exception()  # retrieved: a waiter may have given up already

    def _extra(self) -> dict[str, str]:
        return {"upstream": self._upstream.spec.name}


def _draining(entry: _UserSession) -> bool:
    """A closed session kept open for its calls in flight (its teardown has not begun)."""
    return entry.draining and entry.in_flight > 0 and not entry.stop.is_set()
