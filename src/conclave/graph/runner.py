"""How dispatches run through the graph: coalesced into shared runs, or each on its own.

:class:`CoalescingRunner` collects the dispatches that arrive within one turn of the event loop
(and those that wait while ``max_runs`` runs are in flight) into one run of the
:class:`~conclave.graph.coalesce.CoalescedGraph`, at most ``max_batch`` per run. Under light load a
dispatch runs alone as soon as it arrives; under load the runs grow and LangGraph's per-run cost is
shared. :class:`SoloRunner` gives every dispatch a LangGraph run of its own (``GRAPH_COALESCE=1``,
or a graph that uses what coalesced runs do not support).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from conclave.graph.coalesce import CoalescedGraph, coalescible

log = logging.getLogger(__name__)

# How long a coalesced run counts against ``GRAPH_COALESCE_RUNS``. A run of 32 dispatches through
# the default graph takes a few milliseconds of CPU; one still going after this waits on I/O.
_BUSY_SECONDS = 0.025

RunObserver = Callable[[int], None]
"""Told how many dispatches each graph run carried."""


def _ignore(_dispatches: int) -> None:
    return None


class DispatchRunner(Protocol):
    """Runs one dispatch's state through the graph and returns its final state."""

    mode: str

    async def run(self, state: Mapping[str, Any]) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class SoloRunner:
    """One LangGraph run per dispatch: the graph compiled as it was defined."""

    mode = "solo"

    def __init__(self, graph: StateGraph[Any], observe: RunObserver = _ignore) -> None:
        self._compiled: CompiledStateGraph[Any] = graph.compile()
        self._observe = observe

    async def run(self, state: Mapping[str, Any]) -> dict[str, Any]:
        # version="v2" streams only the state values internally; the default ("v1") also maps
        # every step's updates, to look for interrupts, which the dispatch graph does not use.
        self._observe(1)
        output = await self._compiled.ainvoke(dict(state), version="v2")
        return dict(output.value)

    async def close(self) -> None:
        return None


@dataclass
class _Waiting:
    state: Mapping[str, Any]
    context: contextvars.Context
    answer: asyncio.Future[dict[str, Any]]


class CoalescingRunner:
    """Dispatches that arrive together share one run of the coalesced graph."""

    mode = "coalesced"

    def __init__(
        self, graph: StateGraph[Any], max_batch: int, max_runs: int, observe: RunObserver = _ignore
    ) -> None:
        self._graph = CoalescedGraph(graph)
        self._observe = observe
        self._max_batch = max_batch
        self._max_runs = max_runs
        self._waiting: deque[_Waiting] = deque()
        self._runs: dict[asyncio.Task[None], float] = {}  # run -> loop time it started
        self._recheck: asyncio.TimerHandle | None = None
        self._start_scheduled = False
        self._closed = False

    async def run(self, state: Mapping[str, Any]) -> dict[str, Any]:
        if self._closed:
            raise RuntimeError("the dispatch runner is closed")
        loop = asyncio.get_running_loop()
        # The run happens in another task: keep this request's context (correlation and request
        # ids) for the node calls made on its behalf.
        waiting = _Waiting(state, contextvars.copy_context(), loop.create_future())
        self._waiting.append(waiting)
        if not self._start_scheduled:
            # After the callbacks already due in this turn of the loop: the requests that arrived
            # together get here first and share the run.
            self._start_scheduled = True
            loop.call_soon(self._start_runs, context=contextvars.Context())
        return await waiting.answer

    def _start_runs(self) -> None:
        self._start_scheduled = False
        loop = asyncio.get_running_loop()
        now = loop.time()
        # Only recently started runs hold back new ones: a run still going after
        # ``_BUSY_SECONDS`` waits on I/O (an expedition service that is slow or down) and must not
        # keep the dispatches behind it waiting for as long.
        busy = sum(1 for started in self._runs.values() if now - started < _BUSY_SECONDS)
        while self._waiting and busy < self._max_runs:
            batch: list[_Waiting] = []
            while self._waiting and len(batch) < self._max_batch:
                waiting = self._waiting.popleft()
                if not waiting.answer.done():  # its caller gave up (disconnected)
                    batch.append(waiting)
            if batch:
                task = asyncio.create_task(self._run(batch), context=contextvars.Context())
                self._runs[task] = now
                task.add_done_callback(self._run_done)
                busy += 1
        if self._waiting and self._recheck is None:
            self._recheck = loop.call_later(_BUSY_SECONDS, self._recheck_runs)

    def _recheck_runs(self) -> None:
        self._recheck = None
        if not self._closed:
            self._start_runs()

    def _run_done(self, task: asyncio.Task[None]) -> None:
        self._runs.pop(task, None)
        if self._waiting and not self._closed:
            self._start_runs()

    async def _run(self, batch: list[_Waiting]) -> None:
        self._observe(len(batch))
        try:
            outcomes = await self._graph.run(
                [waiting.state for waiting in batch], [waiting.context for waiting in batch]
            )
        except asyncio.CancelledError:
            for waiting in batch:
                waiting.answer.cancel()
            raise
        except Exception as exc:  # e.g. the recursion limit: every dispatch of the run failed
            log.exception("coalesced graph run failed", extra={"dispatches": len(batch)})
            outcomes = [exc] * len(batch)
        for waiting, outcome in zip(batch, outcomes, strict=True):
            if waiting.answer.done():
                continue
            if isinstance(outcome, Exception):
                waiting.answer.set_exception(outcome)
            else:
                waiting.answer.set_result(outcome)

    async def close(self) -> None:
        """Cancel the runs in flight and the dispatches waiting for one."""
        self._closed = True
        if self._recheck is not None:
            self._recheck.cancel()
        while self._waiting:
            self._waiting.popleft().answer.cancel()
        runs = list(self._runs)
        for task in runs:
            task.cancel()
        await asyncio.gather(*runs, return_exceptions=True)


def dispatch_runner(
    graph: StateGraph[Any], max_batch: int, max_runs: int, observe: RunObserver = _ignore
) -> DispatchRunner:
    """Coalesced runs when ``max_batch`` > 1 and the graph allows them, else solo runs."""
    if max_batch <= 1:
        return SoloRunner(graph, observe)
    reason = coalescible(graph)
    if reason is not None:
        log.warning(
            "every dispatch runs the graph on its own: %s", reason, extra={"reason": reason}
        )
        return SoloRunner(graph, observe)
    return CoalescingRunner(graph, max_batch, max_runs, observe)
