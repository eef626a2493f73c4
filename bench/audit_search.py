"""The audit trail's search (``GET /calls``) at a million audit rows, against reading one call.

Run: ``.venv/bin/python -m bench.audit_search [--rows 1000000] [--samples 200]``

A throw-away PostgreSQL database is migrated and filled, in SQL (``generate_series``), with audit
rows shaped like the gateway's: 1,000 users with a thousand calls each (and one with ten), 20
tools, 2 % rejected and 1 % failed, half of them with a correlation id, spread over 30 days. The
gateway then serves it (one uvicorn process, auth on: a user's token and an operator's), and the
bench asks, one request at a time over loopback: a user's first page of their own calls, a user's
pages followed by cursor, an operator's first page and 50 pages deep, an operator's page of one
tool, of failed calls, of a 30-minute window, a lookup by correlation id, and the baseline in the
same run, ``GET /calls/{id}`` (one primary-key read). Times are the client's, request to full
answer: the server's time plus loopback.

Issue 21's target: every page of the console (which reads these pages) under 200 ms at p99 with a
million audit rows.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import httpx
from sqlalchemy import text

from bench.report import percentile, target
from bench.servers import Scratch, free_port, scratch_stores, start_process, wait_ready
from conclave.platform.db.engine import create_engine
from conclave.platform.db.migrate import migrate

USERS = 1000
TOOLS = 20
USER_TOKEN, OPERATOR_TOKEN = "tok-user-7", "tok-root"

# Row i: user i % 1000 ("rare" for every 100,000th), tool i % 20, 2 s apart, newest first.
_FILL = """
INSERT INTO mcp_tool_calls (
    conclave_id, tool_name, requested_tool, args, result, orthodoxy_status, status, http_status,
    error_code, user_id, correlation_id, duration_ms, created_at, completed_at, warnings)
SELECT
    md5(i::text)::uuid::text,
    'tool_' || (i % 20), 'tool_' || (i % 20),
    '{"message": "hello, conclave"}'::json,
    CASE WHEN i % 100 = 0 OR i % 50 = 0 THEN NULL ELSE '{"echo": "hello, conclave"}'::json END,
    CASE WHEN i % 50 = 0 THEN 'heretical' ELSE 'blessed' END,
    CASE WHEN i % 100 = 0 THEN 'failed' WHEN i % 50 = 0 THEN 'rejected' ELSE 'succeeded' END,
    CASE WHEN i % 100 = 0 THEN 502 WHEN i % 50 = 0 THEN 422 ELSE 200 END,
    CASE WHEN i % 100 = 0 THEN 'TOOL_FAILED' WHEN i % 50 = 0 THEN 'VALIDATION_FAILED' END,
    CASE WHEN i % 100000 = 7 THEN 'rare' ELSE 'user_' || (i % 1000) END,
    CASE WHEN i % 2 = 0 THEN 'corr-' || i END,
    (i % 97) / 10.0,
    now() - i * interval '2.592 seconds',
    now() - i * interval '2.592 seconds' + interval '3 milliseconds',
    '[]'::json
FROM generate_series(1, :rows) AS i
"""


async def _fill(stores: Scratch, rows: int) -> float:
    engine = create_engine(stores.url)
    started = time.monotonic()
    try:
        await migrate(engine)
        async with engine.begin() as connection:
            await connection.execute(text(_FILL), {"rows": rows})
        async with engine.connect() as connection:
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            await connection.exec_driver_sql("VACUUM ANALYZE mcp_tool_calls")
    finally:
        await engine.dispose()
    return time.monotonic() - started


async def _timed(samples: int, ask: Callable[[], Awaitable[httpx.Response]]) -> list[float]:
    """Milliseconds of ``samples`` requests, one at a time; every answer must be 200."""
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        response = await ask()
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"{response.request.url}: {response.status_code} {response.text}")
    return times


async def main(rows: int, samples: int) -> None:
    async with scratch_stores("audit_search") as stores:
        filled = await _fill(stores, rows)
        port = free_port()
        env = {
            **stores.env(),
            "CONCLAVE_AUTH": "enabled",
            "CONCLAVE_API_TOKENS": f"{USER_TOKEN}=user_7,{OPERATOR_TOKEN}=root",
            "CONCLAVE_OPERATORS": "root",
            "CONCLAVE_LOG_LEVEL": "WARNING",
        }
        server = start_process(
            [sys.executable, "-m", "conclave.cli.main", "serve", "gateway", "--port", str(port)],
            env,
        )
        try:
            await wait_ready(port, "/health")
            results = await _measure(f"http://127.0.0.1:{port}", samples, rows)
        finally:
            server.terminate()
            server.wait(timeout=10)
    _report(rows, samples, filled, results)


async def _measure(base: str, samples: int, rows: int) -> dict[str, list[float]]:
    user = {"Authorization": f"Bearer {USER_TOKEN}"}
    root = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    rng = random.Random(20)
    results: dict[str, list[float]] = {}
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        ids = [
            call["conclave_id"]
            for call in (await client.get("/calls", params={"limit": 100}, headers=root)).json()[
                "calls"
            ]
        ]

        async def one_call() -> httpx.Response:
            return await client.get(f"/calls/{rng.choice(ids)}", headers=root)

        async def page(headers: dict[str, str], **params: object) -> httpx.Response:
            return await client.get("/calls", params=params, headers=headers)

        await _timed(20, one_call)  # warm-up: connections, plans
        results["baseline: GET /calls/{id} (one row)"] = await _timed(samples, one_call)
        results["user: first page of own calls"] = await _timed(samples, lambda: page(user))
        results["operator: first page, everyone's"] = await _timed(samples, lambda: page(root))

        async def operator_deep() -> list[float]:
            times: list[float] = []
            cursor = None
            for _ in range(50):
                params = {"cursor": cursor} if cursor else {}
                started = time.perf_counter()
                answer = (await page(root, **params)).json()
                times.append((time.perf_counter() - started) * 1000)
                cursor = answer["next_cursor"]
            return times

        results["operator: 50 pages deep by cursor"] = await operator_deep()
        results["operator: one tool"] = await _timed(
            samples, lambda: page(root, tool=f"tool_{rng.randrange(TOOLS)}")
        )
        results["operator: one user (of 1,000 calls)"] = await _timed(
            samples, lambda: page(root, user_id=f"user_{rng.randrange(USERS)}")
        )
        results["operator: a user of 10 calls"] = await _timed(
            samples, lambda: page(root, user_id="rare")
        )
        results["operator: failed calls (1 %)"] = await _timed(
            samples, lambda: page(root, status="failed")
        )
        # Values no row holds: the filter must not walk every row to say so.
        results["operator: timed-out calls (none)"] = await _timed(
            samples, lambda: page(root, status="timeout")
        )
        results["operator: purified calls (none)"] = await _timed(
            samples, lambda: page(root, orthodoxy_status="purified")
        )

        def window() -> dict[str, str]:
            minutes = rng.randrange(30 * 24 * 60)
            until = time.time() - minutes * 60
            fmt = "%Y-%m-%dT%H:%M:%SZ"
            return {
                "since": time.strftime(fmt, time.gmtime(until - 1800)),
                "until": time.strftime(fmt, time.gmtime(until)),
            }

        results["operator: a 30-minute window"] = await _timed(
            samples, lambda: page(root, **window())
        )
        results["operator: by correlation id"] = await _timed(
            samples, lambda: page(root, correlation_id=f"corr-{2 * rng.randrange(1, rows // 2)}")
        )
    return results


def _report(rows: int, samples: int, filled: float, results: dict[str, list[float]]) -> None:
    print(
        f"audit search benchmark: {rows:,} audit rows (filled and analysed in {filled:.0f} s), "
        f"{samples} requests per kind one at a time, {time.strftime('%Y-%m-%d')}"
    )
    print("| request | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|")
    for name, times in results.items():
        print(
            f"| {name} | {statistics.median(times):.1f} | {percentile(times, 0.99):.1f} "
            f"| {max(times):.1f} |"
        )
    baseline = percentile(results["baseline: GET /calls/{id} (one row)"], 0.99)
    pages = {name: times for name, times in results.items() if not name.startswith("baseline")}
    worst_name, worst = max(
        ((name, percentile(times, 0.99)) for name, times in pages.items()), key=lambda x: x[1]
    )
    print(
        f"worst page p99: {worst:.1f} ms ({worst_name}); {worst / baseline:.1f}x the one-row "
        f"read's p99 ({baseline:.1f} ms)"
    )
    target(
        f"gateway: audit search page p99 at {rows:,} rows (console, issue 21)",
        f"{worst:.0f} ms",
        "< 200 ms",
        worst < 200,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=200)
    options = parser.parse_args()
    asyncio.run(main(options.rows, options.samples))
