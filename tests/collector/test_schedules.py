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


UNUSABLE_CRONS = [
    "0 0 30 2 *",  # 30 February
    "0 0 31 4 *",  # 31 April
    "0 0 31 2,4 *",
    "* * 31 2 *",
    "*/0 * * * *",
    "0-99999999 * * * *",
    "99999999999999999999 * * * *",
    "0 0 1 1 * 2099",
    "0 0 1 13 *",
    "@reboot",
    "\x00 * * * *",
    "0 0 1 1 \x00",
    "",
    " " * 20,
]


async def test_unusable_cron_expressions_are_a_422_and_store_nothing(backend, tmp_path) -> None:
    settings = collector_settings(tmp_path, run_workers=False)
    async with collector_app(backend, settings) as (client, _app):
        for cron in UNUSABLE_CRONS:
            response = await client.post(
                "/schedules", json={"name": "impossible", "cron": cron, "expedition_type": "audit"}
            )
            assert response.status_code == 422, (cron, response.text)
            assert response.headers["content-type"].startswith("application/problem+json")
            if "\x00" in cron:  # refused at the boundary, before the cron is looked at
                assert response.json()["code"] == "UNSAFE_INPUT", cron
            elif cron:  # an empty cron is refused by the request model already
                assert response.json()["code"] == "INVALID_CRON", cron
        never = await client.post(
            "/schedules", json={"name": "x", "cron": "0 0 30 2 *", "expedition_type": "audit"}
        )
        assert "names no date that exists" in never.json()["detail"]
        assert (await client.get("/schedules")).json()["count"] == 0


async def test_a_stored_schedule_without_a_next_tick_does_not_stop_the_others(
    backend, tmp_path
) -> None:
    settings = collector_settings(tmp_path, run_workers=False)
    async with collector_app(backend, settings) as (client, app):
        for name in ("broken", "hourly"):
            created = await client.post(
                "/schedules", json={"name": name, "cron": "0 * * * *", "expedition_type": "audit"}
            )
            assert created.status_code == 201
        # A row stored before crons were checked (or by an older croniter) and now due.
        async with backend.engine.begin() as connection:
            await connection.execute(
                update(store.schedules).values(next_fire_at=utc_now() - timedelta(seconds=1))
            )
            await connection.execute(
                update(store.schedules)
                .where(store.schedules.c.name == "broken")
                .values(cron="0 0 30 2 *")
            )
        scheduler = Scheduler(app.state.collector.service, 1.0)
        [fired] = await scheduler.fire_due()
        history = (await client.get("/expedition/history")).json()
        assert [e["expedition_id"] for e in history["expeditions"]] == [fired]
        fired_row = history["expeditions"][0]
        assert fired_row["requested_by"] == "anonymous"  # the creator (auth off)
        assert fired_row["correlation_id"] == "schedule:hourly"


async def test_a_paused_schedule_fires_no_tick_and_resumes_at_its_next_one(
    backend, tmp_path
) -> None:
    settings = collector_settings(tmp_path, run_workers=False)
    async with collector_app(backend, settings) as (client, app):
        created = await client.post(
            "/schedules",
            json={"name": "hourly", "cron": "0 * * * *", "expedition_type": "audit"},
        )
        assert created.status_code == 201
        for body in (
            {"enabled": "no"},
            {"enabled": 0},
            {},
            {"enabled": False, "cron": "* * * * *"},
        ):
            refused = await client.patch("/schedules/hourly", json=body)
            assert refused.status_code == 422, body
        # A page of another site can send text/plain without asking first: refused.
        plain = await client.patch(
            "/schedules/hourly",
            content=b'{"enabled": false}',
            headers={"Content-Type": "text/plain"},
        )
        assert plain.status_code == 415
        missing = await client.patch("/schedules/nope", json={"enabled": False})
        assert (missing.status_code, missing.json()["code"]) == (404, "SCHEDULE_NOT_FOUND")

        paused = await client.patch("/schedules/hourly", json={"enabled": False})
        assert paused.status_code == 200 and paused.json()["enabled"] is False
        # Its tick comes while it is paused: nothing fires.
        past = utc_now() - timedelta(hours=3)
        async with backend.engine.begin() as connection:
            await connection.execute(update(store.schedules).values(next_fire_at=past))
        scheduler = Scheduler(app.state.collector.service, 1.0)
        assert await scheduler.fire_due() == []

        # Resumed (by id this time): its next tick is the next one after now, the missed ones
        # are not made up.
        resumed = await client.patch(
            f"/schedules/{created.json()['schedule_id']}", json={"enabled": True}
        )
        assert resumed.status_code == 200 and resumed.json()["enabled"] is True
        assert resumed.json()["next_fire_at"] > created.json()["created_at"]
        assert resumed.json()["next_fire_at"].endswith(":00:00.000000Z")
        assert await scheduler.fire_due() == []
        assert (await client.get("/expedition/history")).json()["count"] == 0
