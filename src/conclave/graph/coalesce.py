"""Coalesced graph runs: dispatches that arrive together share one LangGraph run.

LangGraph's runtime costs CPU per run and per superstep, whatever the nodes do, and far more than
the default nodes themselves take (docs/benchmarks.md). A run that carries many dispatches pays
that once for all of them. :class:`CoalescedGraph` therefore turns
the dispatch graph (the ``StateGraph`` of per-dispatch nodes and edges that deployments extend)
into a *batch* graph with the same node names, compiled and run by LangGraph:

- The batch state holds every dispatch of the run (its own ``DispatchState``) and the nodes it
  is waiting at: each dispatch moves through the graph exactly as it would alone.
- A batch node calls the extension's or built-in node function once per dispatch waiting at it,
  concurrently, each in the context (correlation id, request id) of the request it came from, on a
  fresh copy of that dispatch's state. The update is applied with the state's reducers, then the
  node's edges and conditional edges are evaluated on that dispatch's updated state, as LangGraph
  evaluates them, to find where the dispatch goes next. Join edges (``add_edge([a, b], c)``) wait
  per dispatch.
- The batch node tells LangGraph which nodes run in the next superstep (``Command.goto``): the
  union of where its dispatches go.
- A node or routing function that raises fails that dispatch only; the others go on.

What a dispatch sees is what a run of its own would give: the same node calls in the same order,
the same state, the same route. Features that need LangGraph to hold one dispatch per run (node
retry, cache, time-out or error-handler policies, ``Command`` or ``Send`` results, nodes that take
a ``config``/``runtime`` argument, subgraphs as nodes) make :func:`coalescible` say no, and the
service then runs every dispatch on its own (see docs/graph.md).

The cost: dispatches of one run move in step, so a dispatch whose collector step waits on a slow
expedition service holds back the others of its run until that step ends (the collector's time
budget bounds it). :class:`DispatchRunner` caps the dispatches per run (``GRAPH_COALESCE``) and the
runs in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import typing
from collections.abc import Callable, Coroutine, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, TypedDict, TypeVar

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

Reducer = Callable[[Any, Any], Any]
Reducers = Mapping[str, Reducer | None]
NodeCall = Callable[[dict[str, Any]], Any]
T = TypeVar("T")
_NOWHERE: frozenset[str] = frozenset()


class UnsupportedNodeResult(TypeError):
    """A node returned something other than a dict of state updates in a coalesced run."""


@dataclass(frozen=True)
class _Dispatch:
    """One dispatch inside a batch: its state and where it waits."""

    state: dict[str, Any]
    at: frozenset[str]
    context: contextvars.Context
    arrived: Mapping[int, frozenset[str]] = field(default_factory=dict)
    error: BaseException | None = None


@dataclass(frozen=True)
class _Step:
    """What one node did to one dispatch: its update and where the dispatch goes next."""

    node: str
    update: Mapping[str, Any] | None
    goes_to: frozenset[str]
    error: BaseException | None = None


def state_fields(schema: type[Any]) -> tuple[dict[str, Reducer | None], dict[str, Any]]:
    """Each state field's reducer (``Annotated[T, reducer]``; ``None`` for overwritten fields),
    and what the reducer fields hold before any write: as LangGraph's channels start them, an
    empty value of the field's type (``[]`` for a list)."""
    reducers: dict[str, Reducer | None] = {}
    initial: dict[str, Any] = {}
    for name, hint in typing.get_type_hints(schema, include_extras=True).items():
        metadata = getattr(hint, "__metadata__", ())
        reducers[name] = next((item for item in metadata if callable(item)), None)
        if reducers[name] is None:
            continue
        base = typing.get_args(hint)[0]
        with contextlib.suppress(Exception):  # without an empty value it starts unset there too
            initial[name] = (typing.get_origin(base) or base)()
    return reducers, initial


def apply_update(
    state: Mapping[str, Any], update: Mapping[str, Any] | None, reducers: Reducers
) -> dict[str, Any]:
    """``state`` with ``update`` applied: reducer fields combine, the others are overwritten."""
    merged = dict(state)
    for name, value in (update or {}).items():
        if name not in reducers:
            raise KeyError(f"a node wrote {name!r}, which is not a field of the dispatch state")
        reducer = reducers[name]
        merged[name] = reducer(merged[name], value) if reducer and name in merged else value
    return merged


def _plain_function(runnable: Any) -> tuple[NodeCall, bool] | None:
    """``(function, is_async)`` of a LangGraph node or routing function that only takes the state.

    LangGraph wraps such functions in its ``RunnableCallable``: ``afunc`` is the coroutine
    function, or for a plain ``def`` the same thread-pool call LangGraph makes under ``ainvoke``.
    Read by attribute, so a release that changes the wrapper makes the graph run solo, not wrong.
    """
    if type(runnable).__name__ != "RunnableCallable":
        return None
    if getattr(runnable, "func_accepts", True) or getattr(runnable, "kwargs", True):
        return None  # takes config, runtime, writer or store, or bound extra arguments
    afunc, func = getattr(runnable, "afunc", None), getattr(runnable, "func", None)
    if callable(afunc):
        return afunc, True
    if callable(func):
        return func, False
    return None


def coalescible(graph: StateGraph[Any]) -> str | None:
    """``None`` when ``graph`` can run coalesced, else the reason it cannot."""
    # ``set_node_defaults`` keeps them on a private object; read what it documents setting.
    defaults = getattr(graph, "_node_defaults", None)
    policies = ("retry_policy", "cache_policy", "error_handler", "timeout")
    if any(getattr(defaults, policy, None) is not None for policy in policies):
        return "the graph sets node defaults (retry, cache, time-out or error handler)"
    for name, spec in graph.nodes.items():
        if spec.retry_policy or spec.cache_policy or spec.timeout or spec.defer:
            return f"node {name!r} has a retry, cache or time-out policy, or is deferred"
        if spec.is_error_handler or spec.error_handler_node or spec.ends:
            return f"node {name!r} is an error handler, has one, or declares Command destinations"
        if _plain_function(spec.runnable) is None:
            return f"node {name!r} is not a plain function of the state (config, runtime, graph)"
    for source, branches in graph.branches.items():
        for branch in branches.values():
            if _plain_function(branch.path) is None:
                return f"a conditional edge out of {source!r} is not a plain function of the state"
    return None


class _Routes:
    """Where a dispatch goes after a node, from the dispatch graph's edges."""

    def __init__(self, graph: StateGraph[Any], reducers: Reducers) -> None:
        self.reducers = reducers
        self.static: dict[str, frozenset[str]] = {}
        for source, target in graph.edges:
            if target != END:  # a dispatch that reaches END is done: it waits nowhere
                self.static[source] = self.static.get(source, frozenset()) | {target}
        self.branches = {
            source: [(_function(branch.path), branch.ends or {}) for branch in branches.values()]
            for source, branches in graph.branches.items()
        }
        # Join edges (``add_edge([a, b], c)``): ``c`` runs for a dispatch once ``a`` and ``b``
        # have both run for it. ``joins_after[a]`` lists the joins ``a`` is a start of.
        self.joins = [(frozenset(starts), end) for starts, end in sorted(graph.waiting_edges)]
        self.joins_after: dict[str, list[int]] = {}
        for number, (starts, _end) in enumerate(self.joins):
            for start in starts:
                self.joins_after.setdefault(start, []).append(number)

    async def after(self, node: str, state: dict[str, Any]) -> frozenset[str]:
        """The nodes ``state`` goes to after ``node`` (``END`` dropped; joins not included)."""
        targets = set(self.static.get(node, ()))
        for path, ends in self.branches.get(node, ()):
            chosen = await _call(path, dict(state))
            for choice in chosen if isinstance(chosen, list) else [chosen]:
                target = ends.get(choice) if ends and isinstance(choice, Hashable) else choice
                if not isinstance(target, str):
                    raise ValueError(f"conditional edge out of {node!r} chose {choice!r}")
                targets.add(target)
        targets.discard(END)
        return frozenset(targets)

    def join_ends(self, node: str) -> frozenset[str]:
        """Nodes a join may release after ``node`` runs."""
        return frozenset(self.joins[number][1] for number in self.joins_after.get(node, ()))


def _function(runnable: Any) -> tuple[NodeCall, bool]:
    plain = _plain_function(runnable)
    assert plain is not None, "coalescible() checked every node and path"
    return plain


async def _call(function: tuple[NodeCall, bool], state: dict[str, Any]) -> Any:
    call, is_async = function
    if is_async:
        return await call(state)
    # As LangGraph runs plain ``def`` nodes and paths under ``ainvoke``: in a worker thread.
    return await asyncio.to_thread(call, state)


def _merge(
    current: dict[int, _Dispatch], writes: Mapping[int, _Dispatch | _Step], routes: _Routes
) -> dict[int, _Dispatch]:
    """The batch channel's reducer: the run's input, then each node's steps, one by one."""
    merged = dict(current)
    for index, write in writes.items():
        if isinstance(write, _Dispatch):
            merged[index] = write
            continue
        dispatch = merged[index]
        if dispatch.error is not None:
            continue
        if write.error is not None:
            merged[index] = _Dispatch(
                dispatch.state, frozenset(), dispatch.context, error=write.error
            )
            continue
        at = (dispatch.at - {write.node}) | write.goes_to
        arrived = dict(dispatch.arrived)
        for number in routes.joins_after.get(write.node, ()):
            starts, end = routes.joins[number]
            seen = arrived.get(number, frozenset()) | {write.node}
            if seen >= starts:
                at, seen = at | {end}, frozenset()
            arrived[number] = seen
        state = apply_update(dispatch.state, write.update, routes.reducers)
        merged[index] = _Dispatch(state, at, dispatch.context, arrived)
    return merged


class CoalescedGraph:
    """The dispatch graph compiled as a batch graph; :meth:`run` takes many dispatches at once."""

    def __init__(self, graph: StateGraph[Any]) -> None:
        reason = coalescible(graph)
        if reason is not None:
            raise ValueError(f"the dispatch graph cannot run coalesced: {reason}")
        self.reducers, self._initial = state_fields(graph.state_schema)
        routes = self._routes = _Routes(graph, self.reducers)

        def merge(current: dict[int, _Dispatch], writes: Any) -> dict[int, _Dispatch]:
            return _merge(current, writes, routes)

        # The functional form: the reducer is a local, which a string annotation could not name.
        BatchState = TypedDict(  # noqa: UP013
            "BatchState", {"dispatches": Annotated[dict[int, _Dispatch], merge]}
        )

        batch: StateGraph[Any] = StateGraph(BatchState)
        for name, spec in graph.nodes.items():
            batch.add_node(name, self._batch_node(name, _function(spec.runnable)))

        # Where the run starts: every node some dispatch waits at (no superstep of its own).
        async def entry(state: dict[str, Any]) -> list[str]:
            return sorted({node for d in state["dispatches"].values() for node in d.at})

        batch.add_conditional_edges(START, entry, list(graph.nodes))
        self._compiled: CompiledStateGraph[Any] = batch.compile()

    def _batch_node(self, name: str, function: tuple[NodeCall, bool]) -> Any:
        routes = self._routes

        async def one(dispatch: _Dispatch) -> _Step:
            update = await _call(function, dict(dispatch.state))
            if update is not None and not isinstance(update, dict):
                raise UnsupportedNodeResult(
                    f"node {name!r} returned {type(update).__name__}; in coalesced runs a node "
                    "returns a dict of state updates (GRAPH_COALESCE=1 runs each dispatch alone)"
                )
            if update and not update.keys() <= routes.reducers.keys():
                # Caught here, not in the batch channel's reducer, so only this dispatch fails.
                unknown = sorted(set(update) - set(routes.reducers))
                raise KeyError(f"node {name!r} wrote {unknown}, not fields of the dispatch state")
            if name not in routes.branches:  # only plain edges: no need for the updated state
                return _Step(name, update, routes.static.get(name, _NOWHERE))
            updated = apply_update(dispatch.state, update, routes.reducers)
            return _Step(name, update, await routes.after(name, updated))

        async def batch_node(state: dict[str, Any]) -> Command[str]:
            waiting = [
                (index, dispatch)
                for index, dispatch in state["dispatches"].items()
                if name in dispatch.at and dispatch.error is None
            ]
            outcomes = await _each(one, [dispatch for _, dispatch in waiting])
            steps: dict[int, _Step] = {}
            # A join this node starts may release its end for some dispatch: run that node next;
            # it does nothing for dispatches still waiting at the join.
            goto = set(routes.join_ends(name))
            for (index, _), outcome in zip(waiting, outcomes, strict=True):
                if isinstance(outcome, _Step):
                    steps[index] = outcome
                    goto |= outcome.goes_to
                else:
                    steps[index] = _Step(name, None, frozenset(), outcome)
            return Command(update={"dispatches": steps}, goto=sorted(goto))

        batch_node.__name__ = name
        return batch_node

    async def run(
        self, states: Sequence[Mapping[str, Any]], contexts: Sequence[contextvars.Context]
    ) -> list[dict[str, Any] | Exception]:
        """Every dispatch's final state, or the exception that failed it (same order)."""
        starts = [{**self._initial, **state} for state in states]
        fresh = [
            _Dispatch(start, frozenset(), context)
            for start, context in zip(starts, contexts, strict=True)
        ]

        async def entry(dispatch: _Dispatch) -> frozenset[str]:
            return await self._routes.after(START, dispatch.state)

        entries: Sequence[frozenset[str] | Exception]
        if START in self._routes.branches:
            entries = await _each(entry, fresh)
        else:  # where every dispatch starts is fixed: no routing function to call
            entries = [self._routes.static.get(START, _NOWHERE)] * len(fresh)
        outcomes: list[dict[str, Any] | Exception] = []
        dispatches: dict[int, _Dispatch] = {}
        for index, (dispatch, entry_nodes) in enumerate(zip(fresh, entries, strict=True)):
            if isinstance(entry_nodes, Exception):
                outcomes.append(entry_nodes)
                continue
            outcomes.append(dispatch.state)
            dispatches[index] = replace(dispatch, at=entry_nodes)
        if dispatches:
            final = await self._compiled.ainvoke({"dispatches": dispatches}, version="v2")
            for index, dispatch in final.value["dispatches"].items():
                outcomes[index] = dispatch.error if dispatch.error is not None else dispatch.state
        return outcomes


async def _each(
    work: Callable[[_Dispatch], Coroutine[Any, Any, T]], dispatches: Sequence[_Dispatch]
) -> list[T | Exception]:
    """``work`` for every dispatch, concurrently, each in a task of its own in its own request's
    context (a task, not just a context: time-outs and cancel scopes belong to the task that
    entered them); an exception is that dispatch's outcome. Cancelling the run cancels them all."""
    tasks = [asyncio.create_task(work(d), context=d.context) for d in dispatches]
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome
    return outcomes  # type: ignore[return-value]
