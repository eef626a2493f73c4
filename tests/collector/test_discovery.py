"""Discovery runs end to end: sources → structured store + semantic memory, events, re-runs."""

from __future__ import annotations

from conclave.collector.events import state_channel
from tests.collector.conftest import (
    LOCAL_API,
    JsonApi,
    collector_app,
    collector_settings,
    inbox,
    wait_terminal,
    write_jsonl,
)
from tests.conftest import eventually

ITEMS = [
    {"id": "a1", "title": "  Red apple orchard  ", "region": "north"},
    {"id": "b2", "title": "Blue whale migration", "region": "ocean"},
    {"id": "c3", "title": "Green tea plantation", "region": "east"},
]


async def test_file_discovery_runs_to_both_stores_and_emits_events(
    backend, tmp_path, redis_prefix
) -> None:
    source = write_jsonl(inbox(tmp_path) / "items.jsonl", ITEMS)
    settings = collector_settings(tmp_path)
    async with collector_app(backend, settings) as (client, _app):
        body = {
            "expedition_type": "discovery",
            "target_collections": ["things"],
            "priority": "high",
            "correlation_id": "corr-42",
            "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
        }
        response = await client.post("/expedition/run", json=body)
        assert response.status_code == 202
        accepted = response.json()
        assert accepted["status"] == "queued"
        assert accepted["status_url"].endswith(f"/expedition/status/{accepted['expedition_id']}")

        record = await wait_terminal(client, accepted["expedition_id"])
        assert record["status"] == "completed", record["errors"]
        assert record["progress"]["fraction"] == 1.0
        assert record["attempts"] == 1
        assert {"expedition_leader", "tracker", "restorer", "binder", "inspector"} <= set(
            record["agents_deployed"]
        )
        results = record["results"]
        assert results["records"] == {"inserted": 3, "updated": 0, "unchanged": 0, "rejected": 0}
        assert results["quality"]["score"] == 1.0

        stored = (await client.get("/collections/things/records/a1")).json()
        assert stored["data"]["title"] == "Red apple orchard"  # normalized by the Restorer
        assert stored["correlation_id"] == "corr-42"
        assert stored["expedition_id"] == accepted["expedition_id"]

        async def vectors_written() -> bool:
            listing = (await client.get("/collections")).json()["collections"]
            return listing == [
                {
                    "name": "things",
                    "records": 3,
                    "vectors": 3,
                    "pending_vectors": 0,
                    "updated_at": listing[0]["updated_at"],
                }
            ]

        await eventually(vectors_written)
        found = (await client.get("/collections/things/search", params={"q": "whale"})).json()
        assert found["hits"][0]["record"]["record_key"] == "b2"

        async def events_published() -> list:
            started = await backend.bus.read(state_channel("started"))
            completed = await backend.bus.read(state_channel("completed"))
            return started and completed and (started, completed)

        _started, completed = await eventually(events_published)
        assert completed[-1].payload["expedition_id"] == accepted["expedition_id"]
        assert completed[-1].payload["results"]["records"]["inserted"] == 3
        assert completed[-1].correlation_id == "corr-42"
        if backend.name == "production":
            raw = await backend.bus._redis.xrange(f"{redis_prefix}{state_channel('completed')}")
            assert raw and raw[-1][1]["correlation_id"] == "corr-42"

        # Re-running the same data is idempotent; a changed item is an update.
        again = await client.post("/expedition/run", json=body)
        rerun = await wait_terminal(client, again.json()["expedition_id"])
        assert rerun["results"]["records"]["unchanged"] == 3
        write_jsonl(source, [*ITEMS[:2], {**ITEMS[2], "title": "Black tea"}])
        third = await client.post("/expedition/run", json=body)
        changed = await wait_terminal(client, third.json()["expedition_id"])
        assert changed["results"]["records"] == {
            "inserted": 0,
            "updated": 1,
            "unchanged": 2,
            "rejected": 0,
        }

        metrics = (await client.get("/metrics")).text
        assert 'conclave_collector_expeditions_total{status="completed",type="discovery"} 3.0' in (
            metrics
        )
        assert 'conclave_collector_records_collected_total{outcome="inserted"} 3.0' in metrics


async def test_http_json_source_with_pagination_and_csv(backend, tmp_path) -> None:
    pages = [[{"sku": f"p{n}-{i}", "name": f"item {n} {i}"} for i in range(3)] for n in (1, 2)]
    (inbox(tmp_path) / "more.csv").write_text("sku,name\nc-1,  first  \nc-2,second\n")
    settings = collector_settings(tmp_path, **LOCAL_API)
    async with JsonApi(pages) as api, collector_app(backend, settings) as (client, _app):
        response = await client.post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "target_collections": ["catalogue"],
                "parameters": {
                    "sources": [
                        {
                            "type": "http_json",
                            "url": api.url,
                            "records_path": "data",
                            "pagination": {"type": "page", "param": "page", "start": 1},
                            "key": "sku",
                        },
                        {"type": "file", "path": str(inbox(tmp_path) / "more.csv"), "key": "sku"},
                    ]
                },
            },
        )
        record = await wait_terminal(client, response.json()["expedition_id"])
        assert record["status"] == "completed", record["errors"]
        assert record["results"]["records"]["inserted"] == 8
        assert api.requests == 3  # two pages, then the empty page that ends pagination
        row = (await client.get("/collections/catalogue/records/c-1")).json()
        assert row["data"] == {"sku": "c-1", "name": "first"}
        assert row["source"].startswith("file:")


async def test_source_returning_garbage_fails_with_the_reason(backend, tmp_path) -> None:
    settings = collector_settings(tmp_path, **LOCAL_API)
    async with JsonApi([[{"id": 1}]]) as api, collector_app(backend, settings) as (client, _):
        api.garbage = True
        response = await client.post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "parameters": {"sources": [{"type": "http_json", "url": api.url}]},
            },
        )
        record = await wait_terminal(client, response.json()["expedition_id"])
        assert record["status"] == "failed"
        assert record["errors"][-1]["code"] == "EXPEDITION_FAILED"
        assert "not JSON" in record["errors"][-1]["message"]
        # The event follows the commit through the outbox relay, a moment later.
        events = await eventually(lambda: backend.bus.read(state_channel("failed")))
        assert events[-1].payload["expedition_id"] == record["expedition_id"]


async def test_items_nested_too_deep_are_rejected_and_the_rest_collected(backend, tmp_path) -> None:
    # A source's data is outside input too: deep nesting crashed the reader, a 5,000-digit number
    # too. (Items holding lone surrogates, NUL or non-finite numbers are kept escaped:
    # tests/collector/test_unsafe_values.py.)
    lines = ['{"id": "ok", "title": "fine"}', '{"id": "d", "v": ' + "[" * 100 + "]" * 100 + "}"]
    (inbox(tmp_path) / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    (inbox(tmp_path) / "huge.jsonl").write_text('{"id": "h", "v": ' + "9" * 5000 + "}\n")
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        accepted = await client.post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "parameters": {"sources": [{"type": "file", "path": "mixed.jsonl", "key": "id"}]},
            },
        )
        record = await wait_terminal(client, accepted.json()["expedition_id"])
        assert record["status"] == "completed", record["errors"]
        results = record["results"]
        assert results["records"]["inserted"] == 1
        assert results["rejections"] == ["item 1: nested deeper than 64 levels"]
        assert (await client.get("/collections/default/records/ok")).status_code == 200

        accepted = await client.post(
            "/expedition/run",
            json={
                "expedition_type": "discovery",
                "parameters": {"sources": [{"type": "file", "path": "huge.jsonl", "key": "id"}]},
            },
        )
        record = await wait_terminal(client, accepted.json()["expedition_id"])
        assert record["status"] == "failed"
        assert record["errors"][0]["code"] == "EXPEDITION_FAILED"
        assert "unreadable JSON at line 1" in record["errors"][0]["message"]
        assert (await client.get("/expedition/history")).status_code == 200
