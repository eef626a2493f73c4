"""Coalesced runs: many dispatches in one LangGraph run, each moving as it would alone."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

from conclave.graph.coalesce import CoalescedGraph, UnsupportedNodeResult, coalescible
from conclave.graph.graph import DispatchState
from conclave.graph.runner import CoalescingRunner, SoloRunner, dispatch_runner
from tests.graph.conftest import graph_app, graph_settings
from tests.graph.extension_example import add_weather

request_tag: contextvars.ContextVar[str] = contextvars.ContextVar("request_tag", default="")


def branching_graph() -> StateGraph[DispatchState]:
    """Conditional edges, a fan-out, a join, reducer and overwritten fields, a path map."""
    graph = StateGraph(DispatchState)

    async def normalize(state: DispatchState) -> dict[str, Any]:
        return {"text": state.get("query", "").strip().lower(), "steps": ["normalize"]}

    async def route(state: DispatchState) -> str:
        text = state.get("text", "")
        if "fail" in text:
            return "broken"
        return "split" if "both" in text else "single"

    async def single(state: DispatchState) -> dict[str, Any]:
        return {"steps": ["single"], "results": [{"saw": state["text"]}]}

    async def left(state: DispatchState) -> dict[str, Any]:
        await asyncio.sleep(0)  # suspends: the other branch and other dispatches interleave
        return {"steps": ["left"], "results": [{"side": "left"}]}

    async def right(state: DispatchState) -> dict[str, Any]:
        return {"steps": ["right"], "warnings": ["right ran"]}

    async def broken(state: DispatchState) -> dict[str, Any]:
        raise RuntimeError(f"cannot handle {state['text']!r}")

    async def joined(state: DispatchState) -> dict[str, Any]:
        # Runs once per dispatch, after both branches, on their merged updates.
        return {"steps": ["joined"], "intent": f"{len(state.get('results', []))} results"}

    async def complete(state: DispatchState) -> dict[str, Any]:
        return {"steps": ["complete"], "route": "_".join([*state["steps"], "complete"])}

    for name, node in [("normalize", normalize), ("single", single), ("left", left),
                       ("right", right), ("broken", broken), ("joined", joined),
                       ("complete", complete)]:  # fmt: skip
        graph.add_node(name, node)
    graph.add_edge(START, "normalize")
    graph.add_conditional_edges(
        "normalize", route, {"single": "single", "split": "left", "broken": "broken"}
    )
    graph.add_edge("normalize", "right")  # every dispatch also goes right (fan-out)
    graph.add_edge(["left", "right"], "joined")
    graph.add_edge("single", "complete")
    graph.add_edge("joined", "complete")
    graph.add_edge("complete", END)
    return graph


QUERIES = ["Hello", "  BOTH sides ", "both again", "just one", "please fail", ""]


async def test_each_dispatch_ends_as_a_run_of_its_own_would_end_it() -> None:
    graph = branching_graph()
    solo = SoloRunner(graph)
    alone = {}
    for query in QUERIES:
        try:
            alone[query] = await solo.run({"query": query})
        except RuntimeError as exc:
            alone[query] = exc

    outcomes = await CoalescedGraph(graph).run(
        [{"query": q} for q in QUERIES], [contextvars.copy_context() for _ in QUERIES]
    )

    for query, outcome in zip(QUERIES, outcomes, strict=True):
        expected = alone[query]
        if isinstance(expected, Exception):
            assert isinstance(outcome, RuntimeError)
            assert str(outcome) == str(expected)
        else:
            assert outcome == expected, query
    by_query = dict(zip(QUERIES, outcomes, strict=True))
    # The fan-out + join path, and the path where the join never completes (no "left").
    assert by_query["  BOTH sides "]["route"] == "normalize_left_right_joined_complete"
    assert by_query["  BOTH sides "]["warnings"] == ["right ran"]
    assert by_query["just one"]["route"] == "normalize_right_single_complete"
    assert "intent" not in by_query["just one"]  # its join waits for "left", which never ran


async def test_a_failing_dispatch_leaves_the_others_of_its_run_alone() -> None:
    outcomes = await CoalescedGraph(branching_graph()).run(
        [{"query": "fail now"}, {"query": "hello"}], [contextvars.copy_context()] * 2
    )
    assert isinstance(outcomes[0], RuntimeError)
    assert "fail now" in str(outcomes[0])
    assert isinstance(outcomes[1], dict)
    assert outcomes[1]["route"] == "normalize_right_single_complete"


async def test_nodes_run_in_the_context_of_their_own_request() -> None:
    graph = StateGraph(DispatchState)

    async def tag(state: DispatchState) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"intent": request_tag.get()}

    graph.add_node("tag", tag)
    graph.add_edge(START, "tag")
    contexts = []
    for name in ("first", "second", "third"):
        request_tag.set(name)
        contexts.append(contextvars.copy_context())
    request_tag.set("")

    outcomes = await CoalescedGraph(graph).run([{"query": ""}] * 3, contexts)

    assert [outcome["intent"] for outcome in outcomes] == ["first", "second", "third"]  # type: ignore[index]


async def test_a_node_returning_something_else_than_updates_fails_its_dispatch() -> None:
    graph = StateGraph(DispatchState)

    async def odd(state: DispatchState) -> Any:
        return ["not", "a", "dict"]

    graph.add_node("odd", odd)
    graph.add_edge(START, "odd")
    [outcome] = await CoalescedGraph(graph).run([{"query": "x"}], [contextvars.copy_context()])
    assert isinstance(outcome, UnsupportedNodeResult)
    assert "GRAPH_COALESCE=1" in str(outcome)


async def test_a_node_writing_an_unknown_field_fails_only_its_dispatch() -> None:
    graph = StateGraph(DispatchState)

    async def sloppy(state: DispatchState) -> dict[str, Any]:
        return {"no_such_field": 1} if state["query"] == "bad" else {"intent": "fine"}

    graph.add_node("sloppy", sloppy)
    graph.add_edge(START, "sloppy")
    bad, good = await CoalescedGraph(graph).run(
        [{"query": "bad"}, {"query": "good"}], [contextvars.copy_context()] * 2
    )
    assert isinstance(bad, KeyError)
    assert "no_such_field" in str(bad)
    assert isinstance(good, dict)
    assert good["intent"] == "fine"


def test_graphs_that_need_a_run_per_dispatch_are_recognised(caplog) -> None:
    assert coalescible(branching_graph()) is None

    graph = branching_graph()

    async def retried(state: DispatchState) -> dict[str, Any]:
        return {}

    graph.add_node("retried", retried, retry_policy=RetryPolicy(max_attempts=2))
    reason = coalescible(graph)
    assert reason is not None and "retried" in reason

    with caplog.at_level(logging.WARNING, logger="conclave.graph.runner"):
        runner = dispatch_runner(graph, max_batch=32, max_runs=1)
    assert isinstance(runner, SoloRunner)
    assert "retried" in caplog.text
    assert isinstance(dispatch_runner(branching_graph(), 32, 1), CoalescingRunner)
    assert isinstance(dispatch_runner(branching_graph(), 1, 1), SoloRunner)


async def test_dispatches_that_arrive_together_share_a_run() -> None:
    sizes: list[int] = []
    runner = CoalescingRunner(branching_graph(), max_batch=4, max_runs=1, observe=sizes.append)
    try:
        results = await asyncio.gather(*(runner.run({"query": f"q{i}"}) for i in range(10)))
    finally:
        await runner.close()
    assert [r["results"] for r in results] == [[{"saw": f"q{i}"}] for i in range(10)]
    assert sum(sizes) == 10
    assert max(sizes) == 4  # capped by max_batch
    assert len(sizes) < 10  # and shared


async def test_a_run_waiting_on_io_does_not_hold_back_later_dispatches() -> None:
    release = asyncio.Event()
    graph = StateGraph(DispatchState)

    async def lookup(state: DispatchState) -> dict[str, Any]:
        if state["query"] == "slow":
            await release.wait()  # an expedition service that does not answer
        return {"steps": ["lookup"]}

    graph.add_node("lookup", lookup)
    graph.add_edge(START, "lookup")
    runner = CoalescingRunner(graph, max_batch=32, max_runs=1)
    try:
        slow = asyncio.create_task(runner.run({"query": "slow"}))
        await asyncio.sleep(0.01)
        fast = await asyncio.wait_for(runner.run({"query": "fast"}), timeout=30)
        assert fast["steps"] == ["lookup"]
        assert not slow.done()
        release.set()
        assert (await slow)["steps"] == ["lookup"]
    finally:
        await runner.close()


async def test_a_caller_that_gives_up_does_not_disturb_the_run() -> None:
    runner = CoalescingRunner(branching_graph(), max_batch=32, max_runs=1)
    try:
        gone = asyncio.create_task(runner.run({"query": "gone"}))
        kept = asyncio.create_task(runner.run({"query": "kept"}))
        await asyncio.sleep(0)
        gone.cancel()
        assert (await kept)["results"] == [{"saw": "kept"}]
        with pytest.raises(asyncio.CancelledError):
            await gone
    finally:
        await runner.close()


async def test_the_service_coalesces_and_reports_run_sizes(embedded) -> None:
    async with graph_app(embedded, graph_settings()) as (client, _app):
        queries = [f"hello number {i}" for i in range(12)]
        answers = await asyncio.gather(
            *(client.post("/dispatch", json={"query": q}) for q in queries)
        )
        text = (await client.get("/metrics")).text
    assert [answer.status_code for answer in answers] == [200] * 12, answers[0].text
    assert {answer.json()["intent"] for answer in answers} == {"greeting"}
    assert len({answer.json()["trace_id"] for answer in answers}) == 12
    sums = [line for line in text.splitlines() if line.startswith("conclave_graph_run_dispatches_")]
    total = next(float(line.split()[-1]) for line in sums if "_sum" in line)
    count = next(float(line.split()[-1]) for line in sums if "_count" in line)
    assert total == 12 + 1  # the requests and the start-up run
    assert count < 13  # some runs carried several dispatches


async def test_plain_def_nodes_and_routing_functions_run_coalesced_as_alone() -> None:
    graph = StateGraph(DispatchState)

    def shout(state: DispatchState) -> dict[str, Any]:  # plain def: LangGraph's thread pool
        return {"text": state.get("query", "").upper(), "steps": ["shout"]}

    def pick(state: DispatchState) -> str:
        return "long" if len(state["text"]) > 3 else END

    async def long(state: DispatchState) -> dict[str, Any]:
        return {"steps": ["long"]}

    graph.add_node("shout", shout)
    graph.add_node("long", long)
    graph.add_edge(START, "shout")
    graph.add_conditional_edges("shout", pick, ["long", END])
    queries = ["hi", "hello", ""]
    solo = [await SoloRunner(graph).run({"query": q}) for q in queries]
    coalesced = await CoalescedGraph(graph).run(
        [{"query": q} for q in queries], [contextvars.copy_context() for _ in queries]
    )
    assert coalesced == solo
    assert [state["steps"] for state in solo] == [["shout"], ["shout", "long"], ["shout"]]


async def test_dispatches_of_one_run_take_different_routes_of_an_extension(embedded) -> None:
    async with graph_app(embedded, graph_settings(), extensions=[add_weather]) as (client, _app):
        queries = ["weather in Rome?", "hello", "is the weather fine", "what is a bridge?"] * 3
        answers = await asyncio.gather(
            *(client.post("/dispatch", json={"query": q}) for q in queries)
        )
    routes = [answer.json()["route"] for answer in answers]
    assert routes == [
        "weather_complete" if "weather" in q else "collector_complete" for q in queries
    ]
    for query, answer in zip(queries, answers, strict=True):
        results = answer.json()["results"]
        if "weather" in query:
            assert results == [{"kind": "forecast", "text": "sunny", "query": query}]
