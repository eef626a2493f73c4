"""Values no store, bus or response can carry: refused where they come in, and a row that holds
one anyway (stored before the boundary refused it) never fails a list or a read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import func, select

from conclave.collector import store
from conclave.collector.events import REQUESTED
from conclave.collector.models import ExpeditionCreate
from conclave.collector.store.tables import expeditions
from conclave.platform.bus.base import dead_letter_channel
from conclave.platform.embedding import HashingEmbedder
from tests.collector.conftest import collector_app, collector_settings, inbox, wait_terminal
from tests.conftest import REDIS_URL, Backend, eventually

JSON = {"content-type": "application/json"}


async def _stored_count(engine: Any) -> int:
    async with engine.connect() as connection:
        return int(
            (await connection.execute(select(func.count()).select_from(expeditions))).scalar()
        )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            b'{"expedition_type": "audit", "parameters": {"note": "\\ud800"}}',
            "body.parameters.note",
        ),
        (b'{"expedition_type": "audit", "parameters": {"n": NaN}}', "body.parameters.n"),
        (b'{"expedition_type": "audit", "timeout_seconds": 1e309}', "body.timeout_seconds"),
        (b'{"expedition_type": "audit", "correlation_id": "a\\u0000"}', "body.correlation_id"),
    ],
)
async def test_an_unsafe_request_queues_nothing(backend, tmp_path, body: bytes, field: str) -> None:
    settings = collector_settings(tmp_path, run_workers=False)
    async with collector_app(backend, settings) as (client, _app):
        for path in ("/expedition/run", "/expedition/trigger/orchestrator"):
            response = await client.post(path, content=body, headers=JSON)
            assert response.status_code == 422, response.text
            problem = response.json()
            assert problem["code"] == "UNSAFE_INPUT"
            assert problem["errors"][0]["field"] == field
        schedule = body.replace(b"{", b'{"name": "n", "cron": "* * * * *", ', 1)
        refused = await client.post("/schedules", content=schedule, headers=JSON)
        assert refused.json()["code"] == "UNSAFE_INPUT"
        assert await _stored_count(backend.engine) == 0
        assert (await client.get("/schedules")).json()["count"] == 0
        assert await backend.bus.read(REQUESTED) == []


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/expedition/status/%00", "path.expedition_id"),
        ("/expedition/status/%ED%A0%80", "path.expedition_id"),
        ("/expedition/a%00/cancel", "path.expedition_id"),
        ("/collections/default/records/%00", "path.key"),
        ("/expedition/history?expedition_type=%00", "query.expedition_type"),
        ("/expedition/history?cursor=%ED%A0%80", "query.cursor"),
        ("/collections/default/search?q=%00", "query.q"),
    ],
)
async def test_unsafe_path_and_query_values_are_refused(backend, tmp_path, path, field) -> None:
    # On PostgreSQL a NUL reached the query and failed it: a 500 for a lookup of nothing.
    settings = collector_settings(tmp_path, run_workers=False)
    async with collector_app(backend, settings) as (client, _app):
        method = client.post if path.endswith("/cancel") else client.get
        response = await method(path)
        assert response.status_code == 422, response.text
        assert response.json()["code"] == "UNSAFE_INPUT"
        assert response.json()["errors"][0]["field"] == field


async def _store_row(app: Any, engine: Any, **values: Any) -> str:
    """Store an expedition the way a row written before the boundary check looks."""
    service = app.state.collector.service
    row = service.new_row(ExpeditionCreate(**values), requested_by="earlier")
    async with engine.begin() as connection:
        await store.insert_expedition(connection, row)
    return row.expedition_id


async def test_a_stored_lone_surrogate_does_not_break_history_for_anyone(backend, tmp_path):
    settings = collector_settings(tmp_path, run_workers=False)
    async with collector_app(backend, settings) as (client, app):
        before = await _store_row(app, backend.engine, expedition_type="audit")
        broken = await _store_row(
            app, backend.engine, expedition_type="audit", parameters={"note": "x\ud800y"}
        )
        after = await _store_row(app, backend.engine, expedition_type="audit")

        history = await client.get("/expedition/history")
        assert history.status_code == 200, history.text
        items = {item["expedition_id"]: item for item in history.json()["expeditions"]}
        assert set(items) == {before, broken, after}
        assert items[broken]["parameters"] == {"note": "x\\ud800y"}
        assert items[before]["parameters"] == {} and items[after]["parameters"] == {}

        status = await client.get(f"/expedition/status/{broken}")
        assert status.status_code == 200
        assert status.json()["parameters"] == {"note": "x\\ud800y"}


async def test_a_bus_request_holding_an_unsafe_value_is_dead_lettered(
    redis_bus, postgres_engine, redis_prefix, redis_client, tmp_path
) -> None:
    """An outside producer can XADD anything to the request channel: a lone surrogate (escaped
    in the JSON text, or as bytes that are not UTF-8) is dead-lettered at once, nothing is
    queued for it, and the request behind it still runs."""
    backend = Backend("production", postgres_engine, redis_bus)
    key = redis_prefix + REQUESTED
    envelope = {"channel": REQUESTED, "source": "outside", "emitted_at": "2026-01-01T00:00:00Z"}
    entries: list[dict[str, Any]] = [
        {
            "event_id": "e-escaped",
            "payload": b'{"expedition_type": "audit", "parameters": {"note": "\\ud800"}}',
        },
        {
            "event_id": "e-bytes",
            "payload": b'{"expedition_type": "audit", "parameters": {"note": "\xed\xa0\x80"}}',
        },
        {"event_id": "e-nan", "payload": b'{"expedition_type": "audit", "timeout_seconds": NaN}'},
        {
            "event_id": "e-good",
            "payload": b'{"expedition_type": "audit", "correlation_id": "after-the-poison"}',
        },
    ]
    raw = Redis.from_url(REDIS_URL)  # bytes in and out, as an outside producer sees the stream
    try:
        for entry in entries:
            await raw.xadd(key, {**envelope, **entry})
        async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):

            async def finished() -> Any:
                page = (await client.get("/expedition/history?status=completed")).json()
                return page["expeditions"]

            done = await eventually(finished, timeout=60)
            assert [item["correlation_id"] for item in done] == ["after-the-poison"]
            dead = await raw.xrange(dead_letter_channel(key))
            reasons = {fields[b"event_id"]: fields[b"dlq_reason"] for _id, fields in dead}
            assert set(reasons) == {b"e-escaped", b"e-bytes", b"e-nan"}
            assert (
                reasons[b"e-bytes"]
                == b"malformed entry: unsafe value at payload.parameters.note: lone_surrogate"
            )
            assert (
                reasons[b"e-nan"]
                == b"malformed entry: unsafe value at payload.timeout_seconds: non_finite_number"
            )
            # The dead letter keeps the bytes the producer wrote.
            kept = {fields[b"event_id"]: fields[b"payload"] for _id, fields in dead}
            assert kept[b"e-bytes"] == entries[1]["payload"]
            assert await _stored_count(backend.engine) == 1
    finally:
        await raw.aclose()


async def test_collected_items_holding_unsafe_values_are_kept_escaped(backend, tmp_path) -> None:
    """A file or an API we do not own may hold anything: the run completes, the items are stored
    escaped, their vectors are written, and reading them back works."""
    source = inbox(tmp_path) / "items.jsonl"
    source.write_text(
        '{"id": "ok", "title": "plain apple"}\n'
        '{"id": "bad", "title": "broken \\ud800 pear", "score": NaN, "big": 1e400}\n'
        '{"id": "nul", "title": "a\\u0000b", "n": 99999999999999999999}\n'
    )
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        body = {
            "expedition_type": "discovery",
            "target_collections": ["things"],
            "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
        }
        accepted = (await client.post("/expedition/run", json=body)).json()
        record = await wait_terminal(client, accepted["expedition_id"])
        assert record["status"] == "completed", record["errors"]
        assert record["results"]["records"]["inserted"] == 3

        bad = (await client.get("/collections/things/records/bad")).json()
        assert bad["data"] == {
            "id": "bad",
            "title": "broken \\ud800 pear",
            "score": "NaN",
            "big": "Infinity",
        }
        nul = (await client.get("/collections/things/records/nul")).json()
        assert nul["data"] == {"id": "nul", "title": "a\\u0000b", "n": "99999999999999999999"}

        async def indexed() -> Any:
            listing = (await client.get("/collections")).json()["collections"]
            return [c for c in listing if c["name"] == "things" and c["vectors"] == 3]

        await eventually(indexed, timeout=60)
        audit = await client.post(
            "/expedition/run", json={"expedition_type": "audit", "target_collections": ["things"]}
        )
        audited = await wait_terminal(client, audit.json()["expedition_id"])
        assert audited["status"] == "completed", audited["errors"]


class Utf8Embedder(HashingEmbedder):
    """The lexical embedder, reading its texts as UTF-8 as a model's tokenizer or an embedding
    API does (the built-in one only looks at word characters, and never meets a surrogate)."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return super().embed([text.encode("utf-8").decode("utf-8") for text in texts])


async def test_a_stored_record_holding_a_lone_surrogate_does_not_block_the_vectors(
    backend, tmp_path
) -> None:
    """The indexer writes vectors in batches: one record stored before the checks, whose text
    cannot be encoded, failed every batch it was in, so no vector was written for anyone."""
    now = datetime.now(UTC)

    def record(key: str, data: dict[str, Any]) -> store.CollectedRecord:
        return store.CollectedRecord(
            collection="things",
            record_key=key,
            content_hash=key * 8,
            data=data,
            source="earlier",
            expedition_id=None,
            correlation_id=None,
            vector_pending=True,
            created_at=now,
            updated_at=now,
        )

    settings = collector_settings(tmp_path, embedder=f"{__name__}:{Utf8Embedder.__name__}")
    async with collector_app(backend, settings) as (client, _app):
        async with backend.engine.begin() as connection:
            await store.upsert_records(
                connection,
                [
                    record("before", {"t": "plain"}),
                    record("broken", {"t": "x\ud800\x00y"}),
                    record("after", {"t": "plain too"}),
                ],
            )

        async def indexed() -> Any:
            listing = (await client.get("/collections")).json()["collections"]
            return [c for c in listing if c["name"] == "things" and c["vectors"] == 3]

        await eventually(indexed, timeout=60)
        found = (await client.get("/collections/things/search", params={"q": "plain"})).json()
        assert {hit["record"]["record_key"] for hit in found["hits"]} == {
            "before",
            "after",
            "broken",
        }
