"""Queue behaviour: priorities, cancel, time-out, lost workers, history and stats."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from conclave.collector import store
from conclave.collector.events import state_channel
from conclave.platform.clock import utc_now
from tests.collector.conftest import (
    LOCAL_API,
    JsonApi,
    collector_app,
    collector_settings,
    inbox,
    wait_status,
    wait_terminal,
    write_jsonl,
)
from tests.conftest import eventually


def _slow_run(api: JsonApi, **extra) -> dict:
    return api.discovery(key=None, **extra)


async def test_priorities_order_the_queue(backend, tmp_path) -> None:
    source = write_jsonl(inbox(tmp_path) / "one.jsonl", [{"id": 1}])
    body = {
        "expedition_type": "discovery",
        "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
    }
    # No worker in the HTTP process: the queue fills first, then one worker drains it.
    quiet = collector_settings(tmp_path, run_workers=False)
    ids = {}
    async with collector_app(backend, quiet) as (client, _app):
        for priority in ("low", "medium", "critical", "high"):
            response = await client.post("/expedition/run", json={**body, "priority": priority})
            ids[priority] = response.json()["expedition_id"]
        assert (await client.get("/stats")).json()["queue_depth"] == 4
    worker = collector_settings(tmp_path, worker_concurrency=1)
    async with collector_app(backend, worker) as (client, _app):
        records = {p: await wait_terminal(client, i) for p, i in ids.items()}
    order = sorted(records, key=lambda p: records[p]["started_at"])
    assert order == ["critical", "high", "medium", "low"]


async def test_cancel_queued_and_running(backend, tmp_path) -> None:
    settings = collector_settings(tmp_path, worker_concurrency=1, **LOCAL_API)
    async with (
        JsonApi([[{"id": 1}]] * 50, delay=0.2) as api,
        collector_app(backend, settings) as (client, _app),
    ):
        running = (await client.post("/expedition/run", json=_slow_run(api))).json()
        queued = (await client.post("/expedition/run", json=_slow_run(api))).json()
        await wait_status(client, running["expedition_id"], "running")
        assert (await client.get(f"/expedition/status/{queued['expedition_id']}")).json()[
            "status"
        ] == "queued"

        cancelled = await client.post(f"/expedition/{queued['expedition_id']}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        stop = await client.post(f"/expedition/{running['expedition_id']}/cancel")
        assert stop.json()["status"] == "cancelled"
        # The run notices at its next heartbeat and stops fetching.
        await asyncio.sleep(settings.lease_seconds)
        calls = api.requests
        await asyncio.sleep(0.6)
        assert api.requests == calls
        final = (await client.get(f"/expedition/status/{running['expedition_id']}")).json()
        assert final["status"] == "cancelled"
        events = await eventually(lambda: backend.bus.read(state_channel("cancelled")))
        assert {e.payload["expedition_id"] for e in events} == {
            running["expedition_id"],
            queued["expedition_id"],
        }


async def test_time_out_fails_with_a_clear_error(backend, tmp_path) -> None:
    settings = collector_settings(tmp_path, **LOCAL_API)
    async with (
        JsonApi([[{"id": 1}]] * 50, delay=0.2) as api,
        collector_app(backend, settings) as (client, _app),
    ):
        response = await client.post("/expedition/run", json=_slow_run(api, timeout_seconds=0.5))
        record = await wait_terminal(client, response.json()["expedition_id"])
        assert record["status"] == "failed"
        error = record["errors"][-1]
        assert error["code"] == "TIMEOUT"
        assert error["message"].startswith("timed out after 0.5 s in stage 'collecting'")


async def test_expedition_of_a_dead_worker_is_run_again(backend, tmp_path) -> None:
    source = write_jsonl(inbox(tmp_path) / "items.jsonl", [{"id": i} for i in range(5)])
    quiet = collector_settings(tmp_path, run_workers=False)
    async with collector_app(backend, quiet) as (client, _app):
        response = await client.post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
            },
        )
        expedition_id = response.json()["expedition_id"]
    # A worker claims it and dies without a word: its lease simply runs out.
    now = utc_now()
    async with backend.engine.begin() as connection:
        claimed = await store.claim_next(
            connection, "dead-worker", now, now + timedelta(milliseconds=300)
        )
    assert claimed.expedition_id == expedition_id
    await asyncio.sleep(0.4)
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        record = await wait_terminal(client, expedition_id)
    assert record["status"] == "completed"
    assert record["attempts"] == 2
    assert record["errors"][0]["code"] == "WORKER_LOST"
    assert "dead-worker" in record["errors"][0]["message"]
    assert record["results"]["records"]["inserted"] == 5


async def test_history_filters_cursor_and_stats(backend, tmp_path) -> None:
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        ids = []
        for _ in range(3):
            ids.append(
                (await client.post("/expedition/run", json={"expedition_type": "audit"})).json()[
                    "expedition_id"
                ]
            )
        bad = await client.post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "parameters": {
                    "sources": [{"type": "file", "path": str(inbox(tmp_path) / "gone.csv")}]
                },
            },
        )
        for expedition_id in [*ids, bad.json()["expedition_id"]]:
            await wait_terminal(client, expedition_id)

        whole = (await client.get("/expedition/history", params={"limit": 4})).json()
        assert (whole["count"], whole["next_cursor"]) == (4, None)  # full, and the last
        first = (await client.get("/expedition/history", params={"limit": 2})).json()
        assert first["count"] == 2 and first["next_cursor"]
        rest = (
            await client.get(
                "/expedition/history", params={"limit": 2, "cursor": first["next_cursor"]}
            )
        ).json()
        seen = [e["expedition_id"] for e in first["expeditions"] + rest["expeditions"]]
        assert sorted(seen) == sorted([*ids, bad.json()["expedition_id"]])
        failed = (await client.get("/expedition/history", params={"status": "failed"})).json()
        assert [e["expedition_type"] for e in failed["expeditions"]] == ["discovery"]
        audits = (
            await client.get("/expedition/history", params={"expedition_type": "audit"})
        ).json()
        assert audits["count"] == 3
        future = (
            await client.get("/expedition/history", params={"since": "2999-01-01T00:00:00Z"})
        ).json()
        assert future["count"] == 0
        # A time with no UTC moment, a cursor made by hand: clear problems, never a 500.
        for params, status, code in (
            ({"since": "9999-12-31T23:59:59-14:00"}, 422, "VALIDATION_FAILED"),
            ({"until": "0001-01-01T00:00:00+14:00"}, 422, "VALIDATION_FAILED"),
            ({"cursor": "MjAyNi0wMS0wMVQwMDowMDowMHx4"}, 400, "INVALID_CURSOR"),  # no zone
            ({"cursor": "MjAyNi0wMS0wMVQwMDowMDowMFp8eAB5"}, 400, "INVALID_CURSOR"),  # NUL
            # 0001-01-01T00:00:00+14:00|x: a time with no UTC moment
            ({"cursor": "MDAwMS0wMS0wMVQwMDowMDowMCsxNDowMHx4"}, 400, "INVALID_CURSOR"),
        ):
            refused = await client.get("/expedition/history", params=params)
            assert (refused.status_code, refused.json()["code"]) == (status, code), params

        stats = (await client.get("/stats")).json()
        assert stats["expeditions"]["by_status"]["completed"] == 3
        assert stats["expeditions"]["by_status"]["failed"] == 1
        assert stats["by_type"]["audit"] == {"completed": 3}
        assert stats["success_rate"] == 0.75
        assert stats["duration_seconds"]["count"] == 4
        assert stats["queue_depth"] == 0


async def test_state_survives_a_restart(backend, tmp_path) -> None:
    source = write_jsonl(inbox(tmp_path) / "items.jsonl", [{"id": i} for i in range(4)])
    discovery = {
        "expedition_type": "discovery",
        "target_collections": ["kept"],
        "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
    }
    settings = collector_settings(tmp_path, worker_concurrency=1, **LOCAL_API)
    async with JsonApi([[{"id": i}] for i in range(5)], delay=0.2) as api:
        async with collector_app(backend, settings) as (client, _app):
            interrupted = (await client.post("/expedition/run", json=_slow_run(api))).json()
            await wait_status(client, interrupted["expedition_id"], "running")
            queued = (await client.post("/expedition/run", json=discovery)).json()
        # Stopped with one expedition running and one waiting; a new app on the same store:
        async with collector_app(backend, settings) as (client, _app):
            waiting = (await client.get(f"/expedition/status/{queued['expedition_id']}")).json()
            assert waiting["created_at"] == queued["created_at"]
            rerun = await wait_terminal(client, interrupted["expedition_id"])
            done = await wait_terminal(client, queued["expedition_id"])
    assert rerun["status"] == "completed", rerun["errors"]
    assert rerun["attempts"] == 2  # the shutdown put it back in the queue; it ran again
    assert rerun["results"]["records"]["inserted"] + rerun["results"]["records"]["unchanged"] == 5
    assert done["status"] == "completed", done["errors"]
    assert done["results"]["records"]["inserted"] == 4
    assert done["target_collections"] == ["kept"]
