"""Sessions with an HTTP upstream opened with one user's own credential.

A credential is a property of an HTTP session (its headers on every request, and upstreams bind
their ``Mcp-Session-Id`` to the principal that opened it), so a user's calls go through a session
of that user's: opened at their first call, kept for the next ones, closed after
``GATEWAY_UPSTREAM_USER_SESSION_IDLE_SECONDS`` without a call, or when more than
``GATEWAY_UPSTREAM_MAX_USER_SESSIONS`` are open (the least recently used idle one first), or when
the user's credential changes.

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

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from conclave.gateway.progress import ProgressReporter
from conclave.gateway.upstreams.connection import (
    Upstream,
    UpstreamDown,
    describe,
    progress_callback,
)

log = logging.getLogger(__name__)

_STOP_SECONDS = 3.0
_REFUSED = frozenset({401, 403})


class CredentialRefused(Exception):
    """The upstream answered 401 or 403 to a request carrying the user's credential."""


class _UserSession:
    """One user's session and the task that holds it open."""

    def __init__(self, credential: str) -> None:
        self.credential = credential
        self.session: ClientSession | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.refused = False
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def saw(self, status: int) -> None:
        if status in _REFUSED:
            self.refused = True


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

    def __len__(self) -> int:
        return len(self._sessions)

    async def call(
        self,
        user_id: str,
        header_value: str,
        name: str,
        arguments: dict[str, Any],
        progress: ProgressReporter | None = None,
    ) -> types.CallToolResult:
        """``tools/call`` on ``user_id``'s session (opened with ``header_value`` if need be);
        ``progress`` as in :meth:`Upstream.call`."""
        entry = self._entry(user_id, header_value)
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
                if exc.error.code == types.CONNECTION_CLOSED:
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

    def forget(self, user_id: str) -> None:
        """Close ``user_id``'s session (their credential was replaced or deleted)."""
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
        """Close every session, waiting a bounded time for their tasks."""
        tasks = [entry.task for entry in self._sessions.values() if entry.task is not None]
        for user_id, entry in list(self._sessions.items()):
            self._close(user_id, entry)
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=_STOP_SECONDS)
            for task in stuck:
                task.cancel()

    def _entry(self, user_id: str, header_value: str) -> _UserSession:
        self.close_idle()
        entry = self._sessions.get(user_id)
        # A session that ended by itself (the upstream closed it) or holds an older credential
        # is replaced.
        if entry is not None and (entry.credential != header_value or entry.stop.is_set()):
            self._close(user_id, entry)
            entry = None
        if entry is None:
            if len(self._sessions) >= self._max:
                idle = [uid for uid, held in self._sessions.items() if held.in_flight == 0]
                if not idle:
                    spec = self._upstream.spec
                    raise UpstreamDown(
                        f"Upstream {spec.name!r}: every session for users' credentials is busy."
                    )
                self._close(idle[0], self._sessions[idle[0]])
            entry = _UserSession(header_value)
            self._sessions[user_id] = entry
            entry.task = asyncio.create_task(
                self._hold(entry), name=f"upstream {self._upstream.spec.name} user session"
            )
        self._sessions.move_to_end(user_id)
        return entry

    def _close(self, user_id: str, entry: _UserSession) -> None:
        entry.stop.set()
        if self._sessions.get(user_id) is entry:
            del self._sessions[user_id]

    async def _hold(self, entry: _UserSession) -> None:
        headers = {**self._upstream.spec.headers, self._header: entry.credential}
        try:
            async with self._upstream.http_session(headers, on_status=entry.saw) as session:
                entry.session = session
                entry.ready.set_result(None)
                await entry.stop.wait()
        except Exception as exc:
            # Logged without the credential: `describe` words the failure, never the headers.
            extra = {"upstream": self._upstream.spec.name}
            log.info("upstream user session ended: %s", describe(exc), extra=extra)
            if not entry.ready.done():
                # The call was not sent: 503 like an upstream that is not connected, in words
                # without the request's headers.
                opened = UpstreamDown(
                    f"Upstream {self._upstream.spec.name!r} did not open a session for your "
                    f"credential ({describe(exc)})."
                )
                entry.ready.set_exception(CredentialRefused() if entry.refused else opened)
        finally:
            entry.stop.set()
            if not entry.ready.done():
                entry.ready.set_exception(UpstreamDown("the session was closed"))
            with contextlib.suppress(BaseException):
                entry.ready.exception()  # retrieved: a waiter may have given up already
