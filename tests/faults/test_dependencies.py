"""Redis, PostgreSQL and semantic memory going away and coming back under running services.

Each outage is a cut of the proxy between the services and that server (new connections refused,
established ones dropped); the services are never restarted: the same process ids must serve
before, during and after.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from conclave.collector.semantic.edge_shard import EdgeStore
from tests.collector.conftest import JsonApi
from tests.conftest import eventually
from tests.edge import samples
from tests.faults.conftest import AUTH, LEASE_SECONDS, ServiceProcess, Topology
from tests.faults.invariants import (
    TOOL_CHANNEL,
    Ledger,
    check_all_expeditions_settle,
    check_dispatches,
    check_executions,
    check_expeditions,
    check_uploads,
    gather_answers,
)
from tests.httpserver import reserved_port

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

SERVICES = ("gateway", "edge", "collector", "graph")
# /health reports the store and the bus; the graph's is the spec's heartbeat health only.
CHECKED = ("gateway", "edge", "collector")


def _key(case: str) -> str:
    return f"{case}-{uuid.uuid4().hex[:10]}"


class Traffic:
    """One request of each kind, recorded in the ledgers of the case."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.executions = Ledger()
        self.uploads = Ledger()
        self.dispatches = Ledger()
        self.expeditions: dict[str, str] = {}
        self._clients = {name: topology.client(name) for name in SERVICES}

    async def close(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self._clients.values()))

    async def execute(self) -> httpx.Response:
        key = _key("exec")
        self.executions.sent.add(key)
        answer = await self._clients["gateway"].post(
            "/execute",
            json={"tool": "echo", "args": {"message": key}},
            headers={"Idempotency-Key": key},
        )
        if answer.status_code == 200:
            self.executions.acked[key] = answer.json()["conclave_id"]
        return answer

    async def upload(self) -> httpx.Response:
        key = _key("upload")
        self.uploads.sent.add(key)
        answer = await self._clients["edge"].post(
            "/api/edge-intake/image",
            files={"file": ("photo.png", samples.png(16, len(self.uploads.sent) + 8))},
            headers={"Idempotency-Key": key},
        )
        if answer.status_code == 200:
            self.uploads.acked[key] = answer.json()["evidence_ids"]
        return answer

    async def dispatch(self) -> httpx.Response:
        correlation_id = _key("dispatch")
        self.dispatches.sent.add(correlation_id)
        answer = await self._clients["graph"].post(
            "/dispatch",
            json={"query": "where is the bridge", "validated_entities": ["bridge-1"]},
            headers={"X-Correlation-ID": correlation_id},
        )
        if answer.status_code == 200:
            self.dispatches.acked[correlation_id] = answer.json()["trace_id"]
        return answer

    async def expedition(self, collection: str = "outages", rows: int = 3) -> httpx.Response:
        items = self.topology.data_dir / f"{collection}.jsonl"
        items.write_text("".join(f'{{"id": {i}, "name": "bridge {i}"}}\n' for i in range(rows)))
        answer = await self._clients["collector"].post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "target_collections": [collection],
                "parameters": {"sources": [{"type": "file", "path": str(items), "key": "id"}]},
            },
        )
        if answer.status_code == 202:
            self.expeditions[answer.json()["expedition_id"]] = collection
        return answer

    async def check(self) -> None:
        """The invariants on everything this case sent."""
        await check_executions(self.topology, self.executions)
        await check_uploads(self.topology, self.uploads)
        await check_dispatches(self.topology, self.dispatches)
        await check_expeditions(self.topology, self.expeditions)


def _pids(topology: Topology) -> dict[str, int]:
    return {name: p.process.pid for name, p in topology.services.items() if p.process}


async def _health(topology: Topology, name: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(topology.url(name) + "/health")


async def _all_healthy(topology: Topology) -> bool:
    answers = await asyncio.gather(*(_health(topology, name) for name in SERVICES))
    return all(answer.status_code == 200 for answer in answers)


def _problem(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["code"] == code, answer.text


async def _until_ok(send: Callable[[], Awaitable[httpx.Response]], ok: int) -> httpx.Response:
    """Repeat ``send`` until it is answered ``ok`` (after an outage a pool may still hold a dead
    connection: its first statement fails with 503 and the pool drops it)."""
    answers: list[httpx.Response] = []

    async def attempt() -> httpx.Response | None:
        answers.append(await send())
        return answers[-1] if answers[-1].status_code == ok else None

    return await eventually(attempt, timeout=60)


@pytest.fixture
async def traffic(topology: Topology) -> Any:
    traffic = Traffic(topology)
    yield traffic
    await traffic.close()


async def test_redis_cut_then_restored(topology: Topology, traffic: Traffic) -> None:
    pids = _pids(topology)
    await topology.redis.cut()
    try:
        for name in CHECKED:
            health = await _health(topology, name)
            assert health.status_code == 503, health.text
            assert health.json()["checks"]["bus"]["status"] == "down"
        # The bus is not on the request path: work is accepted, events wait in the outboxes.
        for _ in range(3):
            assert (await traffic.execute()).status_code == 200
            assert (await traffic.upload()).status_code == 200
            assert (await traffic.dispatch()).status_code == 200
        assert (await traffic.expedition()).status_code == 202
        # Nothing announced yet: the events wait in the outboxes.
        entries = await topology.entries(TOOL_CHANNEL)
        announced = {entry["payload"]["conclave_id"] for entry in entries}
        assert not announced & set(traffic.executions.acked.values())
    finally:
        await topology.redis.restore()
    await eventually(lambda: _all_healthy(topology), timeout=60)
    await traffic.check()
    assert _pids(topology) == pids  # recovered without a restart


async def test_postgres_cut_then_restored(topology: Topology, traffic: Traffic) -> None:
    pids = _pids(topology)
    pages = [[{"id": f"{page}-{i}"} for i in range(5)] for page in range(10)]
    async with JsonApi(pages, delay=0.2) as api, topology.client("collector") as collector:
        running = await collector.post("/expedition/run", json=api.discovery("cut"))
        assert running.status_code == 202
        traffic.expeditions[running.json()["expedition_id"]] = "cut"

        async def fetching() -> bool:
            return api.requests >= 2

        await eventually(fetching, timeout=60)
        # Cut the store while an expedition runs and requests are in flight.
        burst = [traffic.execute() for _ in range(6)] + [traffic.upload() for _ in range(3)]
        answers = asyncio.gather(*burst, return_exceptions=True)
        await topology.postgres.cut()
        cut_at = asyncio.get_running_loop().time()
        try:
            for answer in await answers:
                assert not isinstance(answer, Exception), answer
                assert answer.status_code in (200, 503), answer.text
            _problem(await traffic.execute(), 503, "STORE_UNAVAILABLE")
            _problem(await traffic.upload(), 503, "STORE_UNAVAILABLE")
            _problem(await traffic.dispatch(), 503, "STORE_UNAVAILABLE")
            _problem(await traffic.expedition(), 503, "STORE_UNAVAILABLE")
            _problem(
                await collector.get(f"/expedition/status/{running.json()['expedition_id']}"),
                503,
                "STORE_UNAVAILABLE",
            )
            for name in CHECKED:
                health = await _health(topology, name)
                assert health.status_code == 503, health.text
                assert health.json()["checks"]["store"]["status"] == "down"
            # Hold the outage past the workers' lease, which no worker can renew while the
            # store is away: the recovery has to sort out a lapsed lease, not only a blip.
            await _hold_since(cut_at, seconds=LEASE_SECONDS + 1)
        finally:
            await topology.postgres.restore()
        await _until_ok(traffic.execute, 200)
        await _until_ok(traffic.upload, 200)
        await _until_ok(traffic.dispatch, 200)
        await _until_ok(traffic.expedition, 202)
        await eventually(lambda: _all_healthy(topology), timeout=60)
        await traffic.check()
    rows = await topology.query(
        "SELECT count(*) AS n FROM collected_records WHERE collection = 'cut'"
    )
    assert rows[0].n == 50  # the interrupted run finished, every record once
    assert _pids(topology) == pids


async def _hold_since(started: float, seconds: float) -> None:
    """Keep an outage going until ``seconds`` after ``started`` (a duration, not a wait for a
    condition)."""
    await asyncio.sleep(max(0.0, started + seconds - asyncio.get_running_loop().time()))


async def test_semantic_memory_cut_then_restored(topology: Topology, traffic: Traffic) -> None:
    pids = _pids(topology)
    async with topology.client("collector") as collector:
        await topology.qdrant.cut()
        try:
            health = await _health(topology, "collector")
            assert health.status_code == 200  # degraded, not down: records still collect
            body = health.json()
            assert body["status"] == "degraded"
            assert body["checks"]["semantic_memory"]["status"] == "down"
            _problem(
                await collector.get("/collections/outage/search", params={"q": "bridge"}),
                503,
                "SEMANTIC_MEMORY_UNAVAILABLE",
            )
            assert (await traffic.expedition("outage", rows=5)).status_code == 202
            await check_expeditions(topology, traffic.expeditions)
            record = await collector.get("/collections/outage/records/3")
            assert record.status_code == 200, record.text
            assert await _pending_vectors(topology, "outage") == 5  # delayed, not lost
            assert (await traffic.dispatch()).status_code == 200  # answered, degraded
        finally:
            await topology.qdrant.restore()

        async def searchable() -> Any:
            answer = await collector.get(
                "/collections/outage/search", params={"q": "bridge 3", "limit": 5}
            )
            return answer.json() if answer.status_code == 200 and answer.json()["hits"] else None

        hits = await eventually(searchable, timeout=60)  # the indexer backs off up to 10 s
        assert hits["hits"][0]["record"]["record_key"] == "3", hits

        async def indexed() -> bool:
            return await _pending_vectors(topology, "outage") == 0

        await eventually(indexed, timeout=60)
        listing = (await collector.get("/collections")).json()["collections"]
        [outage] = [item for item in listing if item["name"] == "outage"]
        assert outage["records"] == outage["vectors"] == 5, outage
        health = await _health(topology, "collector")
        assert health.json()["status"] == "healthy", health.text
    await traffic.check()
    assert _pids(topology) == pids


async def _pending_vectors(topology: Topology, collection: str) -> int:
    rows = await topology.query(
        "SELECT count(*) AS n FROM collected_records WHERE collection = :name AND vector_pending",
        name=collection,
    )
    return int(rows[0].n)


async def test_embedded_semantic_memory_held_by_another_process(topology: Topology) -> None:
    # The embedded semantic memory (the default) is a Qdrant Edge shard one process may open at a
    # time. Another process holding it is this mode's "Qdrant unavailable".
    folder = topology.data_dir / "edge-shard"
    holder = EdgeStore.open(folder, 384)
    port = reserved_port()
    env = {
        key: value
        for key, value in topology["collector"].env.items()
        if key != "CONCLAVE_SEMANTIC_MEMORY_URL"
    }
    env.update({"COLLECTOR_SEMANTIC_MEMORY_PATH": str(folder), "COLLECTOR_API_PORT": str(port)})
    log = folder.with_suffix(".log")
    collector = ServiceProcess("local", ["serve", "collector"], env, log, port)
    collector.start()
    try:
        await collector.ready()
        async with httpx.AsyncClient(base_url=collector.url, headers=AUTH) as client:
            health = (await client.get("/health")).json()
            assert health["checks"]["semantic_memory"]["status"] == "down"
            _problem(
                await client.get("/collections/x/search", params={"q": "a"}),
                503,
                "SEMANTIC_MEMORY_UNAVAILABLE",
            )
            holder.close()

            async def back() -> bool:
                answer = await client.get("/health")
                return answer.json()["checks"]["semantic_memory"]["status"] == "up"

            await eventually(back, timeout=60)
    finally:
        with contextlib.suppress(Exception):
            holder.close()  # already released above when the test got that far
        collector.stop()


async def test_every_accepted_expedition_settles(topology: Topology) -> None:
    await check_all_expeditions_settle(topology)
    assert await _all_healthy(topology)
    answers = await gather_answers(*(_health(topology, name) for name in SERVICES))
    assert all(answer.status_code == 200 for answer in answers)
