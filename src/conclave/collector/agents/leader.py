"""ExpeditionLeader: runs an expedition type's stages under the time-out, reports progress."""

from __future__ import annotations

import asyncio
from typing import Any

from conclave.collector.agents.context import ExpeditionContext, ExpeditionFailed
from conclave.collector.expedition_types import ExpeditionType
from conclave.platform.problem_types import ProblemCode


class ExpeditionLeader:
    """Coordinates the agents of one run; the other agents are deployed by the type's plan."""

    name = "expedition_leader"

    def __init__(self, context: ExpeditionContext, expedition_type: ExpeditionType) -> None:
        self._context = context
        self._type = expedition_type

    async def run(self, timeout_seconds: float) -> dict[str, Any]:
        """Run to the end and return the results summary.

        Raises :class:`ExpeditionFailed` with the reason (time-out included); other exceptions
        are bugs of the type and are reported as such by the worker.
        """
        progress = self._context.progress
        progress.stages = tuple(self._type.stages)
        progress.deploy(self.name)
        deadline = asyncio.timeout(timeout_seconds)
        try:
            async with deadline:
                return await self._type.run(self._context)
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            raise ExpeditionFailed(
                f"timed out after {timeout_seconds:g} s in stage {progress.stage!r} "
                f"({progress.items_done} items done)",
                code=ProblemCode.TIMEOUT,
            ) from exc
