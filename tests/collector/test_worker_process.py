"""A real worker process killed with SIGKILL mid-run: another worker finishes its expedition."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from tests.collector.conftest import (
    LOCAL_API,
    LOCAL_API_ENV,
    JsonApi,
    collector_app,
    collector_settings,
    wait_status,
    wait_terminal,
)
from tests.conftest import Backend, eventually


async def _fetched(api: JsonApi, pages: int) -> bool:
    return api.requests >= pages


async def test_kill_9_of_a_worker_mid_run(sqlite_engine, memory_bus, tmp_path) -> None:
    # Embedded mode: the worker process and this test share the SQLite file (the queue).
    backend = Backend("embedded", sqlite_engine, memory_bus)
    env = {
        **os.environ,
        "CONCLAVE_DATA_DIR": str(tmp_path),
        "CONCLAVE_AUTO_MIGRATE": "false",
        "CONCLAVE_LOG_LEVEL": "WARNING",
        "COLLECTOR_SEMANTIC_MEMORY_PATH": str(tmp_path / "worker-qdrant"),
        "COLLECTOR_LEASE_SECONDS": "2",
        "COLLECTOR_POLL_SECONDS": "0.1",
        "COLLECTOR_BRIDGE_CHANNELS": "{}",
        "COLLECTOR_LOAD_ENTRY_POINTS": "false",
        **LOCAL_API_ENV,
    }
    pages = [[{"id": f"{page}-{i}"} for i in range(5)] for page in range(12)]
    async with JsonApi(pages, delay=0.25) as api:
        quiet = collector_settings(tmp_path, run_workers=False)
        async with collector_app(backend, quiet) as (client, _app):
            response = await client.post("/expedition/run", json=api.discovery())
            expedition_id = response.json()["expedition_id"]
            worker = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "conclave.cli.main", "worker", "collector", env=env
            )
            try:
                running = await wait_status(client, expedition_id, "running", timeout=30)
                assert running["worker_id"].split(":")[1] == str(worker.pid)
                await eventually(lambda: _fetched(api, 3), timeout=60)
            finally:
                worker.send_signal(signal.SIGKILL)
                await worker.wait()
            assert worker.returncode == -signal.SIGKILL

        settings = collector_settings(tmp_path, **LOCAL_API)
        async with collector_app(backend, settings) as (client, _app):
            record = await wait_terminal(client, expedition_id, timeout=30)
    assert record["status"] == "completed", record["errors"]
    assert record["attempts"] == 2, record["errors"]
    assert record["errors"][0]["code"] == "WORKER_LOST"
    assert (
        record["results"]["records"]["inserted"] + record["results"]["records"]["unchanged"] == 60
    )
