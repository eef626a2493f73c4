"""Store or bus down: clear 503 answers, runs and events wait, everything resumes by itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest
from sqlalchemy import func, select

from conclave.collector.events import QUEUED, state_channel
from conclave.platform.bus.redis_streams import RedisStreamsBus
from conclave.platform.db.schema import outbox_events
from tests.collector.conftest import (
    collector_app,
    collector_settings,
    inbox,
    wait_terminal,
    write_jsonl,
)
from tests.conftest import POSTGRES_URL, REDIS_URL, Backend, eventually, isolated_postgres
from tests.netproxy import CuttableProxy, through


async def _proxy(url: str, default_port: int) -> CuttableProxy:
    parsed = urlparse(url.replace("+asyncpg", ""))
    proxy = CuttableProxy(parsed.hostname or "127.0.0.1", parsed.port or default_port)
    await proxy.start()
    return proxy


@pytest.fixture
async def redis_proxy(redis_client) -> AsyncIterator[CuttableProxy]:
    proxy = await _proxy(REDIS_URL, 6379)
    yield proxy
    await proxy.close()


def _discovery(path) -> dict:
    return {
        "expedition_type": "discovery",
        "parameters": {"sources": [{"type": "file", "path": str(path), "key": "id"}]},
    }


async def test_store_down_answers_503_and_recovers_without_restart(redis_bus, tmp_path) -> None:
    source = write_jsonl(inbox(tmp_path) / "items.jsonl", [{"id": i} for i in range(3)])
    proxy = await _proxy(POSTGRES_URL, 5432)
    proxied = through(proxy, POSTGRES_URL)
    try:
        async with isolated_postgres(proxied) as engine:
            backend = Backend("production", engine, redis_bus)
            async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
                before = (await client.post("/expedition/run", json=_discovery(source))).json()
                await wait_terminal(client, before["expedition_id"])

                await proxy.cut()
                for response in (
                    await client.post("/expedition/run", json=_discovery(source)),
                    await client.get(f"/expedition/status/{before['expedition_id']}"),
                ):
                    assert response.status_code == 503
                    assert response.json()["code"] == "STORE_UNAVAILABLE"
                health = await client.get("/health")
                assert health.status_code == 503
                assert health.json()["checks"]["store"]["status"] == "down"

                await proxy.restore()  # same app, no restart
                assert (await client.get("/health")).status_code == 200
                after = await client.post("/expedition/run", json=_discovery(source))
                assert after.status_code == 202
                record = await wait_terminal(client, after.json()["expedition_id"])
                assert record["status"] == "completed", record["errors"]
                assert record["results"]["records"]["unchanged"] == 3
    finally:
        await proxy.close()


async def test_bus_down_runs_complete_and_events_wait_in_the_outbox(
    postgres_engine, redis_client, redis_prefix, redis_proxy, tmp_path
) -> None:
    source = write_jsonl(inbox(tmp_path) / "items.jsonl", [{"id": i} for i in range(3)])
    bus = RedisStreamsBus(f"redis://127.0.0.1:{redis_proxy.port}/0", stream_prefix=redis_prefix)
    backend = Backend("production", postgres_engine, bus)
    try:
        async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
            await redis_proxy.cut()
            ids = []
            for _ in range(3):
                response = await client.post("/expedition/run", json=_discovery(source))
                assert response.status_code == 202  # accepting work needs only the store
                ids.append(response.json()["expedition_id"])
            for expedition_id in ids:
                record = await wait_terminal(client, expedition_id)
                assert record["status"] == "completed", record["errors"]
            health = await client.get("/health")
            assert health.status_code == 503
            assert health.json()["checks"]["bus"]["status"] == "down"

            async def unpublished() -> int:
                async with postgres_engine.connect() as connection:
                    return int(
                        await connection.scalar(
                            select(func.count())
                            .select_from(outbox_events)
                            .where(outbox_events.c.published_at.is_(None))
                        )
                    )

            # queued + started + completed for each run, all held back
            assert await unpublished() == 9
            assert not await redis_client.exists(redis_prefix + state_channel("completed"))

            await redis_proxy.restore()

            async def delivered() -> list | None:
                entries = await redis_client.xrange(redis_prefix + state_channel("completed"))
                return entries if len(entries) >= 3 else None

            entries = await eventually(delivered, timeout=60)
            await eventually(lambda: _none_left(unpublished))
            assert (await client.get("/health")).status_code == 200
        completed = sorted(f["payload"] for _, f in entries)
        assert len(completed) == 3 and all(any(i in p for p in completed) for i in ids)
        assert await redis_client.xlen(redis_prefix + QUEUED) == 3
        assert await redis_client.xlen(redis_prefix + state_channel("started")) == 3
    finally:
        await bus.close()


async def _none_left(unpublished) -> bool:
    return await unpublished() == 0
