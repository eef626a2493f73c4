"""Real `conclave worker collector` processes sharing one PostgreSQL + Redis deployment."""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select, text

from conclave.collector.events import QUEUED, state_channel
from conclave.collector.listeners import WAKE_GROUP_PREFIX
from conclave.collector.store.tables import records as collected_records
from tests.collector.conftest import (
    LOCAL_API_ENV,
    JsonApi,
    collector_app,
    collector_settings,
    wait_status,
    wait_terminal,
)
from tests.conftest import POSTGRES_URL, REDIS_URL, Backend, eventually

RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3}


@asynccontextmanager
async def worker_processes(
    backend: Backend, prefix: str, folders: list[Path], **env: str
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """`conclave worker collector` processes on this test's schema and stream prefix, one per data
    folder in ``folders``, stopped together at the end."""
    async with backend.engine.connect() as connection:
        schema = await connection.scalar(text("SELECT current_schema()"))
    processes = []
    try:
        for folder in folders:
            await asyncio.to_thread(folder.mkdir)
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "conclave.cli.main",
                "worker",
                "collector",
                env={
                    **os.environ,
                    "CONCLAVE_DATABASE_URL": POSTGRES_URL,
                    "CONCLAVE_DATABASE_SCHEMA": schema,
                    "CONCLAVE_BUS_URL": REDIS_URL,
                    "BUS_STREAM_PREFIX": prefix,
                    "CONCLAVE_DATA_DIR": str(folder),
                    "CONCLAVE_AUTO_MIGRATE": "false",
                    "CONCLAVE_LOG_LEVEL": "WARNING",
                    "CONCLAVE_OUTBOX_POLL_SECONDS": "0.05",
                    "COLLECTOR_WORKER_CONCURRENCY": "1",
                    "COLLECTOR_LEASE_SECONDS": "3",
                    "COLLECTOR_BRIDGE_CHANNELS": "{}",
                    "COLLECTOR_LOAD_ENTRY_POINTS": "false",
                    **env,
                },
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            processes.append(process)
        yield processes
    finally:
        # Graceful (unfinished runs go back to the queue), and all at once: each process takes
        # seconds to stop, which one after another would add up.
        running = [process for process in processes if process.returncode is None]
        for process in running:
            process.terminate()
        await asyncio.gather(*(process.wait() for process in running))


async def wait_listening(redis_client, prefix: str, count: int) -> None:
    """Until ``count`` worker processes read the wake-up channel (each has its own group)."""

    async def ready() -> bool:
        if not await redis_client.exists(prefix + QUEUED):
            return False
        groups = await redis_client.xinfo_groups(prefix + QUEUED)
        return sum(g["name"].startswith(WAKE_GROUP_PREFIX) for g in groups) >= count

    await eventually(ready, timeout=60)


def _slow(api: JsonApi, priority: str, collection: str) -> dict:
    return {
        "expedition_type": "discovery",
        "priority": priority,
        "target_collections": [collection],
        "parameters": {
            "sources": [{"type": "http_json", "url": api.url, "records_path": "data", "key": "id"}]
        },
    }


async def test_two_worker_processes_share_20_expeditions(
    postgres_engine, redis_bus, redis_client, redis_prefix, tmp_path
) -> None:
    backend = Backend("production", postgres_engine, redis_bus)
    quiet = collector_settings(tmp_path, run_workers=False)
    folders = [tmp_path / "w1", tmp_path / "w2"]
    # The worker processes first: they start while this process starts the collector.
    async with (
        worker_processes(backend, redis_prefix, folders, **LOCAL_API_ENV),
        JsonApi([[{"id": f"r{i}"} for i in range(3)]], delay=0.3) as api,
        collector_app(backend, quiet) as (client, _app),
    ):
        await wait_listening(redis_client, redis_prefix, 2)
        # Keep both workers busy while the 20 are queued, so claims follow priority, not arrival.
        blockers = []
        for i in range(2):
            body = _slow(api, "critical", f"blocker{i}")
            blockers.append((await client.post("/expedition/run", json=body)).json())
        busy = [await wait_status(client, b["expedition_id"], "running") for b in blockers]
        assert len({b["worker_id"] for b in busy}) == 2

        priorities = [p for p in RANK for _ in range(5)]
        random.Random(5).shuffle(priorities)
        ids = {}
        for i, priority in enumerate(priorities):
            response = await client.post("/expedition/run", json=_slow(api, priority, f"c{i}"))
            ids[response.json()["expedition_id"]] = f"c{i}"
        records = [await wait_terminal(client, i, timeout=60) for i in ids]

        async def all_events() -> bool:
            started = await redis_client.xlen(redis_prefix + state_channel("started"))
            done = await redis_client.xlen(redis_prefix + state_channel("completed"))
            return started == done == 22

        await eventually(all_events, timeout=60)  # each run started and completed once

    assert all(r["status"] == "completed" and r["attempts"] == 1 for r in records), records
    assert len({r["worker_id"] for r in records}) == 2  # both processes took a share
    async with postgres_engine.connect() as connection:
        counts = dict(
            (
                await connection.execute(
                    select(collected_records.c.collection, func.count()).group_by(
                        collected_records.c.collection
                    )
                )
            ).all()
        )
    assert all(counts[collection] == 3 for collection in ids.values())
    assert all(r["results"]["records"]["inserted"] == 3 for r in records)

    # Priorities hold across processes: each claim takes the best queued row, so only the two
    # claims racing each other (one per worker) may appear swapped in start order.
    ordered = sorted(records, key=lambda r: datetime.fromisoformat(r["started_at"]))
    ranks = [RANK[r["priority"]] for r in ordered]
    for i, rank in enumerate(ranks):
        assert all(rank <= later for later in ranks[i + 2 :]), ranks


async def test_another_process_starts_a_queued_expedition_at_once(
    postgres_engine, redis_bus, redis_client, redis_prefix, tmp_path
) -> None:
    backend = Backend("production", postgres_engine, redis_bus)
    quiet = collector_settings(tmp_path, run_workers=False)
    # The worker polls every 30 s: starting sooner proves the bus wake-up reached it.
    async with (
        worker_processes(backend, redis_prefix, [tmp_path / "w"], COLLECTOR_POLL_SECONDS="30"),
        collector_app(backend, quiet) as (client, _app),
    ):
        await wait_listening(redis_client, redis_prefix, 1)
        waits = []
        for _ in range(5):
            response = await client.post("/expedition/run", json={"expedition_type": "audit"})
            record = await wait_terminal(client, response.json()["expedition_id"], timeout=60)
            assert record["status"] == "completed"
            waits.append(
                datetime.fromisoformat(record["started_at"])
                - datetime.fromisoformat(record["created_at"])
            )
    assert max(w.total_seconds() for w in waits) < 5, waits


async def test_a_collector_deletes_its_wake_up_group_when_it_stops(
    postgres_engine, redis_bus, redis_client, redis_prefix, tmp_path
) -> None:
    backend = Backend("production", postgres_engine, redis_bus)
    key = redis_prefix + QUEUED

    async def wake_groups() -> set[str]:
        if not await redis_client.exists(key):
            return set()
        groups = await redis_client.xinfo_groups(key)
        return {g["name"] for g in groups if g["name"].startswith(WAKE_GROUP_PREFIX)}

    # Another process's group: a stopping collector deletes only its own.
    other = WAKE_GROUP_PREFIX + "other-process"
    await redis_client.xgroup_create(key, other, id="$", mkstream=True)
    async with collector_app(backend, collector_settings(tmp_path)):
        await eventually(lambda: _more_than(wake_groups, {other}), timeout=60)
    assert await wake_groups() == {other}


async def _more_than(current, known: set[str]) -> bool:
    return len(await current() - known) > 0
