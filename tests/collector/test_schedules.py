"""Cron schedules: stored, listed, removed, and each tick fired once across replicas."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import update

from conclave.collector import store
from conclave.collector.scheduler import Scheduler
from conclave.platform.clock import utc_now
from tests.collector.conftest import collector_app, collector_settings


async def test_schedule_fires_once_per_tick_with_two_replicas(backend, tmp_path) -> None:
    settings = collector_settings(tmp_path, run_workers=False)
    async with collector_app(backend, settings) as (client, app):
        bad = await client.post(
            "/schedules", json={"name": "x", "cron": "every day", "expedition_type": "audit"}
        )
        assert bad.status_code == 422
        created = await client.post(
            "/schedules",
            json={"name": "nightly-audit", "cron": "0 3 * * *", "expedition_type": "audit"},
        )
        assert created.status_code == 201
        duplicate = await client.post(
            "/schedules",
            json={"name": "nightly-audit", "cron": "0 4 * * *", "expedition_type": "audit"},
        )
        assert duplicate.status_code == 409

        # The tick has come (as if 03:00 just passed).
        async with backend.engine.begin() as connection:
            await connection.execute(
                update(store.schedules).values(next_fire_at=utc_now() - timedelta(seconds=1))
            )
        service = app.state.collector.service
        replicas = [Scheduler(service, 1.0) for _ in range(2)]
        fired = await asyncio.gather(*(replica.fire_due() for replica in replicas))
        assert sorted(len(ids) for ids in fired) == [0, 1]
        assert await asyncio.gather(*(replica.fire_due() for replica in replicas)) == [[], []]

        [schedule] = (await client.get("/schedules")).json()["schedules"]
        assert schedule["last_expedition_id"] == next(i for ids in fired for i in ids)
        assert schedule["next_fire_at"].endswith("03:00:00.000000Z")
        history = (await client.get("/expedition/history")).json()
        # A tick's expedition is the schedule creator's (here the anonymous user of auth off).
        [fired_run] = history["expeditions"]
        assert (fired_run["requested_by"], fired_run["correlation_id"]) == (
            "anonymous",
            "schedule:nightly-audit",
        )

        assert (await client.delete("/schedules/nightly-audit")).status_code == 204
        assert (await client.delete("/schedules/nightly-audit")).status_code == 404
