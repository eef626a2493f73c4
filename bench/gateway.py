"""Governed executions per second vs a bare FastAPI endpoint, over HTTP, Postgres + Redis.

Run: ``.venv/bin/python -m bench.gateway [--seconds 10] [--concurrency 32]``

Both servers are single uvicorn processes on loopback; the load generator runs in this process.
The gateway commits every audit row (and its outbox event, and its leaf queued for the
transparency log ``calls``) to PostgreSQL before answering; at the end the bench checks that the
number of audit rows equals the number of 200 answers, and that every call is in the log. The same
gateway with its calls log off (``GATEWAY_CALL_LOG=false``) is measured too: what the log costs.
Last, the federated tool (``bench/federated.py``): governed calls of a local upstream MCP server
that echoes, against calling it directly with the same MCP client (``--federated-only`` runs just
that).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from bench import federated
from bench.loadgen import LoadResult, run_load
from bench.report import target
from bench.servers import (
    Scratch,
    cpu_seconds,
    free_port,
    scratch_stores,
    start_process,
    wait_ready,
)

BODY = {"tool": "echo", "args": {"message": "hello, conclave"}}
MCP_BODY = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"message": "hello, conclave"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


async def _measure(
    port: int,
    pid: int,
    concurrency: int,
    seconds: float,
    path: str = "/execute",
    body: dict = BODY,
    headers: dict[str, str] | None = None,
) -> tuple[LoadResult, float]:
    """The load's result and the server's CPU milliseconds per request during it."""
    options = {"concurrency": concurrency, "headers": headers}
    await run_load("127.0.0.1", port, path, body, seconds=1.0, **options)  # warm-up
    cpu_before = cpu_seconds(pid)
    result = await run_load("127.0.0.1", port, path, body, seconds=seconds, **options)
    return result, (cpu_seconds(pid) - cpu_before) / max(result.requests, 1) * 1000


def _row(name: str, result: LoadResult, cpu_ms: float) -> str:
    return (
        f"| {name} | {result.throughput:,.0f} | {result.percentile(0.50):.1f} | "
        f"{result.percentile(0.99):.1f} | {cpu_ms:.3f} | {result.errors} |"
    )


async def main(seconds: float, concurrency: int) -> None:
    async with scratch_stores() as stores:
        bare_port, gateway_port, unlogged_port = free_port(), free_port(), free_port()
        python = sys.executable
        bare = start_process(
            [python, "-m", "uvicorn", "bench.bare_app:app", "--port", str(bare_port),
             "--no-access-log", "--log-level", "warning"], {},
        )  # fmt: skip
        env = {
            **stores.env(),
            "CONCLAVE_AUTH": "disabled",
            "CONCLAVE_LOG_LEVEL": "WARNING",
            "GATEWAY_CALL_LOG": "true",
        }
        serve = [python, "-m", "conclave.cli.main", "serve", "gateway", "--port"]
        gateway = start_process([*serve, str(gateway_port)], env)
        # Its own store: the calls log of the other gateway must hold exactly its calls.
        async with scratch_stores("bench_unlogged") as unlogged_stores:
            unlogged = start_process(
                [*serve, str(unlogged_port)],
                {**env, **unlogged_stores.env(), "GATEWAY_CALL_LOG": "false"},
            )
            try:
                await wait_ready(unlogged_port, "/health")
                without_log, without_log_cpu = await _measure(
                    unlogged_port, unlogged.pid, concurrency, seconds
                )
            finally:
                unlogged.terminate()
                unlogged.wait(timeout=10)
        try:
            await wait_ready(bare_port, "/docs")
            await wait_ready(gateway_port, "/health")
            baseline, baseline_cpu = await _measure(bare_port, bare.pid, concurrency, seconds)
            governed, governed_cpu = await _measure(gateway_port, gateway.pid, concurrency, seconds)
            mcp, mcp_cpu = await _measure(
                gateway_port, gateway.pid, concurrency, seconds, "/mcp", MCP_BODY, MCP_HEADERS
            )
            await asyncio.sleep(1.5)  # let the relay publish the last events
            rows = await stores.count(
                "SELECT count(*) FROM mcp_tool_calls WHERE status='succeeded'"
            )
            calls = await stores.count("SELECT count(*) FROM mcp_tool_calls")
            logged = await _logged_calls(stores)
            unpublished = await stores.unpublished()
            stream = await stores.stream_length("conclave.mcp.actions")
        finally:
            for process in (bare, gateway):
                process.terminate()
                process.wait(timeout=10)

    ratio = governed.throughput / baseline.throughput if baseline.throughput else 0.0
    # The gateway as deployed by default (GATEWAY_CALL_LOG off) holds the gateway's own target;
    # the one with every call in the log, issue 20's.
    default_ratio = without_log.throughput / baseline.throughput if baseline.throughput else 0.0
    print(f"gateway benchmark: {seconds:g} s per run, {concurrency} connections, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    print("| endpoint | req/s | p50 ms | p99 ms | server CPU ms/req | errors |")
    print("|---|---:|---:|---:|---:|---:|")
    print(_row("bare FastAPI /execute (baseline)", baseline, baseline_cpu))
    print(_row("governed /execute (Postgres + Redis, calls log)", governed, governed_cpu))
    print(_row("governed /execute, calls log off (the default)", without_log, without_log_cpu))
    print(_row("MCP tools/call (Postgres + Redis)", mcp, mcp_cpu))
    print(f"ratio governed/bare: {default_ratio:.2f} (target >= 0.50), with the calls log "
          f"{ratio:.2f} (target >= 0.55); CPU per request "
          f"{baseline_cpu / governed_cpu:.2f} (server process only: PostgreSQL and Redis "
          "work on the other core)")  # fmt: skip
    mcp_ratio = mcp.throughput / governed.throughput if governed.throughput else 0.0
    print(f"ratio MCP/execute: {mcp_ratio:.2f} (target >= 0.70)")
    log_cost = governed.throughput / without_log.throughput if without_log.throughput else 0.0
    print(f"ratio with the calls log / without: {log_cost:.2f}")
    ok = default_ratio >= 0.5
    target("gateway: governed /execute / bare FastAPI", f"{default_ratio:.2f}", ">= 0.50", ok)
    target(
        "gateway: governed /execute, every call in the log / bare",
        f"{ratio:.2f}",
        ">= 0.55",
        ratio >= 0.55 and logged == calls,
    )
    target("gateway: MCP tools/call / /execute", f"{mcp_ratio:.2f}", ">= 0.70", mcp_ratio >= 0.7)
    print(
        f"audit rows committed: {rows} for "
        f"{governed.statuses.get(200, 0) + mcp.statuses.get(200, 0)} answers 200 (+ warm-ups); "
        f"events on the stream: {stream}; unpublished outbox rows: {unpublished}; "
        f"calls in a signed checkpoint of the log: {logged} of {calls}"
    )


async def _logged_calls(stores: Scratch) -> int:
    """The size of the calls log's latest checkpoint once it covers every audit row (or after 10
    seconds): the integrator signs at most one checkpoint a second."""
    count = stores.count
    deadline = time.monotonic() + 10.0
    while True:
        calls = await count("SELECT count(*) FROM mcp_tool_calls")
        logged = await count("SELECT coalesce(max(integrated_size), 0) FROM tlog_logs")
        if logged >= calls or time.monotonic() > deadline:
            return int(logged)
        await asyncio.sleep(0.2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--federated-only", action="store_true")
    options = parser.parse_args()
    if not options.federated_only:
        asyncio.run(main(options.seconds, options.concurrency))
    # MCP client sessions are heavier than the load generator's connections: half as many.
    asyncio.run(federated.measure(options.seconds, max(options.concurrency // 2, 1)))
