"""Bad requests get a clear problem answer; nothing is queued for them."""

from __future__ import annotations

from tests.collector.conftest import collector_app, collector_settings, wait_terminal


async def test_validation_errors(backend, tmp_path) -> None:
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        unknown = await client.post("/expedition/run", json={"expedition_type": "nope"})
        assert unknown.status_code == 422
        problem = unknown.json()
        assert problem["code"] == "UNKNOWN_EXPEDITION_TYPE"
        assert problem["known_types"] == ["audit", "discovery", "evidence_ingest", "healing"]

        priority = await client.post(
            "/expedition/run", json={"expedition_type": "audit", "priority": "urgent"}
        )
        assert priority.status_code == 422
        assert priority.json()["errors"][0]["field"] == "body.priority"

        not_object = await client.post(
            "/expedition/run", json={"expedition_type": "audit", "parameters": [1, 2]}
        )
        assert not_object.status_code == 422

        outside = await client.post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "parameters": {"sources": [{"type": "file", "path": "/etc/passwd"}]},
            },
        )
        assert outside.status_code == 422
        assert outside.json()["code"] == "FILE_REFUSED"

        bad_collection = await client.post(
            "/expedition/run",
            json={"expedition_type": "audit", "target_collections": ["../x"]},
        )
        assert bad_collection.status_code == 422

        assert (await client.get("/expedition/status/missing")).status_code == 404
        assert (await client.post("/expedition/missing/cancel")).status_code == 404
        assert (await client.get("/collections/none/records/x")).status_code == 404
        bad_cursor = await client.get("/expedition/history", params={"cursor": "@@"})
        assert bad_cursor.status_code == 400
        history = (await client.get("/expedition/history")).json()
        assert history["count"] == 0


async def test_cancel_of_a_finished_expedition_is_a_conflict(backend, tmp_path) -> None:
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        response = await client.post("/expedition/run", json={"expedition_type": "audit"})
        expedition_id = response.json()["expedition_id"]
        assert (await wait_terminal(client, expedition_id))["status"] == "completed"
        conflict = await client.post(f"/expedition/{expedition_id}/cancel")
        assert conflict.status_code == 409
        assert conflict.json()["expedition_status"] == "completed"
