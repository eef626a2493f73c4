"""Edge replicas on one PostgreSQL: do uploads wait on one another's locks?

Run: ``.venv/bin/python -m bench.edge_replicas [--seconds 10] [--concurrency 8]``

Small uploads (64 KiB PNG, as ``bench/edge.py`` sends them) go to one ``conclave serve edge``
process, then to two on the same database, the connections split between them, in the same run.
While each load runs, ``pg_stat_activity`` of the run's database is sampled every 10 ms: of the
sessions busy at that moment (``state = 'active'``), how many wait for a lock
(``wait_event_type = 'Lock'``: a row lock, a transaction id, an advisory lock). Issue 20's
targets: with two replicas fewer than 10 % of the sampled busy sessions wait on a lock, and two
replicas are never slower than one. (This machine has 2 cores, so two replicas cannot show
scaling; what they must not show is waiting.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from bench.edge import closed_loop, multipart_body, png_variant, small_png
from bench.loadgen import LoadResult
from bench.report import target
from bench.servers import Scratch, free_port, scratch_stores, start_process, wait_ready

ROUTE = "/api/edge-intake/image"


@dataclass
class Sessions:
    """``pg_stat_activity`` samples: busy sessions seen, and those waiting on a lock."""

    samples: int = 0
    busy: int = 0
    waiting: int = 0

    @property
    def waiting_share(self) -> float:
        return self.waiting / self.busy if self.busy else 0.0


async def _sample(dsn: str, database: str, into: Sessions, stop: asyncio.Event) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        while not stop.is_set():
            row = await connection.fetchrow(
                "SELECT count(*) FILTER (WHERE state = 'active') AS busy, "
                "count(*) FILTER (WHERE state = 'active' AND wait_event_type = 'Lock') AS waiting "
                "FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                database,
            )
            into.samples += 1
            into.busy += row["busy"]
            into.waiting += row["waiting"]
            await asyncio.sleep(0.01)
    finally:
        await connection.close()


async def _load(ports: list[int], concurrency: int, seconds: float) -> LoadResult:
    """``concurrency`` connections split over ``ports``: one result for all of them."""
    base = small_png()

    def body(n: int) -> bytes:
        return multipart_body(f"tile-{n}.png", "image/png", png_variant(base, n))

    shares = [concurrency // len(ports) + (i < concurrency % len(ports)) for i in range(len(ports))]
    results = await asyncio.gather(
        *(
            closed_loop(port, ROUTE, body, concurrency=share, seconds=seconds)
            for port, share in zip(ports, shares, strict=True)
            if share
        )
    )
    total = LoadResult()
    for result in results:
        total.requests += result.requests
        total.latencies.extend(result.latencies)
        for status, count in result.statuses.items():
            total.statuses[status] = total.statuses.get(status, 0) + count
        total.errors += result.errors
        total.seconds = max(total.seconds, result.seconds)
    return total


async def _measure(
    stores: Scratch, ports: list[int], concurrency: int, seconds: float
) -> tuple[LoadResult, Sessions]:
    await _load(ports, concurrency, 1.0)  # warm-up
    sessions, stop = Sessions(), asyncio.Event()
    sampler = asyncio.create_task(_sample(stores.dsn, stores.database, sessions, stop))
    try:
        result = await _load(ports, concurrency, seconds)
    finally:
        stop.set()
        await sampler
    return result, sessions


def _start_edge(stores: Scratch, work: Path, name: str) -> tuple[int, subprocess.Popen[bytes]]:
    port = free_port()
    env = {
        **stores.env(),
        "CONCLAVE_AUTH": "disabled",
        "CONCLAVE_LOG_LEVEL": "WARNING",
        "CONCLAVE_DATA_DIR": str(work / name),
    }
    command = [sys.executable, "-m", "conclave.cli.main", "serve", "edge", "--port", str(port)]
    return port, start_process(command, env)


async def main(seconds: float, concurrency: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="conclave-bench-replicas-"))
    rows = []
    try:
        async with scratch_stores("bench_replicas") as stores:
            processes = []
            try:
                first_port, first = _start_edge(stores, work, "edge-1")
                processes.append(first)
                await wait_ready(first_port, "/health")
                rows.append(
                    ("one replica", *await _measure(stores, [first_port], concurrency, seconds))
                )
                second_port, second = _start_edge(stores, work, "edge-2")
                processes.append(second)
                await wait_ready(second_port, "/health")
                ports = [first_port, second_port]
                rows.append(("two replicas", *await _measure(stores, ports, concurrency, seconds)))
            finally:
                for process in processes:
                    process.terminate()
                    process.wait(timeout=30)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"edge replicas benchmark: {seconds:g} s per run, {concurrency} connections, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    print("| edge | uploads/s | p50 ms | p99 ms | errors | busy sessions sampled | on a lock |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, result, sessions in rows:
        print(
            f"| {name} | {result.throughput:,.0f} | {result.percentile(0.50):.1f} | "
            f"{result.percentile(0.99):.1f} | {result.errors} | {sessions.busy} "
            f"({sessions.samples} samples) | {sessions.waiting_share:.1%} |"
        )
    (_, one, _), (_, two, sessions) = rows
    speed = two.throughput / one.throughput if one.throughput else 0.0
    print(f"ratio two replicas / one: {speed:.2f}")
    share = sessions.waiting_share
    target(
        "edge: busy sessions waiting on a lock, two replicas",
        f"{share:.1%}",
        "< 10 %",
        share < 0.10,
    )
    target("edge: two replicas / one replica, uploads/s", f"{speed:.2f}", ">= 1.00", speed >= 1.0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    options = parser.parse_args()
    asyncio.run(main(options.seconds, options.concurrency))
