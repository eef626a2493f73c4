"""The operator console's pages at a million audit rows, against the API pages they are made of.

Run: ``.venv/bin/python -m bench.console [--rows 1000000] [--samples 200]``

A throw-away PostgreSQL database is filled with audit rows as ``bench.audit_search`` fills it
(1,000 users with a thousand calls each, 20 tools, 30 days). The four services and the console
run as ``conclave serve`` processes on it, auth on; the bench signs in to the console through
its form (a user and an operator) and asks, one request at a time: the overview (which asks every
service's ``/health`` and ``/metrics``), a user's audit trail, an operator's, 50 pages deep by
the "Next page" links, filtered pages, and a call's page (which asks the call and its
verification). The same-run baseline of each console page is the gateway API request(s) it is
made of, asked directly. Times are the client's: request to full answer over loopback.

The edge's store gets 100,000 Evidence Packs (100 uploaders, 50 devices, every media type, one in
a hundred with a correlation id; rows only: their blobs are not written, so a pack's page shows
its verification failing, which costs what a passing one does), and the Evidence pages are asked
the same way against the edge's `GET /api/edge-intake/evidence` and `/evidence/{id}`.

Issue 21's target: every page's server time under 200 ms at p99 with a million audit rows and
100,000 packs.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import httpx
from sqlalchemy import text

from bench.audit_search import OPERATOR_TOKEN, TOOLS, USER_TOKEN, _fill
from bench.report import percentile, target
from bench.servers import Scratch, free_port, scratch_stores, start_process, wait_ready
from conclave.platform.db.engine import create_engine
from conclave.platform.media_types import media_type_names

SERVICE_PORTS = {
    "gateway": "GATEWAY_PORT",
    "collector": "COLLECTOR_API_PORT",
    "graph": "GRAPH_PORT",
    "edge": "EDGE_PORT",
    "console": "CONSOLE_PORT",
}
PACKS = 100_000
# The user of USER_TOKEN is "user_7": one uploader in a hundred is "user_<n % 100>".
_FILL_PACKS = """
INSERT INTO edge_evidence_packs (evidence_id, chain_seq, media_type, format, mime_type, filename,
  sha256, size_bytes, client_metadata, extracted, device_id, correlation_id, idempotency_key,
  part_index, sampling_policy_ref, event_id, created_at, uploaded_by)
SELECT md5(n::text || 'pack')::uuid::text, n, (CAST(:types AS text[]))[1 + n % :type_count], 'png',
  'image/png', 'f-' || n || '.png', md5(n::text) || md5(n::text), 65536,
  '{"latitude": 45.07, "longitude": 7.69}', '{"format": "PNG", "width": 250, "height": 250}',
  'device-' || (n % 50), CASE WHEN n % 100 = 0 THEN 'case-' || n END, NULL, 0, NULL,
  md5(n::text || 'event')::uuid::text, now() - n * interval '25.92 seconds',
  'user_' || (n % 100)
FROM generate_series(1, :packs) AS n
"""


async def _fill_packs(stores: Scratch, packs: int) -> None:
    engine = create_engine(stores.url)
    types = list(media_type_names())
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text(_FILL_PACKS), {"types": types, "type_count": len(types), "packs": packs}
            )
        async with engine.connect() as connection:
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            await connection.exec_driver_sql("VACUUM ANALYZE edge_evidence_packs")
    finally:
        await engine.dispose()


_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_NEXT = re.compile(r'<a rel="next" href="([^"]+)"')


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


def _start(stores: Scratch) -> tuple[dict[str, int], list[subprocess.Popen[bytes]]]:
    ports = {name: free_port() for name in SERVICE_PORTS}
    env = {
        **stores.env(),
        "CONCLAVE_AUTH": "enabled",
        "CONCLAVE_API_TOKENS": f"{USER_TOKEN}=user_7,{OPERATOR_TOKEN}=root",
        "CONCLAVE_OPERATORS": "root",
        "CONCLAVE_LOG_LEVEL": "WARNING",
        "COLLECTOR_RUN_WORKERS": "false",
        **{setting: str(ports[name]) for name, setting in SERVICE_PORTS.items()},
        "CONSOLE_GATEWAY_URL": f"http://127.0.0.1:{ports['gateway']}",
        "CONSOLE_COLLECTOR_URL": f"http://127.0.0.1:{ports['collector']}",
        "CONSOLE_GRAPH_URL": f"http://127.0.0.1:{ports['graph']}",
        "CONSOLE_EDGE_URL": f"http://127.0.0.1:{ports['edge']}",
    }
    processes = [
        start_process([sys.executable, "-m", "conclave.cli.main", "serve", name], env)
        for name in SERVICE_PORTS
    ]
    return ports, processes


async def _signed_in(console: str, token: str) -> httpx.AsyncClient:
    client = httpx.AsyncClient(base_url=console, timeout=30)
    form = await client.get("/signin")
    found = _CSRF.search(form.text)
    if found is None:
        raise SystemExit(f"no sign-in form: {form.status_code} {form.text[:300]}")
    answer = await client.post("/signin", data={"csrf_token": found.group(1), "token": token})
    if answer.status_code != 303:
        raise SystemExit(f"sign-in refused: {answer.status_code} {answer.text[:300]}")
    return client


async def main(rows: int, samples: int) -> None:
    async with scratch_stores("console") as stores:
        filled = await _fill(stores, rows)
        await _fill_packs(stores, PACKS)
        ports, processes = _start(stores)
        try:
            for port in ports.values():
                await wait_ready(port, "/health")
            results = await _measure(ports, samples)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=10)
    _report(rows, samples, filled, results)


Timings = dict[str, tuple[list[float], list[float]]]
"""Each page's times and its baseline's, by page."""


async def _measure(ports: dict[str, int], samples: int) -> Timings:
    """Each console page's times, with its baseline's (the API requests it is made of)."""
    console = f"http://127.0.0.1:{ports['console']}"
    gateway = httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['gateway']}", timeout=30)
    user_api = {"Authorization": f"Bearer {USER_TOKEN}"}
    root_api = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    user = await _signed_in(console, USER_TOKEN)
    root = await _signed_in(console, OPERATOR_TOKEN)
    rng = random.Random(21)
    results: dict[str, tuple[list[float], list[float]]] = {}
    try:
        ids = [
            call["conclave_id"]
            for call in (
                await gateway.get("/calls", params={"limit": 100}, headers=root_api)
            ).json()["calls"]
        ]
        await _timed(20, lambda: root.get("/calls"))  # warm-up: connections, plans, templates

        def api(path: str, params: dict[str, str]) -> Awaitable[httpx.Response]:
            return gateway.get(path, params=params, headers=root_api)

        async def api_call_and_verify() -> httpx.Response:
            chosen = rng.choice(ids)
            await gateway.get(f"/calls/{chosen}/verify", headers=root_api)
            return await gateway.get(f"/calls/{chosen}", headers=root_api)

        async def api_overview() -> httpx.Response:
            answer = None
            async with httpx.AsyncClient(timeout=30) as direct:
                for port in (p for n, p in ports.items() if n != "console"):
                    await direct.get(f"http://127.0.0.1:{port}/health")
                    answer = await direct.get(f"http://127.0.0.1:{port}/metrics")
            assert answer is not None
            return answer

        results["overview (4 services: /health + /metrics)"] = (
            await _timed(samples // 4, lambda: root.get("/overview")),
            await _timed(samples // 4, api_overview),
        )
        results["user: own calls, first page"] = (
            await _timed(samples, lambda: user.get("/calls")),
            await _timed(samples, lambda: gateway.get("/calls", headers=user_api)),
        )
        results["operator: everyone's, first page"] = (
            await _timed(samples, lambda: root.get("/calls")),
            await _timed(samples, lambda: gateway.get("/calls", headers=root_api)),
        )
        results["operator: 50 pages deep by Next"] = (
            await _pages_deep(root, "/calls", console=True),
            await _pages_deep(gateway, "/calls", headers=root_api),
        )
        results["operator: one tool"] = (
            await _timed(samples, lambda: root.get("/calls", params=_tool(rng))),
            await _timed(samples, lambda: api("/calls", _tool(rng))),
        )
        results["operator: failed calls"] = (
            await _timed(samples, lambda: root.get("/calls", params={"status": "failed"})),
            await _timed(samples, lambda: api("/calls", {"status": "failed"})),
        )
        results["operator: a call's page (+ verify)"] = (
            await _timed(samples, lambda: root.get(f"/calls/{rng.choice(ids)}")),
            await _timed(samples, api_call_and_verify),
        )
        results.update(await _measure_evidence(ports, user, root, samples, rng))
    finally:
        for client in (gateway, user, root):
            await client.aclose()
    return results


async def _measure_evidence(
    ports: dict[str, int],
    user: httpx.AsyncClient,
    root: httpx.AsyncClient,
    samples: int,
    rng: random.Random,
) -> Timings:
    """The Evidence pages against the edge requests they are made of."""
    edge = httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['edge']}", timeout=30)
    user_api = {"Authorization": f"Bearer {USER_TOKEN}"}
    root_api = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    search = "/api/edge-intake/evidence"
    results: Timings = {}
    try:
        listed = await edge.get(search, params={"limit": 100}, headers=root_api)
        ids = [pack["evidence_id"] for pack in listed.json()["packs"]]

        async def api_pack() -> httpx.Response:
            chosen = rng.choice(ids)
            await edge.get(f"/api/edge-intake/evidence/{chosen}/verify", headers=root_api)
            return await edge.get(f"/api/edge-intake/evidence/{chosen}", headers=root_api)

        def device() -> dict[str, str]:
            return {"device_id": f"device-{rng.randrange(50)}"}

        results["user: own packs, first page"] = (
            await _timed(samples, lambda: user.get("/evidence")),
            await _timed(samples, lambda: edge.get(search, headers=user_api)),
        )
        results["operator: every pack, first page"] = (
            await _timed(samples, lambda: root.get("/evidence")),
            await _timed(samples, lambda: edge.get(search, headers=root_api)),
        )
        results["operator: packs 50 pages deep by Next"] = (
            await _pages_deep(root, "/evidence", console=True),
            await _pages_deep(edge, search, headers=root_api, cursor_key="next_cursor"),
        )
        results["operator: one device's packs"] = (
            await _timed(samples, lambda: root.get("/evidence", params=device())),
            await _timed(samples, lambda: edge.get(search, params=device(), headers=root_api)),
        )
        results["operator: a pack's page (+ verify)"] = (
            await _timed(samples, lambda: root.get(f"/evidence/{rng.choice(ids)}")),
            await _timed(samples, api_pack),
        )
    finally:
        await edge.aclose()
    return results


def _tool(rng: random.Random) -> dict[str, str]:
    return {"tool": f"tool_{rng.randrange(TOOLS)}"}


async def _pages_deep(
    client: httpx.AsyncClient,
    path: str,
    console: bool = False,
    headers: dict[str, str] | None = None,
    cursor_key: str = "next_cursor",
) -> list[float]:
    times: list[float] = []
    target_path, params = path, {}
    for _ in range(50):
        started = time.perf_counter()
        answer = await client.get(target_path, params=params, headers=headers)
        times.append((time.perf_counter() - started) * 1000)
        if console:
            found = _NEXT.search(answer.text)
            if found is None:
                break
            target_path, params = found.group(1).replace("&amp;", "&"), {}
        else:
            params = {"cursor": answer.json()[cursor_key]}
    return times


def _report(rows: int, samples: int, filled: float, results: Timings) -> None:
    print(
        f"console benchmark: {rows:,} audit rows (filled and analysed in {filled:.0f} s) and "
        f"{PACKS:,} Evidence Packs, "
        f"{samples} requests per page one at a time, {time.strftime('%Y-%m-%d')}"
    )
    print("| page | console p50 ms | console p99 ms | its API requests p99 ms | ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, (page, api) in results.items():
        page99, api99 = percentile(page, 0.99), percentile(api, 0.99)
        print(
            f"| {name} | {statistics.median(page):.1f} | {page99:.1f} | {api99:.1f} "
            f"| {page99 / api99:.2f} |"
        )
    worst_name, worst = max(
        ((name, percentile(page, 0.99)) for name, (page, _) in results.items()),
        key=lambda item: item[1],
    )
    print(f"worst page p99: {worst:.1f} ms ({worst_name})")
    target(
        f"console: every page p99 at {rows:,} audit rows and {PACKS:,} packs (issue 21)",
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
