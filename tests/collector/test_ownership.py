"""Per-user authorization: expeditions, schedules and collections are their requester's; an
operator sees and acts on all of them; another user's are 404, never 403 (ids cannot be probed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from conclave.settings import CollectorSettings
from tests.collector.conftest import (
    LOCAL_API,
    TERMINAL,
    JsonApi,
    collector_app,
    collector_settings,
)
from tests.conftest import eventually

ANN, BOB, OLGA = (
    {"Authorization": "Bearer tok-ann"},
    {"Authorization": "Bearer tok-bob"},
    {"Authorization": "Bearer tok-olga"},
)


def users_settings(data_dir: Path, **overrides: Any) -> CollectorSettings:
    """Auth on with two users, ann and bob, and an operator, olga."""
    return collector_settings(
        data_dir,
        auth="enabled",
        api_tokens="tok-ann=ann,tok-bob=bob,tok-olga=olga,tok-gw=gateway",
        operators="olga",
        service_users="gateway",
        **overrides,
    )


async def finished(client: httpx.AsyncClient, user: dict[str, str], expedition_id: str) -> Any:
    """The expedition's record, as ``user`` sees it, once it has finished."""

    async def check() -> Any:
        body = (await client.get(f"/expedition/status/{expedition_id}", headers=user)).json()
        return body if body["status"] in TERMINAL else None

    return await eventually(check, timeout=60)


def ids(page: httpx.Response) -> list[str]:
    assert page.status_code == 200, page.text
    return [item["expedition_id"] for item in page.json()["expeditions"]]


async def test_users_see_and_cancel_only_their_own_expeditions(backend, tmp_path) -> None:
    settings = users_settings(tmp_path, run_workers=False)  # they stay queued
    async with collector_app(backend, settings) as (client, _app):
        run = {"expedition_type": "audit", "target_collections": ["ann-notes"]}
        accepted = await client.post("/expedition/run", json=run, headers=ANN)
        assert accepted.status_code == 202, accepted.text
        mine = accepted.json()["expedition_id"]
        unknown = await client.get("/expedition/status/no-such-id", headers=BOB)

        # Bob gets exactly what an unknown id gets.
        for attempt in (
            await client.get(f"/expedition/status/{mine}", headers=BOB),
            await client.post(f"/expedition/{mine}/cancel", headers=BOB),
        ):
            assert attempt.status_code == 404
            assert attempt.json()["code"] == unknown.json()["code"] == "EXPEDITION_NOT_FOUND"
        assert ids(await client.get("/expedition/history", headers=BOB)) == []
        waited = await client.post(
            "/expedition/trigger/orchestrator",
            json={"expedition_type": "audit", "target_collections": ["bob-notes"]},
            headers=BOB,
        )
        assert ids(await client.get("/expedition/history", headers=BOB)) == [
            waited.json()["expedition_id"]
        ]

        # Ann's run was not touched by Bob's cancel; she sees it, with her name on it.
        own = await client.get(f"/expedition/status/{mine}", headers=ANN)
        assert (own.json()["status"], own.json()["requested_by"]) == ("queued", "ann")
        assert ids(await client.get("/expedition/history", headers=ANN)) == [mine]

        # The operator sees every user's runs and may cancel any of them.
        assert set(ids(await client.get("/expedition/history", headers=OLGA))) == {
            mine,
            waited.json()["expedition_id"],
        }
        assert (await client.get(f"/expedition/status/{mine}", headers=OLGA)).status_code == 200
        cancelled = await client.post(f"/expedition/{mine}/cancel", headers=OLGA)
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


async def test_users_list_and_delete_only_their_own_schedules(backend, tmp_path) -> None:
    settings = users_settings(tmp_path, run_workers=False)
    async with collector_app(backend, settings) as (client, _app):
        schedule = {
            "name": "ann-nightly",
            "cron": "0 3 * * *",
            "expedition_type": "audit",
            "target_collections": ["ann-notes"],
        }
        created = await client.post("/schedules", json=schedule, headers=ANN)
        assert created.status_code == 201, created.text
        assert created.json()["created_by"] == "ann"

        assert (await client.get("/schedules", headers=BOB)).json()["schedules"] == []
        for name in ("ann-nightly", created.json()["schedule_id"]):
            refused = await client.delete(f"/schedules/{name}", headers=BOB)
            assert (refused.status_code, refused.json()["code"]) == (404, "SCHEDULE_NOT_FOUND")
        for name in ("ann-nightly", created.json()["schedule_id"]):
            paused = await client.patch(f"/schedules/{name}", json={"enabled": False}, headers=BOB)
            assert (paused.status_code, paused.json()["code"]) == (404, "SCHEDULE_NOT_FOUND")
        [kept] = (await client.get("/schedules", headers=ANN)).json()["schedules"]
        assert (kept["name"], kept["enabled"]) == ("ann-nightly", True)
        paused = await client.patch("/schedules/ann-nightly", json={"enabled": False}, headers=OLGA)
        assert paused.status_code == 200 and paused.json()["enabled"] is False

        [seen] = (await client.get("/schedules", headers=OLGA)).json()["schedules"]
        assert seen["created_by"] == "ann"
        assert (await client.delete("/schedules/ann-nightly", headers=OLGA)).status_code == 204
        assert (await client.get("/schedules", headers=ANN)).json()["schedules"] == []


async def test_collections_are_read_and_written_by_their_owner(backend, tmp_path) -> None:
    settings = users_settings(tmp_path, shared_collections="public", **LOCAL_API)
    items = [{"id": "b1", "name": "Old stone bridge"}, {"id": "b2", "name": "Steel bridge"}]
    async with JsonApi([items]) as api, collector_app(backend, settings) as (client, _app):
        # A shared collection is written by operators (and internal callers such as the bridge);
        # a user may not become its owner by naming it first.
        claim = await client.post("/expedition/run", json=api.discovery("public"), headers=ANN)
        assert (claim.status_code, claim.json()["code"]) == (409, "COLLECTION_OWNED")
        for collection, user in (("ann-bridges", ANN), ("public", OLGA)):
            run = await client.post("/expedition/run", json=api.discovery(collection), headers=user)
            assert run.status_code == 202, run.text
            done = await finished(client, user, run.json()["expedition_id"])
            assert done["status"] == "completed", done

        def names(response: httpx.Response) -> set[str]:
            return {item["name"] for item in response.json()["collections"]}

        assert names(await client.get("/collections", headers=ANN)) == {"ann-bridges", "public"}
        assert names(await client.get("/collections", headers=BOB)) == {"public"}
        assert names(await client.get("/collections", headers=OLGA)) == {"ann-bridges", "public"}

        # Another user's collection reads like one that does not exist.
        record = await client.get("/collections/ann-bridges/records/b1", headers=BOB)
        assert (record.status_code, record.json()["code"]) == (404, "RECORD_NOT_FOUND")
        search = "/collections/ann-bridges/search?q=stone"
        for missing in ("ann-bridges", "never-made"):
            found = await client.get(f"/collections/{missing}/search?q=stone", headers=BOB)
            assert (found.status_code, found.json()["code"]) == (404, "COLLECTION_NOT_FOUND")
        assert (await client.get(search, headers=ANN)).json()["hits"]
        assert (await client.get(search, headers=OLGA)).json()["hits"]
        assert (await client.get("/collections/ann-bridges/records/b1", headers=OLGA)).is_success

        # A shared collection is readable by everyone, writable only by operators.
        shared = await client.get("/collections/public/search?q=stone", headers=BOB)
        assert shared.status_code == 200 and shared.json()["hits"]
        for collection in ("public", "ann-bridges"):
            write = await client.post(
                "/expedition/run", json=api.discovery(collection), headers=BOB
            )
            assert (write.status_code, write.json()["code"]) == (409, "COLLECTION_OWNED")
            clash = {
                "name": f"bob-{collection}",
                "cron": "0 3 * * *",
                "expedition_type": "audit",
                "target_collections": [collection],
            }
            scheduled = await client.post("/schedules", json=clash, headers=BOB)
            assert (scheduled.status_code, scheduled.json()["code"]) == (409, "COLLECTION_OWNED")
        assert ids(await client.get("/expedition/history", headers=BOB)) == []
        assert (await client.get("/schedules", headers=BOB)).json()["schedules"] == []

        # "Every collection" for a user means their own ones.
        none = await client.post("/expedition/run", json={"expedition_type": "audit"}, headers=BOB)
        assert (none.status_code, none.json()["code"]) == (422, "NO_COLLECTIONS")
        audit = await client.post("/expedition/run", json={"expedition_type": "audit"}, headers=ANN)
        assert audit.json()["expedition_id"]
        report = await finished(client, ANN, audit.json()["expedition_id"])
        assert report["target_collections"] == ["ann-bridges"]
        assert set(report["results"]["collections"]) == {"ann-bridges"}


async def test_acting_user_header_is_honoured_only_from_a_service(backend, tmp_path) -> None:
    settings = users_settings(tmp_path, run_workers=False)
    async with collector_app(backend, settings) as (client, _app):
        run = {"expedition_type": "audit", "target_collections": ["ann-notes"]}
        forged = await client.post(
            "/expedition/run", json=run, headers={**BOB, "X-Conclave-Acting-User": "ann"}
        )
        assert (forged.status_code, forged.json()["code"]) == (403, "ACTING_USER_FORBIDDEN")
        acting = await client.post(
            "/expedition/run",
            json=run,
            headers={"Authorization": "Bearer tok-gw", "X-Conclave-Acting-User": "ann"},
        )
        assert acting.status_code == 202, acting.text
        record = await client.get(
            f"/expedition/status/{acting.json()['expedition_id']}", headers=ANN
        )
        assert record.json()["requested_by"] == "ann"
        assert ids(await client.get("/expedition/history", headers=BOB)) == []
