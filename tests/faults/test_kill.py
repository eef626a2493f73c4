"""kill -9 of each service process mid-request or mid-work, then a restart and the invariants."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.collector.conftest import JsonApi
from tests.conftest import eventually
from tests.edge import samples
from tests.faults.conftest import AUTH, TOOL_TIMEOUT_SECONDS, Topology
from tests.faults.invariants import (
    Ledger,
    check_all_expeditions_settle,
    check_dispatches,
    check_executions,
    check_expeditions,
    check_uploads,
    gather_answers,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def _key(case: str) -> str:
    return f"{case}-{uuid.uuid4().hex[:10]}"


async def _running_calls(topology: Topology, keys: list[str]) -> int:
    rows = await topology.query(
        "SELECT count(*) AS n FROM mcp_tool_calls WHERE status = 'running' "
        "AND idempotency_key = ANY(:keys)",
        keys=keys,
    )
    return int(rows[0].n)


async def test_gateway_killed_during_a_burst_of_executions(topology: Topology) -> None:
    ledger = Ledger()

    async def execute(client: httpx.AsyncClient, key: str, delay_ms: int) -> httpx.Response:
        ledger.sent.add(key)
        return await client.post(
            "/execute",
            json={"tool": "slow_echo", "args": {"message": key, "delay_ms": delay_ms}},
            headers={"Idempotency-Key": key},
        )

    async with topology.client("gateway") as client:
        quick = [_key("quick") for _ in range(10)]
        slow = [_key("slow") for _ in range(20)]
        burst = [asyncio.create_task(execute(client, key, 0)) for key in quick]
        await asyncio.wait(burst)
        burst += [asyncio.create_task(execute(client, key, 3000)) for key in slow]
        # Kill once every slow call is inside its tool (recorded "running", not yet answered).
        await eventually(lambda: _all_running(topology, slow), timeout=15)
        topology["gateway"].kill()
        topology.notes["orphans"] = (slow, time.monotonic())
        for key, answer in zip(quick + slow, await gather_answers(*burst), strict=True):
            if isinstance(answer, httpx.Response) and answer.status_code == 200:
                ledger.acked[key] = answer.json()["conclave_id"]
        assert set(ledger.acked) == set(quick)  # answered before the kill
        assert not set(ledger.acked) & set(slow)  # cut off mid-run

        await topology["gateway"].restart()
        # A client retries what was not acknowledged, with the same keys: never a second run.
        for key in ledger.unacked():
            retry = await execute(client, key, 3000)  # the same request again
            assert retry.status_code in (200, 409, 503), retry.text
            if retry.status_code == 200:
                ledger.acked[key] = retry.json()["conclave_id"]
            elif retry.status_code == 409:
                assert retry.json()["code"] == "IDEMPOTENCY_IN_PROGRESS"
            else:
                # A slow restart (a loaded machine) let the tool's time-out pass: the sweep has
                # settled the call as interrupted, and the retry is answered with that outcome.
                assert retry.json()["code"] == "INTERRUPTED", retry.text
        fresh = _key("after")
        answer = await execute(client, fresh, 0)
        assert answer.status_code == 200, answer.text
        ledger.acked[fresh] = answer.json()["conclave_id"]
    await check_executions(topology, ledger)


async def _all_running(topology: Topology, keys: list[str]) -> bool:
    return await _running_calls(topology, keys) == len(keys)


async def test_calls_cut_off_by_a_gateway_crash_are_settled(topology: Topology) -> None:
    # The calls the previous case left inside their tool when it killed the gateway: once their
    # time-out has passed, nothing can still be running them.
    if "orphans" not in topology.notes:
        pytest.skip("needs the burst of the previous case")
    orphans, killed_at = topology.notes["orphans"]
    # The sweeper's grace (2 s) and interval (1 s), plus room for the restarted gateway to come
    # up on a loaded machine (the full suite once needed more than 8 s in all; give it 30).
    settle_by = killed_at + TOOL_TIMEOUT_SECONDS + 3 + 30

    async def settled() -> bool:
        return await _running_calls(topology, orphans) == 0

    await eventually(settled, timeout=max(settle_by - time.monotonic(), 0.5))


def _multipart(filename: str, content: bytes) -> tuple[list[bytes], str]:
    boundary = uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    chunk = 16 * 1024
    body = [head] + [content[i : i + chunk] for i in range(0, len(content), chunk)] + [tail]
    return body, f"multipart/form-data; boundary={boundary}"


async def test_edge_killed_mid_upload(topology: Topology) -> None:
    ledger = Ledger()
    audio = samples.wav(seconds=20)  # ~320 KB, streamed slowly
    parts, content_type = _multipart("long.wav", audio)
    half_sent = asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        for index, part in enumerate(parts):
            if index == len(parts) // 2:
                half_sent.set()
            yield part
            await asyncio.sleep(0.05)

    async def upload(client: httpx.AsyncClient, key: str, content: bytes) -> httpx.Response:
        ledger.sent.add(key)
        return await client.post(
            "/api/edge-intake/image",
            files={"file": (f"{key}.png", content)},
            headers={"Idempotency-Key": key},
        )

    async with topology.client("edge") as client:
        long_key = _key("long")
        ledger.sent.add(long_key)
        streamed = asyncio.create_task(
            client.post(
                "/api/edge-intake/audio",
                content=slow_body(),
                headers={"Idempotency-Key": long_key, "Content-Type": content_type},
            )
        )
        small = [_key("small") for _ in range(12)]
        burst = [asyncio.create_task(upload(client, key, samples.png(8 + i))) for i, key in
                 enumerate(small)]  # fmt: skip
        await half_sent.wait()
        topology["edge"].kill()
        answers = await gather_answers(streamed, *burst)
        assert isinstance(answers[0], httpx.TransportError)  # the long upload was cut off
        for key, answer in zip([long_key, *small], answers, strict=True):
            if isinstance(answer, httpx.Response) and answer.status_code == 200:
                ledger.acked[key] = answer.json()["evidence_ids"]

        await topology["edge"].restart()
        # The cut-off upload left nothing behind: its retry creates the pack.
        for key in ledger.unacked():
            if key == long_key:
                retry = await client.post(
                    "/api/edge-intake/audio",
                    files={"file": ("long.wav", audio)},
                    headers={"Idempotency-Key": key},
                )
            else:
                retry = await upload(client, key, samples.png(8 + small.index(key)))
            assert retry.status_code == 200, retry.text
            ledger.acked[key] = retry.json()["evidence_ids"]
        for ids in ledger.acked.values():
            for evidence_id in ids:
                path = f"/api/edge-intake/evidence/{evidence_id}/verify"

                async def proven(path: str = path) -> bool:
                    # Valid once the checkpoint covering the pack is signed (about a second).
                    return bool((await client.get(path)).json()["valid"])

                await eventually(proven, timeout=60)
    await check_uploads(topology, ledger)


async def _pages_fetched(api: JsonApi, pages: int) -> bool:
    return api.requests >= pages


async def test_collector_worker_killed_mid_expedition(topology: Topology) -> None:
    pages = [[{"id": f"{page}-{i}"} for i in range(5)] for page in range(12)]
    async with JsonApi(pages, delay=0.2) as api, topology.client("collector") as client:
        response = await client.post("/expedition/run", json=api.discovery("killed"))
        assert response.status_code == 202, response.text
        expedition_id = response.json()["expedition_id"]
        await eventually(lambda: _pages_fetched(api, 3), timeout=60)
        topology["worker"].kill()
        await topology["worker"].restart()
        rows = await check_expeditions(topology, [expedition_id])
    row = rows[expedition_id]
    assert row.status == "completed", row.errors
    # Claimed again once the dead worker's lease lapsed (a busy machine may add a lapse).
    assert row.attempts >= 2 and row.errors[0]["code"] == "WORKER_LOST", row.errors
    [count] = await topology.query(
        "SELECT count(*) AS n FROM collected_records WHERE collection = 'killed'"
    )
    assert count.n == 60  # every record once, none twice


async def test_collector_api_killed_during_a_burst_of_submissions(topology: Topology) -> None:
    items = topology.data_dir / "burst.jsonl"
    items.write_text("".join(f'{{"id": {i}}}\n' for i in range(3)))
    ledger = Ledger()

    async def submit(client: httpx.AsyncClient, correlation_id: str) -> httpx.Response:
        ledger.sent.add(correlation_id)
        return await client.post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "target_collections": ["burst"],
                "parameters": {"sources": [{"type": "file", "path": str(items), "key": "id"}]},
            },
            headers={"X-Correlation-ID": correlation_id},
        )

    async with topology.client("collector") as client:
        answers = await _burst_then_kill(topology, "collector", lambda key: submit(client, key))
        for correlation_id, answer in answers:
            if isinstance(answer, httpx.Response) and answer.status_code == 202:
                ledger.acked[correlation_id] = answer.json()["expedition_id"]
        await topology["collector"].restart()
        after = await submit(client, _key("after"))
        assert after.status_code == 202, after.text
        ledger.acked[after.request.headers["X-Correlation-ID"]] = after.json()["expedition_id"]
    rows = await topology.query(
        "SELECT expedition_id, correlation_id FROM collector_expeditions "
        "WHERE correlation_id = ANY(:ids)",
        ids=sorted(ledger.sent),
    )
    by_correlation: dict[str, list[str]] = {}
    for row in rows:
        by_correlation.setdefault(row.correlation_id, []).append(row.expedition_id)
    assert all(len(ids) == 1 for ids in by_correlation.values())  # never twice
    for correlation_id, expedition_id in ledger.acked.items():
        assert by_correlation[correlation_id] == [expedition_id]
    await check_expeditions(topology, [row.expedition_id for row in rows])


async def _burst_then_kill(
    topology: Topology, service: str, request: Any, streams: int = 4, acked_before: int = 8
) -> list[tuple[str, Any]]:
    """Send ``request(correlation_id)`` from ``streams`` concurrent loops; kill ``service`` once
    ``acked_before`` were answered, so the others are cut off in flight. Returns (correlation id,
    answer or transport error)."""
    answered: list[tuple[str, Any]] = []
    killed = asyncio.Event()

    async def loop() -> None:
        while not killed.is_set():
            correlation_id = _key("burst")
            try:
                answer: Any = await request(correlation_id)
            except httpx.TransportError as exc:
                answer = exc
            answered.append((correlation_id, answer))
            if isinstance(answer, Exception):
                return

    loops = [asyncio.create_task(loop()) for _ in range(streams)]

    async def enough() -> bool:
        return len(answered) >= acked_before

    await eventually(enough, timeout=30)
    topology[service].kill()
    killed.set()
    await asyncio.gather(*loops)
    return answered


async def test_graph_killed_mid_dispatch(topology: Topology) -> None:
    ledger = Ledger()

    async def dispatch(client: httpx.AsyncClient, correlation_id: str) -> httpx.Response:
        ledger.sent.add(correlation_id)
        return await client.post(
            "/dispatch",
            json={"query": "compare the two bridges", "validated_entities": ["b-1", "b-2"]},
            headers={"X-Correlation-ID": correlation_id},
        )

    async with topology.client("graph") as client:
        answers = await _burst_then_kill(topology, "graph", lambda key: dispatch(client, key))
        assert any(isinstance(answer, httpx.TransportError) for _, answer in answers)
        for correlation_id, answer in answers:
            if isinstance(answer, httpx.Response) and answer.status_code == 200:
                ledger.acked[correlation_id] = answer.json()["trace_id"]
        await topology["graph"].restart()
        after = await dispatch(client, _key("after"))
        assert after.status_code == 200, after.text
        ledger.acked[after.request.headers["X-Correlation-ID"]] = after.json()["trace_id"]
    await check_dispatches(topology, ledger)


async def test_every_accepted_expedition_settles(topology: Topology) -> None:
    # Bridged evidence_ingest runs (one per Evidence Pack) included.
    await check_all_expeditions_settle(topology)
    for name in ("gateway", "edge", "collector", "graph"):
        async with httpx.AsyncClient(headers=AUTH) as client:
            assert (await client.get(topology.url(name) + "/health")).status_code == 200
