"""Settling the calls interrupted by a gateway that died while their tool ran.

A call of a tool with side effects is recorded ``running`` before it runs. If its gateway process
dies (kill -9, a lost machine) the row would stay ``running`` for ever: no audit outcome, no event,
and a retry with the same ``Idempotency-Key`` refused with 409 ``IDEMPOTENCY_IN_PROGRESS``. Every
gateway therefore sweeps: a ``running`` row older than its tool's time-out plus a grace period
cannot still be running anywhere (the executor would have timed out and written its outcome), so it
is settled as ``failed`` with code ``INTERRUPTED`` and its event is published, in one transaction.
The update only applies while the row is still ``running``, so with several replicas sweeping, one
settles each row and one event is published. Its outcome is unknown: the tool may or may not have
finished its side effect, which is what the error message says; a retry with the same key is
answered with this outcome, a retry with a new key runs the tool again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta

from conclave.gateway import store
from conclave.gateway.events import call_event
from conclave.gateway.outcome import BLESSED, FAILED
from conclave.gateway.records import AuditRow
from conclave.gateway.registry import ToolRegistry
from conclave.platform.clock import as_utc, utc_now
from conclave.platform.db.engine import is_store_down
from conclave.platform.outbox import add_event
from conclave.platform.problem_types import ProblemCode
from conclave.platform.runtime import Platform

log = logging.getLogger(__name__)

INTERRUPTED = ProblemCode.INTERRUPTED
# Longer than the executor's time-out handling plus the retries of the final audit write.
GRACE = timedelta(seconds=2)
_MESSAGE = "The gateway stopped while the tool ran; whether the tool finished its work is unknown."


class InterruptedCalls:
    """Finds and settles calls cut off by a dead gateway; :meth:`run` sweeps until cancelled."""

    def __init__(
        self,
        registry: ToolRegistry,
        platform: Platform,
        *,
        default_timeout: float,
        every_seconds: float = 1.0,
    ) -> None:
        self._registry = registry
        self._platform = platform
        self._default_timeout = default_timeout
        self._every = every_seconds

    async def run(self) -> None:
        while True:
            try:
                await self.settle_once()
            except Exception as exc:  # the store may be down: try again next round
                level = logging.WARNING if is_store_down(exc) else logging.ERROR
                log.log(level, "settling interrupted calls failed", exc_info=not is_store_down(exc))
            await asyncio.sleep(self._every)

    async def settle_once(self) -> int:
        """Settle every call that can no longer be running; return how many this pass settled."""
        now = utc_now()
        shortest = min([self._default_timeout, *self._timeouts()])
        candidates = await store.running_calls_before(
            self._platform.engine, now - timedelta(seconds=shortest) - GRACE
        )
        settled = 0
        for row in candidates:
            deadline = as_utc(row.created_at) + timedelta(seconds=self._timeout(row)) + GRACE
            if deadline < now and await self._settle(row):
                settled += 1
        return settled

    def _timeouts(self) -> list[float]:
        tools = self._registry.tools(include_unavailable=True)
        return [tool.timeout_seconds for tool in tools if tool.timeout_seconds]

    def _timeout(self, row: AuditRow) -> float:
        registered = self._registry.resolve(row.tool_name)
        timeout = registered.tool.timeout_seconds if registered else None
        return timeout or self._default_timeout

    async def _settle(self, running: AuditRow) -> bool:
        settled = replace(
            running,
            status=FAILED,
            orthodoxy_status=running.orthodoxy_status or BLESSED,
            http_status=503,
            error_code=INTERRUPTED,
            error_message=_MESSAGE,
            created_at=as_utc(running.created_at),
            completed_at=utc_now(),
        )
        async with self._platform.engine.begin() as connection:
            if not await store.settle_interrupted_call(connection, settled):
                return False  # another replica settled it, or it just finished
            await add_event(connection, call_event(settled))
        self._platform.relay.wake()
        log.warning("settled an interrupted call", extra={"conclave_id": settled.conclave_id})
        return True


@contextlib.asynccontextmanager
async def sweeping(calls: InterruptedCalls) -> AsyncIterator[InterruptedCalls]:
    """Run ``calls``' sweep in the background while the block runs."""
    task = asyncio.create_task(calls.run(), name="settle-interrupted-calls")
    try:
        yield calls
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
