"""Progress a tool reports while it runs, bounded on its way to the caller.

A tool (an upstream MCP server, a plug-in) reports progress through the optional
:attr:`~conclave.gateway.tools.ToolContext.progress` of its call: a plain synchronous function,
set only when the caller can receive progress (an MCP ``tools/call`` carrying a
``progressToken`` and accepting an event stream), ``None`` otherwise. The chain knows nothing of
MCP: the protocol's side (the token, the notification) lives in :mod:`conclave.gateway.mcp`.

What a tool reports is untrusted, so :class:`ProgressRelay` stands between it and the caller:

- a report never waits: it replaces the one waiting to be sent (coalescing), so a slow reader
  cannot hold up the tool, nor an upstream connection other callers share;
- at most one notification per ``min_interval`` seconds is sent, however fast the tool reports;
- values are checked: a progress that is not a finite number within ±2**53, or that does not
  increase (the protocol requires it to), is dropped; a total that is not such a number is left
  out; a message has NUL and lone surrogates escaped and is cut to :data:`MAX_MESSAGE_CHARS`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType

from conclave.platform.inputs import escape_text

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 500
"""Longest progress message passed on, in characters."""
MIN_INTERVAL_SECONDS = 0.2
"""Shortest time between two notifications of one call (five a second)."""
_LARGEST = float(2**53)  # beyond it a JSON number is not exact in every client (JavaScript)

ProgressReporter = Callable[[float, "float | None", "str | None"], None]
"""``report(progress, total, message)``: never blocks, never raises."""


@dataclass(frozen=True, slots=True)
class Progress:
    """One checked progress report."""

    progress: float
    total: float | None
    message: str | None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > _LARGEST:
        return None  # float() of a huge int raises, or rounds
    number = float(value)
    return number if math.isfinite(number) and abs(number) <= _LARGEST else None


def checked(progress: object, total: object, message: object) -> Progress | None:
    """The report as it may be passed on, or ``None`` when its progress is unusable."""
    value = _number(progress)
    if value is None:
        return None
    text = None
    if isinstance(message, str):
        # Cut first so escaping costs at most a bounded amount; escaping can lengthen it again.
        text = escape_text(message[:MAX_MESSAGE_CHARS])[:MAX_MESSAGE_CHARS]
    return Progress(value, _number(total), text)


class ProgressRelay:
    """Passes a call's progress reports to ``send``, checked and at a bounded rate.

    Use as ``async with ProgressRelay(send) as relay:`` around the call, with
    :meth:`report` as its reporter; leaving the block drops what is still waiting (the
    call's answer follows at once). A failing ``send`` (the caller went away) is logged and
    the relay carries on."""

    def __init__(
        self,
        send: Callable[[Progress], Awaitable[None]],
        *,
        min_interval: float = MIN_INTERVAL_SECONDS,
    ) -> None:
        self._send = send
        self._min_interval = min_interval
        self._waiting: Progress | None = None
        self._latest: float | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def report(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Queue a report (replacing any still waiting); never blocks."""
        update = checked(progress, total, message)
        if update is None or (self._latest is not None and update.progress <= self._latest):
            return
        self._latest = update.progress
        self._waiting = update
        self._wake.set()

    async def _pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            update, self._waiting = self._waiting, None
            if update is None:
                continue
            try:
                await self._send(update)
            except Exception as exc:  # the caller's stream is gone: nothing more to do for it
                log.debug("a progress notification could not be sent: %s", type(exc).__name__)
            await asyncio.sleep(self._min_interval)

    async def __aenter__(self) -> ProgressRelay:
        self._task = asyncio.create_task(self._pump())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            # `wait`, not `await task`: the pump's own cancellation must not be mistaken for
            # (or hide) a cancellation of the call itself.
            await asyncio.wait([self._task])
