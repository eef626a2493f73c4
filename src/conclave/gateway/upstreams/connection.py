"""One upstream MCP server: its connection kept up, its tools listed, its calls made.

:meth:`Upstream.run` is the supervisor: it connects (the SDK's ``ClientSession`` over the
streamable HTTP client or :mod:`.stdio`), runs the ``initialize`` handshake within the connect
time-out, lists the tools, then waits for ``notifications/tools/list_changed`` (debounced: a storm
of them costs one listing per debounce interval), the refresh period, or the end of the
connection (the process exited, a listing failed, the upstream ended the session). Then it
connects again after a backoff that doubles up to a minute and is reset by a connection that
worked. Its last known tools stay listed while it reconnects; their calls answer 503
``UPSTREAM_UNAVAILABLE`` meanwhile.

Each connection lives in a task of its own (:meth:`Upstream._serve`: the SDK's transport holds a
task group, whose scope must be left by the task that entered it), so that a session the upstream
ended can be handed over at once and closed later, when its calls have ended
(:mod:`.open_session`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx2
import mcp_types as types
from mcp.client.session import ClientSession, IncomingMessage, MessageHandlerFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from conclave.gateway.backends.breaker import CircuitBreaker
from conclave.gateway.progress import ProgressReporter
from conclave.gateway.upstreams.config import McpServerSpec, UpstreamLimits
from conclave.gateway.upstreams.listing import LISTING_TIMEOUTS_IN_A_ROW, list_tools
from conclave.gateway.upstreams.open_session import OpenSession, retrieved
from conclave.gateway.upstreams.redaction import Scrubber
from conclave.gateway.upstreams.session_answers import (
    connection_lost,
    session_gone,
)
from conclave.gateway.upstreams.session_opening import (
    direct_calls_for,
    open_http_session,
    open_stdio_session,
    progress_callback,
)
from conclave.gateway.upstreams.stdio import StdioProcess
from conclave.gateway.upstreams.upstream_errors import (
    ConnectionEnded,
    SessionGone,
    SessionLost,
    UpstreamDown,
    describe,
)
from conclave.platform.clock import utc_now
from conclave.platform.egress import EgressPolicy

if TYPE_CHECKING:  # aiohttp is imported once an upstream answers JSON (9 MB, a quarter second)
    pass

log = logging.getLogger(__name__)

_MAX_BACKOFF_SECONDS = 60.0
_CLOSE_GRACE_SECONDS = 1.0  # past the time-out, for its calls to time out by themselves
_SESSION_ENDED = "the upstream ended the session"
_PROCESS_POLL_SECONDS = 0.5


Listing = Callable[["Upstream", list[types.Tool], list[str]], Awaitable[None]]
"""Called with each complete listing and the notes on it (truncated, a page bound reached)."""


class Upstream:
    """An upstream MCP server and its supervisor's state."""

    def __init__(
        self, spec: McpServerSpec, policy: EgressPolicy, limits: UpstreamLimits, on_listing: Listing
    ) -> None:
        self.spec = spec
        self.breaker = CircuitBreaker()
        self.state = "starting"
        self.tool_count = 0
        self.last_refresh: str | None = None
        self.last_error: str | None = None
        self.notes: list[str] = []
        self.restarts = 0
        self.refreshes = 0
        self.process = StdioProcess()
        self.ready = asyncio.Event()
        """Set once the first connection attempt has ended, one way or the other."""
        self._policy = policy
        self._limits = limits
        self._on_listing = on_listing
        self._current: OpenSession | None = None
        """The session new calls go to (``None`` while there is none)."""
        self._reopen = asyncio.Event()
        """Set once a session is open; a new one when the upstream ends a session."""
        self._changed = asyncio.Event()
        self.service_headers: dict[str, str] = {}
        """The service credential's header (HTTP upstreams with one): on the shared session,
        which lists the tools and makes the calls that present the service credential."""
        self.scrubber = Scrubber(spec.headers.values())
        """Scrubs what the shared session presents (its headers' values, the service
        credential) from the texts of its failures and answers."""

    # -- the supervisor -------------------------------------------------------------------

    async def run(self) -> None:
        """Keep the upstream connected until cancelled."""
        backoff = self._limits.first_backoff_seconds
        held: set[asyncio.Task[None]] = set()  # the connections still open, lost ones included
        try:
            while True:
                opened = OpenSession(self._limits.max_connections)
                served = asyncio.create_task(
                    self._serve(opened), name=f"upstream {self.spec.name} connection"
                )
                held.add(served)
                served.add_done_callback(held.discard)
                served.add_done_callback(retrieved)
                await asyncio.wait({served, opened.handed_over}, return_when="FIRST_COMPLETED")
                # Whatever broke, the supervisor carries on.
                if opened.handed_over.done():
                    failure: BaseException | None = SessionLost(_SESSION_ENDED)
                else:
                    failure = (
                        ConnectionEnded("the connection was cancelled")
                        if served.cancelled()
                        else served.exception()
                    )
                    if self._current is not None and self._current.lost:
                        self._current = None  # no session replaces it: calls answer 503 at once
                if failure is not None:
                    self.last_error = describe(failure, self.scrubber)
                    log.warning(
                        "upstream connection ended: %s", self.last_error, extra=self._extra()
                    )
                if self.state == "ready":  # a connection that worked resets the backoff
                    backoff = self._limits.first_backoff_seconds
                self.state = "restarting"
                self.ready.set()
                self.restarts += 1
                await asyncio.sleep(backoff * random.uniform(0.8, 1.0))
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
        finally:
            for task in held:
                task.cancel()
            if held:
                await asyncio.wait(held)

    async def _serve(self, opened: OpenSession) -> None:
        """One connection: opened, its tools listed, watched until it ends. A session the
        upstream ended is handed over at once and closed once its calls have ended."""
        try:
            async with self._connected(opened) as session:
                opened.session = session
                # Calls that met a 404 are made again on it now, not after its listing: a big
                # catalogue may take longer to list than they wait (an outside attack: such a
                # call failed 503 and counted as a breaker failure).
                self._current = opened
                self._reopen.set()
                self._changed.clear()  # this listing covers what changed before
                try:
                    await self._list(opened)
                    # Ready once its tools are served: `/upstreams` never says ready with the
                    # first listing still on its way.
                    self.state = "ready"
                    self.ready.set()
                    await self._watch(opened)
                except SessionLost:
                    # It stays the current session until the next one opens: calls meeting it
                    # wait for that one, as those that met its 404 do.
                    opened.handed_over.set_result(None)
                    # Past the time-out, each of its calls has timed out by itself.
                    await opened.drained(self.spec.timeout_seconds + _CLOSE_GRACE_SECONDS)
                opened.closing = True
        finally:
            opened.closing = True
            # A lost session stays the current one until the supervisor installs the next (or
            # gives that one up): calls meeting it wait for the new session instead of finding
            # none (an outside attack: with no call in flight on it, it was dropped at once and
            # calls made during the backoff and handshake failed 503).
            if self._current is opened and not opened.lost:
                self._current = None

    @asynccontextmanager
    async def _connected(self, opened: OpenSession) -> AsyncIterator[ClientSession]:
        spec = self.spec
        self.process = StdioProcess()
        if spec.transport == "http":
            headers = {**spec.headers, **self.service_headers}
            first: list[httpx2.Response] = []  # the answer to `initialize`

            def seen(answer: httpx2.Response) -> None:
                if not first and not answer.is_redirect:  # a redirect the SDK followed
                    first.append(answer)
                elif not opened.closing and session_gone(answer):
                    # The SDK would go on with a session that is gone. Once closing, its
                    # closing DELETE may be answered 404: no matter.
                    self._lose_session(opened)

            async with self.http_session(headers, self._on_message, seen) as session:
                opened.direct = direct_calls_for(
                    self.spec,
                    self._policy,
                    self._limits.max_message_bytes,
                    session,
                    headers,
                    first[0] if first else None,
                    max_connections=self._limits.max_connections,
                    on_session_lost=lambda: self._lose_session(opened),
                )
                try:
                    yield session
                finally:
                    opened.closing = True
                    if opened.direct is not None:
                        await opened.direct.aclose()
            return
        stdio = open_stdio_session(
            spec, self.process, self._limits.max_message_bytes, self._on_message
        )
        async with stdio as session:
            try:
                yield session
            finally:
                opened.closing = True

    def http_session(
        self,
        headers: dict[str, str],
        message_handler: MessageHandlerFnT | None = None,
        on_response: Callable[[httpx2.Response], None] | None = None,
    ) -> AbstractAsyncContextManager[ClientSession]:
        """An initialised session with the HTTP upstream, every request carrying ``headers``;
        ``on_response`` sees each HTTP answer (the SDK words a 401 like a 500)."""
        return open_http_session(
            self.spec,
            self._policy,
            self._limits.max_message_bytes,
            headers,
            message_handler,
            on_response,
            max_connections=self._limits.max_connections,
        )

    def _lose_session(self, opened: OpenSession) -> None:
        """The upstream said the session is gone (404): the supervisor opens a new one."""
        if opened.lost:
            return
        opened.lost = True
        self._new_reopen()
        self._changed.set()

    def _new_reopen(self) -> None:
        # Calls waiting for the next session wait on one event, set when it is ready. Replaced
        # only once set: a second 404 of the same lost session must not leave the calls that
        # met the first waiting on an event nobody will set (an outside attack: they waited out
        # their budget and failed with the new session ready).
        if self._reopen.is_set():
            self._reopen = asyncio.Event()

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._changed.set()

    async def _watch(self, opened: OpenSession) -> None:
        """Refresh on ``list_changed`` (debounced) and on the period, until the connection ends.
        It looks at the process twice a second (a dead one fails its calls at once anyway: the
        SDK's session sees its output end)."""
        period = self.spec.refresh_seconds or None
        listed = time.monotonic()
        timeouts = 0  # listings timed out in a row (LISTING_TIMEOUTS_IN_A_ROW)
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_PROCESS_POLL_SECONDS):
                    await self._changed.wait()
            if self.process.returncode is not None:
                raise ConnectionEnded(f"the process exited (code {self.process.returncode})")
            if opened.lost:
                raise SessionLost(_SESSION_ENDED)
            due = period is not None and time.monotonic() - listed >= period
            if not (self._changed.is_set() or due):
                continue
            # Debounce: notifications arriving meanwhile are folded into this one listing.
            await asyncio.sleep(self._limits.debounce_seconds)
            changed = self._changed.is_set()
            self._changed.clear()
            started = time.monotonic()
            try:
                await self._list(opened)
                timeouts = 0
            except MCPError as exc:
                timeouts += 1
                # The SDK's own time-out, or the gateway's for a listing that waited for a
                # connection, lasted the time-out: an upstream answering that code at once has
                # not timed out (an outside attack), and ends the connection as any failure.
                waited = time.monotonic() - started >= self.spec.timeout_seconds
                timed_out = exc.error.code == types.REQUEST_TIMEOUT and waited
                if not timed_out or timeouts == LISTING_TIMEOUTS_IN_A_ROW:
                    raise
                self.last_error = f"tools/list timed out ({timeouts} in a row): tools kept"
                log.warning("upstream listing timed out", extra=self._extra())
                if changed:
                    self._changed.set()  # what changed is listed again after the debounce
            listed = time.monotonic()

    async def _list(self, opened: OpenSession) -> None:
        """The session's listing; a failure on a session the upstream ended is its loss
        (:class:`SessionLost`), whichever request met the 404 first: the session is handed over
        and its calls in flight are let finish (an outside attack: a listing that met the 404
        raised the SDK's "Session terminated", which closed the connection under them)."""
        assert opened.session is not None
        try:
            await self._refresh(opened.session)
        except Exception as exc:
            if opened.lost:
                raise SessionLost(_SESSION_ENDED) from exc
            raise

    async def _refresh(self, session: ClientSession) -> None:
        """``tools/list`` through every page, within the bounds; hands the listing on."""
        tools, notes = await list_tools(session, self._limits, self.spec.timeout_seconds)
        await self._on_listing(self, tools, notes)
        self.refreshes += 1
        self.last_refresh = utc_now().isoformat().replace("+00:00", "Z")

    # -- calls ----------------------------------------------------------------------------

    async def call(
        self, name: str, arguments: dict[str, Any], progress: ProgressReporter | None = None
    ) -> types.CallToolResult:
        """``tools/call`` on the upstream; raises what :mod:`.errors` maps to problems. With
        ``progress``, the call carries a progress token and the upstream's progress reports for
        it go there. Cancelled, the SDK's session sends the upstream ``notifications/cancelled``
        for it before the cancellation goes on."""
        opened = self._current
        if opened is None or not opened.lost:
            try:
                return await self._call_once(opened, name, arguments, progress)
            except SessionGone:
                pass
        # The upstream no longer knew the session (it restarted, or expired it) and ran nothing:
        # once more, on the session the supervisor opens now; at once 503 while the circuit is
        # open (an outside attack: calls waited for a session they would not be let use).
        if self.breaker.state == "open":
            raise UpstreamDown(f"Upstream {self.spec.name!r} is failing; calls are paused.")
        try:
            await self._reopened(opened)
        except UpstreamDown:
            self._charge(opened)  # forgot the session and opened no other in time
            raise
        # A session lost again at once is the upstream's fault, not a moment's: an upstream that
        # forgets every session must open the circuit, not cost each call two handshakes.
        return await self._call_once(self._current, name, arguments, progress, retried=True)

    async def _reopened(self, lost: OpenSession | None) -> None:
        """Wait until a session other than ``lost`` is open (503 when none is within a backoff
        and a handshake). Its listing is not waited for."""
        budget = self._limits.first_backoff_seconds + self.spec.connect_timeout_seconds
        try:
            async with asyncio.timeout(budget):
                while self._current in (None, lost):
                    # A set event here belongs to a session already gone: waiting on it would
                    # not even yield to the loop (and the time-out could never fire).
                    self._new_reopen()
                    await self._reopen.wait()
        except TimeoutError:
            name = self.spec.name
            raise UpstreamDown(f"Upstream {name!r} ended its session; none is open yet.") from None

    def _charge(self, lost: OpenSession | None) -> None:
        """A breaker failure for a lost session that was not replaced by a working one: one per
        session, however many calls were waiting on it (an outside attack: five calls meeting
        one slow restart opened the circuit)."""
        if lost is None or not lost.charged:
            if lost is not None:
                lost.charged = True
            self.breaker.record_failure()
        else:
            self.breaker.record_neutral()

    async def _call_once(
        self,
        opened: OpenSession | None,
        name: str,
        arguments: dict[str, Any],
        progress: ProgressReporter | None,
        *,
        retried: bool = False,
    ) -> types.CallToolResult:
        if opened is None or opened.session is None:
            raise UpstreamDown(f"Upstream {self.spec.name!r} is not connected ({self.state}).")
        if not self.breaker.allow():
            raise UpstreamDown(f"Upstream {self.spec.name!r} is failing; calls are paused.")
        started = time.monotonic()
        direct = opened.direct
        try:
            with opened.calling():
                async with opened.slot(self.spec.timeout_seconds):
                    if direct is not None and progress is None:
                        result = await direct.call(name, arguments)
                    else:
                        result = await self._sdk_call(opened, name, arguments, progress)
        except SessionGone:
            if retried:
                self._charge(opened)
            else:
                self.breaker.record_neutral()  # the upstream is there, the call is made again
            raise
        except MCPError as exc:
            if connection_lost(exc):
                self._lost_connection(opened)
            elif exc.error.code != types.REQUEST_TIMEOUT:
                self.breaker.record_success()  # it answered, whatever it thought of the call
            else:
                # A time-out is not counted: it says this call was slow, which its caller's own
                # arguments can make it (an outside attack: five `sleep 5` calls against a 1 s
                # time-out paused every tool of a healthy upstream for everyone for 30 s). A hung
                # upstream costs each call its time-out instead, within `max_concurrency`. Were
                # it the half-open circuit's trial, the next call is (or the circuit stayed
                # shut for good: outside attack).
                self.breaker.record_neutral()
            raise
        except ValidationError:
            self.breaker.record_success()  # it answered something that is not a tool result
            raise
        except asyncio.CancelledError:
            # The caller gave up (its time-out, a disconnect): nothing about the upstream.
            self.breaker.record_neutral()
            raise
        except Exception:
            self._lost_connection(opened)
            raise
        self.breaker.record_success()
        log.debug("upstream call", extra={**self._extra(), "seconds": time.monotonic() - started})
        return result

    async def _sdk_call(
        self,
        opened: OpenSession,
        name: str,
        arguments: dict[str, Any],
        progress: ProgressReporter | None,
    ) -> types.CallToolResult:
        # Never made again, even when it fails on a session answered 404: the SDK words a 404
        # to this very request (-32600) as it words the upstream's own -32600, and the 404 may
        # have answered another request while the upstream ran this one (an outside attack: a
        # call the upstream had run and answered -32600 was sent again, and ran twice). The
        # SDK picks the request's id itself, so the 404 cannot be tied to the call.
        assert opened.session is not None
        return await opened.session.send_request(
            types.CallToolRequest(
                params=types.CallToolRequestParams(name=name, arguments=arguments)
            ),
            types.CallToolResult,
            request_read_timeout_seconds=self.spec.timeout_seconds,
            progress_callback=progress_callback(progress) if progress else None,
        )

    def _lost_connection(self, opened: OpenSession) -> None:
        # A call cut because the gateway closes its connection (the supervisor stops or
        # reconnects, a lost session's calls outlived the time-out) says nothing more of the
        # upstream (an outside attack: the calls in flight on a session the upstream ended were
        # cut and each counted as a failure, which opened the circuit).
        if opened.closing:
            self.breaker.record_neutral()
        else:
            self.breaker.record_failure()

    def status(self) -> dict[str, Any]:
        """What ``GET /upstreams`` shows: never a header, an environment value or a URL secret."""
        return {
            "name": self.spec.name,
            "transport": self.spec.transport,
            "state": self.state,
            "circuit": self.breaker.state,
            "tools": self.tool_count,
            "last_refresh": self.last_refresh,
            "last_error": self.last_error,
            "notes": list(self.notes),
            "restarts": self.restarts,
            "refreshes": self.refreshes,
        }

    def _extra(self) -> dict[str, str]:
        return {"upstream": self.spec.name}
