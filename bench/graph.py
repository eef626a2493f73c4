"""Dispatches per second vs a bare FastAPI endpoint, over HTTP, plus the graph's own cost.

Run: ``.venv/bin/python -m bench.graph [--seconds 10] [--concurrency 32]``

Both servers are single uvicorn processes on loopback (embedded mode, SQLite in a temporary
folder); the load generator runs in this process and spreads its connections over a mixed query
set (greeting, question, complex, empty). The collector step has nothing to fetch
(``GRAPH_COLLECTOR_SEARCH_LIMIT=0``, no entities), so the numbers are the dispatch machinery:
HTTP, validation, LangGraph, intent detection. Besides requests per second, each server's CPU time
per request is read from ``/proc`` (Linux): on a shared machine it moves much less than wall-clock
throughput. The service coalesces concurrent dispatches into shared LangGraph runs (docs/graph.md);
the benchmark prints how many dispatches a run carried on average. The in-process rows time the
default graph alone: one LangGraph run per dispatch, and coalesced runs of 16.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import os
import sys
import tempfile
import time
import uuid

import httpx
from fastapi import FastAPI

from bench.loadgen import LoadResult, run_load
from bench.report import target
from bench.servers import cpu_seconds, free_port, start_process, wait_ready
from conclave.graph.app import build_classifier
from conclave.graph.coalesce import CoalescedGraph
from conclave.graph.collector_client import CollectorClient, CollectorLookup
from conclave.graph.graph import GraphContext, define_graph
from conclave.graph.models import DispatchRequest, DispatchResponse
from conclave.graph.runner import SoloRunner
from conclave.settings import GraphSettings

QUERIES = [
    {"query": "hello there", "validated_entities": []},
    {"query": "what is the capital of France?", "validated_entities": []},
    {
        "query": "compare the flood reports of Milan and Turin over the last ten years, then "
        "summarize the differences and list the sensors involved",
        "validated_entities": [],
    },
    {"query": "", "validated_entities": []},
]

bare_app = FastAPI()


@bare_app.post("/dispatch")
async def bare_dispatch(body: DispatchRequest) -> DispatchResponse:
    """Same request parsing and response shape as the graph service, without the graph."""
    return DispatchResponse(
        route="collector_complete",
        intent="unknown",
        intent_confidence=0.0,
        entities=[],
        results=[],
        trace_id=str(uuid.uuid4()),
        duration_ms=0.01,
    )


async def _mixed(port: int, pid: int, concurrency: int, seconds: float) -> tuple[LoadResult, float]:
    """One load per query kind at the same time, merged into one result; plus the server's CPU
    milliseconds per request during the measured part."""
    share = max(1, concurrency // len(QUERIES))

    async def run(body: dict, run_seconds: float) -> LoadResult:
        return await run_load(
            "127.0.0.1", port, "/dispatch", body, concurrency=share, seconds=run_seconds
        )

    await asyncio.gather(*(run(body, 1.0) for body in QUERIES))  # warm-up
    cpu_before = cpu_seconds(pid)
    parts = await asyncio.gather(*(run(body, seconds) for body in QUERIES))
    cpu = cpu_seconds(pid) - cpu_before
    merged = LoadResult(seconds=max(part.seconds for part in parts))
    for part in parts:
        merged.requests += part.requests
        merged.errors += part.errors
        merged.latencies += part.latencies
        for status, count in part.statuses.items():
            merged.statuses[status] = merged.statuses.get(status, 0) + count
    return merged, cpu / max(merged.requests, 1) * 1000


async def _graph_alone(rounds: int, per_run: int) -> tuple[float, float]:
    """Mean CPU milliseconds per dispatch of the default graph in process, over the mixed queries:
    one LangGraph run per dispatch (``GRAPH_COALESCE=1``), and coalesced runs of ``per_run``."""
    settings = GraphSettings(collector_search_limit=0)
    async with httpx.AsyncClient() as http:
        lookup = CollectorLookup(CollectorClient(http, settings.collector_url), settings)
        graph = define_graph(GraphContext(settings, build_classifier(settings), lookup))
        states = [{"query": QUERIES[i % len(QUERIES)]["query"], "entities": []} for i in range(64)]
        solo, coalesced = SoloRunner(graph), CoalescedGraph(graph)
        await solo.run(states[0])
        cpu_started = time.process_time()
        for index in range(rounds):
            await solo.run(states[index % len(states)])
        solo_ms = (time.process_time() - cpu_started) / rounds * 1000
        contexts = [contextvars.copy_context() for _ in range(per_run)]
        await coalesced.run(states[:per_run], contexts)
        cpu_started = time.process_time()
        for index in range(rounds // per_run):
            start = index * per_run % len(states)
            await coalesced.run(states[start : start + per_run], contexts)
        coalesced_ms = (time.process_time() - cpu_started) / (rounds // per_run * per_run) * 1000
        return solo_ms, coalesced_ms


async def _mean_run_size(port: int) -> float:
    """Dispatches per LangGraph run so far, from the service's own histogram."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("conclave_graph_run_dispatches_")
    }
    count = values.get("conclave_graph_run_dispatches_count", 0.0)
    return values.get("conclave_graph_run_dispatches_sum", 0.0) / count if count else 0.0


def _row(name: str, result: LoadResult, cpu_ms: float) -> str:
    return (
        f"| {name} | {result.throughput:,.0f} | {result.percentile(0.50):.1f} | "
        f"{result.percentile(0.99):.1f} | {cpu_ms:.3f} | {result.errors} |"
    )


async def main(seconds: float, concurrency: int) -> None:
    bare_port, graph_port = free_port(), free_port()
    python = sys.executable
    with tempfile.TemporaryDirectory() as data_dir:
        bare = start_process(
            [python, "-m", "uvicorn", "bench.graph:bare_app", "--port", str(bare_port),
             "--no-access-log", "--log-level", "warning"], {},
        )  # fmt: skip
        service = start_process(
            [python, "-m", "conclave.cli.main", "serve", "graph", "--port", str(graph_port)],
            {
                "CONCLAVE_DATA_DIR": data_dir,
                "CONCLAVE_AUTH": "disabled",
                "CONCLAVE_LOG_LEVEL": "WARNING",
                "GRAPH_COLLECTOR_SEARCH_LIMIT": "0",
            },
        )
        try:
            await wait_ready(bare_port, "/docs")
            await wait_ready(graph_port, "/health")
            baseline, baseline_cpu = await _mixed(bare_port, bare.pid, concurrency, seconds)
            graph, graph_cpu = await _mixed(graph_port, service.pid, concurrency, seconds)
            run_size = await _mean_run_size(graph_port)
        finally:
            for process in (bare, service):
                process.terminate()
                process.wait(timeout=10)
    solo_ms, coalesced_ms = await _graph_alone(2048, 16)
    ratio = graph.throughput / baseline.throughput if baseline.throughput else 0.0
    print(f"graph benchmark: {seconds:g} s per run, {concurrency} connections, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    print("| endpoint | req/s | p50 ms | p99 ms | server CPU ms/req | errors |")
    print("|---|---:|---:|---:|---:|---:|")
    print(_row("bare FastAPI /dispatch (baseline)", baseline, baseline_cpu))
    print(_row("graph /dispatch (mixed queries)", graph, graph_cpu))
    print(f"ratio graph/bare: {ratio:.2f} req/s (target >= 0.30), "
          f"{baseline_cpu / graph_cpu:.2f} CPU per request")  # fmt: skip
    print(f"dispatches per LangGraph run in the service: {run_size:.1f} on average")
    print(f"graph alone (in process), CPU per dispatch: {solo_ms:.3f} ms with a run per dispatch, "
          f"{coalesced_ms:.3f} ms in coalesced runs of 16")  # fmt: skip
    target("graph: /dispatch / bare FastAPI", f"{ratio:.2f}", ">= 0.30", ratio >= 0.3)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    options = parser.parse_args()
    asyncio.run(main(options.seconds, options.concurrency))
