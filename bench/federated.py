"""The gateway's federated tool: governed calls of an upstream MCP server against calling that
upstream directly, with the same MCP client (the SDK's ``ClientSession`` over streamable HTTP) in
the same run. Used by ``bench/gateway.py``; run alone with ``python -m bench.federated``.

Setup: ``bench/mcp_echo.py`` (the SDK's server, stateless JSON) on one port; a gateway (PostgreSQL
and Redis, calls log off, the default) whose catalogue names it as upstream ``echo-up``, so its
tool is ``echo-up__echo``. Each of ``concurrency`` clients holds one session and calls in a loop.
The gateway audits every call (one row, one event) and checks it against the upstream's schema.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench.report import target
from bench.servers import cpu_seconds, free_port, scratch_stores, start_process, wait_ready

MESSAGE = {"message": "hello, conclave"}


async def _client_loop(url: str, tool: str, stop: float, counts: list[int]) -> None:
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        while time.monotonic() < stop:
            result = await session.call_tool(tool, MESSAGE)
            counts[0 if not result.is_error else 1] += 1


async def _warm_up(url: str, tool: str) -> None:
    warm = time.monotonic() + 1.0
    await asyncio.gather(*(_client_loop(url, tool, warm, [0, 0]) for _ in range(2)))


async def _rate(url: str, tool: str, seconds: float, concurrency: int) -> tuple[float, int]:
    """Calls per second of ``concurrency`` clients over ``seconds``, and the error results."""
    counts = [0, 0]
    started = time.monotonic()
    stop = started + seconds
    await asyncio.gather(*(_client_loop(url, tool, stop, counts) for _ in range(concurrency)))
    return counts[0] / (time.monotonic() - started), counts[1]


async def measure(seconds: float, concurrency: int) -> float:
    """Run both, print a table and the target line; the ratio governed/direct."""
    python = sys.executable
    upstream_port, gateway_port = free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}/mcp/"
    upstream = start_process(
        [python, "-m", "uvicorn", "bench.mcp_echo:app", "--port", str(upstream_port),
         "--no-access-log", "--log-level", "warning"], {},
    )  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="conclave-federated-"))
    catalogue = folder / "upstreams.json"
    # The echo tool says readOnlyHint and the operator runs it: trusted, so each call is one
    # commit (an untrusted hint costs a `running` row first: two).
    entry = {
        "name": "echo-up",
        "transport": "http",
        "url": upstream_url,
        "refresh_seconds": 0,
        "trust_read_only_hint": True,
    }
    catalogue.write_text(json.dumps({"mcp_servers": [entry]}))
    async with scratch_stores("bench_federated") as stores:
        env = {
            **stores.env(),
            "CONCLAVE_AUTH": "disabled",
            "CONCLAVE_LOG_LEVEL": "WARNING",
            "GATEWAY_CALL_LOG": "false",
            "GATEWAY_TOOL_CATALOGUES": str(catalogue),
            "CONCLAVE_EGRESS_ALLOW_HOSTS": "127.0.0.1",
        }
        serve = [python, "-m", "conclave.cli.main", "serve", "gateway", "--port"]
        try:
            await wait_ready(upstream_port, "/mcp")
            gateway = start_process([*serve, str(gateway_port)], env)
            try:
                await wait_ready(gateway_port, "/health")
                await _warm_up(upstream_url, "echo")
                direct, direct_errors = await _rate(upstream_url, "echo", seconds, concurrency)
                gateway_url = f"http://127.0.0.1:{gateway_port}/mcp"
                await _warm_up(gateway_url, "echo-up__echo")
                cpu = cpu_seconds(gateway.pid)
                governed, governed_errors = await _rate(
                    gateway_url, "echo-up__echo", seconds, concurrency
                )
                cpu_ms = (cpu_seconds(gateway.pid) - cpu) / max(governed * seconds, 1) * 1000
                rows = await stores.count("SELECT count(*) FROM mcp_tool_calls")
            finally:
                gateway.terminate()
                gateway.wait(timeout=10)
        finally:
            upstream.terminate()
            upstream.wait(timeout=10)
    ratio = governed / direct if direct else 0.0
    print(f"federated tool: {seconds:g} s per run, {concurrency} MCP client sessions")
    print("| path | calls/s | error results |")
    print("|---|---:|---:|")
    print(f"| upstream MCP server directly (SDK client) | {direct:,.0f} | {direct_errors} |")
    print(f"| through the gateway's /mcp, governed | {governed:,.0f} | {governed_errors} |")
    print(f"gateway CPU per governed upstream call: {cpu_ms:.3f} ms; audit rows: {rows}")
    target("gateway: governed upstream MCP call / direct", f"{ratio:.2f}", ">= 0.60", ratio >= 0.6)
    return ratio


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    options = parser.parse_args()
    asyncio.run(measure(options.seconds, options.concurrency))
