"""Governed executions per second vs a bare FastAPI endpoint, over HTTP, Postgres + Redis.

Run: ``.venv/bin/python -m bench.gateway [--seconds 10] [--concurrency 32]``

Both servers are single uvicorn processes on loopback; the load generator runs in this process.
The gateway commits every audit row (and its outbox event) to PostgreSQL before answering; at the
end the bench checks that the number of audit rows equals the number of 200 answers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from bench.loadgen import LoadResult, run_load
from bench.report import target
from bench.servers import cpu_seconds, free_port, scratch_stores, start_process, wait_ready

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
        bare_port, gateway_port = free_port(), free_port()
        python = sys.executable
        bare = start_process(
            [python, "-m", "uvicorn", "bench.bare_app:app", "--port", str(bare_port),
             "--no-access-log", "--log-level", "warning"], {},
        )  # fmt: skip
        gateway = start_process(
            [python, "-m", "conclave.cli.main", "serve", "gateway", "--port", str(gateway_port)],
            {**stores.env(), "CONCLAVE_AUTH": "disabled", "CONCLAVE_LOG_LEVEL": "WARNING"},
        )
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
            unpublished = await stores.unpublished()
            stream = await stores.stream_length("conclave.mcp.actions")
        finally:
            for process in (bare, gateway):
                process.terminate()
                process.wait(timeout=10)

    ratio = governed.throughput / baseline.throughput if baseline.throughput else 0.0
    print(f"gateway benchmark: {seconds:g} s per run, {concurrency} connections, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    print("| endpoint | req/s | p50 ms | p99 ms | server CPU ms/req | errors |")
    print("|---|---:|---:|---:|---:|---:|")
    print(_row("bare FastAPI /execute (baseline)", baseline, baseline_cpu))
    print(_row("governed /execute (Postgres + Redis)", governed, governed_cpu))
    print(_row("MCP tools/call (Postgres + Redis)", mcp, mcp_cpu))
    print(f"ratio governed/bare: {ratio:.2f} (target >= 0.50); CPU per request "
          f"{baseline_cpu / governed_cpu:.2f} (server process only: PostgreSQL and Redis "
          "work on the other core)")  # fmt: skip
    mcp_ratio = mcp.throughput / governed.throughput if governed.throughput else 0.0
    print(f"ratio MCP/execute: {mcp_ratio:.2f} (target >= 0.70)")
    target("gateway: governed /execute / bare FastAPI", f"{ratio:.2f}", ">= 0.50", ratio >= 0.5)
    target("gateway: MCP tools/call / /execute", f"{mcp_ratio:.2f}", ">= 0.70", mcp_ratio >= 0.7)
    print(
        f"audit rows committed: {rows} for "
        f"{governed.statuses.get(200, 0) + mcp.statuses.get(200, 0)} answers 200 (+ warm-ups); "
        f"events on the stream: {stream}; unpublished outbox rows: {unpublished}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    options = parser.parse_args()
    asyncio.run(main(options.seconds, options.concurrency))
