"""One session the supervisor opened with an upstream, and the calls in flight on it.

A session the upstream ended (a 404 on it) takes no new call from then on, while the supervisor
opens the next one, but it is not closed under the calls already sent on it: the upstream answers
those it accepted. It is closed once the last of them has ended, or after the upstream's time-out
(by then each of them has timed out itself). A call cut by that close is cut by the gateway, not
by the upstream: it says nothing of the upstream's health.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

if TYPE_CHECKING:
    from conclave.gateway.upstreams.direct_calls import DirectCalls


log = logging.getLogger(__name__)


RESERVED_CONNECTIONS = 2
"""Connections of a session's pools its tool calls never take: the SDK's event stream (GET) and
the gateway's own listings and notices. Calls beyond the rest wait for a free slot
(:meth:`OpenSession.slot`), never in the HTTP client's pool: one caller's slow calls filled the
pool, the gateway's own listing waited past its time-out there and ended the connection for
everyone; a call its caller abandoned in the pool was still sent once a connection came free;
cancellation notices were sent for calls never sent; and thousands of waiters in the HTTP
client's queue cost its event loop seconds (an outside attack)."""


class OpenSession:
    """A session of the shared connection to an upstream (SDK session, direct calls on it)."""

    def __init__(self, max_connections: int = 100) -> None:
        self._slots = asyncio.Semaphore(max(1, max_connections - RESERVED_CONNECTIONS))
        self.session: ClientSession | None = None
        self.direct: DirectCalls | None = None
        """Calls without progress on an HTTP session answered with JSON (:mod:`.direct_calls`)."""
        self.lost = False
        """The upstream ended the session (a 404 on it): it takes no new call."""
        self.closing = False
        """The gateway is closing it: what fails on it now is the gateway's doing."""
        self.charged = False
        """Its loss was counted as a breaker failure already (at most one per lost session)."""
        self.handed_over: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Done once it was lost and the supervisor may open the next one."""
        self._in_flight = 0
        self._idle = asyncio.Event()

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Count a call in flight on this session while the block runs."""
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def slot(self, timeout_seconds: float) -> AsyncIterator[None]:
        """Hold one of the connections tool calls may take while the block runs, waited for at
        most ``timeout_seconds``: past it the call is timed out (MCPError ``REQUEST_TIMEOUT``,
        never sent, a wait that says nothing of the upstream)."""
        try:
            async with asyncio.timeout(timeout_seconds):
                await self._slots.acquire()
        except TimeoutError:
            raise MCPError(types.REQUEST_TIMEOUT, "Request timed out") from None
        try:
            yield
        finally:
            self._slots.release()

    async def drained(self, timeout_seconds: float) -> None:
        """Return once no call is in flight on it, or after ``timeout_seconds``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_seconds):
                while self._in_flight:
                    await self._idle.wait()


def retrieved(task: asyncio.Task[None]) -> None:
    """A session's connection task's done callback: a lost session's connection ends after the
    supervisor moved on, and its failure (its close failed) is logged by nobody else; it must
    not be left unretrieved."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.debug("upstream connection closed: %s", type(exc).__name__)
