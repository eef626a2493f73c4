"""Dispatches per second vs a bare FastAPI endpoint, over HTTP, plus the graph's own cost.

Run: ``.venv/bin/python -m bench.graph [--seconds 10] [--concurrency 32]``

Both servers are single uvicorn processes on loopback (embedded mode, SQLite in a temporary
folder); the load generator runs in this process and spreads its connections over a mixed query
set (greeting, question, complex, empty). The collector step has nothing to fetch
(``GRAPH_COLLECTOR_SEARCH_LIMIT=0``, no entities), so the numbers are the dispatch machinery:
HTTP, validation, LangGraph, intent detection. The in-process row times ``graph.ainvoke`` alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid

import httpx
from fastapi import FastAPI

from bench.loadgen import LoadResult, run_load
from bench.servers import free_port, start_process, wait_ready
from conclave.graph.app import build_classifier
from conclave.graph.collector import CollectorClient, CollectorLookup
from conclave.graph.graph import GraphContext, build_graph
from conclave.graph.models import DispatchRequest, DispatchResponse
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


async def _mixed(port: int, concurrency: int, seconds: float) -> LoadResult:
    """One load per query kind at the same time, merged into one result."""
    share = max(1, concurrency // len(QUERIES))

    async def run(body: dict, run_seconds: float) -> LoadResult:
        return await run_load(
            "127.0.0.1", port, "/dispatch", body, concurrency=share, seconds=run_seconds
        )

    await asyncio.gather(*(run(body, 1.0) for body in QUERIES))  # warm-up
    parts = await asyncio.gather(*(run(body, seconds) for body in QUERIES))
    merged = LoadResult(seconds=max(part.seconds for part in parts))
    for part in parts:
        merged.requests += part.requests
        merged.errors += part.errors
        merged.latencies += part.latencies
        for status, count in part.statuses.items():
            merged.statuses[status] = merged.statuses.get(status, 0) + count
    return merged


async def _graph_alone(rounds: int) -> float:
    """Mean milliseconds of one ``ainvoke`` of the default graph over the mixed queries."""
    settings = GraphSettings(collector_search_limit=0)
    async with httpx.AsyncClient() as http:
        lookup = CollectorLookup(CollectorClient(http, settings.collector_url), settings)
        graph = build_graph(GraphContext(settings, build_classifier(settings), lookup))
        await graph.ainvoke({"query": ""})
        started = time.perf_counter()
        for index in range(rounds):
            await graph.ainvoke({"query": QUERIES[index % len(QUERIES)]["query"]})
        return (time.perf_counter() - started) / rounds * 1000


def _row(name: str, result: LoadResult) -> str:
    return (
        f"| {name} | {result.throughput:,.0f} | {result.percentile(0.50):.1f} | "
        f"{result.percentile(0.99):.1f} | {result.errors} |"
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
            baseline = await _mixed(bare_port, concurrency, seconds)
            graph = await _mixed(graph_port, concurrency, seconds)
        finally:
            for process in (bare, service):
                process.terminate()
                process.wait(timeout=10)
    alone_ms = await _graph_alone(2000)
    ratio = graph.throughput / baseline.throughput if baseline.throughput else 0.0
    print(f"graph benchmark: {seconds:g} s per run, {concurrency} connections, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    print("| endpoint | req/s | p50 ms | p99 ms | errors |")
    print("|---|---:|---:|---:|---:|")
    print(_row("bare FastAPI /dispatch (baseline)", baseline))
    print(_row("graph /dispatch (mixed queries)", graph))
    print(f"ratio graph/bare: {ratio:.2f} (target >= 0.30)")
    print(f"graph alone (in process, ainvoke): {alone_ms:.2f} ms per dispatch")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    options = parser.parse_args()
    asyncio.run(main(options.seconds, options.concurrency))
