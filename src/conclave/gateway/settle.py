"""Settling calls whose gateway died while their tool ran.

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
from datetime import timedelta
from typing import Any

from sqlalchemy import update

from conclave.gateway.events import call_event
from conclave.gateway.outcome import BLESSED, FAILED, RUNNING
from conclave.gateway.registry import ToolRegistry
from conclave.gateway.store import mcp_tool_calls, running_calls_before
from conclave.platform.clock import as_utc, utc_now
from conclave.platform.db.engine import is_store_down
from conclave.platform.outbox import add_event
from conclave.platform.runtime import Platform

log = logging.getLogger(__name__)

INTERRUPTED = "INTERRUPTED"
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
        candidates = await running_calls_before(
            self._platform.engine, now - timedelta(seconds=shortest) - GRACE
        )
        settled = 0
        for row in candidates:
            deadline = as_utc(row.created_at) + timedelta(seconds=self._timeout(row)) + GRACE
            if deadline < now and await self._settle(row):
                settled += 1
        return settled

    def _timeouts(self) -> list[float]:
        return [t.timeout_seconds for t in self._registry.tools(include_unavailable=True)
                if t.timeout_seconds]  # fmt: skip

    def _timeout(self, row: Any) -> float:
        registered = self._registry.resolve(row.tool_name)
        timeout = registered.tool.timeout_seconds if registered else None
        return timeout or self._default_timeout

    async def _settle(self, row: Any) -> bool:
        event = call_event(
            conclave_id=row.conclave_id,
            tool=row.tool_name,
            requested_tool=row.requested_tool,
            args=row.args,
            user_id=row.user_id,
            created_at=as_utc(row.created_at),
            status=FAILED,
            orthodoxy_status=row.orthodoxy_status or BLESSED,
            correlation_id=row.correlation_id,
        )
        async with self._platform.engine.begin() as connection:
            result = await connection.execute(
                update(mcp_tool_calls)
                .where(
                    mcp_tool_calls.c.conclave_id == row.conclave_id,
                    mcp_tool_calls.c.status == RUNNING,
                )
                .values(
                    status=FAILED,
                    http_status=503,
                    error_code=INTERRUPTED,
                    error_message=_MESSAGE,
                    completed_at=utc_now(),
                )
            )
            if result.rowcount != 1:  # another replica settled it, or it just finished
                return False
            await add_event(connection, event)
        self._platform.relay.wake()
        log.warning("settled an interrupted call", extra={"conclave_id": row.conclave_id})
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
